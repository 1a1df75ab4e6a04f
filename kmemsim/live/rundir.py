"""A run directory: what the recorder writes, each file atomically (temp file, then os.replace).

  events.parquet     the trace (kmemsim/core/trace.py schema): MMAP/MUNMAP, faults as READ/WRITE on
                     mappings, PROC_START/PROC_EXIT
  raw/<probe>.parquet every BPF event with all its tracepoint fields (t = ns since the run started)
  samples.parquet    the counter samples (memcg, vmstat, zram, smaps_rollup), one row per tick
  command.json       what ran; kernel.json: the kernel facts that shape reclaim
  summary.json       the totals (see `summary`)
"""
from __future__ import annotations

import gzip
import json
import os
import platform

import numpy as np
import pandas as pd

from ..core import trace as tr
from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE as PAGE
from .cgroup import v1_root, v2_root
from .leftovers import stop_point
from .samplers import read_kv


MAP_SHARED, MAP_FIXED, MAP_ANONYMOUS, MAP_LOCKED, MAP_POPULATE = 0x01, 0x10, 0x20, 0x2000, 0x8000
PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
VMSTAT_KEYS = ("pswpin", "pswpout", "swpin_zero", "swpout_zero", "pgpgin", "pgpgout", "pgfault", "pgmajfault", "workingset_refault_file",
               "workingset_refault_anon", "workingset_activate_file", "workingset_nodes", "pgsteal_direct",
               "pgscan_direct", "pgsteal_kswapd", "pgscan_kswapd", "allocstall_normal", "oom_kill")


def vmstat(keys=VMSTAT_KEYS) -> dict:
    """The machine's /proc/vmstat counters named in keys (0 for one the kernel lacks)."""
    v = read_kv("/proc/vmstat")
    return {k: v.get(k, 0) for k in keys}


