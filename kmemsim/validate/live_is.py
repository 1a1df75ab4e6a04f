"""IS (Initial KV cache Swap) on the real kernel, from outside a running llama.cpp process.

`kmemsim is-live MODEL.gguf --prompt N --decode M --ctx C --mem-limit SIZE --zram ALGO:SIZE
[--variant alloc|tail] -o DIR` runs the reference child of `kmemsim validate` (child.py,
docs/validation.md) twice under the recorder, with its gate (an 11th argument): after `Llama(...)`
returns (the KV buffer is allocated and ggml_backend_buffer_clear has zeroed it) the child writes a
ready file and waits for a go file before it evaluates anything. A controller thread in this process then

  1. finds the KV buffer in the child's address space (find_kv: the glibc chunk header of the
     posix_memalign'd buffer, whose size matches the KV size computed from the GGUF and logged by
     llama.cpp; then every page of the buffer is checked resident and zero through /proc/PID/pagemap
     and /proc/PID/mem),
  2. stock run: does nothing more; IS run: pidfd_open(child) + process_madvise(pidfd, iov,
     MADV_PAGEOUT) over the whole buffer (variant alloc) or over the pages that hold only cells
     beyond prompt+decode (variant tail; kv_tail_ranges),
  3. creates the go file.

Both runs are compared with `kmemsim predict` (policies stock and is / is-tail) on the same
configuration; DIR gets is_live.csv, is_live.md, per run stock/ and is/ (run directory, child result,
is_apply.json with what the controller found and did).

Note on counting: the page-out runs in the controller (this process), not in a recorded task, so the
recorder's `swap_out_pages` (bios of tracked tasks) does not see it; the live swap-out reported here is
the swap device's bios from all tasks (`swap_device_pages.written_all_tasks`; the device is created for
the run and holds nothing else).
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import struct
import threading
import time

import numpy as np

import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE as PAGE, pad, parse_size
from ..engine.managers import KVGeometry
from ..engine.managers.llamacpp import layout
from ..live import rundir
from ..live.recorder import read_maps, require_root, run_command
from ..live.samplers import INTERVAL_S, read_kv
from ..live.swap_setup import active_swaps
from ..workload.gguf_layout import read_layout
from . import predict as P
from .reference import CHILD, check_args, child_argv, child_pythonpath_removed, measured
MADV_PAGEOUT = 21
SYS_process_madvise = 440          # x86_64 (also 440 on arm64/generic)
IOV_MAX = 1024
IS_MMAPPED = 2

def child_source() -> str:
    """The reference child (child.py) as is: its gate waits after Llama() when given a gate path."""
    return CHILD.read_text()


# ------------------------------------------------------------------------------------------------
# The KV buffer's layout: llama.cpp's own, as the llamacpp KV manager lays it out (one CPU buffer, k_l0,
# v_l0, k_l1, ... each padded to TENSOR_ALIGNMENT; V transposed: flash attention off, llama-cpp-python's
# default)

def kv_layout(model, ctx, kv_type="f16") -> dict:
    if kv_type != "f16":
        raise InputError("is-live supports the f16 KV cache (llama-cpp-python's default) only")
    hp = read_layout(model).hparams
    return layout(KVGeometry(n_layer=hp["n_layer"], n_embd_kv=hp["head_dim"] * hp["n_head_kv"],
                             kv_size=pad(int(ctx), 256)))


def kv_tail_ranges(base, lay, used_cells):
    """Page-aligned [start, end) address ranges that hold only cells >= used_cells, for a KV buffer
    whose data starts at `base`. K: a layer's cells are contiguous rows, so its tail is one range.
    V (transposed): each of the n_embd_v rows holds kv_size cells; its tail is the row's end, and only
    pages lying wholly inside one row's tail can go (a page across a row boundary also holds the
    next row's first cells)."""
    out = []
    kv, u = lay["kv_size"], int(used_cells)
    if u >= kv:
        return out

    def add(lo, hi):
        lo = -(-lo // PAGE) * PAGE
        hi = hi // PAGE * PAGE
        if hi > lo:
            if out and out[-1][1] == lo:
                out[-1] = (out[-1][0], hi)
            else:
                out.append((lo, hi))
    for il in range(lay["n_layer"]):
        k0 = base + lay["k_off"][il]
        add(k0 + u * lay["row_bytes"], k0 + lay["tensor_bytes"])
        v0 = base + lay["v_off"][il]
        for d in range(lay["n_embd_v"]):
            r0 = v0 + d * kv * 2
            add(r0 + u * 2, r0 + kv * 2)
    return out


# ------------------------------------------------------------------------------------------------
# Finding the KV buffer from outside

def _present(pid, lo, hi):
    """Present bits (bool array) of pages [lo, hi) from /proc/PID/pagemap (bit 63)."""
    n = (hi - lo) // PAGE
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(lo // PAGE * 8)
        ent = np.frombuffer(f.read(8 * n), dtype=np.uint64)
    return (ent >> np.uint64(63)).astype(bool)


def _runs(mask):
    """[(start, end)) runs of True in a bool array."""
    d = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def find_kv(pid, kv_bytes, logged_bytes=None, verify=True) -> dict:
    """Locate the KV buffer (kv_bytes exactly, from kv_layout) in pid's address space.

    ggml_backend_cpu_buffer_type_alloc_buffer -> ggml_aligned_malloc -> posix_memalign(64, size): above
    glibc's mmap threshold this is an mmap of roundup(size + 64 + header, 4096) (KV + 4 KiB for a
    page-multiple KV), whose first page carries the chunk header: at +8 the mmap size | IS_MMAPPED,
    at +48 the memalign lead (48) and at +56 (size - 48) | IS_MMAPPED; the data starts at +64. The
    kernel merges this mapping with neighbouring anonymous rw-p mappings (the compute buffer's), so
    /proc/PID/maps alone cannot delimit it: we read the header words at every resident page start of
    every anonymous rw-p mapping large enough. Fallback (buffer from the brk heap, below the mmap
    threshold): any 64-aligned address preceded by a malloc size word in [kv+16, kv+4 KiB]. The hit
    is verified: every page of [data, data + kv_bytes) resident and zero (just cleared)."""
    maps = [m for m in read_maps(pid) if m[2].startswith("rw") and m[5] == 0 and
            (m[6] == "" or m[6] == "[heap]") and m[1] - m[0] >= kv_bytes]
    res = {"pid": pid, "kv_bytes": int(kv_bytes), "logged_kv_bytes": logged_bytes, "candidates_mappings": len(maps),
           "found": False, "method": None, "hits": []}
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for lo, hi, perms, off, dev, ino, path in maps:
            pres = _present(pid, lo, hi)
            for i in np.flatnonzero(pres):
                a = lo + int(i) * PAGE
                try:
                    w = struct.unpack("8Q", os.pread(mem.fileno(), 64, a))
                except OSError:
                    continue
                msize = w[1] & ~7
                if not (w[1] & IS_MMAPPED and msize % PAGE == 0 and a + msize <= hi):
                    continue
                if w[6] == 48 and w[7] == ((msize - 48) | IS_MMAPPED):
                    data, cap = a + 64, msize - 64
                elif w[6] == 0:                           # plain mmapped chunk (no alignment lead)
                    data, cap = a + 16, msize - 16
                else:
                    continue
                if kv_bytes <= cap < kv_bytes + 2 * PAGE:
                    res["hits"].append({"method": "mmapped chunk header", "chunk": a, "mmap_bytes": msize,
                                        "data": data, "mapping": (lo, hi, path)})
        if not res["hits"]:
            for lo, hi, perms, off, dev, ino, path in maps:    # brk heap / arena chunk
                pres = _present(pid, lo, hi)
                for s, e in _runs(pres):
                    buf = os.pread(mem.fileno(), int(e - s) * PAGE, lo + int(s) * PAGE)
                    w = np.frombuffer(buf, dtype=np.uint64)
                    size = w & np.uint64(~7 & 0xFFFFFFFFFFFFFFFF)
                    idx = np.flatnonzero((size >= kv_bytes + 16) & (size <= kv_bytes + PAGE) &
                                         ((w & np.uint64(IS_MMAPPED)) == 0))
                    for j in idx:
                        data = lo + int(s) * PAGE + int(j) * 8 + 8
                        if data % 64 == 0 and data + kv_bytes <= hi:
                            res["hits"].append({"method": "heap chunk size word", "chunk": data - 16,
                                                "data": data, "mapping": (lo, hi, path)})
        if verify:
            for h in res["hits"]:
                d = h["data"]
                lo, hi = d // PAGE * PAGE, -(-(d + kv_bytes) // PAGE) * PAGE
                pres = _present(pid, lo, hi)
                h["resident_pages"] = int(pres.sum())
                h["pages"] = len(pres)
                nz = 0
                step = 8 << 20
                for a in range(d, d + kv_bytes, step):
                    n = min(step, d + kv_bytes - a)
                    b = np.frombuffer(os.pread(mem.fileno(), n, a), dtype=np.uint8)
                    nz += int(np.count_nonzero(b))
                h["nonzero_bytes"] = nz
                h["verified"] = bool(pres.all() and nz == 0)
    good = [h for h in res["hits"] if h.get("verified", True)]
    if len(good) == 1:
        h = good[0]
        res.update(found=True, method=h["method"], data=h["data"], chunk=h["chunk"], mapping=h["mapping"])
    elif len(good) > 1:
        res["error"] = f"{len(good)} candidate buffers of the KV size"
    else:
        res["error"] = "no KV-sized resident zero buffer found"
    return res


# ------------------------------------------------------------------------------------------------
# process_madvise

class _iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def process_madvise(pidfd, ranges, advice=MADV_PAGEOUT) -> int:
    """process_madvise(pidfd, iov, n, advice, 0) over [(start, end)), IOV_MAX ranges per call;
    returns the bytes advised (the kernel's return values summed)."""
    done = 0
    for i in range(0, len(ranges), IOV_MAX):
        part = ranges[i:i + IOV_MAX]
        iov = (_iovec * len(part))(*[_iovec(lo, hi - lo) for lo, hi in part])
        r = _libc.syscall(ctypes.c_long(SYS_process_madvise), ctypes.c_int(pidfd), iov,
                          ctypes.c_size_t(len(part)), ctypes.c_int(advice), ctypes.c_uint(0))
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"process_madvise: {os.strerror(e)}")
        done += r
    return done


SYS_migrate_pages = 256            # x86_64


def drain_lru_batches(pid) -> str:
    """Empty every CPU's per-CPU LRU-add batches (up to FOLIO_BATCH_SIZE = 31 folios each), so that the
    folios the child just faulted in are on an LRU list: MADV_PAGEOUT isolates from the LRU and skips
    folios still sitting in another CPU's batch (madvise drains only the caller's CPU). The one
    syscall that does lru_add_drain_all() for a given process without changing anything:
    migrate_pages(pid, from = to = the same nodes) (do_migrate_pages drains first, then finds nothing
    to move). Best effort: returns 'ok' or why not."""
    mask = ctypes.c_ulong(1)         # node 0
    r = _libc.syscall(ctypes.c_long(SYS_migrate_pages), ctypes.c_int(pid), ctypes.c_ulong(64),
                      ctypes.byref(mask), ctypes.byref(mask))
    if r < 0:
        return f"migrate_pages: {os.strerror(ctypes.get_errno())}"
    return "ok"


# ------------------------------------------------------------------------------------------------
# The controller

def _status(pid):
    st = read_kv(f"/proc/{pid}/status")
    return {k: st[k] * 1024 for k in ("VmRSS", "RssAnon", "VmSwap") if k in st}


def _zram_stat():
    """mm_stat of the zram devices that are swap now (the run's own), summed."""
    keys = ["orig_data_size", "compr_data_size", "mem_used_total", "mem_limit", "mem_used_max",
            "same_pages", "pages_compacted", "huge_pages"]
    tot = dict.fromkeys(keys, 0)
    for dev in active_swaps():
        name = os.path.basename(dev)
        if name.startswith("zram"):
            with open(f"/sys/block/{name}/mm_stat") as f:
                for k, v in zip(keys, f.read().split()):
                    tot[k] += int(v)
    return tot


SWAP_KEYS = ("pswpout", "pswpin", "swpout_zero", "swpin_zero")


def _logged_kv(log):
    m = re.search(r"llama_kv_cache: size =\s*([\d.]+) MiB", log or "")
    return int(round(float(m.group(1)) * 2**20)) if m else None


def control(gate, lay, apply, variant, used_cells, out_json, timeout=600.0):
    """The controller: wait for the child's ready file, find the KV buffer, page it out (apply), let
    the child go. Always creates the go file; what happened goes to out_json."""
    info = {"variant": variant if apply else "none", "apply": apply, "used_cells": int(used_cells),
            "kv_bytes_computed": lay["kv_bytes"]}
    try:
        t0 = time.monotonic()
        while not os.path.exists(gate + ".ready"):
            if time.monotonic() - t0 > timeout:
                raise TimeoutError("the child never signalled that its context is ready")
            time.sleep(0.005)
        with open(gate + ".ready") as f:
            ready = json.load(f)
        pid = ready["pid"]
        info["pid"] = pid
        info["kv_bytes_logged"] = _logged_kv(ready.get("log"))
        t1 = time.monotonic()
        found = find_kv(pid, lay["kv_bytes"], info["kv_bytes_logged"])
        info["find_s"] = time.monotonic() - t1
        info["find"] = found
        if apply and found["found"]:
            base = found["data"]
            if variant == "tail":
                ranges = kv_tail_ranges(base, lay, used_cells)
            else:                  # alloc: every page wholly inside the buffer
                lo, hi = -(-base // PAGE) * PAGE, (base + lay["kv_bytes"]) // PAGE * PAGE
                ranges = [(lo, hi)]
            info["ranges"] = len(ranges)
            info["advised_target_pages"] = sum(hi - lo for lo, hi in ranges) // PAGE
            info["kv_pages"] = -(-lay["kv_bytes"] // PAGE)
            info["before"] = {"status": _status(pid), "zram": _zram_stat(), "vmstat": rundir.vmstat(SWAP_KEYS)}
            t2 = time.monotonic()
            info["lru_drain"] = drain_lru_batches(pid)
            pidfd = os.pidfd_open(pid)
            try:
                info["advised_bytes"] = process_madvise(pidfd, ranges)
            finally:
                os.close(pidfd)
            info["madvise_s"] = time.monotonic() - t2
            info["after"] = {"status": _status(pid), "zram": _zram_stat(), "vmstat": rundir.vmstat(SWAP_KEYS)}
            b, a = info["before"], info["after"]
            info["paged_out_pages"] = (a["status"].get("VmSwap", 0) - b["status"].get("VmSwap", 0)) // PAGE
            info["same_pages_added"] = a["zram"]["same_pages"] - b["zram"]["same_pages"]
            info["vmstat_delta"] = {k: a["vmstat"][k] - b["vmstat"][k] for k in a["vmstat"]}
            info["rss_anon_drop_bytes"] = b["status"].get("RssAnon", 0) - a["status"].get("RssAnon", 0)
    except Exception as e:             # noqa: BLE001 - reported; the child must go on either way
        info["error"] = f"{type(e).__name__}: {e}"
    finally:
        with open(gate + ".go", "w") as f:
            f.write("go\n")
        atomic_write(out_json, json.dumps(info, indent=1, default=str))
    return info


# ------------------------------------------------------------------------------------------------
# One live run and the comparison

def live_run(model, prompt, decode, ctx, mem_limit, outdir, apply, variant="alloc", zram="lz4:4G",
             swappiness=60, batch=512, ubatch=512, threads=2, interval=INTERVAL_S) -> dict:
    os.makedirs(outdir, exist_ok=True)
    lay = kv_layout(model, ctx)
    script = os.path.join(outdir, "kmemsim_is_child.py")
    atomic_write(script, child_source())
    res_path = os.path.join(outdir, "llama_result.json")
    gate = os.path.join(outdir, "gate")
    for sfx in (".ready", ".go"):
        if os.path.exists(gate + sfx):
            os.unlink(gate + sfx)
    argv = child_argv(script, "run", res_path, model, prompt, decode, ctx, batch, ubatch, threads) + [gate]
    apply_json = os.path.join(outdir, "is_apply.json")
    ctl = threading.Thread(target=control, name="kmemsim-is-controller", daemon=True,
                           args=(gate, lay, apply, variant, prompt + decode, apply_json))
    ctl.start()
    try:
        with child_pythonpath_removed():                # the child imports only llama_cpp
            rc = run_command(argv, os.path.join(outdir, "run"), mem_limit=mem_limit, zram=zram,
                             swappiness=swappiness, drop_caches=True, interval=interval, smaps_interval=0)
    finally:
        if not os.path.exists(gate + ".go"):       # the child died before the gate: release the thread
            with open(gate + ".ready", "a"):
                pass
    ctl.join(timeout=30)
    if rc == 130:
        raise KeyboardInterrupt("live run interrupted")
    m = measured(outdir, model, rc)
    with open(os.path.join(outdir, "run", "summary.json")) as f:
        s = json.load(f)
    try:
        with open(apply_json) as f:
            m["is"] = json.load(f)
    except (OSError, ValueError):
        m["is"] = {"error": "controller wrote nothing"}
    dev = s.get("swap_device_pages") or {}
    m["swap_bio_out_pages"] = int(dev.get("written_all_tasks") or 0)    # incl. the controller's page-out
    m["swap_bio_out_pages_tracked"] = int(s.get("swap_out_pages") or 0)  # the child's own reclaim
    m["swap_bio_in_pages"] = int(s.get("swap_in_pages") or 0)
    samp = pd.read_parquet(os.path.join(outdir, "run", "samples.parquet"))
    # Linux >= 6.12 never writes a zero-filled folio to the swap device: swap_writeout() sets a bit in
    # the device's zeromap (vmstat swpout_zero) and swap-in zero-fills (swpin_zero), no I/O, nothing
    # in zram. So pages swapped out = pswpout + swpout_zero (global deltas over the run; the run's zram
    # device is the only swap on the machine).
    for k in ("pswpout", "pswpin", "swpout_zero", "swpin_zero"):
        c = f"vmstat_{k}"
        m[k] = int(samp[c].iloc[-1] - samp[c].iloc[0]) if c in samp and len(samp) > 1 else None
    m["swap_out_pages"] = (m["pswpout"] or 0) + (m["swpout_zero"] or 0)
    m["swap_in_pages"] = (m["pswpin"] or 0) + (m["swpin_zero"] or 0)
    for k in ("same_pages", "mem_used_total", "orig_data_size", "compr_data_size"):
        c = f"zram_{k}"
        m[f"zram_{k}_max"] = int(samp[c].max()) if c in samp and len(samp) else None
    if "zram_mem_used_max" in samp and len(samp):
        m["zram_mem_used_max"] = int(samp["zram_mem_used_max"].max())
    return m


ROWS = [  # (metric, live key, emulator key, unit)
    ("swap_out_pages (pswpout + swpout_zero)", "swap_out_pages", "swap_out_pages", "pages"),
    ("  of which zero, no I/O (swpout_zero)", "swpout_zero", "swpout_zero", "pages"),
    ("swap_in_pages (pswpin + swpin_zero)", "swap_in_pages", "swap_in_pages", "pages"),
    ("  of which zero (swpin_zero)", "swpin_zero", "swpin_zero", "pages"),
    ("zram_same_pages_max", "zram_same_pages_max", "zram_same_pages_max", "pages"),
    ("zram_mem_used_max_bytes", "zram_mem_used_total_max", "zram_mem_used_max_bytes", "bytes"),
    ("peak_resident_bytes", "peak_resident_bytes", "peak_resident_bytes", "bytes"),
    ("major_faults", "major_faults", "major_faults", "count"),
    ("minor_faults", "minor_faults", "minor_faults", "count"),
    ("ttft_s", "ttft_s", "ttft_s", "s"),
    ("tpot_s", "tpot_s", "tpot_s", "s"),
]


def emulated(model, prompt, decode, ctx, mem_limit, policy, zram, swappiness, batch=512, ubatch=512,
             threads=2) -> dict:
    p = P.predict(model, prompt, decode, ctx, mem_limit, batch, ubatch, threads, zram, swappiness,
                  policy=policy, keep_result=True)
    r = p.pop("_result")
    p.pop("_trace", None)
    s = r.summary
    tl = r.timeline
    # the same definition as the live side: zram writes plus zero pages in the swap zeromap (6.12+)
    p["swap_out_pages"] = int(s.get("pswpout", 0)) + int(s.get("swpout_zero", 0))
    p["swap_in_pages"] = int(s.get("pswpin", 0)) + int(s.get("swpin_zero", 0))
    for k in ("zram_same_pages", "zram_mem_used_total"):
        p[k + "_max"] = int(tl[k].max()) if k in tl and len(tl) else s.get(k)
    used = p.get("zram_mem_used_total_max")
    p["zram_mem_used_max_bytes"] = int(used) * PAGE if used is not None else None
    p["kv_bytes"] = p["config"].get("kv_bytes")
    return p


def compare(model, prompt, decode, ctx, mem_limit, out, variant="alloc", zram="lz4:4G", swappiness=60,
            batch=512, ubatch=512, threads=2, progress=None) -> "pd.DataFrame":
    if variant not in ("alloc", "tail"):
        raise InputError(f"--variant {variant!r}: choose alloc or tail")
    lims = check_args(model, prompt, decode, ctx, batch, ubatch, threads, str(mem_limit), zram, swappiness)
    limit = lims[0][1]
    require_root()
    os.makedirs(out, exist_ok=True)
    say = progress or (lambda m: None)
    policy = "is" if variant == "alloc" else "is-tail"
    live, emu = {}, {}
    for name, apply in (("stock", False), ("is", True)):
        say(f"live {name} run ...")
        live[name] = live_run(model, prompt, decode, ctx, limit, os.path.join(out, name), apply, variant, zram,
                              swappiness, batch, ubatch, threads)
    for name, pol in (("stock", "stock"), ("is", policy)):
        say(f"emulator {pol} ...")
        emu[name] = emulated(model, prompt, decode, ctx, limit, pol, zram, swappiness, batch, ubatch, threads)
    rows = []
    for metric, lk, ek, unit in ROWS:
        rows.append({"metric": metric, "unit": unit,
                     "live_stock": live["stock"].get(lk), "live_is": live["is"].get(lk),
                     "emu_stock": emu["stock"].get(ek), "emu_is": emu["is"].get(ek)})
    df = pd.DataFrame(rows)
    meta = {"model": os.path.abspath(model), "prompt": prompt, "decode": decode, "ctx": ctx, "mem_limit": limit,
            "zram": zram, "swappiness": swappiness, "variant": variant, "emulator_policy": policy,
            "kv": kv_layout(model, ctx), "is_apply": live["is"].get("is"), "stock_find": live["stock"].get("is"),
            "complete": {k: v.get("complete") for k, v in live.items()},
            "emu_kv_bytes": emu["is"].get("kv_bytes")}
    atomic_write(os.path.join(out, "is_live.csv"), lambda tmp: df.to_csv(tmp, index=False))
    atomic_write(os.path.join(out, "is_live.json"), json.dumps({"meta": meta, "live": live, "emulated": emu},
                                                               indent=1, default=str))
    atomic_write(os.path.join(out, "is_live.md"), markdown(df, meta))
    df.attrs["meta"] = meta
    return df


def _fmt(unit, v):
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if unit == "bytes":
        return f"{v / 2**20:.1f} MiB"
    if unit == "s":
        return f"{v * 1000:.1f} ms"
    return f"{int(v):,}"


def markdown(df, meta) -> str:
    a = meta.get("is_apply") or {}
    f = a.get("find") or {}
    lay = meta["kv"]
    lines = [f"# IS on the live kernel: {os.path.basename(meta['model'])}, prompt {meta['prompt']}, decode "
             f"{meta['decode']}, ctx {meta['ctx']}, limit {meta['mem_limit'] / 2**20:.0f} MiB, zram {meta['zram']}, "
             f"variant {meta['variant']} (emulator policy `{meta['emulator_policy']}`)", "",
             "| metric | live stock | live IS | emulator stock | emulator IS |", "|---|---:|---:|---:|---:|"]
    for r in df.itertuples():
        lines.append(f"| {r.metric} | {_fmt(r.unit, r.live_stock)} | {_fmt(r.unit, r.live_is)} | "
                     f"{_fmt(r.unit, r.emu_stock)} | {_fmt(r.unit, r.emu_is)} |")
    lines += ["", f"KV buffer: {lay['kv_bytes']:,} bytes computed from the GGUF ({lay['n_layer']} layers x "
              f"{lay['kv_size']} cells, K and V^T f16), logged {a.get('kv_bytes_logged')}, emulator "
              f"{meta.get('emu_kv_bytes')}.",
              f"Found: {f.get('found')} by {f.get('method')} at {hex(f['data']) if f.get('data') else '-'} "
              f"({len(f.get('hits', []))} candidate(s); verified resident+zero: "
              f"{[h.get('verified') for h in f.get('hits', [])]}); find took {a.get('find_s', 0) * 1000:.0f} ms.",
              f"process_madvise: {a.get('ranges')} range(s), {a.get('advised_target_pages')} of {a.get('kv_pages')} "
              f"KV pages targeted, {a.get('advised_bytes')} bytes advised in {a.get('madvise_s', 0) * 1000:.1f} ms; "
              f"VmSwap +{a.get('paged_out_pages')} pages, zram same_pages +{a.get('same_pages_added')}, "
              f"vmstat {a.get('vmstat_delta')}.",
              "", "Live swap counts are /proc/vmstat deltas over the run (the run's zram device is the only swap): "
              "the kernel (>= 6.12) keeps zero-filled folios out of zram (swap zeromap, swpout_zero), so zram's "
              "same_pages stays 0 there; the emulator stores them in zram as same-filled pages. Peak = memcg "
              "max_usage_in_bytes.", ""]
    if a.get("error"):
        lines.append(f"Controller error: {a['error']}")
    return "\n".join(lines) + "\n"
