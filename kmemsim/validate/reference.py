"""The reference live run (docs/validation.md): llama-cpp-python in a fresh process (child.py), page
cache dropped first, in a memory cgroup with zram swap, under the recorder and then again unrecorded;
what it measures (METRICS, measured) and the sizes llama.cpp logs.

  Llama(model_path, n_ctx=C, n_batch=B, n_ubatch=U, n_threads=T, use_mmap=True, use_mlock=False);
  exactly N prompt tokens evaluated (the first is BOS) and M greedy decode steps with EOS suppressed.
  TTFT = the prompt's evaluation time after load; TPOT = the median decode step, both from the same
  run made again unrecorded right after it (the recorder changes the run it records).
The child writes what llama.cpp logged (buffer sizes) and its timings to a JSON file beside the run.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.limits import LIVE_ZRAM_ALGOS, MAX_MEM_BYTES, MAX_THREADS, check_int, check_mem, check_zram_size
from ..core.paths import input_file
from ..core.units import PAGE_SIZE, parse_size
from ..live.recorder import run_command
from ..live.rundir import swap_pages
from ..live.samplers import INTERVAL_S, kernel_memory
from ..live.swap_setup import parse_zram
from .child import reference_prompt  # noqa: F401  (the reference run's prompt: parent and child share it)

CHILD = Path(__file__).with_name("child.py")      # the child program, copied beside each run

# what a reference run is measured by (measured), predicted (kmemsim.validate.predict) and scored
METRICS = ["storage_read_bytes", "file_evicted_bytes", "major_faults", "minor_faults", "swap_out_bytes",
           "swap_in_bytes", "peak_resident_bytes", "kernel_memory_bytes", "ttft_s", "tpot_s"]


_BUF = re.compile(r"(\S+) (model|compute|KV) buffer size =\s*([\d.]+) MiB")
_KV = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")


def buffers_from_log(log: str) -> dict:
    """llama.cpp's own buffer sizes (bytes) from its load log: {'CPU_Mapped model': .., 'CPU_REPACK
    model': .., 'CPU KV': .., 'CPU compute': .., 'CPU output': ..}. Sizes are logged in MiB with two
    decimals, so each is exact to +-5 KiB."""
    out = {}
    for name, kind, mib in _BUF.findall(log):
        key = f"{name} {kind}"
        out[key] = out.get(key, 0) + int(round(float(mib) * 1024 * 1024))
    m = re.search(r"(\S+)\s+output buffer size =\s*([\d.]+) MiB", log)
    if m:
        out[f"{m.group(1)} output"] = int(round(float(m.group(2)) * 1024 * 1024))
    return out



def child_script(dirpath) -> str:
    """child.py's text written to DIR/kmemsim_reference_child.py (the run's own copy); its path."""
    p = os.path.join(dirpath, "kmemsim_reference_child.py")
    atomic_write(p, CHILD.read_text())
    return p


def model_size(model) -> int:
    return os.path.getsize(input_file(model, expected=".gguf model file"))


def parse_limits(spec, model_bytes) -> list[tuple[str, int]]:
    """'40%,60%,1G' -> [('40%', bytes), ...]; percents are of the model file's size. Each limit is at
    least one page and at most what a machine can have (kmemsim.core.limits)."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if part.endswith("%"):
            try:
                pct = float(part[:-1])
            except ValueError:
                raise InputError(f"--mem-limit {part[:40]!r}: expected a percent like 60% or a size like 512M") from None
            if not pct > 0 or pct == float("inf"):          # nan, 0, negative, inf
                raise InputError(f"--mem-limit {part[:40]!r}: expected a positive, finite percent")
            if model_bytes * pct / 100 > MAX_MEM_BYTES:
                raise InputError(f"--mem-limit {part[:40]!r}: {pct:g}% of the model is more memory than a "
                                 "machine can have")
            n = int(model_bytes * pct / 100) // PAGE_SIZE * PAGE_SIZE
        else:
            n = parse_size(part, "--mem-limit") // PAGE_SIZE * PAGE_SIZE
        check_mem(n, "--mem-limit", part)
        out.append((part, n))
    if not out:
        raise InputError("--mem-limit: no limit given (e.g. 40%,60%,80%,100%,120%)")
    return out


def check_live_zram(zram) -> tuple[str, int]:
    """A live run's --zram ALGO:SIZE: a compressor the kernel's zram has, a size a device can have."""
    algo, size = parse_zram(zram)
    if algo not in LIVE_ZRAM_ALGOS:
        raise InputError(f"--zram {zram!r}: unknown compressor {algo!r}; zram offers {', '.join(LIVE_ZRAM_ALGOS)}")
    check_zram_size(size, "--zram size", zram.partition(":")[2])
    return algo, size


# ------------------------------------------------------------------------------------------------
# The live side

