"""Android's lmkd (c_ext/lmkd.c) against what system/memory/lmkd/lmkd.cpp mp_event_psi() decides, with
its defaults for a device that is not low-RAM: it kills on page-cache thrashing (workingset_refault_file
in the 1 s window over the file LRU at its start, ro.lmk.thrashing_limit 100%, critical 200%) or on low
swap (free swap below ro.lmk.swap_free_low_percentage 10%), never because reclaim merely runs; it
spares oom_score_adj <= PERCEPTIBLE_APP_ADJ (200) unless below the min watermark or thrashing past the
critical level; it kills from oom_score_adj 1000 down, the heaviest within a score."""
from kmemsim.core.trace import MapFlag, Op, TraceBuilder
from kmemsim.engine.kernel import LMKD_REASONS, Config, Emulator

SHARED_RO = MapFlag.SHARED | MapFlag.READ
ANON_RW = MapFlag.READ | MapFlag.WRITE
MS = 1_000_000
MEM = 32768 * 4096                 # 128 MiB: watermarks min 362, low 452, high 543 pages
PLAIN = dict(read_ahead_kb=0, fault_around_bytes=4096, max_folio_order=0, sample_ms=0, lmk=True)


def apps(b, t=0):
    """A cached app (oom_score_adj 900) and a perceptible one (200, heavier) holding anonymous memory."""
    b.process(t, 20, "cached", oom_score_adj=900)
    b.process(t, 30, "perceptible", oom_score_adj=200)
    for pid, n in ((20, 3000), (30, 6000)):
        m = b.mmap(t, pid, "heap", n, flags=ANON_RW)
        b.event(t, pid, Op.WRITE, m, 0, n)


def scan(b, m, pid, t, npages, passes, chunk=256, step=MS):
    """`passes` sequential reads of a mapping, `chunk` pages each `step` ns."""
    for _ in range(passes):
        for p in range(0, npages, chunk):
            b.event(t, pid, Op.READ, m, p, min(chunk, npages - p))
            t += step
    return t


def fill(b, pid, npages, chunk=256):
    """A process writing fresh anonymous memory, `chunk` pages a millisecond."""
    m = b.mmap(0, pid, "heap", npages, flags=ANON_RW)
    for i, p in enumerate(range(0, npages, chunk)):
        b.event((i + 1) * MS, pid, Op.WRITE, m, p, min(chunk, npages - p))


def run(b, **cfg):
    return Emulator(Config(mem=MEM, **dict(PLAIN, **cfg))).replay(b.build(), check_invariants=True)


def test_reasons_are_lmkds():
    # enum kill_reasons in lmkd.cpp, in its order (the kill log's and statsd's numbering)
    assert LMKD_REASONS[:6] == ["pressure_after_kill", "not_responding", "low_swap_and_thrashing",
                                "low_mem_and_swap", "low_mem_and_thrashing", "direct_recl_and_thrashing"]


def test_page_cache_thrashing_kills_the_cached_app_and_spares_the_perceptible_one():
    # A foreground reader cycles a file larger than the page cache: every page refaults
    # (workingset_refault() counts each evicted page that comes back with a shadow entry). One pass
    # within a second refaults about the file LRU: above the 100% limit, below the 200% critical
    # level, with free memory below the high watermark (kswapd is awake): LOW_MEM_AND_THRASHING, which
    # may not take oom_score_adj <= 200. Without swap no anonymous memory can go, so nothing but a
    # kill relieves the pressure: the cached app dies, the heavier perceptible one does not.
    b = TraceBuilder("thrash")
    apps(b)
    b.process(0, 10, "reader", oom_score_adj=0)
    f = b.file("/model", 26000)
    m = b.mmap(0, 10, "model", 26000, file=f, flags=SHARED_RO)
    scan(b, m, 10, MS, 26000, passes=2)
    res = run(b)
    k = res.kills
    assert list(k["pid"]) == [20], k
    assert k["reason"].iloc[0] == "low_mem_and_thrashing" and k["by"].iloc[0] == "lmkd"
    assert res.summary["workingset_refault_file"] > 20000


def test_no_kill_while_reclaim_swaps_and_nothing_thrashes():
    # Reclaim that can swap (zram with room) is not lmkd's business: no thrashing, swap not low,
    # so none of mp_event_psi()'s conditions holds, however often kswapd wakes.
    b = TraceBuilder("swap")
    apps(b)
    b.process(0, 10, "writer", oom_score_adj=0)
    fill(b, 10, 40000)
    res = run(b, zram="lz4:256M")
    assert res.summary["pswpout"] > 10000 and res.summary["kswapd_wake"] > 10
    assert res.summary["lmk_kill"] == 0 and res.kills.empty


def test_low_swap_kills_above_perceptible_first():
    # zram nearly full (free swap < 10% of it) and free memory below the high watermark:
    # LOW_MEM_AND_SWAP. Above the min watermark lmkd may not take oom_score_adj <= 200, so the
    # first kill is the cached app.
    b = TraceBuilder("swap low")
    apps(b)
    b.process(0, 10, "writer", oom_score_adj=0)
    fill(b, 10, 40000, chunk=32)           # 128 KiB a millisecond: zram fills over ~300 polls
    res = run(b, zram="lz4:40M")
    k = res.kills
    assert len(k) >= 1 and k["pid"].iloc[0] == 20, k
    assert k["reason"].iloc[0] in ("low_mem_and_swap", "low_swap_and_thrashing"), k


def test_within_a_background_score_the_longest_held_dies_first():
    # find_and_kill_process() takes a background score's victim from the tail of its adj slot list
    # (proc_adj_tail(): the process slotted there longest), not the heaviest. Two cached apps at 900:
    # the lighter one, there first, dies first.
    b = TraceBuilder("slot")
    b.process(0, 20, "first", oom_score_adj=900)
    b.process(1, 21, "second", oom_score_adj=900)
    for pid, n in ((20, 3000), (21, 6000)):
        m = b.mmap(2, pid, "heap", n, flags=ANON_RW)
        b.event(2, pid, Op.WRITE, m, 0, n)
    b.process(3, 10, "reader", oom_score_adj=0)
    f = b.file("/model", 26000)
    m = b.mmap(3, 10, "model", 26000, file=f, flags=SHARED_RO)
    scan(b, m, 10, MS, 26000, passes=2)
    k = run(b).kills
    assert len(k) >= 1 and k["pid"].iloc[0] == 20, k