def read_text(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


class RunDir:
    def __init__(self, path):
        self.path = path

    @classmethod
    def create(cls, path):
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise InputError(f"run directory {path} exists and is not empty; choose a new one or remove it")
        try:
            os.makedirs(os.path.join(path, "raw"), exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create run directory {path}: {e.strerror}")
        return cls(path)

    def p(self, name):
        return os.path.join(self.path, name)

    def write_json(self, name, obj):
        def w(tmp):
            with open(tmp, "w") as f:
                json.dump(obj, f, indent=1, default=int)
                f.write("\n")
        atomic_write(self.p(name), w)

    def write_frame(self, name, df):
        atomic_write(self.p(name), lambda tmp: df.to_parquet(tmp, compression="zstd", index=False))

    def write_all(self, rec, status, cg=None, rusage=None, faults=None, env=None, pid=None):
        """Everything from a stopped Recording. Files come first, summary.json last: a reader that
        finds summary.json finds the rest."""
        t0 = rec.t0
        tables = {p.name: p.table() for p in rec.probes.probes}
        for p in rec.probes.probes:
            df = pd.DataFrame({f: tables[p.name][f] for f in tables[p.name].dtype.names})
            df.insert(0, "t", (df.pop("ts").astype(np.int64) - t0))
            for f in p.times:
                df[f] = df[f].astype(np.int64) - t0
            if hasattr(p, "KINDS"):
                df["kind"] = pd.Categorical.from_codes(df["kind"].astype(int).to_numpy(), list(p.KINDS))
            self.write_frame(f"raw/{p.name}.parquet", df)
        samples = rec.sampler.table() if rec.sampler else pd.DataFrame({"t": []})
        if len(samples):
            samples["t"] = samples["t"] - t0
        self.write_frame("samples.parquet", samples)
        stop_point("writing")
        trace, tstats = build_trace(rec, tables)
        atomic_write(self.p("events.parquet"), lambda tmp: tr.save(trace, tmp))
        summ = summary(rec, tables, status, samples, tstats, cg=cg, rusage=rusage, faults=faults, pid=pid)
        summ["t0_monotonic_ns"] = int(t0)         # event times t are ns after this CLOCK_MONOTONIC instant
        env = dict(env or {})
        devs = sorted({f["dev"] for f in summ["files"].values()})
        env["read_ahead_kb"] = {d: read_ahead_kb(d) for d in devs}
        env["max_sectors_kb"] = {d: max_sectors_kb(d) for d in devs}   # bdi io_pages: readahead's cap
        env["fs_type"] = fs_types(devs)             # large folios or not (engine/kernel_release.py)
        self.write_json("kernel.json", env)
        self.write_json("summary.json", summ)

    def write_none_recorded(self, status, env=None):
        """A recording that never started (interrupted or failed while the probes compiled or
        attached): the files a recording has, with nothing in them, so the directory reads as any
        other; summary.json last."""
        self.write_frame("samples.parquet", pd.DataFrame({"t": []}))
        empty = tr.TraceBuilder(source="kmemsim recorder").build()
        atomic_write(self.p("events.parquet"), lambda tmp: tr.save(empty, tmp))
        self.write_json("kernel.json", dict(env or {}))
        self.write_json("summary.json", dict(status, lost_events=0, files={}))


# ---------------------------------------------------------------------------------------------------
# the trace: mappings from mmap syscalls and /proc/PID/maps snapshots; faults resolved onto them

def _maps_entries(rec):
    """Snapshot VMAs: list of dicts with pid, start, end, perms, off, kdev, ino, path, seen."""
    out = []
    for (pid, lo, hi, perms, off, dev, ino, path), seen in rec.maps.items():
        maj, mnr = (int(x, 16) for x in dev.split(":"))
        out.append(dict(pid=pid, start=lo, end=hi, perms=perms, off=off, kdev=(maj << 20) | mnr, ino=ino,
                        path=path, seen=seen))
    return out


def _flags(prot, mflags):
    f = 0
    f |= tr.MapFlag.SHARED if mflags & MAP_SHARED else 0
    f |= tr.MapFlag.READ if prot & PROT_READ else 0
    f |= tr.MapFlag.WRITE if prot & PROT_WRITE else 0
    f |= tr.MapFlag.EXEC if prot & PROT_EXEC else 0
    f |= tr.MapFlag.POPULATE if mflags & MAP_POPULATE else 0
    f |= tr.MapFlag.LOCKED if mflags & MAP_LOCKED else 0
    return int(f)


def _perm_flags(perms):
    prot = (PROT_READ if "r" in perms else 0) | (PROT_WRITE if "w" in perms else 0) | \
        (PROT_EXEC if "x" in perms else 0)
    return _flags(prot, MAP_SHARED if "s" in perms else 0)


def _is_file(path):
    return path.startswith("/") and not path.endswith(" (deleted)")


def build_trace(rec, tables):
    """The recorded run in the trace schema. Mappings come from the mmap/munmap/mremap syscall
    events (exact in time) and, for those the kernel made itself (exec, brk, stack), from /proc/PID/maps
    snapshots; a fault belongs to the newest mapping that covers its address at its time."""
    t0 = rec.t0
    mm, tasks, fl = tables["mmap"], tables["tasks"], tables["faults"]
    snaps = _maps_entries(rec)
    execs = {}
    for e in tasks[tasks["kind"] == 1]:
        execs.setdefault(int(e["pid"]), []).append(int(e["ts"]))
    inf = np.iinfo(np.int64).max

    def exec_end(pid, t):           # an exec replaces the whole address space
        return min([x for x in execs.get(pid, []) if x > t], default=inf)

    def exec_start(pid, t):
        return max([x for x in execs.get(pid, []) if x <= t], default=0)

    maps = []                       # dicts: pid, start, end, t, t_end, path, pgoff, flags

    def new_map(pid, start, end, t, path, pgoff, flags, kdev=0, ino=0):
        maps.append(dict(pid=pid, start=start, end=end, t=t, t_end=exec_end(pid, t), path=path,
                         pgoff=pgoff, flags=flags, kdev=kdev, ino=ino))

    by_start = {}
    for s in snaps:
        by_start.setdefault((s["pid"], s["start"]), []).append(s)
    munmaps = []
    for e in mm:
        pid, t, kind = int(e["pid"]), int(e["ts"]), int(e["kind"])
        if int(e["ret"]) >= (1 << 64) - 4096:                 # -errno: the call failed
            continue
        if kind == 0:
            start = int(e["ret"])
            end = start + -(-int(e["len"]) // PAGE) * PAGE
            path, kdev, ino = None, 0, 0
            if not int(e["flags"]) & MAP_ANONYMOUS:
                cands = [s for s in by_start.get((pid, start), []) if s["ino"]]
                later = [s for s in cands if s["seen"] >= t] or cands
                if later:
                    s = min(later, key=lambda s: s["seen"])
                    path, kdev, ino = s["path"], s["kdev"], s["ino"]
                else:
                    path = f"<fd {int(e['fd'])} of pid {pid}>"
            new_map(pid, start, end, t, path, int(e["off"]) // PAGE, _flags(int(e["prot"]), int(e["flags"])),
                    kdev, ino)
        elif kind == 1:
            munmaps.append((t, pid, int(e["addr"]), int(e["addr"]) + -(-int(e["len"]) // PAGE) * PAGE))
        else:                                                   # mremap: old range ends, new begins
            old, old_len, new_len, new = int(e["addr"]), int(e["len"]), int(e["prot"]), int(e["ret"])
            src = [m for m in maps if m["pid"] == pid and m["start"] <= old < m["end"] and m["t"] <= t < m["t_end"]]
            m = src[-1] if src else None
            munmaps.append((t, pid, old, old + old_len))
            new_map(pid, new, new + -(-new_len // PAGE) * PAGE, t, m["path"] if m else None,
                    (m["pgoff"] + (old - m["start"]) // PAGE) if m else 0, m["flags"] if m else 0,
                    m["kdev"] if m else 0, m["ino"] if m else 0)

    # VMAs no syscall explains (exec image, ld.so before we saw it, heap, stack, vdso): from snapshots,
    # valid from the exec before they were first seen; one per (pid, start, path), widest end.
    sys_ranges = {}
    for m in maps:
        sys_ranges.setdefault(m["pid"], []).append((m["start"], m["end"]))
    extra = {}
    for s in snaps:
        if any(lo <= s["start"] and s["end"] <= hi for lo, hi in sys_ranges.get(s["pid"], [])):
            continue
        k = (s["pid"], s["start"], s["path"])
        if k not in extra or s["end"] > extra[k]["end"]:
            extra[k] = s
    for s in extra.values():
        path = s["path"] if s["ino"] else None
        new_map(s["pid"], s["start"], s["end"], exec_start(s["pid"], s["seen"]), path, s["off"] // PAGE,
                _perm_flags(s["perms"]), s["kdev"], s["ino"])
        if not s["ino"] and s["path"]:
            maps[-1]["name"] = s["path"]                       # [heap], [stack], [vdso]

    for t, pid, lo, hi in munmaps:
        for m in maps:
            if m["pid"] == pid and m["t"] <= t < m["t_end"] and lo <= m["start"] and m["end"] <= hi:
                m["t_end"] = t

    maps.sort(key=lambda m: m["t"])
    # Faults onto mappings: newest mapping covering (pid, address, time) wins.
    order = np.argsort(fl["address"], kind="stable")
    addr, fpid, fts = fl["address"][order], fl["pid"][order], fl["ts"][order].astype(np.int64)
    owner = np.full(len(fl), -1, np.int64)
    for i, m in enumerate(maps):
        lo, hi = np.searchsorted(addr, m["start"]), np.searchsorted(addr, m["end"])
        if lo == hi:
            continue
        sl = slice(lo, hi)
        ok = (fpid[sl] == m["pid"]) & (fts[sl] >= m["t"]) & (fts[sl] < m["t_end"])
        owner[sl][ok] = i
    used = np.unique(owner[owner >= 0])

    b = tr.TraceBuilder(source="kmemsim recorder")
    rel = lambda t: max(0, int(t) - t0)
    root = rec.root_pid
    procs = {root} | {int(x) for x in tasks["other"][tasks["kind"] == 0]}
    born = {int(x): int(t) for x, t in zip(tasks["other"][tasks["kind"] == 0], tasks["ts"][tasks["kind"] == 0])}
    for pid in sorted(p for p in procs if p):
        b.process(rel(born.get(pid, t0)), pid, read_text(f"/proc/{pid}/comm") or str(pid))
    files, mids = {}, {}
    for i in used:
        m = maps[i]
        npages = (m["end"] - m["start"]) // PAGE
        fid = -1
        if m["path"] is not None:
            if m["path"] not in files:
                size = 0
                try:
                    size = os.stat(m["path"]).st_size if _is_file(m["path"]) else 0
                except OSError:
                    pass
                files[m["path"]] = [b.file(m["path"], 0), -(-size // PAGE)]
            f = files[m["path"]]
            f[1] = max(f[1], m["pgoff"] + npages)               # a mapping may run past EOF
            fid = f[0]
        name = m.get("name") or (m["path"] if m["path"] else "anon")
        mids[i] = b.mmap(rel(m["t"]), m["pid"], name, npages, file=fid, pgoff=m["pgoff"] if fid >= 0 else 0,
                         flags=m["flags"])
    for f in b.meta["files"]:
        f["pages"] = int(files[f["path"]][1])
    ok = owner >= 0
    if ok.any():
        ow = owner[ok]
        lut = np.full(len(maps), -1, np.int64)
        for i, m_id in mids.items():
            lut[i] = m_id
        starts = np.array([m["start"] for m in maps], np.uint64)
        page = ((addr[ok] - starts[ow]) // PAGE).astype(np.int64)
        write = (fl["error_code"][order][ok] & 2) != 0
        b.ranges(fts[ok] - t0, fpid[ok], np.where(write, tr.Op.WRITE, tr.Op.READ), lut[ow], page, 1)
    for t, pid, lo, hi in munmaps:
        for i, m in enumerate(maps):
            if i in mids and m["pid"] == pid and m["t"] <= t and m["start"] < hi and lo < m["end"]:
                a, z = max(lo, m["start"]), min(hi, m["end"])
                b.event(rel(t), pid, tr.Op.MUNMAP, mids[i], (a - m["start"]) // PAGE, (z - a) // PAGE)
    for e in tasks[(tasks["kind"] == 2) & (tasks["other"] == 1) & (tasks["pid"] == tasks["tid"])]:
        b.event(rel(e["ts"]), int(e["pid"]), tr.Op.PROC_EXIT)
    trace = b.build()
    return trace, {"fault_events": int(len(fl)), "faults_resolved": int(ok.sum()), "mappings": len(mids)}


# ---------------------------------------------------------------------------------------------------
# summary and kernel facts

def inode_paths(rec):
    """(kernel dev, ino) -> path, from every maps snapshot."""
    out = {}
    for (pid, lo, hi, perms, off, dev, ino, path) in rec.maps:
        if ino and _is_file(path):
            maj, mnr = (int(x, 16) for x in dev.split(":"))
            out[((maj << 20) | mnr, ino)] = path
    return out


def summary(rec, tables, status, samples, tstats, cg=None, rusage=None, faults=None, pid=None):
    probes = rec.probes
    paths = inode_paths(rec)
    files, other = {}, []
    counts = dict(rec.file_counts) if rec.file_counts is not None else probes.file_counts()
    for key in paths:               # every mapped file is listed, also those the run never read in
        counts.setdefault(key, (0, 0, 0))
    for (kdev, ino), (added, deleted, ffaults) in sorted(counts.items()):
        dev = f"{kdev >> 20}:{kdev & 0xFFFFF}"
        row = {"pages_added": added, "pages_deleted": deleted, "filemap_faults": ffaults, "dev": dev, "ino": ino}
        path = paths.get((kdev, ino))
        if path:
            files[path] = row
        else:                       # read() but never mapped, or gone before a maps snapshot
            other.append(row)
    vm = probes.array("vmscan_totals")
    sw = probes.array("swap_totals")
    out = dict(status)
    out.update({
        "files": files,
        "other_files": other,
        "swap_out_pages": sw[1],    # block:block_bio_queue writes to swap devices by tracked tasks
        "swap_in_pages": sw[0],
        "swap_device_pages": {"written_all_tasks": sw[3], "read_all_tasks": sw[2]},
        # readio.c: read bios the tracked tasks submitted, their pages, and the parts of them a request
        # completion ended (a split bio completes in parts; raw/readio.parquet has one row a part)
        "read_bios": dict(zip(("submitted", "pages", "parts_completed"), probes.array("read_totals"))),
        "swap_out_folios": vm[0],   # mm_vmscan_write_folio with RECLAIM_WB_ANON
        "reclaim": {"file_folios_written": vm[1], "scanned": vm[2], "reclaimed": vm[3],
                    "direct_reclaim_ns": vm[4], "memcg_reclaim_ns": vm[5],
                    "direct_reclaims": vm[6], "memcg_reclaims": vm[7]},
        "oom_kills": int(len(tables["oom"])),
        "lost_events": probes.lost(),
        "lost_by_probe": {p.name: p.lost for p in probes.probes if p.lost},
        # runs of a tracepoint's program the kernel skipped, another BPF program running on that CPU
        "bpf_recursion_misses": dict(rec.recursion_misses),
        # tracepoints (fields) this kernel lacks, their records left out (Probes.kernel_lacks)
        "kernel_lacks": sorted(probes.kernel_lacks),
        "duration_s": float((samples["t"].max() - samples["t"].min()) / 1e9) if len(samples) > 1 else 0.0,
    })
    out.update(tstats)
    if rusage is not None:          # wait4(): the command and every descendant it waited for
        out["major_faults"], out["minor_faults"] = rusage.ru_majflt, rusage.ru_minflt
        out["faults_source"] = "wait4 rusage"
    elif faults is not None:        # /proc/PID/stat deltas over the recording
        out["minor_faults"], out["major_faults"] = faults
        out["faults_source"] = "/proc/PID/stat"
    else:
        out["major_faults"] = out["minor_faults"] = None
    if cg is not None:
        out["peak_resident_bytes"] = cg.peak()
        out["peak_source"] = "memcg " + ("memory.max_usage_in_bytes" if cg.version == 1 else "memory.peak")
        out["kernel_memory_peak_bytes"] = cg.kmem_peak()
        out["memcg"] = cg.stat()
    elif pid is not None:
        hwm = "status_VmHWM"
        out["peak_resident_bytes"] = int(samples[hwm].max()) if hwm in samples else None
        out["peak_source"] = "/proc/PID/status VmHWM"
    if len(samples) > 1:
        first, last = samples.iloc[0], samples.iloc[-1]
        out["vmstat_delta"] = {k: int(last[f"vmstat_{k}"] - first[f"vmstat_{k}"])
                               for k in VMSTAT_KEYS if f"vmstat_{k}" in samples}
        z = [c for c in samples.columns if c.startswith("zram_")]
        out["zram"] = {c[5:]: int(last[c]) for c in z}
    return out


def _first_int(*paths):
    """The integer in the first of the sysfs files that can be read, None if none can."""
    for p in paths:
        v = read_text(p)
        if v is not None:
            return int(v)
    return None


def read_ahead_kb(dev):
    """read_ahead_kb of the block device holding a file ('maj:min'), from its bdi."""
    return _first_int(f"/sys/class/bdi/{dev}/read_ahead_kb", f"/sys/dev/block/{dev}/queue/read_ahead_kb",
                      f"/sys/dev/block/{dev}/../queue/read_ahead_kb")


def max_sectors_kb(dev):
    """max_sectors_kb of the block device holding a file ('maj:min'): bdi->io_pages, the most
    force_page_cache_ra() (fadvise/madvise WILLNEED) and a large read's readahead take at once;
    None where the device has no queue (9p, tmpfs)."""
    return _first_int(f"/sys/dev/block/{dev}/queue/max_sectors_kb", f"/sys/dev/block/{dev}/../queue/max_sectors_kb")


# Before 6.3 a zram swap device is written and read through its ->rw_page (__swap_writepage() ->
# bdev_write_page(), swap_readpage() -> bdev_read_page()): no bio, so block:block_bio_queue sees no
# swap I/O ("block: remove ->rw_page" took the path out in 6.3)
RW_PAGE_UNTIL = (6, 3)


def swap_pages(summary: dict, kernel: dict) -> tuple[int, int, str]:
    """(pages swapped out, swapped in, where from) of a run: the tracked tasks' swap bios, or where the
    kernel moves zram's pages without bios (RW_PAGE_UNTIL), /proc/vmstat's pswpout / pswpin over the
    run (machine-wide: true of a run alone on its machine, as in `kmemsim vm`'s guest)."""
    from ..engine.kernel_release import release_tuple  # here: engine/ is not the recorder's import
    try:
        old = release_tuple(kernel.get("kernel", "")) < RW_PAGE_UNTIL
    except ValueError:
        old = False
    on_zram = (kernel.get("zram") or {}).get("device") or any("zram" in str(sw[0]) for sw in kernel.get("swaps") or [])
    v = summary.get("vmstat_delta") or {}
    if old and on_zram and "pswpout" in v:
        return int(v["pswpout"]), int(v.get("pswpin", 0)), "vmstat (zram's rw_page: no swap bios before 6.3)"
    return int(summary.get("swap_out_pages") or 0), int(summary.get("swap_in_pages") or 0), "swap bios"


def fs_types(devs, mountinfo="/proc/self/mountinfo") -> dict:
    """The file system type mounted from each device ('maj:min'), from mountinfo (its third field
    and the first after ' - ')."""
    out = {}
    for line in (read_text(mountinfo) or "").splitlines():
        head, _, tail = line.partition(" - ")
        f = head.split()
        if len(f) > 2 and f[2] in devs and tail:
            out.setdefault(f[2], tail.split()[0])
    return out


def lru_mode():
    v = read_text("/sys/kernel/mm/lru_gen/enabled")
    if v is not None:
        return {"mode": "mglru" if int(v, 16) else "classic", "lru_gen_enabled": v}
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            cfg = f.read()
        if "CONFIG_LRU_GEN=y" in cfg:
            return {"mode": "mglru", "source": "CONFIG_LRU_GEN=y"}
        return {"mode": "classic", "source": "CONFIG_LRU_GEN not set"}
    except OSError:
        return {"mode": "classic", "source": "no /sys/kernel/mm/lru_gen"}


# A VM's free page reporting (virtio-balloon): the minimum time a page stays free before it is
# reported to the host, where the machine's kernel has that setting (this project's VMs)
PAGE_REPORTING_MIN_FREE = "/sys/module/page_reporting/parameters/min_free_ms"


def environment(cg=None, zram=None, swappiness=None, limit=None, pid=None):
    u = platform.uname()
    sysctl = lambda n: read_text("/proc/sys/vm/" + n)
    env = {
        "kernel": u.release, "kernel_version": u.version, "machine": u.machine,
        "lru": lru_mode(),
        "swappiness_global": int(sysctl("swappiness")),
        "page_cluster": int(sysctl("page-cluster")),
        "min_free_kbytes": int(sysctl("min_free_kbytes")),
        "watermark_scale_factor": int(sysctl("watermark_scale_factor") or 0),
        "thp_enabled": read_text("/sys/kernel/mm/transparent_hugepage/enabled"),
        "mem_total_kb": read_kv("/proc/meminfo").get("MemTotal"),
        "swaps": [line.split() for line in (read_text("/proc/swaps") or "").splitlines()[1:]],
        # a VM's free page reporting: how long a page stays free before the host takes it back
        # (kmemsim.live.recorder.hold_page_reporting); None where the machine has no such setting
        "page_reporting_min_free_ms": int(read_text(PAGE_REPORTING_MIN_FREE) or 0)
        if os.path.exists(PAGE_REPORTING_MIN_FREE) else None,
    }
    if cg is not None:
        env["cgroup"] = {"version": cg.version, "path": cg.path}
        env["mem_limit"] = cg.limit()
        env["swappiness"] = int(read_text(os.path.join(cg.path, "memory.swappiness"))) if cg.version == 1 \
            else env["swappiness_global"]
    elif pid is not None:
        stat = memcg_stat_of(pid)
        env["cgroup"] = {"path": os.path.dirname(stat) if stat else None}
        env["swappiness"] = env["swappiness_global"]
    if zram is not None and zram.dev:
        d = f"/sys/block/{zram.dev}"
        algo = read_text(f"{d}/comp_algorithm") or ""
        env["zram"] = {"device": zram.dev, "algorithm": algo[algo.find("[") + 1:algo.find("]")],
                       "disksize": int(read_text(f"{d}/disksize") or 0)}
    else:
        env["zram"] = None
    return env


def memcg_stat_of(pid):
    """memory.stat of the memory cgroup `pid` is in (v1 'memory' line or v2 '0::' line), or None."""
    text = read_text(f"/proc/{pid}/cgroup") or ""
    for line in text.splitlines():
        hid, ctrls, path = line.split(":", 2)
        root = v1_root() if "memory" in ctrls.split(",") else (v2_root() if hid == "0" else None)
        if root:
            p = os.path.join(root, path.lstrip("/"), "memory.stat")
            if os.path.exists(p):
                return p
    return None


def cmdline(pid):
    raw = read_text(f"/proc/{pid}/cmdline") or ""
    return [a for a in raw.split("\0") if a]
