"""Counter samplers: a thread reads memcg memory.stat, /proc/vmstat, zram's mm_stat and block stat and
the recorded process's /proc/PID/status every `interval` (10 ms), and its smaps_rollup every
`smaps_interval` (5 s), into one wide table (one row per tick, columns prefixed by source).

Cost matters (the recorder must not slow inference by more than 3%): files stay open and are re-read
with pread, and a tick keeps only the numbers (field names are parsed once, the kernel keeps their
order): ~8 bytes per number, about 0.8 GB an hour at 10 ms with zram and memcg sources. smaps_rollup walks the page tables under mmap_lock, 7-30 ms for a 650 MB resident model, so it
gets its own, slower period; status has the RSS split (anon/file/shmem) and swap from O(1) counters."""
from __future__ import annotations

import operator
import os
import threading
import time
from array import array

ZRAM_MM_STAT = ("orig_data_size", "compr_data_size", "mem_used_total", "mem_limit", "mem_used_max",
                "same_pages", "pages_compacted", "huge_pages", "huge_pages_since")
# /sys/block/<dev>/stat (Documentation/block/stat.rst); zram accounts every bio it serves here.
BLOCK_STAT = ("read_ios", "read_merges", "read_sectors", "read_ticks", "write_ios", "write_merges",
              "write_sectors", "write_ticks", "in_flight", "io_ticks", "time_in_queue",
              "discard_ios", "discard_merges", "discard_sectors", "discard_ticks", "flush_ios", "flush_ticks")
# /proc/PID/stat fields (proc(5)), as indexes after "(comm) ": the process's own fault counts
PROC_STAT = {"minflt": 7, "majflt": 9}
STATUS_KEYS = (b"VmPeak", b"VmSize", b"VmHWM", b"VmRSS", b"RssAnon", b"RssFile", b"RssShmem", b"VmSwap",
               b"VmPTE")


def read_kv(path, prefix=""):
    """'name value' lines -> {prefix+name: int}; missing file -> {} (the process may have exited)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[1].lstrip("-").isdigit():
                    out[prefix + parts[0].rstrip(":")] = int(parts[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def smaps_rollup(pid):
    """kB figures of /proc/PID/smaps_rollup, in bytes."""
    return {k: v * 1024 for k, v in read_kv(f"/proc/{pid}/smaps_rollup", "smaps_").items()}


def proc_stat_fields(data):
    """The PROC_STAT fields of a /proc/PID/stat read (bytes), in its order: those after "(comm) "
    (the command name may hold spaces and parentheses, so after the last ")")."""
    rest = data[data.rindex(b")") + 2:].split()
    return [int(rest[i]) for i in PROC_STAT.values()]


def proc_faults(pid):
    """minflt, majflt of /proc/PID/stat (fields 10 and 12), this process only."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return tuple(proc_stat_fields(f.read()))
    except (FileNotFoundError, ProcessLookupError):
        return None


def kernel_memory(samples):
    """The cgroup's kernel memory in bytes per sample (v1 memory.kmem.usage_in_bytes, v2 memory.stat
    `kernel`), or None when the run has neither."""
    for col in ("memcg_kmem_usage_in_bytes", "memcg_kernel"):
        if col in samples:
            return samples[col]
    return None


class Source:
    """One counter file, kept open and re-read with pread. kind: 'kv' ("name value" lines: vmstat,
    memory.stat), 'values' (one line of numbers with the given names: zram mm_stat, block stat),
    'status' (/proc/PID/status, the kB lines in STATUS_KEYS, stored in bytes), 'stat' (/proc/PID/stat,
    the fields in PROC_STAT).

    A tick costs ~75 us for vmstat: names are learned once (the kernel keeps their order) and the
    numbers go into one flat int64 array per segment; a new segment starts if the layout changes."""

    def __init__(self, path, prefix, kind="kv", names=(), every=1):
        self.path, self.prefix, self.kind, self.fixed = path, prefix, kind, list(names)
        self.every = every              # read at every this many ticks (0: the first and last only)
        self.fd = os.open(path, os.O_RDONLY)
        self.segments = []              # [names, times array('q'), values array('q')]
        self._ntok = None

    def read(self, t):
        try:
            data = os.pread(self.fd, 1 << 16, 0)
        except (OSError, TypeError):        # the process exited, or the source is closed
            return
        if self.kind == "status":
            lines = data.split(b"\n")
            if len(lines) != self._ntok:
                self._learn_status(lines)
            vals = [int(line.split()[1]) * 1024 for line in self._pick(lines)]
        elif self.kind == "stat":           # /proc/PID/stat: the fields after "(comm) "
            if not data:
                return
            if not self.segments:
                self.segments.append([list(PROC_STAT), array("q"), array("q")])
            vals = proc_stat_fields(data)
        else:
            toks = data.split()
            if len(toks) != self._ntok:
                self._ntok = len(toks)
                names = [n.rstrip(b":").decode() for n in toks[0::2]] if self.kind == "kv" else \
                    self.fixed[:len(toks)]         # older kernels print fewer block-stat fields
                self.segments.append([names, array("q"), array("q")])
            vals = toks[1::2] if self.kind == "kv" else toks[:len(self.segments[-1][0])]
        seg = self.segments[-1]
        vals = list(map(int, vals))
        if len(vals) == len(seg[0]):
            seg[1].append(t)
            seg[2].extend(vals)

    def _learn_status(self, lines):
        self._ntok = len(lines)
        idx = [i for i, line in enumerate(lines) if line.split(b":")[0] in STATUS_KEYS]
        # a zombie's status has no Vm lines: nothing to pick
        self._pick = operator.itemgetter(*idx) if len(idx) > 1 else (lambda ls: [ls[i] for i in idx])
        self.segments.append([[lines[i].split(b":")[0].decode() for i in idx], array("q"), array("q")])

    def frame(self):
        import numpy as np       # here: the CLI's option defaults import this module (start-up)
        import pandas as pd
        frames = []
        for names, ts, vals in self.segments:
            v = np.frombuffer(vals, np.int64).reshape(len(ts), -1) if len(ts) else np.zeros((0, len(names)))
            frames.append(pd.DataFrame(v[:, :len(names)], columns=[self.prefix + n for n in names],
                                       index=pd.Index(np.frombuffer(ts, np.int64), name="t")))
        return pd.concat(frames) if frames else pd.DataFrame(index=pd.Index([], name="t"))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# Reading memory.stat flushes the memcg's statistics (mem_cgroup_flush_stats()), which reclaim then