def check_args(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness):
    """Everything a live reference run takes, checked before the machine is touched: the model's
    header (kmemsim.workload.gguf_layout: a truncated or corrupt file is refused now, not after the
    live runs), the numbers, the zram device and the limits."""
    from ..workload.gguf_layout import read_layout   # here: gguf takes 0.2 s, only for the check
    from ..workload.llama import check_request       # here too: the workload side loads numpy
    size = model_size(model)
    check_request(prompt, decode, ctx, batch, ubatch)
    check_int(threads, "--threads", 1, MAX_THREADS)
    if prompt + decode > ctx:
        raise InputError(f"--prompt + --decode = {prompt + decode} exceeds --ctx {ctx}")
    if not 0 <= swappiness <= 200:
        raise InputError(f"--swappiness {swappiness}: expected 0..200")
    if zram:
        check_live_zram(zram)
    lims = parse_limits(limits, size)
    read_layout(model)
    return lims


def child_argv(script, mode, out, model=None, prompt=0, decode=0, ctx=0, batch=512, ubatch=512, threads=2):
    argv = [sys.executable, script, mode, out]
    if model is not None:
        argv += [os.path.abspath(model), str(prompt), str(decode), str(ctx), str(batch), str(ubatch),
                 str(threads)]
    return argv


def child_env():
    """This process's environment less PYTHONPATH, for the child's subprocess.run."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)          # the child needs only llama_cpp: keep kmemsim out of its imports
    return env


@contextlib.contextmanager
def child_pythonpath_removed():
    """run_command() starts the child with this process's environment: drop PYTHONPATH around it, as
    child_env() does for subprocess.run, so kmemsim stays out of the child's imports."""
    old = os.environ.pop("PYTHONPATH", None)
    try:
        yield
    finally:
        if old is not None:
            os.environ["PYTHONPATH"] = old


def reference_child(model, prompt, decode, ctx, mem_limit, outdir, batch, ubatch, threads, zram, swappiness,
                     memcg_interval, record, mode="run") -> int:
    """One reference run in `outdir` (kmemsim.live.recorder.run_command, recorded or not); its exit
    status. mode: the child's (child.py; "moe-page-cache", "moe-willneed": kmemsim.validate.moe)."""
    os.makedirs(outdir, exist_ok=True)
    script = child_script(outdir)
    res_path = os.path.join(outdir, "llama_result.json")
    argv = child_argv(script, mode, res_path, model, prompt, decode, ctx, batch, ubatch, threads)
    with child_pythonpath_removed():
        rc = run_command(argv, os.path.join(outdir, "run"), mem_limit=mem_limit, zram=zram,
                         swappiness=swappiness, drop_caches=True, smaps_interval=0, record=record,
                         memcg_interval=memcg_interval)
    if rc == 130:                        # the recording was interrupted: stop, don't go on to the next limit
        raise KeyboardInterrupt("live run interrupted")
    return rc


def live_run(model, prompt, decode, ctx, mem_limit, outdir, batch=512, ubatch=512, threads=2,
             zram="lz4:4G", swappiness=60, memcg_interval=INTERVAL_S) -> dict:
    """The reference run under the recorder (reading the cgroup's memory.stat every memcg_interval
    s), then the same run unrecorded in `outdir`/unrecorded/ for its times (UNRECORDED). Returns the
    measured metrics; the run directory is `outdir`."""
    args = (model, prompt, decode, ctx, mem_limit)
    rest = (batch, ubatch, threads, zram, swappiness, memcg_interval)
    rc = reference_child(*args, outdir, *rest, record=True)
    reference_child(*args, os.path.join(outdir, UNRECORDED), *rest, record=False)
    return measured(outdir, model, rc)


def recorded_memcg_interval(outdir):
    """How often the recorder read the run's memory.stat (its command.json; runs recorded before
    --memcg-interval read it at every tick)."""
    with open(os.path.join(outdir, "run", "command.json")) as f:
        return json.load(f).get("memcg_interval", INTERVAL_S)


