"""The emulator's Python face: a Config, and Emulator(config).replay(trace) -> Result.

The whole trace goes to the C core (c_ext/) in one call; Python never loops per page or per event.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import time
from dataclasses import dataclass, asdict
from functools import cached_property
from typing import Iterable

import numpy as np

from ..core import limits
from ..core.errors import InputError
from ..core.units import PAGE_SIZE
from ..core.trace import FILE_ID_OPS, MapFlag, Op, Trace, validate
from ..core.units import parse_size

ZRAM_ALGOS = ("lzo-rle", "lzo", "lz4", "zstd")
LRU_KINDS = ("classic", "mglru")    # Config.lru: the two-list LRU, or the multi-generational LRU (c_ext/lru_gen.c)


def _load_core():
    """kmemsim._core, or a sanitizer build from KMEMSIM_CORE_PATH (make asan)."""
    path = os.environ.get("KMEMSIM_CORE_PATH")
    if not path:
        from .. import _core          # here: a sanitizer build stands in for it (make asan)
        return _core
    so = glob.glob(os.path.join(path, "kmemsim", "_core*.so"))
    if not so:
        raise ImportError(f"no kmemsim core built under {path}")
    spec = importlib.util.spec_from_file_location("kmemsim._core", so[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_core = _load_core()
ffi, lib = _core.ffi, _core.lib
COUNTERS = [ffi.string(lib.km_counter_name(i)).decode() for i in range(lib.km_nr_counters())]
GAUGES = [ffi.string(lib.km_gauge_name(i)).decode() for i in range(lib.km_nr_gauges())]


# the policies the core's registry holds (policy_lookup in c_ext/policy_stock.c), in its order
POLICIES = [ffi.string(lib.km_policy_name(i)).decode() for i in range(lib.km_nr_policies())]
LMKD_REASONS = [ffi.string(lib.km_lmkd_reason(i)).decode().lower() for i in range(lib.km_nr_lmkd_reasons())]


@dataclass
class Config:
    """What the emulated machine is. Sizes accept strings ("512M") or bytes.

    Defaults are this machine's kernel settings where they matter (read_ahead_kb 8192 on virtio,
    fault_around_bytes 64 KiB, x86's young prefaulted PTEs); a device profile overrides them.
    """
    mem: str | int | None = None            # device RAM (watermarks, kswapd, zram counts against it)
    memcg_limit: str | int | None = None    # memory cgroup limit (reclaim at charge time)
    swappiness: int = 60
    zram: str | None = None                 # "ALGO:SIZE", e.g. "lz4:2G"
    policy: str = "stock"
    policy_param: int = 0
    min_free_kbytes: int = 0                # 0: computed as the kernel does from RAM
    watermark_scale_factor: int = 10
    read_ahead_kb: int = 8192
    max_sectors_kb: int = 4096
    fault_around_bytes: int = 65536
    prefault_young: bool = True
    max_folio_order: int = 9                # ext4 large folios (6.16+) up to PMD order
    lmk: bool = False
    swap_zeromap: bool = True               # Linux 6.12+: zero pages swap to a bitmap (swpout_zero), not zram
    exec_folio_order: int = 0               # Linux 6.17+: exec faults read forward in the vma, folios of
                                            # this order (x86 0, arm64 4); -1: older kernels read around
    # storage time (bio.c): a read's latency and bandwidth; 0: reads complete at once. threads: how
    # many share a graph node (events at one trace time): while one waits for a read, the others go
    # on. The task's own work moves the clock reads complete against: per page swapped in (a
    # same-filled or zeromap one: zero_page_us), swapped out, scanned, per file folio dropped and per
    # page of it, and per inactive list the task's reclaim shrinks
    # (kmemsim.engine.time.device.Device.task_costs gives them all from a profile)
    io_latency_us: float = 0.0
    io_read_gbps: float = 0.0
    threads: int = 1
    swapin_us: float = 0.0
    zero_page_us: float = 0.0
    swapout_us: float = 0.0
    file_folio_us: float = 0.0
    scan_us: float = 0.0
    list_us: float = 0.0
    file_page_us: float = 0.0
    sample_ms: float = 10.0
    # the memcg statistics reclaim decides by are flushed this often (ms, on the clock reads complete
    # against): the kernel's own flush runs every 2,000 ms and a memory.stat reader adds its own,
    # as kmemsim's recorder does every 10 ms; 0 reads them as they are (c_ext/memcontrol.c)
    stats_flush_ms: float = 0.0
    # when the first of those flushes falls (ms from the start; the kernel's timer is not the run's,
    # so it is the run's chance); before it the statistics are the new memcg's: nothing
    stats_flush_phase_ms: float = 0.0
    # which LRU reclaim keeps: "classic" (active/inactive lists, CONFIG_LRU_GEN off or disabled) or
    # "mglru" (the multi-generational LRU, c_ext/lru_gen.c: Android 14+ GKI kernels turn it on;
    # docs/mglru.md), and MGLRU's /sys/kernel/mm/lru_gen/min_ttl_ms (0: off)
    lru: str = "classic"
    min_ttl_ms: float = 0.0
    # MGLRU's memcg reclaim before Linux 6.3 (6.1's lru_gen_shrink_lruvec(): it evicts on after
    # aging, stops when it aged twice or met its goal having swapped); 6.3+ skips a lruvec it aged
    # and never stops memcg reclaim short (engine/kernel_release.py; docs/mglru.md)
    lru_gen_fairness_safeguards: bool = False

    def to_c(self, ffi):
        if self.policy not in POLICIES:
            raise InputError(f"unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if not 0 <= int(self.swappiness) <= 200:
            raise InputError(f"swappiness {self.swappiness} is outside 0..200")
        mem = parse_size(self.mem, "--mem") if self.mem is not None else 0
        memcg = parse_size(self.memcg_limit, "--memcg-limit") if self.memcg_limit is not None else 0
        if not mem and not memcg:
            raise InputError("no memory size: give --mem SIZE (device RAM) or --memcg-limit SIZE")
        zram_pages, algo = 0, 0
        if self.zram:
            name, _, size = str(self.zram).partition(":")
            if name not in ZRAM_ALGOS or not size:
                raise InputError(f"--zram {self.zram!r}: expected ALGO:SIZE with ALGO one of "
                                 f"{', '.join(ZRAM_ALGOS)} (e.g. lz4:2G)")
            algo = ZRAM_ALGOS.index(name)
            zram_pages = limits.check_zram_size(parse_size(size, "--zram size"), "--zram size", size) // PAGE_SIZE
        # the kernel's knobs, as a device profile may set them (the C core refuses the rest too)
        for name, v, lo, hi in (("min_free_kbytes", self.min_free_kbytes, -1, limits.MAX_KNOB_KB),
                                ("watermark_scale_factor", self.watermark_scale_factor, 0,
                                 limits.MAX_WATERMARK_SCALE_FACTOR),
                                ("read_ahead_kb", self.read_ahead_kb, 0, limits.MAX_KNOB_KB),
                                ("max_sectors_kb", self.max_sectors_kb, 0, limits.MAX_KNOB_KB),
                                ("fault_around_bytes", self.fault_around_bytes, 0, limits.MAX_FAULT_AROUND_BYTES),
                                ("max_folio_order", self.max_folio_order, 0, 9),
                                ("threads", self.threads, 1, limits.MAX_THREADS),
                                ("policy_param", self.policy_param, -limits.MAX_POLICY_PARAM,
                                 limits.MAX_POLICY_PARAM)):
            limits.check_int(v, name, lo, hi)
        for name, v in (("io_latency_us", self.io_latency_us), ("io_read_gbps", self.io_read_gbps),
                        ("swapin_us", self.swapin_us), ("zero_page_us", self.zero_page_us),
                        ("swapout_us", self.swapout_us), ("file_folio_us", self.file_folio_us),
                        ("scan_us", self.scan_us), ("list_us", self.list_us),
                        ("file_page_us", self.file_page_us), ("sample_ms", self.sample_ms),
                        ("stats_flush_ms", self.stats_flush_ms), ("stats_flush_phase_ms", self.stats_flush_phase_ms)):
            limits.check_float(v, name, 0, limits.MAX_PERIOD_S * 1e6)
        c = ffi.new("struct km_config *")
        c.mem_pages = mem // PAGE_SIZE
        c.memcg_limit_pages = memcg // PAGE_SIZE
        if (mem and not c.mem_pages) or (memcg and not c.memcg_limit_pages):
            raise InputError("memory size below one 4 KiB page")
        c.swappiness = int(self.swappiness)
        c.zram_pages = zram_pages
        c.zram_algo = algo
        c.min_free_kbytes = int(self.min_free_kbytes)
        c.watermark_scale_factor = int(self.watermark_scale_factor)
        c.ra_pages = int(self.read_ahead_kb) // 4
        c.io_pages = int(self.max_sectors_kb) // 4
        c.fault_around_pages = max(1, int(self.fault_around_bytes) // PAGE_SIZE)
        c.prefault_young = int(bool(self.prefault_young))
        c.max_folio_order = int(self.max_folio_order)
        c.lmk = int(bool(self.lmk))
        c.swap_zeromap = int(bool(self.swap_zeromap))
        if not -1 <= int(self.exec_folio_order) <= 9:
            raise InputError(f"exec_folio_order {self.exec_folio_order} is outside -1..9")
        c.exec_folio_order = int(self.exec_folio_order)
        if self.io_latency_us < 0 or self.io_read_gbps < 0 or int(self.threads) < 1:
            raise InputError(f"storage time: latency {self.io_latency_us} us, {self.io_read_gbps} GB/s and "
                             f"{self.threads} threads (want >= 0, >= 0 and >= 1)")
        costs = (self.swapin_us, self.zero_page_us, self.swapout_us, self.file_folio_us, self.scan_us,
                 self.list_us, self.file_page_us)
        if min(costs) < 0:
            raise InputError(f"task time costs {costs} us: none may be negative")
        (c.swapin_ns, c.zero_ns, c.swapout_ns, c.file_folio_ns, c.scan_ns, c.list_ns,
         c.file_page_ns) = (int(round(x * 1e3)) for x in costs)
        c.io_latency_ns = int(round(self.io_latency_us * 1e3))
        c.io_ns_per_page = int(round(PAGE_SIZE / self.io_read_gbps)) if self.io_read_gbps else 0
        c.nr_threads = int(self.threads)
        c.sample_ns = int(self.sample_ms * 1e6)
        if self.stats_flush_ms < 0:
            raise InputError(f"stats_flush_ms {self.stats_flush_ms} is negative")
        c.stats_flush_ns = int(round(self.stats_flush_ms * 1e6))
        if not 0 <= self.stats_flush_phase_ms <= max(self.stats_flush_ms, 0):
            raise InputError(f"stats_flush_phase_ms {self.stats_flush_phase_ms} is outside 0..stats_flush_ms")
        c.stats_flush_phase_ns = int(round(self.stats_flush_phase_ms * 1e6))
        c.policy = self.policy.encode()
        c.policy_param = int(self.policy_param)
        if self.lru not in LRU_KINDS:
            raise InputError(f"lru {self.lru!r}: expected one of {', '.join(LRU_KINDS)}")
        limits.check_float(self.min_ttl_ms, "min_ttl_ms", 0, limits.MAX_PERIOD_S * 1e3)
        if self.lru != "classic" or self.min_ttl_ms:     # (the classic lists leave both fields 0)
            c.lru_gen = int(self.lru == "mglru")
            c.lru_gen_min_ttl_ns = int(round(self.min_ttl_ms * 1e6))
            c.lru_gen_fairness_safeguards = int(bool(self.lru_gen_fairness_safeguards))
        return c


def lru_gen_state(emu) -> dict | None:
    """MGLRU's state after a replay (km_lru_gen_state in c_ext/lru_gen.c), None with the classic lists:
    max_seq and min_seq per type; per live generation (oldest first) its seq, pages and birth (trace
    ns); the PID controller's per-tier counters by type (refaulted, evicted, protected and their
    averages); and what the aging and eviction did (agings, mm walks, PTE tables walked and left out
    by the Bloom filter, young PTEs the walks and look-arounds cleared, min_ttl OOM kills)."""
    s = np.zeros(lib.KM_LRU_GEN_STATE, np.int64)
    lib.km_lru_gen_state(emu, ffi.from_buffer("int64_t[]", s))
    if not s[0]:
        return None
    max_seq, min_seq = int(s[1]), {"anon": int(s[2]), "file": int(s[3])}
    gens = []
    for seq in range(min(min_seq.values()), max_seq + 1):
        g = seq % 4
        gens.append({"seq": seq, "anon": int(s[4 + 2 * g]) if seq >= min_seq["anon"] else 0,
                     "file": int(s[5 + 2 * g]) if seq >= min_seq["file"] else 0, "birth_ns": int(s[12 + g])})
    tiers = lambda base: {t: [int(x) for x in s[base + 4 * i: base + 4 * i + 4]] for i, t in enumerate(("anon", "file"))}
    names = ("mm_seq", "agings", "mm_walks", "tables_walked", "tables_filtered", "walk_young", "look_arounds",
             "look_around_young", "min_ttl_ooms", "min_ttl_ns", "pid_chose_anon", "pid_chose_file", "anon_behind",
             "type_fallbacks")
    return {"max_seq": max_seq, "min_seq": min_seq, "gens": gens,
            "avg_refaulted": tiers(16), "avg_total": tiers(24), "refaulted": tiers(32), "evicted": tiers(40),
            "protected": {t: [0] + [int(x) for x in s[48 + 3 * i: 51 + 3 * i]] for i, t in enumerate(("anon", "file"))},
            **{n: int(s[54 + i]) for i, n in enumerate(names)}}


def _unique_inverse(x: np.ndarray):
    """np.unique(x, return_inverse=True), the inverse as int32, for an integer column such as pid.
    Without the sort when the values span a small range (pids do): a table of the values present
    and its running count give the same answer in linear time."""
    if x.size == 0:
        u, inv = np.unique(x, return_inverse=True)
        return u, inv.astype(np.int32)
    lo, hi = int(x.min()), int(x.max())
    if lo == hi:                                      # one process: the common case
        return np.array([lo], x.dtype), np.zeros(x.size, np.int32)
    if hi - lo > max(1 << 16, x.size):
        u, inv = np.unique(x, return_inverse=True)
        return u, inv.reshape(-1).astype(np.int32)
    off = x.astype(np.int64) - lo
    present = np.zeros(hi - lo + 1, bool)
    present[off] = True
    rank = (np.cumsum(present, dtype=np.int64) - 1).astype(np.int32)
    return (np.flatnonzero(present) + lo).astype(x.dtype), rank[off]


def core_bytes(trace: Trace, files: list, c) -> int:
    """What the C core will allocate for a trace (c_ext/mmap.c, replay.c, zram.c, page_alloc.c): per
    file page a page-cache slot and a shadow entry (12 bytes), per mapped page a PTE byte, and for
    each anonymous or private mapping an object of 16 bytes a page; a folio struct and its clocks
    (48 bytes) per page that can be resident at once, per swap slot used 8, and the timeline."""
    col = trace.cols
    mm = col["op"] == Op.MMAP
    npg = col["npages"][mm].astype(np.int64)
    anon = (col["arg"][mm] < 0) | ((col["flags"][mm] & MapFlag.SHARED) == 0)
    mapped = int(npg.sum())
    anon_pages = int(npg[anon].sum())
    file_pages = sum(int(f["pages"]) for f in files)
    limit = min(x for x in (c.mem_pages or 1 << 62, c.memcg_limit_pages or 1 << 62))
    resident = min(limit, mapped + file_pages)
    # the timeline: a row of every counter and gauge per sample over the trace's span (and per
    # phase), held by the core and copied out: twice its 8 bytes a value
    t = col["t"]
    rows = int(np.count_nonzero(col["op"] == Op.PHASE)) + 2
    if len(t) and c.sample_ns > 0:
        rows += (int(t[-1]) - int(t[0])) // c.sample_ns
    timeline = 2 * 8 * (2 + len(COUNTERS) + len(GAUGES)) * rows
    return (12 * file_pages + mapped + 16 * anon_pages + 48 * resident + 8 * min(anon_pages, c.zram_pages)
            + timeline)


class PageState:
    """Bits of Result.page_states (km_file_page_states in c_ext/replay.c)."""
    RESIDENT, ACTIVE, UNEVICTABLE, REFERENCED, SHADOW = 1, 2, 4, 8, 16


class Result:
    """What a replay gives back. The tables are pandas DataFrames built from the core's arrays on first
    use, so a caller that reads only the summary (`kmemsim replay --json`) never loads pandas."""

    def __init__(self, summary: dict, raw: dict, page_states: dict | None = None, config: dict | None = None,
                 lru_gen: dict | None = None):
        self.summary = summary             # kernel-named totals, plus accesses/misses and peaks
        self.page_states = page_states if page_states is not None else {}   # path -> per-page bits (PageState)
        self.config = config if config is not None else {}
        self.lru_gen = lru_gen             # MGLRU's state at the end (lru_gen_state()); None with the classic lists
        self._raw = raw                    # the core's arrays the tables below are made of

    @cached_property
    def timeline(self) -> "pd.DataFrame":
        """Sampled counters and gauges over trace time."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        tl = pd.DataFrame(r["timeline"], columns=["t", "phase"] + COUNTERS + GAUGES)
        phases = r["phases"]
        tl["phase"] = [phases[i] if 0 <= i < len(phases) else "" for i in tl["phase"]]
        return tl

    @cached_property
    def per_phase(self) -> "pd.DataFrame":
        """Counter totals per phase name."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        return pd.DataFrame(r["per_phase"][:len(r["phases"])].astype(np.int64),
                            index=pd.Index(r["phases"], name="phase"), columns=COUNTERS)

    @cached_property
    def per_process(self) -> "pd.DataFrame":
        """Counter totals per pid."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        return pd.DataFrame(r["per_task"].astype(np.int64), index=pd.Index(r["pids"], name="pid"), columns=COUNTERS)

    @cached_property
    def files(self) -> "pd.DataFrame":
        """Per file: pages added/deleted/resident."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        fs = r["file_stats"]
        return pd.DataFrame({"path": r["paths"], "pages_added": fs[:, 0], "pages_deleted": fs[:, 1],
                             "resident_pages": fs[:, 2]})

    def column_max(self, names) -> dict:
        """The largest sample of each named timeline column, read from the core's array (no pandas:
        `kmemsim replay --json` shows the zram pool's peaks)."""
        cols = ["t", "phase"] + COUNTERS + GAUGES
        tl = self._raw["timeline"]
        return {n: int(tl[:, cols.index(n)].max()) for n in names if n in cols and len(tl)}

    @cached_property
    def rss(self) -> "pd.DataFrame":
        """Per timeline row (same index): each pid's mapped pages (rss)."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        return pd.DataFrame(r["rss"], columns=pd.Index(np.asarray(r["pids"]), name="pid"))

    @cached_property
    def kills(self) -> "pd.DataFrame":
        """pid, t (trace ns), by ("oom" or "lmkd"), reason: the tasks killed."""
        import pandas as pd  # here: built on first read (replay --json loads no pandas)
        r = self._raw
        kills = r["kills"]
        k = kills[:, 0] >= 0
        return (pd.DataFrame({"pid": np.asarray(r["pids"])[k], "t": kills[k, 0],
                              "by": np.where(kills[k, 1] >= 2, "lmkd", "oom"),
                              "reason": [LMKD_REASONS[b - 2] if b >= 2 else "oom" for b in kills[k, 1]]})
                .sort_values("t", kind="stable", ignore_index=True))


# km_replay()'s columns, in its order, with their C types
_C_COLUMNS = (("t", "int64_t"), ("task", "int32_t"), ("op", "uint8_t"), ("map", "int32_t"), ("page", "int64_t"),
              ("npages", "int64_t"), ("arg", "int64_t"), ("flags", "uint32_t"))


class CoreBatch(dict):
    """A batch already in km_replay()'s form (the _C_COLUMNS, contiguous: task and mapping ids dense),
    valid by construction, so passed as it is: a reader that fills the same buffers slice after slice
    (libcachesim_io.OracleGeneralStream) faults in no fresh memory per event."""


def _batch_columns(b: dict, pids: np.ndarray, map_ids: np.ndarray, lengths: np.ndarray, last_t: int) -> dict:
    """A batch's columns as km_replay() takes them, checked: READ/WRITE events of known processes and
    mappings, inside them, from time last_t on. map_ids: the trace's mapping ids in order of creation."""
    if isinstance(b, CoreBatch):
        return b
    n = len(b["t"])
    if any(len(b[k]) != n for k in ("t", "pid", "op", "map", "page", "npages")):
        raise InputError("a batch's columns differ in length")
    op = np.asarray(b["op"], np.uint8)
    t = np.ascontiguousarray(b["t"], np.int64)
    if n == 0:
        return {k: np.zeros(0, np.dtype(ct.replace("_t", ""))) for k, ct in _C_COLUMNS}
    bad = np.flatnonzero((op != Op.READ) & (op != Op.WRITE))
    if bad.size:
        raise InputError(f"batch row {int(bad[0])}: op {int(op[bad[0]])}; batches hold READ and WRITE events only")
    if t[0] < last_t or (n > 1 and (np.diff(t) < 0).any()):
        raise InputError("a batch's times go backwards (from the last event's on, in order)")
    pid = np.asarray(b["pid"])
    task = np.searchsorted(pids, pid)
    known = (task < len(pids)) & (pids[np.minimum(task, len(pids) - 1)] == pid)
    if not known.all():
        raise InputError(f"batch row {int(np.flatnonzero(~known)[0])}: a process the trace does not start")
    order = np.argsort(map_ids, kind="stable")
    m = np.asarray(b["map"], np.int64)
    pos = np.searchsorted(map_ids[order], m)
    ok = (pos < len(map_ids)) & (map_ids[order][np.minimum(pos, len(map_ids) - 1)] == m)
    if not ok.all():
        raise InputError(f"batch row {int(np.flatnonzero(~ok)[0])}: a mapping the trace does not create")
    dense = order[pos].astype(np.int32)
    page, npages = np.asarray(b["page"], np.int64), np.asarray(b["npages"], np.int64)
    out = (page < 0) | (npages < 0) | (page + npages > lengths[dense])
    if out.any():
        raise InputError(f"batch row {int(np.flatnonzero(out)[0])}: range runs past the end of its mapping")
    zeros = lambda dt: np.zeros(n, dt)  # noqa: E731
    return {"t": t, "task": task.astype(np.int32), "op": np.ascontiguousarray(op), "map": dense,
            "page": np.ascontiguousarray(page), "npages": np.ascontiguousarray(npages),
            "arg": np.ascontiguousarray(b.get("arg", zeros(np.int64)), np.int64),
            "flags": np.ascontiguousarray(b.get("flags", zeros(np.uint32)), np.uint32)}