# decides by (lruvec_page_state()): a run recorded with this period is a kernel whose memcg
# statistics are at most this old, where the kernel's own flush alone leaves them up to 2 s old
# (Config.stats_flush_ms; docs/recorder.md).
INTERVAL_S = 0.01


class Sampler:
    """Samples every `interval` s until stop(). `t` is CLOCK_MONOTONIC nanoseconds, the clock
    bpf_ktime_get_ns() uses, so samples and events share one time axis."""

    def __init__(self, interval=INTERVAL_S, memcg_stat=None, zram_dev=None, pid=None, smaps=True,
                 smaps_interval=5.0, memcg_interval=INTERVAL_S):
        self.interval = interval
        self.smaps_every = max(1, round(smaps_interval / interval)) if smaps and pid else 0
        self.pid = pid
        self.sources = [Source("/proc/vmstat", "vmstat_")]
        if memcg_stat:
            every = max(1, round(memcg_interval / interval)) if memcg_interval > 0 else 0
            self.sources.append(Source(memcg_stat, "memcg_", every=every))
            # kernel memory charged to the cgroup: v1 has its own file (v2's memory.stat says "kernel")
            kmem = os.path.join(os.path.dirname(memcg_stat), "memory.kmem.usage_in_bytes")
            if os.path.exists(kmem):
                self.sources.append(Source(kmem, "memcg_", "values", ["kmem_usage_in_bytes"], every=every))
        if zram_dev:
            self.sources.append(Source(f"/sys/block/{zram_dev}/mm_stat", "zram_", "values", ZRAM_MM_STAT))
            self.sources.append(Source(f"/sys/block/{zram_dev}/stat", "zram_bio_", "values", BLOCK_STAT))
        if pid:
            self.sources.append(Source(f"/proc/{pid}/status", "status_", "status"))
            # its fault counts, per tick: by phase without reading memory.stat
            self.sources.append(Source(f"/proc/{pid}/stat", "stat_", "stat"))
        self.smaps_rows = []
        self.ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kmemsim-sampler", daemon=True)

    def sample(self, last=False):
        t = time.monotonic_ns()
        for s in self.sources:
            if last or self.ticks == 0 or (s.every and self.ticks % s.every == 0):
                s.read(t)
        if self.smaps_every and self.ticks % self.smaps_every == 0:
            row = smaps_rollup(self.pid)
            if row:
                self.smaps_rows.append(dict(row, t=t))
        self.ticks += 1

    def _loop(self):
        # time.sleep, not Event.wait: a timed wait costs twice the CPU per wake-up, and stopping
        # within one interval is soon enough
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sample()
            nxt += self.interval
            delay = nxt - time.monotonic()
            if delay < 0:                   # fell behind: skip ticks, don't burst
                nxt = time.monotonic()
            else:
                time.sleep(delay)

    def start(self, thread=True):
        """thread=False: the caller calls sample() on its own clock (the recorder's poll loop does,
        saving a thread's wake-ups)."""
        if thread:
            self._thread.start()

    def stop(self):
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample(last=True)              # a final row after the command ended
        for s in self.sources:
            s.close()

    def table(self):
        """One row per tick: the sources joined on t (every source shares the tick's t); smaps
        columns (float, NaN between smaps ticks) on the ticks that read them."""
        import pandas as pd      # here: the CLI's option defaults import this module (start-up)
        df = pd.concat([s.frame() for s in self.sources], axis=1).sort_index()
        df = df.ffill().fillna(0).astype("int64")     # a source that vanished keeps its last value
        if self.smaps_rows:
            df = df.join(pd.DataFrame(self.smaps_rows).set_index("t"), how="left")
        return df.reset_index()