def _peak_kernel_memory(run_dir):
    """The cgroup's largest kernel-memory charge (v1's watermark; else the largest sampled), or None
    (a run recorded without either)."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        peak = json.load(f).get("kernel_memory_peak_bytes")
    if peak is not None:
        return peak
    p = os.path.join(run_dir, "samples.parquet")
    if not os.path.exists(p):
        return None
    k = kernel_memory(pd.read_parquet(p))
    return int(k.max()) if k is not None and len(k) else None


# The recorder changes the run it records: its reads of the cgroup's memory.stat flush the memcg
# statistics reclaim decides by (at tiny 120%, 60-79 major faults recorded against 5-10 k
# unrecorded), and its probes cost a little time (before session 16 a lot: qwen 60% decoded a token
# in 5.17 s recorded, 1.97 s unrecorded). The times reported, and the unobserved prediction's
# comparison, are those of the same run unrecorded, made right after it (live_run), as the device
# a prediction stands for runs. Runs recorded before session 15 have none: their own times.
UNRECORDED = "unrecorded"


def _result(outdir) -> dict:
    p = os.path.join(outdir, "llama_result.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def run_kernel(outdir, model) -> dict:
    """The emulator's kernel settings for the reference run in OUTDIR, from what its kernel.json says
    the kernel was: the LRU reclaim kept, the readahead and max_sectors_kb of the model's device,
    and what its release implies (engine/kernel_release.py: zeromap, large folios on the model's file
    system, exec faults, MGLRU's memcg reclaim). A 6.1 guest's run (kmemsim vm) is predicted as 6.1 with the guest disk's 128 KiB, this
    machine's as 6.18 with virtio's 8 MiB; settings it does not say stay Config's."""
    from ..engine.kernel_release import release_config  # here: engine/ only for the prediction's settings
    try:
        with open(os.path.join(outdir, "run", "kernel.json")) as f:
            k = json.load(f)
        with open(os.path.join(outdir, "run", "summary.json")) as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError):
        return {}
    mp = os.path.realpath(model)
    dev = next((v["dev"] for p, v in files.items() if os.path.realpath(p) == mp), None)
    if dev is None:          # the run made where the model was then (a grid's directory moved)
        dev = next((v["dev"] for p, v in files.items() if os.path.basename(p) == os.path.basename(mp)), None)
    out = release_config(k["kernel"], k.get("machine", "x86_64"), (k.get("fs_type") or {}).get(dev)) \
        if k.get("kernel") else {}
    ra = (k.get("read_ahead_kb") or {}).get(dev)
    if ra is not None:
        out["read_ahead_kb"] = int(ra)
    # the device's max_sectors_kb (bdi io_pages: how much a WILLNEED reads at once); runs recorded
    # before kernel.json kept it are predicted with the device profile's
    ms = (k.get("max_sectors_kb") or {}).get(dev)
    if ms is not None:
        out["max_sectors_kb"] = int(ms)
    lru = (k.get("lru") or {}).get("mode")
    if lru in ("classic", "mglru"):
        out["lru"] = lru
    return out


def measured(outdir, model, rc=0) -> dict:
    with open(os.path.join(outdir, "run", "summary.json")) as f:
        s = json.load(f)
    res = _result(outdir)
    quiet = _result(os.path.join(outdir, UNRECORDED))
    times = quiet if "tpot_s" in quiet else res
    mp = os.path.realpath(model)
    row = next((v for k, v in s.get("files", {}).items() if os.path.realpath(k) == mp), None)
    if row is None:
        ino = os.stat(model).st_ino
        row = next((v for v in list(s.get("files", {}).values()) + s.get("other_files", [])
                    if v.get("ino") == ino), {"pages_added": 0, "pages_deleted": 0})
    try:
        with open(os.path.join(outdir, "run", "kernel.json")) as f:
            kernel = json.load(f)
    except (OSError, ValueError):
        kernel = {}
    swap_out, swap_in, swap_from = swap_pages(s, kernel)
    out = {
        "storage_read_bytes": row["pages_added"] * PAGE_SIZE,
        "file_evicted_bytes": row["pages_deleted"] * PAGE_SIZE,
        "major_faults": s.get("major_faults"),
        "minor_faults": s.get("minor_faults"),
        "swap_out_bytes": swap_out * PAGE_SIZE,
        "swap_in_bytes": swap_in * PAGE_SIZE,
        "swap_counted_from": swap_from,
        "peak_resident_bytes": s.get("peak_resident_bytes"),
        "kernel_memory_bytes": _peak_kernel_memory(os.path.join(outdir, "run")),
        "ttft_s": times.get("ttft_s"),
        "tpot_s": times.get("tpot_s"),
        "times_from": "unrecorded run" if times is quiet else "recorded run",
        "ttft_recorded_s": res.get("ttft_s"),
        "tpot_recorded_s": res.get("tpot_s"),
        "exit_code": rc,
        "complete": bool(s.get("complete")) and rc == 0 and "tpot_s" in res,
        "oom_kills": s.get("oom_kills", 0),
        "lost_events": s.get("lost_events", 0),
        "buffers": buffers_from_log(res.get("log", "")),
    }
    q = os.path.join(outdir, UNRECORDED, "run", "summary.json")
    if os.path.exists(q):
        with open(q) as f:
            qs = json.load(f)
        v = qs.get("vmstat_delta")
        if v:   # what the unrecorded run shows without probes: the machine's vmstat (it ran alone)
            out[UNRECORDED] = {
                "major_faults": qs.get("major_faults"), "minor_faults": qs.get("minor_faults"),
                "swap_out_bytes": v["pswpout"] * PAGE_SIZE, "swap_in_bytes": v["pswpin"] * PAGE_SIZE,
                # block reads (PGPGIN counts 1 KiB units, submit_bio()) less the swap-ins among them
                "storage_read_bytes": v["pgpgin"] * 1024 - v["pswpin"] * PAGE_SIZE,
                "peak_resident_bytes": qs.get("peak_resident_bytes")}
    return out