class Emulator:
    def __init__(self, config: Config | None = None, **kw):
        self.config = config or Config(**kw)
        self._c = self.config.to_c(ffi)    # validate early: bad configs fail before any work

    def replay(self, trace: Trace, check_invariants: bool = False) -> Result:
        return self.replay_batches(trace, None, check_invariants)

    def replay_batches(self, trace: Trace, batches: Iterable[dict] | None, check_invariants: bool = False) -> Result:
        """Replay `trace`, then each batch of events after it, the core's state carried across: a
        trace longer than memory (Parquet row groups, oracleGeneral slices, a stream generated on the
        fly) in bounded memory. A batch is a dict of the trace's columns holding READ and WRITE events
        only, of the trace's processes and mappings, at times from the last event's on; the result
        equals one replay of the whole (km_replay_continues() in c_ext/replay.c: every call says more
        follow, and an empty last call closes the timeline). One batch is held at a time."""
        if not trace.validated:
            validate(trace)
        c = trace.cols
        pids, task = _unique_inverse(c["pid"])
        # mapping ids: dense, in order of creation (the core indexes vmas by id)
        maps = c["map"]
        mm = c["op"] == Op.MMAP
        created = maps[mm]
        dense = np.full(int(maps.max(initial=-1)) + 2, -1, np.int32)   # dense[-1] is -1: no mapping
        dense[created] = np.arange(len(created), dtype=np.int32)
        if maps.min(initial=0) >= -1:
            # ids already dense and in order (builders make them so): the column maps to itself
            same = len(created) == len(dense) - 1 and np.array_equal(created, np.arange(len(created)))
            mapcol = maps if same else dense[maps]
        else:
            mapcol = np.where(maps >= 0, dense[np.clip(maps, 0, None)], -1).astype(np.int32)
        files = sorted(trace.meta.get("files", []), key=lambda f: f["id"])
        fid_dense = {int(f["id"]): i for i, f in enumerate(files)}
        arg = c["arg"]
        flags = c["flags"]
        if files and any(k != v for k, v in fid_dense.items()):
            arg = arg.copy()                          # the trace's own columns stay as they are
            flags = flags.copy()
            lut = np.vectorize(lambda x: fid_dense.get(int(x), x), otypes=[np.int64])
            fm = mm & (arg >= 0)
            arg[fm] = lut(arg[fm])
            fa = np.isin(c["op"], FILE_ID_OPS)                                          # file id in flags
            flags[fa] = lut(flags[fa].astype(np.int64)).astype(np.uint32)
        file_pages = np.array([int(f["pages"]) for f in files], np.int64)
        phases = list(trace.meta.get("phases", []))

        limits.check_memory(core_bytes(trace, files, self._c), f"the trace ({len(trace):,} events)")
        emu = lib.km_new(self._c, len(files), ffi.from_buffer("int64_t[]", file_pages),
                         len(phases), len(pids))
        if emu == ffi.NULL:
            raise InputError("out of memory: the emulator cannot be allocated")
        try:
            if lib.km_failed(emu):
                raise InputError("the emulator refuses the trace: " + ffi.string(lib.km_error(emu)).decode())
            cols = {k: np.ascontiguousarray(v) for k, v in
                    dict(t=c["t"], task=task, op=c["op"], map=mapcol, page=c["page"],
                         npages=c["npages"], arg=arg, flags=flags).items()}
            lib.km_replay_continues(emu, batches is not None)
            t0 = time.perf_counter()
            rc = lib.km_replay(emu, len(trace),
                               ffi.from_buffer("int64_t[]", cols["t"]),
                               ffi.from_buffer("int32_t[]", cols["task"]),
                               ffi.from_buffer("uint8_t[]", cols["op"]),
                               ffi.from_buffer("int32_t[]", cols["map"]),
                               ffi.from_buffer("int64_t[]", cols["page"]),
                               ffi.from_buffer("int64_t[]", cols["npages"]),
                               ffi.from_buffer("int64_t[]", cols["arg"]),
                               ffi.from_buffer("uint32_t[]", cols["flags"]))
            self.core_seconds = time.perf_counter() - t0   # the C event loop alone (bench reports it)
            created = np.flatnonzero(mm)
            lengths = c["npages"][created]                 # per dense mapping id: its pages
            last_t = int(c["t"][-1]) if len(trace) else 0
            for batch in (batches if batches is not None and rc == 0 else ()):
                b = _batch_columns(batch, pids, maps[created], lengths, last_t)
                del batch
                t0 = time.perf_counter()
                rc = lib.km_replay(emu, len(b["t"]), *(ffi.from_buffer(f"{ct}[]", b[k]) for k, ct in _C_COLUMNS))
                self.core_seconds += time.perf_counter() - t0
                if rc != 0:
                    break
                last_t = int(b["t"][-1]) if len(b["t"]) else last_t
                del b
            if batches is not None and rc == 0:                # the end: the timeline's closing sample
                lib.km_replay_continues(emu, 0)
                null = ffi.NULL
                rc = lib.km_replay(emu, 0, *(ffi.cast(f"{ct} *", null) for _, ct in _C_COLUMNS))
            if rc != 0:
                raise InputError("trace rejected by the emulator: " + ffi.string(lib.km_error(emu)).decode())
            if check_invariants and lib.km_check_invariants(emu) != 0:
                raise AssertionError("invariant broken: " + ffi.string(lib.km_error(emu)).decode())
            return self._result(emu, pids, phases, files)
        finally:
            lib.km_free(emu)

    def _result(self, emu, pids, phases, files) -> Result:
        nc, ng = len(COUNTERS), len(GAUGES)
        tot = np.zeros(nc, np.uint64)
        lib.km_counters(emu, ffi.from_buffer("uint64_t[]", tot))
        g = np.zeros(ng, np.int64)
        lib.km_gauges(emu, ffi.from_buffer("int64_t[]", g))
        rows = lib.km_timeline_rows(emu)
        tl = np.zeros((rows, 2 + nc + ng), np.int64)
        if rows:
            lib.km_timeline(emu, ffi.from_buffer("int64_t[]", tl))
        rss = np.zeros((rows, len(pids)), np.int64)
        if rows and len(pids):
            lib.km_timeline_rss(emu, ffi.from_buffer("int64_t[]", rss))
        per_task = np.zeros((len(pids), nc), np.uint64)
        lib.km_task_counters(emu, ffi.from_buffer("uint64_t[]", per_task))
        per_phase = np.zeros((max(1, len(phases)), nc), np.uint64)
        lib.km_phase_counters(emu, ffi.from_buffer("uint64_t[]", per_phase))
        fs = np.zeros((len(files), 3), np.int64)
        if files:
            lib.km_file_stats(emu, ffi.from_buffer("int64_t[]", fs))
        states = {}
        for i, f in enumerate(files):
            st = np.zeros(int(f["pages"]), np.uint8)
            lib.km_file_page_states(emu, i, ffi.from_buffer("uint8_t[]", st))
            states[f["path"]] = st
        summary = {k: int(v) for k, v in zip(COUNTERS, tot)}
        summary.update({k: int(v) for k, v in zip(GAUGES, g)})
        summary["peak_resident_bytes"] = summary.pop("peak_resident") * PAGE_SIZE
        summary["peak_memory_bytes"] = summary.pop("peak_memory") * PAGE_SIZE
        kills = np.zeros((len(pids), 2), np.int64)
        lib.km_task_kills(emu, ffi.from_buffer("int64_t[]", kills))
        return Result(
            summary=summary,
            raw={"timeline": tl, "phases": phases, "per_phase": per_phase, "per_task": per_task, "pids": pids,
                 "file_stats": fs, "paths": [f["path"] for f in files], "kills": kills, "rss": rss},
            page_states=states,
            config=asdict(self.config),
            lru_gen=lru_gen_state(emu) if self.config.lru == "mglru" else None,
        )
