"""mzCache's compressed KV arena against the live kernel: a program holds a compressed arena in
malloc'd memory (private anonymous, what glibc's malloc gives a large request) under a memory cgroup
limit with zram swap, with and without mlock. mzcache_kv_state.h mlocks its arenas at the end of a
swap-out because "an ordinary malloc pool is anonymous memory zram swaps out, turning the next swapin
into a major-fault storm". Here a pressure buffer larger than what the limit leaves takes part of the
unlocked arena out to zram, and reading the arena back faults it in page by page. The locked arena
stays on the unevictable list, so reclaim takes the pressure buffer's own older pages, and reading the
arena back faults nothing. The pages swapped out and in and the major faults are compared with the
emulator's replay of the same program's accesses, each within 20% for the unlocked run.

What the figures are made of (each accounted for on both sides):
- The arena: FlexGen-style 8-bit group-wise quantised normals (uint8 codes, min-max per group of
  64, as FlexGen compresses its KV cache). lz4 cannot shorten them (a 4 KiB page compresses to
  4,114 bytes), so zram stores every page raw, as a huge page (zram_write_page(): a compressed length
  at or above huge_class_size). Live, zram's huge_pages at their peak equal the arena pages swapped
  out (4,501 of 4,501 in a run). The emulator's class is KV_Q8. It is the 8-bit KV cache's class. Its
  lz4 model (4096 / 1.08 = 3,793 bytes, at least 3/4 of a page) stores it huge, as zram does. And
  the emulator counts its share of the swap traffic (kv_swapout_pages, kv_swapin_pages). KV_F16 and
  WEIGHTS_Q would store it huge too; HEAP (2.58:1) would not.
- The interpreter: Python with numpy starts with ~15.4 MiB of anonymous memory and reads ~30 MiB of
  its libraries into the page cache charged to the cgroup (after drop_caches). Its start-up is
  modelled as test_live_core.py models it: its file pages read once and its anonymous pages written
  once, both measured in the live run (the filemap records before the program's start stamp, and
  RssAnon at that stamp). Its kernel memory beyond what the emulator charges itself (~220 pages:
  slab; cgroup v1's kmem usage at the start stamp) is one KMEM event, as kmemsim.validate.predict
  adds its engine's. Its heap is the oldest anonymous memory and cold, so reclaim swaps it out first
  in both runs (live ~3,630 of its ~3,950 pages are in swap at the end). What it touches again later
  is not predicted: its code is not in the trace. It is measured: the live run's faults on its own
  anonymous memory after the start stamp (~330 records), and the page cache it adds after it, are
  replayed at their times. This gives ~300 of the predicted swap-ins in each run; live the
  interpreter's swap-ins are ~440. Without that replay the prediction is 8,375 swap-outs and 4,428
  swap-ins against a live 8,719 and 5,264 (the locked run: 0 swap-ins against 435). Without the KMEM
  event the arena swap-ins fall by ~200 (4,284 against 4,480).
- The program ends with os._exit(). Python's finalisation would walk every object and fault the
  swapped-out interpreter heap back in (~3.2 k major faults in a trial run, after the arena was
  read): a storm of the harness, not of the arena.
- Live, the arena's own swap-ins are the faults on its mapping while it is read back (a page not
  resident faults once). The emulator's are kv_swapin_pages. The major faults compared are those
  from the start stamp on: the interpreter's start-up faults (~45, its libraries after
  drop_caches) are read(2)-like FREADs in the trace.
- Swap readahead: page-cluster is 3 on this machine (kernel.json), but it does not apply. zram is
  SWP_SYNCHRONOUS_IO, and do_swap_page() reads a swap entry with one user straight into a new folio,
  skipping the swap cache and swapin_readahead(). Every swap-in read bio is one page, and the pages
  swapped in never exceed the major faults. The emulator's do_swap_page() (c_ext/memory.c) does the
  same.

Figures of five runs (live / predicted). Unlocked: swap-out 8,411-8,741 / 8,393-8,491, swap-in
4,948-5,276 / 4,752-4,848, major faults from the start 4,951-5,278 / 4,752-4,848, arena swap-ins
4,501-4,832 / 4,444-4,543: the prediction within 9%. Locked: swap-out 8,310-8,408 / 8,391-8,424,
swap-in 391-440 / 289-304, arena swap-ins 0 / 0. The prediction moves by under 1% when the statistics
are flushed every 0 or 10 ms, or with the flush phase shifted. It moves by 3% when they are flushed
every 2 s.
"""
import json
import os
import sys
import textwrap

import numpy as np
import pytest

from kmemsim.core.trace import MapFlag, Op, PageClass, TraceBuilder, load
from kmemsim.engine.kernel import Config, Emulator

pytestmark = pytest.mark.live

ARENA_PAGES = 12288          # 48 MiB of compressed KV
PRESSURE_PAGES = 12288       # 48 MiB: more than the limit leaves beside the arena and the interpreter
LIMIT = 80 << 20             # the arena, the interpreter's ~16 MiB heap, part of its page cache
ZRAM = "lz4:1G"
HOLD_S = 0.2                 # the pressure buffer stays resident this long before it is freed

# FlexGen's 8-bit group-wise quantisation (compress_cache: min-max per group, 2^bits - 1 levels) of
# normal values: the arena's data, also run by the test to measure what lz4 makes of it. In place in
# one float32 buffer, so filling the arena allocates nothing (numpy's temporaries would grow and trim
# the malloc heap every chunk: 71 k faults of churn in a trial run).
QUANTISE = textwrap.dedent("""
    import numpy as np
    GROUP = 64

    def kv_codes(rng, x):
        rng.standard_normal(out=x, dtype=np.float32)
        g = x.reshape(-1, GROUP)
        mn, scale = g.min(1, keepdims=True), g.max(1, keepdims=True)
        np.subtract(scale, mn, out=scale)
        np.divide(255, scale, out=scale)
        np.subtract(g, mn, out=g)
        np.multiply(g, scale, out=g)
        np.rint(g, out=g)
        return np.clip(g, 0, 255, out=g).reshape(-1)
""")

ARENA = QUANTISE + textwrap.dedent("""
    import ctypes, json, mmap, os, resource, sys, time
    arena_pages, pressure_pages, lock, hold, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "lock", \\
        float(sys.argv[4]), sys.argv[5]
    PAGE, CHUNK = 4096, 1 << 16
    PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS     # malloc's memory (mmap(-1, n) alone is shared: shmem)
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.mlock.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    rng = np.random.default_rng(7)
    x = np.empty(CHUNK, np.float32)
    stamps = {}

    def status():
        s = dict(l.split(":", 1) for l in open("/proc/self/status"))
        return {k: int(s[k].split()[0]) for k in ("RssAnon", "RssFile", "VmSwap")}

    def stamp(name):
        stamps[name] = (time.monotonic_ns(), resource.getrusage(resource.RUSAGE_SELF).ru_majflt)

    kv_codes(rng, x)                # every code path of the fill run once before the interpreter is measured
    at_start = status()
    stamp("start")
    n = arena_pages * PAGE
    arena = mmap.mmap(-1, n, flags=PRIVATE)
    a = np.frombuffer(arena, np.uint8)
    total = 0
    for off in range(0, n, CHUNK):
        a[off:off + CHUNK] = kv_codes(rng, x)
        total += int(a[off:off + CHUNK].sum(dtype=np.uint64))
    stamp("filled")
    if lock and libc.mlock(a.ctypes.data, n) != 0:
        raise OSError(ctypes.get_errno(), "mlock")
    stamp("locked")
    p = mmap.mmap(-1, pressure_pages * PAGE, flags=PRIVATE)
    np.frombuffer(p, np.uint8)[::PAGE] = 1      # a byte in every page, page by page
    stamp("pressed")
    time.sleep(hold)
    p.close()
    stamp("freed")
    back = int(a.sum(dtype=np.uint64))          # every byte of the arena read back: the swap-ins
    stamp("read")
    with open(out, "w") as f:
        json.dump({"stamps": stamps, "start": at_start, "end": status(), "intact": back == total,
                   "page_cluster": int(open("/proc/sys/vm/page-cluster").read())}, f)
    os._exit(0)                     # no finalisation: it would fault the swapped-out interpreter heap in
""")


def recorded_run(run, args):
    """ARENA run with args under the recorder (kmemsim.live.recorder.run_command), as
    test_live_core.recorded_run runs its programs: a fresh memory cgroup of LIMIT, zram, page cache
    dropped first. Returns its summary.json."""
    from kmemsim.live.recorder import run_command
    script = run.parent / f"{run.name}.py"
    script.write_text(ARENA)
    rc = run_command([sys.executable, str(script), *map(str, args)], str(run), mem_limit=str(LIMIT),
                     zram=ZRAM, swappiness=60, drop_caches=True, smaps_interval=0)
    assert rc == 0
    return json.load(open(run / "summary.json"))


def read_ahead_kb(path):
    dev = os.stat(path).st_dev
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    for p in (f"{base}/queue/read_ahead_kb", f"{base}/../queue/read_ahead_kb", f"{base}/bdi/read_ahead_kb"):
        if os.path.exists(p):
            return int(open(p).read())
    pytest.skip("live test: cannot find read_ahead_kb for the interpreter's device")


def live_figures(run, out):
    """What the live run did, from its run directory and the program's own stamps and status."""
    import pandas as pd
    s = json.load(open(run / "summary.json"))
    prog = json.load(open(out))
    t0 = s["t0_monotonic_ns"]
    rel = {k: t - t0 for k, (t, _) in prog["stamps"].items()}
    start = rel["start"]
    # the interpreter's page cache: what the program added before its start stamp (as
    # test_live_core.measured_interpreter counts it), and what it added later, at those times
    fm = pd.read_parquet(run / "raw" / "filemap.parquet")
    adds = fm[(fm.kind == "add") & (fm.tracked != 0)]
    pages = np.int64(1) << adds.order.to_numpy().astype(np.int64)
    t = adds.t.to_numpy()
    # the kernel memory charged by the start stamp (slab, page tables): cgroup v1's kmem usage, v2's
    # memory.stat kernel
    smp = pd.read_parquet(run / "samples.parquet")
    before = smp[smp.t <= start]
    col = next((k for k in ("memcg_kmem_usage_in_bytes", "memcg_kernel") if k in smp), None)
    kmem = int(before[col].iloc[-1]) // 4096 if col and len(before) else 0
    # the recorded faults: on the arena (the first anonymous mapping of ARENA_PAGES made after the
    # start stamp), on the pressure buffer (the next of PRESSURE_PAGES), on the interpreter's own
    # anonymous mappings (everything else anonymous)
    tr = load(str(run / "events.parquet"))
    c = tr.cols
    mm = c["op"] == Op.MMAP
    made = np.flatnonzero(mm & (c["arg"] == -1) & (c["t"] >= start))
    arenas = [int(c["map"][i]) for i in made if c["npages"][i] == ARENA_PAGES]
    assert arenas, "the arena's mmap is not in the recorded trace"
    pressures = [int(c["map"][i]) for i in made if c["npages"][i] == PRESSURE_PAGES and c["map"][i] != arenas[0]]
    assert pressures, "the pressure buffer's mmap is not in the recorded trace"
    arena, pressure = arenas[0], pressures[0]
    acc = np.isin(c["op"], [Op.READ, Op.WRITE])
    on_arena = acc & (c["map"] == arena) & (c["t"] >= rel["freed"])
    anon_maps = c["map"][mm & (c["arg"] == -1)]
    own = acc & np.isin(c["map"], anon_maps) & ~np.isin(c["map"], [arena, pressure])
    # what zram held at its fullest: the pages it stored raw (huge) among all it stored
    peak = smp.loc[smp["zram_orig_data_size"].idxmax()]
    return {
        "swap_out": s["swap_out_pages"], "swap_in": s["swap_in_pages"], "major_faults": s["major_faults"],
        "major_run": s["major_faults"] - prog["stamps"]["start"][1],
        "arena_swap_in": len(np.unique(c["page"][on_arena])),
        "zram_huge_peak": int(peak["zram_huge_pages"]), "zram_stored_peak": int(peak["zram_orig_data_size"]) // 4096,
        "page_cluster": prog["page_cluster"], "intact": prog["intact"],
        "interp_file": int(pages[t < start].sum()), "file_later": (t[t >= start], pages[t >= start]),
        "interp_anon": -(-prog["start"]["RssAnon"] // 4), "kmem": kmem,
        "own_before": (c["map"][own & (c["t"] < start)], c["page"][own & (c["t"] < start)]),
        "own_after": tuple(c[k][own & (c["t"] >= start)] for k in ("t", "op", "map", "page")),
        "swapped_at_end": prog["end"]["VmSwap"] // 4, "stamps": rel,
    }


def own_pages(live):
    """Where the interpreter's own pages that the live run faulted on after the start stamp go in the
    emulated heap: those it had faulted before at its first indices (written at start), those new
    after the RssAnon it started with. Returns (heap index of each fault, heap pages)."""
    known = set(zip(live["own_before"][0].tolist(), live["own_before"][1].tolist()))
    index, old, new = {}, 0, live["interp_anon"]
    for k in zip(live["own_after"][2].tolist(), live["own_after"][3].tolist()):
        if k not in index:
            if k in known and old < live["interp_anon"]:
                index[k], old = old, old + 1
            else:
                index[k], new = new, new + 1
    idx = [index[k] for k in zip(live["own_after"][2].tolist(), live["own_after"][3].tolist())]
    return np.array(idx, np.int64), new


def interpreter(b, live, t):
    """The interpreter's start-up into builder b at time t (test_live_core.interpreter_started): its
    page cache read once and its anonymous memory (RssAnon at the start stamp) written once. Its file
    and heap have room for what it adds later (file_later, own_pages). Returns (heap map id, its
    page cache file id)."""
    lib = b.file("/interpreter", max(1, live["interp_file"] + int(live["file_later"][1].sum())))
    b.event(t, 1, Op.FREAD, -1, 0, live["interp_file"], 0, lib)
    heap = b.mmap(t + 1, 1, "interpreter heap", max(1, own_pages(live)[1]), flags=MapFlag.READ | MapFlag.WRITE)
    b.event(t + 2, 1, Op.WRITE, heap, 0, live["interp_anon"])
    return heap, lib


def own_kernel_pages(live):
    """The kernel pages the emulator charges for the interpreter's start-up itself (xarray nodes of
    its page cache, its heap's page tables), as kmemsim.validate.predict counts its engine's."""
    b = TraceBuilder("interpreter start-up")
    b.process(0, 1, "python")
    interpreter(b, live, 1)
    return Emulator(Config(memcg_limit=1 << 40, sample_ms=0)).replay(b.build()).summary["nr_kernel_pages"]


def emulated(live, locked):
    """The program's accesses at the live run's times, replayed with this machine's costs as
    test_live_core.py predicts its runs (kmemsim.validate.measure.this_machine); the memcg statistics
    flushed as often as the recorder reads memory.stat. The interpreter as measured in the live run
    (interpreter(), plus its kernel memory beyond what the emulator charges itself, one KMEM event,
    as kmemsim.validate.predict does for its engine) and, after the start stamp, the pages of its own
    anonymous memory the live run faulted on, accessed at those times: the interpreter's code is not
    in the trace, and which of its pages it touches again is measured, not predicted (a page it
    touched while resident left no record, so only the faulted ones are there). Then the arena written
    (and mlocked), the pressure buffer written, held and unmapped, the arena read back, page by page at
    the live pace. Returns the summary with `major_run` (the phase from the start stamp on) and the
    peak of zram's huge pages."""
    from kmemsim.live.samplers import INTERVAL_S
    from kmemsim.validate.measure import this_machine
    st = live["stamps"]
    start = max(st["start"], 10)
    b = TraceBuilder("arena")
    b.process(0, 1, "python")
    b.phase(0, 1, "startup")
    heap, lib = interpreter(b, live, start - 5)
    other = max(0, live["kmem"] - own_kernel_pages(live))
    if other:
        b.event(start - 2, 1, Op.KMEM, -1, 0, other)

    def spread(t0, t1, m, n, op):
        """n one-page accesses of mapping m, page by page, evenly over [t0, t1)."""
        t = t0 + (np.arange(n, dtype=np.int64) * max(0, t1 - t0)) // n
        b.ranges(t, 1, op, m, np.arange(n, dtype=np.int64), 1)

    b.phase(start, 1, "run")
    arena = b.mmap(start, 1, "arena", ARENA_PAGES, flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.KV_Q8)
    spread(start + 1, st["filled"], arena, ARENA_PAGES, Op.WRITE)
    if locked:
        b.event(st["filled"], 1, Op.MLOCK, arena, 0, ARENA_PAGES)
    pressure = b.mmap(st["locked"], 1, "pressure", PRESSURE_PAGES, flags=MapFlag.READ | MapFlag.WRITE)
    spread(st["locked"] + 1, st["pressed"], pressure, PRESSURE_PAGES, Op.WRITE)
    b.event(st["freed"] - 1, 1, Op.MUNMAP, pressure, 0, PRESSURE_PAGES)
    spread(st["freed"], st["read"], arena, ARENA_PAGES, Op.READ)
    # the interpreter's own pages the live run faulted on after the start, at those times
    t, op = live["own_after"][:2]
    if len(t):
        b.ranges(np.maximum(t, start + 1), 1, op, heap, own_pages(live)[0], 1)
    # the page cache it added after the start, at those times, as pages of its file past the first
    ft, fp = live["file_later"]
    if len(ft):
        first = live["interp_file"] + np.concatenate([[0], np.cumsum(fp)[:-1]])
        b.ranges(np.maximum(ft, start + 1), 1, Op.FREAD, -1, first, fp, 0, lib)
    end = max(st["read"], int(t.max()) if len(t) else 0, int(ft.max()) if len(ft) else 0)
    b.event(end + 1, 1, Op.PROC_EXIT)
    cfg = Config(memcg_limit=LIMIT, zram=ZRAM, swappiness=60, read_ahead_kb=read_ahead_kb(sys.executable),
                 sample_ms=10, stats_flush_ms=1e3 * INTERVAL_S, **this_machine().task_costs(ZRAM))
    r = Emulator(cfg).replay(b.build())
    out = dict(r.summary)
    out["major_run"] = int(r.per_phase.loc["run", "pgmajfault"])
    out["zram_huge_peak"] = int(r.timeline["zram_huge_pages"].max())
    out["kmem_event"] = other
    return out


def lz4_page_sizes():
    """lz4's compressed length of each 4 KiB page of 4 MiB of the arena's data."""
    lz4_block = pytest.importorskip("lz4.block", reason="the lz4 package measures the arena's compressibility")
    ns = {}
    exec(QUANTISE, ns)
    data = ns["kv_codes"](np.random.default_rng(7), np.empty(1 << 22, np.float32)).astype(np.uint8).tobytes()
    return np.array([len(lz4_block.compress(data[i:i + 4096], store_size=False)) for i in range(0, len(data), 4096)])


def test_mlocked_arena_is_not_swapped_and_an_unlocked_one_storms_as_predicted(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    # the arena's data is incompressible to lz4: zram stores it raw (huge), as the KV_Q8 model does
    sizes = lz4_page_sizes()
    assert sizes.min() >= 4096 * 3 // 4, sizes.min()
    live, emu = {}, {}
    for mode in ("unlocked", "locked"):
        run, out = tmp_path / mode, tmp_path / f"{mode}.json"
        recorded_run(run, [ARENA_PAGES, PRESSURE_PAGES, "lock" if mode == "locked" else "nolock", HOLD_S, out])
        live[mode] = live_figures(run, out)
        emu[mode] = emulated(live[mode], mode == "locked")
    rows = [("swap-out pages", "swap_out", "pswpout"), ("swap-in pages", "swap_in", "pswpin"),
            ("major faults", "major_faults", "pgmajfault"), ("major faults from start", "major_run", "major_run"),
            ("arena swap-ins", "arena_swap_in", "kv_swapin_pages"),
            ("zram huge pages, peak", "zram_huge_peak", "zram_huge_peak")]
    print(f"\nlz4 on the arena's data: {sizes.mean():.0f} bytes a page (min {sizes.min()})")
    print(f"{'':26}{'unlocked live':>15}{'predicted':>11}{'locked live':>13}{'predicted':>11}")
    for name, lkey, ekey in rows:
        print(f"{name:26}{live['unlocked'][lkey]:>15}{emu['unlocked'][ekey]:>11}"
              f"{live['locked'][lkey]:>13}{emu['locked'][ekey]:>11}")
    for mode in live:
        lv, e = live[mode], emu[mode]
        print(f"{mode}: interpreter {lv['interp_file']} file + {lv['interp_anon']} anon pages, kmem {lv['kmem']} "
              f"(KMEM event {e['kmem_event']}), {len(lv['own_after'][0])} faults on its own memory after the start; "
              f"swapped at the end {lv['swapped_at_end']}; zram at its fullest {lv['zram_stored_peak']} pages; "
              f"page-cluster {lv['page_cluster']}; emulated arena swap-out {e['kv_swapout_pages']}")
    for mode in live:
        assert live[mode]["intact"], f"{mode}: the arena read back differs from what was written"

    u, ue = live["unlocked"], emu["unlocked"]
    # the unlocked arena storms: a good part of it was swapped out, and read back page by page
    assert u["arena_swap_in"] > ARENA_PAGES // 5, u["arena_swap_in"]
    # zram stored the swapped arena raw: its huge pages at their peak hold (nearly) all of it
    assert u["zram_huge_peak"] >= 0.9 * u["arena_swap_in"], (u["zram_huge_peak"], u["arena_swap_in"])
    # no swap readahead on zram (page-cluster is not used): every page swapped in was a major fault
    assert u["swap_in"] <= u["major_faults"], (u["swap_in"], u["major_faults"])
    for what, lkey, ekey in [("swap-out", "swap_out", "pswpout"), ("swap-in", "swap_in", "pswpin"),
                             ("major faults", "major_run", "major_run"),
                             ("arena swap-in", "arena_swap_in", "kv_swapin_pages")]:
        assert abs(ue[ekey] - u[lkey]) <= 0.2 * u[lkey], (what, ue[ekey], u[lkey])

    lk, le = live["locked"], emu["locked"]
    # the locked arena: nothing of it swapped out, so nothing faulted while it was read back, live
    # and predicted; the swap-ins left (the interpreter's) are a small fraction of the unlocked run's
    assert lk["arena_swap_in"] == 0 and le["kv_swapout_pages"] == 0 and le["kv_swapin_pages"] == 0, \
        (lk["arena_swap_in"], le["kv_swapout_pages"], le["kv_swapin_pages"])
    assert lk["swap_in"] <= 0.15 * u["swap_in"], (lk["swap_in"], u["swap_in"])
    assert le["pswpin"] <= 0.15 * ue["pswpin"], (le["pswpin"], ue["pswpin"])
    # reclaim still had to make room, both sides: it took the pressure buffer's own older pages
    assert lk["swap_out"] > 0.5 * u["swap_out"] and le["pswpout"] > 0.5 * ue["pswpout"], \
        (lk["swap_out"], u["swap_out"], le["pswpout"], ue["pswpout"])
