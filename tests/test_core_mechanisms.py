"""One tiny scenario per mechanism of the C core, each worked out by hand from the kernel function
it names (Linux 6.x, classic LRU). Small limits make the arithmetic visible."""
from collections import OrderedDict

import numpy as np
import pytest

from kmemsim.engine.kernel import Config, Emulator, PageState
from kmemsim.core.errors import InputError
from kmemsim.core.trace import Advice, MapFlag, Op, PageClass, TraceBuilder, WriteFlag

SHARED_RO = MapFlag.SHARED | MapFlag.READ
ANON_RW = MapFlag.READ | MapFlag.WRITE
# No readahead, no fault-around: one page per fault, so counts can be worked out by hand.
PLAIN = dict(read_ahead_kb=0, fault_around_bytes=4096, max_folio_order=0, sample_ms=0)


class T:
    """A little trace writer: one process, a clock that ticks per event."""

    def __init__(self, file_pages=4096):
        self.b = TraceBuilder("test")
        self.t = 0
        self.f = self.b.file("/model", file_pages)
        self.b.process(self.tick(), 1, "p")

    def tick(self):
        self.t += 1
        return self.t

    def mmap(self, npages, file=True, flags=SHARED_RO, cls=PageClass.HEAP, pgoff=0):
        return self.b.mmap(self.tick(), 1, "m", npages, file=self.f if file else -1, pgoff=pgoff,
                           flags=flags, cls=cls)

    def read(self, m, page, n=1):
        self.b.event(self.tick(), 1, Op.READ, m, page, n)

    def write(self, m, page, n=1):
        self.b.event(self.tick(), 1, Op.WRITE, m, page, n)

    def fread(self, page, n=1):
        """read(2) of single pages, one event each (as a buffered reader would)."""
        for p in range(page, page + n):
            self.b.event(self.tick(), 1, Op.FREAD, -1, p, 1, 0, self.f)

    def op(self, op, m=-1, page=0, n=0, arg=0, flags=0):
        self.b.event(self.tick(), 1, op, m, page, n, arg, flags)

    def run(self, **cfg):
        kw = dict(PLAIN)
        kw.update(cfg)
        return Emulator(Config(**kw)).replay(self.b.build(), check_invariants=True)


def state(res, page):
    return int(res.page_states["/model"][page])


def test_folio_check_references_second_reference_activates():
    # folio_check_references(): a mapped folio with one PTE reference is KEPT with PG_referenced
    # set ("look twice"); referenced again by the next scan it is ACTIVATED, while the one that was
    # not touched again comes back without a young PTE and is reclaimed (FOLIOREF_RECLAIM_CLEAN).
    tr = T()
    m = tr.mmap(4096)
    tr.read(m, 0)            # A: referenced once
    tr.read(m, 1)            # B
    tr.fread(100, 64)        # pressure: 64 read(2) pages through a 64-page cgroup; scans A and B once
    tr.read(m, 1)            # B referenced again
    tr.fread(200, 64)        # second pressure round reaches A and B again
    res = tr.run(memcg_limit=64 * 4096)
    assert not state(res, 0) & PageState.RESIDENT
    assert state(res, 1) & PageState.ACTIVE
    assert state(res, 0) & PageState.SHADOW


def test_unmapped_read_pages_reclaimed_before_mapped():
    # folio_check_references(): no PTE references and PG_referenced on a file folio ->
    # FOLIOREF_RECLAIM_CLEAN, while a mapped young page is kept for another trip.
    tr = T()
    m = tr.mmap(4096)
    tr.read(m, 0)
    tr.fread(1, 1)
    tr.fread(300, 63)
    tr.fread(400, 2)         # two more pages: reclaim takes from the tail
    res = tr.run(memcg_limit=64 * 4096)
    assert state(res, 0) & PageState.RESIDENT
    assert not state(res, 1) & PageState.RESIDENT


def test_mark_accessed_twice_activates():
    # folio_mark_accessed(): inactive,unreferenced -> inactive,referenced -> active.
    tr = T()
    tr.fread(5, 1)
    tr.fread(6, 1)
    tr.fread(6, 1)
    res = tr.run(memcg_limit=64 * 4096)
    assert state(res, 5) == PageState.RESIDENT | PageState.REFERENCED
    assert state(res, 6) & PageState.ACTIVE
    assert res.summary["pgactivate"] == 1


def test_shrink_active_list_keeps_referenced_exec_file_folios():
    # shrink_active_list(): a referenced VM_EXEC file folio gets another trip around the active
    # list (nr_rotated); a referenced non-exec one is deactivated all the same.
    def run(flags):
        tr = T()
        m = tr.mmap(64, flags=flags)
        tr.fread(0, 64); tr.fread(0, 64)            # folio_mark_accessed() twice: active
        for k in range(4):
            tr.read(m, 0, 64)                       # young PTEs on the active pages
            tr.fread(1000 + 100 * k, 100)           # pressure; the inactive list is low -> refill
        return tr.run(memcg_limit=128 * 4096)
    exe, data = run(SHARED_RO | MapFlag.EXEC), run(SHARED_RO)
    # only the exec folios rotate: pgrefill counts every scan, pgdeactivate only the demoted ones
    assert exe.summary["pgrefill"] > exe.summary["pgdeactivate"]
    assert data.summary["pgrefill"] == data.summary["pgdeactivate"]
    active = lambda r: int(((r.page_states["/model"][:64] & PageState.ACTIVE) > 0).sum())
    assert active(exe) > active(data)


def test_workingset_refault_within_distance_activates():
    # workingset_refault(): refault distance = nonresident_age now - at eviction; activate when it
    # is <= the workingset size (NR_ACTIVE_FILE without swap). 400 active pages in a 1024-page
    # cgroup; X is evicted in a 32-page reclaim batch (SWAP_CLUSTER_MAX) and refaults after a few
    # dozen evictions -> activated; after 2000 more evictions -> not.
    def run(gap):
        tr = T(file_pages=8192)
        tr.fread(0, 400); tr.fread(0, 400)          # 400 active pages
        tr.fread(1000, 1)                           # X
        tr.fread(2000, 624 + gap)                   # pushes X out, then `gap` more evictions
        tr.fread(1000, 1)                           # refault X
        return tr.run(memcg_limit=1024 * 4096)
    near, far = run(2), run(2000)
    assert near.summary["workingset_refault_file"] >= 1
    assert near.summary["workingset_activate_file"] == 1
    assert state(near, 1000) & PageState.ACTIVE
    assert far.summary["workingset_refault_file"] >= 1
    assert far.summary["workingset_activate_file"] == 0
    assert not state(far, 1000) & PageState.ACTIVE


def test_swappiness_zero_never_swaps_with_file_pages():
    # get_scan_count(): cgroup reclaim with swappiness 0 -> SCAN_FILE; swappiness 200 -> the file
    # fraction fp = (200 - 200) * ... = 0, so anon takes the pressure.
    def run(swappiness):
        tr = T(file_pages=8192)
        a = tr.mmap(100, file=False, flags=ANON_RW)
        tr.write(a, 0, 100)
        m = tr.mmap(8192)
        tr.read(m, 0, 2000)
        return tr.run(memcg_limit=256 * 4096, zram="lz4:64M", swappiness=swappiness)
    assert run(0).summary["pswpout"] == 0
    assert run(200).summary["pswpout"] > 0


def test_no_swap_device_never_swaps_anon():
    # get_scan_count(): no free swap -> SCAN_FILE; anon stays resident.
    tr = T(file_pages=8192)
    a = tr.mmap(100, file=False, flags=ANON_RW)
    tr.write(a, 0, 100)
    m = tr.mmap(8192)
    tr.read(m, 0, 2000)
    res = tr.run(memcg_limit=256 * 4096, swappiness=200)
    assert res.summary["pswpout"] == 0
    assert res.summary["nr_anon_pages"] == 100


def _swap_out(cls, algo="lz4", pages=200, **cfg):
    tr = T()
    a = tr.mmap(pages, file=False, flags=ANON_RW, cls=cls)
    tr.write(a, 0, pages)
    b = tr.mmap(pages, file=False, flags=ANON_RW)
    tr.write(b, 0, pages)          # second region pushes the first out (memcg 256 pages)
    return tr.run(memcg_limit=256 * 4096, zram=f"{algo}:64M", swappiness=200, **cfg)


def test_zero_page_costs_no_zram_memory():
    # Before 6.12: zram_write_page() -> zram_same_page_write(): same-filled pages store no data.
    s = _swap_out(PageClass.ZERO, swap_zeromap=False).summary
    zero_swapped = s["zram_same_pages"]
    assert s["pswpout"] > 0 and zero_swapped > 0 and s["swpout_zero"] == 0
    assert s["zram_compr_data_size"] == (s["nr_swapped"] - zero_swapped) * 1588
    # 6.12+: swap_writepage() finds the folio zero-filled (is_folio_zero_filled()) and only sets its
    # bit in the swap device's zeromap: SWPOUT_ZERO, no zram write at all.
    z = _swap_out(PageClass.ZERO).summary
    assert z["swpout_zero"] > 0 and z["zram_same_pages"] == 0
    assert z["pswpout"] == z["nr_swapped"] - z["swpout_zero"] + z["swpin_zero"]
    assert z["zram_compr_data_size"] == z["pswpout"] * 1588


def test_zram_size_classes_and_huge_pages():
    # lz4 on mixed heap data: ratio 2.58 -> 4096/2.58 = 1588 bytes, + 8 B handle -> 1600-byte class
    # (zs_malloc, ZS_SIZE_CLASS_DELTA 16). fp16 KV compresses past 3/4 of a page -> stored raw
    # (huge_class_size, zram_write_page()).
    heap = _swap_out(PageClass.HEAP).summary
    n = heap["nr_swapped"]
    assert heap["zram_compr_data_size"] == n * 1588
    assert heap["zram_mem_used_total"] == -(-n * 1600 // 4096) * 4096
    kv = _swap_out(PageClass.KV_F16).summary
    assert kv["zram_huge_pages"] > 0
    assert kv["zram_compr_data_size"] == kv["zram_huge_pages"] * 4096 + \
        (kv["nr_swapped"] - kv["zram_huge_pages"]) * 1588


def test_swap_in_on_fault_frees_the_slot():
    # do_swap_page() with SWP_SYNCHRONOUS_IO (zram): major fault, read into a new folio, slot freed.
    tr = T()
    a = tr.mmap(200, file=False, flags=ANON_RW)
    tr.write(a, 0, 200)
    b = tr.mmap(200, file=False, flags=ANON_RW)
    tr.write(b, 0, 200)
    tr.read(a, 0, 200)
    res = tr.run(memcg_limit=256 * 4096, zram="lz4:64M", swappiness=200)
    s = res.summary
    assert s["pswpin"] > 0
    assert s["pgmajfault"] == s["pswpin"]
    assert s["nr_swapped"] == s["pswpout"] - s["pswpin"]


def test_the_kv_caches_swapping_is_counted_apart():
    # The kernel counts swap per page, not per buffer (pswpout/swpout_zero in swap_writepage(),
    # pswpin/swpin_zero in swap_read_folio()); the core also counts the KV cache's share, by its
    # mapping's class: a KV page cleared to zero (a CLASS_ZERO folio, swpout_zero/swpin_zero) is
    # still the KV cache's.
    tr = T()
    kv = tr.mmap(100, file=False, flags=ANON_RW, cls=PageClass.KV_F16)
    tr.b.event(tr.tick(), 1, Op.WRITE, kv, 0, 50, flags=WriteFlag.ZERO)   # ggml_backend_buffer_clear
    tr.write(kv, 50, 50)
    heap = tr.mmap(200, file=False, flags=ANON_RW)
    tr.write(heap, 0, 200)        # pushes the KV pages out (memcg 256 pages)
    tr.read(kv, 0, 100)           # and faults them back in
    s = tr.run(memcg_limit=256 * 4096, zram="lz4:64M", swappiness=200).summary
    assert s["kv_swapout_pages"] > 0 and s["kv_swapin_pages"] > 0
    assert s["kv_swapout_pages"] <= s["pswpout"] + s["swpout_zero"]
    assert s["kv_swapin_pages"] <= s["pswpin"] + s["swpin_zero"]
    assert s["swpin_zero"] > 0    # the cleared half came back as zero pages, and counts as KV too
    # every KV page is resident again: each one swapped out came back in
    assert s["kv_swapin_pages"] == s["kv_swapout_pages"]
    # nothing but the KV mapping swaps in here, so the two agree with the kernel's counters
    assert s["kv_swapin_pages"] == s["pswpin"] + s["swpin_zero"]


def test_kswapd_wakes_below_low_and_stops_at_high():
    # wakeup_kswapd() when free - request < low watermark; balance_pgdat() until free >= high.
    # 64 MiB: min_free_kbytes = int_sqrt(65536 * 16) = 1024 -> min 256 pages; watermark_scale_factor
    # 10 gives 16 pages < min/4 = 64, so low = 320 and high = 384 (__setup_per_zone_wmarks()).
    total = 16384
    def run(n):
        tr = T(file_pages=total)
        tr.fread(0, n)
        return tr.run(mem=total * 4096)
    # the page cache's xarray takes RAM too: a 576-byte leaf node per 64 pages (radix_tree_node
    # slab, XA_FLAGS_ACCOUNT), 251 of them for these ~16,000 pages: 36 pages
    k = -(-251 * 576 // 4096)
    before = run(total - 320 - k).summary            # free stays at the low watermark
    assert (before["nr_xa_nodes"], before["nr_kernel_pages"]) == (251, k)
    assert (before["wmark_min"], before["wmark_low"], before["wmark_high"]) == (256, 320, 384)
    assert before["kswapd_wake"] == 0
    after = run(total - 319 - k).summary             # one page more: below low
    assert after["kswapd_wake"] == 1
    assert after["pgsteal_kswapd"] >= 64
    assert after["nr_free_pages"] >= 384 - 1
    assert after["allocstall"] == 0


def test_direct_reclaim_when_kswapd_cannot_keep_up():
    # __alloc_pages_direct_reclaim(): mlocked pages cannot be reclaimed, so kswapd fails and
    # allocations below min stall in direct reclaim, then the OOM killer.
    tr = T(file_pages=16384)
    m = tr.mmap(16384)
    tr.op(Op.MLOCK, m, 0, 16300)             # more than total - min watermark
    res = tr.run(mem=16384 * 4096)
    assert res.summary["kswapd_wake"] >= 1
    assert res.summary["allocstall"] >= 1
    assert res.summary["oom_kill"] == 1


def test_lmkd_kills_highest_oom_score_adj_first():
    # lmkd (Android): under pressure it kills the process with the highest oom_score_adj.
    b = TraceBuilder("lmk")
    b.process(0, 10, "fg", oom_score_adj=0)
    b.process(1, 20, "cached", oom_score_adj=900)
    a = b.mmap(2, 20, "heap", 8000, flags=ANON_RW)
    b.event(3, 20, Op.WRITE, a, 0, 8000)
    f = b.mmap(4, 10, "heap", 16000, flags=ANON_RW)
    b.event(5, 10, Op.WRITE, f, 0, 16000)
    g = b.mmap(6, 20, "more", 10, flags=ANON_RW)         # the victim's later events are dropped
    b.event(7, 20, Op.WRITE, g, 0, 10)
    b.event(8, 20, Op.READ, a, 0, 10)
    res = Emulator(Config(mem=16384 * 4096, lmk=True, sample_ms=0)).replay(b.build(), check_invariants=True)
    assert res.summary["lmk_kill"] >= 1
    assert res.per_process.loc[10, "pgfault"] == 16000  # the foreground app ran to the end


def test_memcg_page_cache_charged_zram_not():
    # mem_cgroup_charge() charges page cache; zram's pool lives outside the cgroup.
    tr = T(file_pages=8192)
    a = tr.mmap(300, file=False, flags=ANON_RW)
    tr.write(a, 0, 300)
    m = tr.mmap(8192)
    tr.read(m, 0, 1000)
    res = tr.run(memcg_limit=256 * 4096, zram="lz4:64M", swappiness=100)
    s = res.summary
    assert s["memcg_usage"] <= 256
    assert s["peak_resident_bytes"] <= 256 * 4096
    assert s["zram_mem_used_total"] > 0


def test_read_around_window_and_fadvise_sequential():
    # do_sync_mmap_readahead(): read-around of ra_pages centred on the fault; POSIX_FADV_SEQUENTIAL
    # doubles the file's ra_pages (generic_fadvise()).
    def run(advice):
        tr = T(file_pages=4096)
        m = tr.mmap(4096)
        if advice is not None:
            tr.op(Op.FADVISE, -1, 0, 4096, advice, tr.f)
        tr.read(m, 1000)
        return tr.run(mem=1 << 30, read_ahead_kb=128, fault_around_bytes=65536)
    plain, seq = run(None), run(Advice.SEQUENTIAL)
    assert plain.summary["pgpgin"] == 32       # ra_pages = 128 KiB / 4 KiB
    assert seq.summary["pgpgin"] == 64
    st = plain.page_states["/model"]
    assert (st[1000 - 16:1000 + 16] & PageState.RESIDENT).all()
    assert plain.summary["pgmajfault"] == 1


def test_mmap_miss_stops_read_around():
    # do_sync_mmap_readahead(): more than MMAP_LOTSAMISS (100) misses without hits -> no read-around.
    tr = T(file_pages=100000)
    m = tr.mmap(100000)
    for i in range(150):
        tr.read(m, i * 600)                     # far apart: read-around never hits
    res = tr.run(mem=1 << 30, read_ahead_kb=128, fault_around_bytes=65536)
    s = res.summary
    assert s["pgmajfault"] == 150
    assert s["pgpgin"] == 100 * 32 + 50        # 100 read-arounds; the 101st miss stops them


def test_async_readahead_streams_a_sequential_scan():
    # do_async_mmap_readahead(): reaching the PG_readahead folio pushes the window forward, so a
    # sequential scan takes one major fault and then only minor ones.
    tr = T(file_pages=8192)
    m = tr.mmap(8192)
    tr.op(Op.FADVISE, -1, 0, 8192, Advice.SEQUENTIAL, tr.f)
    tr.read(m, 0, 8192)
    res = tr.run(mem=1 << 30, read_ahead_kb=128, fault_around_bytes=65536, max_folio_order=9)
    assert res.summary["pgmajfault"] == 1
    assert res.summary["pgpgin"] == 8192


def test_madvise_random_disables_readahead():
    # do_sync_mmap_readahead(): VM_RAND_READ -> no readahead at all.
    tr = T(file_pages=4096)
    m = tr.mmap(4096)
    tr.op(Op.MADVISE, m, 0, 4096, Advice.RANDOM)
    tr.read(m, 0, 64)
    res = tr.run(mem=1 << 30, read_ahead_kb=128, fault_around_bytes=65536)
    assert res.summary["pgpgin"] == 64
    assert res.summary["pgmajfault"] == 64


def test_fault_around_maps_cached_neighbours():
    # do_fault_around() -> filemap_map_pages(): cached pages in the 16-page window get mapped, so
    # touching them later takes no fault.
    tr = T(file_pages=64)
    tr.fread(0, 16)
    m = tr.mmap(64)
    tr.read(m, 0, 16)
    res = tr.run(mem=1 << 30, fault_around_bytes=65536)
    assert res.summary["pgfault"] == 1
    assert res.summary["fault_around_pages"] == 15


def test_willneed_reads_at_most_io_pages():
    # force_page_cache_ra(): WILLNEED reads at most max(io_pages, ra_pages) pages.
    tr = T(file_pages=8192)
    tr.op(Op.FADVISE, -1, 0, 8192, Advice.WILLNEED, tr.f)
    res = tr.run(mem=1 << 30, read_ahead_kb=128, max_sectors_kb=1024)
    assert res.summary["pgpgin"] == 256


def test_madvise_pageout_and_cold():
    # madvise_cold_or_pageout_pte_range(): PAGEOUT reclaims our anon pages now (reclaim_pages()),
    # COLD only moves them to the inactive list.
    tr = T()
    a = tr.mmap(50, file=False, flags=ANON_RW)
    tr.write(a, 0, 50)
    tr.op(Op.MADVISE, a, 0, 20, Advice.PAGEOUT)
    res = tr.run(memcg_limit=1 << 30, zram="lz4:64M")
    assert res.summary["pswpout"] == 20
    assert res.summary["nr_anon_pages"] == 30


def test_madvise_dontneed_frees_anon_and_keeps_file_cache():
    # zap_page_range(): anonymous pages are freed, file pages only unmapped.
    tr = T(file_pages=64)
    a = tr.mmap(10, file=False, flags=ANON_RW)
    tr.write(a, 0, 10)
    m = tr.mmap(64)
    tr.read(m, 0, 10)
    tr.op(Op.MADVISE, a, 0, 10, Advice.DONTNEED)
    tr.op(Op.MADVISE, m, 0, 10, Advice.DONTNEED)
    res = tr.run(memcg_limit=1 << 30)
    assert res.summary["nr_anon_pages"] == 0
    assert res.summary["nr_file_pages"] == 10


def test_mlock_is_unevictable_and_munmap_frees():
    # mlock: folios move to LRU_UNEVICTABLE and survive pressure; munmap/exit free anon memory.
    tr = T(file_pages=4096)
    m = tr.mmap(4096)
    tr.op(Op.MLOCK, m, 0, 32)
    tr.fread(100, 200)
    res = tr.run(memcg_limit=64 * 4096)
    assert (res.page_states["/model"][:32] & PageState.UNEVICTABLE).all()
    assert res.summary["nr_unevictable"] == 32
    tr = T()
    a = tr.mmap(10, file=False, flags=ANON_RW)
    tr.write(a, 0, 10)
    tr.op(Op.MUNMAP, a, 0, 10)
    assert tr.run(memcg_limit=1 << 30).summary["nr_anon_pages"] == 0
    tr = T()
    a = tr.mmap(10, file=False, flags=ANON_RW)
    tr.write(a, 0, 10)
    tr.op(Op.PROC_EXIT)
    assert tr.run(memcg_limit=1 << 30).summary["nr_anon_pages"] == 0


def test_page_cache_shared_between_processes():
    # One address_space per file: a second process mapping the same file finds the pages cached.
    b = TraceBuilder("shared")
    f = b.file("/model", 64)
    b.process(0, 1, "a")
    b.process(1, 2, "b")
    m1 = b.mmap(2, 1, "w", 64, file=f, flags=SHARED_RO)
    m2 = b.mmap(3, 2, "w", 64, file=f, flags=SHARED_RO)
    b.event(4, 1, Op.READ, m1, 0, 64)
    b.event(5, 2, Op.READ, m2, 0, 64)
    res = Emulator(Config(memcg_limit=1 << 30, **PLAIN)).replay(b.build(), check_invariants=True)
    assert res.summary["pgpgin"] == 64
    assert res.per_process.loc[2, "pgmajfault"] == 0


def test_zero_page_on_anonymous_read():
    # do_anonymous_page(): a read fault maps the shared zero page; no memory until written.
    tr = T()
    a = tr.mmap(100, file=False, flags=ANON_RW)
    tr.read(a, 0, 100)
    res = tr.run(memcg_limit=1 << 30)
    assert res.summary["nr_anon_pages"] == 0
    tr.write(a, 0, 100)
    assert tr.run(memcg_limit=1 << 30).summary["nr_anon_pages"] == 100


def test_lru_note_cost_shifts_pressure_to_the_cheaper_list():
    # lru_note_cost(): rotations and I/O on one list make get_scan_count() scan the other more.
    # Refaulting file pages (thrash) pushes reclaim towards anon at swappiness 60.
    tr = T(file_pages=512)
    a = tr.mmap(200, file=False, flags=ANON_RW)
    tr.write(a, 0, 200)
    m = tr.mmap(512)
    for _ in range(6):
        tr.read(m, 0, 300)
    res = tr.run(memcg_limit=400 * 4096, zram="lz4:64M", swappiness=60)
    assert res.summary["workingset_refault_file"] > 0
    assert res.summary["pswpout"] > 0


def test_unknown_policy_and_bad_config():
    with pytest.raises(InputError, match="unknown policy"):
        Emulator(Config(mem="1G", policy="nope"))
    with pytest.raises(InputError, match="swappiness"):
        Emulator(Config(mem="1G", swappiness=201))
    with pytest.raises(InputError):
        Emulator(Config(mem=0))
    with pytest.raises(InputError, match="no memory size"):
        Emulator(Config())
    with pytest.raises(InputError, match="stats_flush_ms"):
        Emulator(Config(mem="1G", stats_flush_ms=-1))


def test_faulting_folio_survives_its_own_async_readahead():
    # filemap_fault(): filemap_get_folio() returns the cached folio with a reference, held across
    # do_async_mmap_readahead(). The readahead's charges reclaim at the memcg limit, but
    # __remove_mapping() cannot free a folio with an extra reference (folio_ref_freeze() fails), so
    # shrink_folio_list() keeps it, the fault maps it and the scan goes on through the whole file.
    # (Before: the folio could be reclaimed under the fault, which then failed and dropped the rest
    # of the access -- a sequential scan of a file larger than the cgroup stopped at the limit.)
    n = 4096
    tr = T(file_pages=n)
    m = tr.mmap(n)
    tr.op(Op.FADVISE, -1, 0, n, Advice.SEQUENTIAL, tr.f)
    tr.read(m, 0, n)
    res = tr.run(memcg_limit=256 * 4096, read_ahead_kb=512, fault_around_bytes=65536)
    st = res.page_states["/model"]
    assert (st & (PageState.RESIDENT | PageState.SHADOW)).all()      # every page was read
    assert res.files["pages_added"].sum() >= n
    assert st[n - 1] & PageState.RESIDENT                            # the last page is mapped now


# 8 MiB readahead windows, 64 KiB fault-around, folios up to PMD size
LARGE_FOLIOS = dict(mem=1 << 30, read_ahead_kb=2048, fault_around_bytes=65536, max_folio_order=9)


def read_once_and_unmapped(n):
    """A file of n pages read once through a SEQUENTIAL-advised mapping, then unmapped: read-around
    at order 0, then async windows of ra_pages (1024) each two orders up (0, 2, 4, 6, 8, 9): with
    n = 8192, [5120, 8192) is cached in order-9 folios; everything stays cached."""
    tr = T(file_pages=n)
    tr.op(Op.FADVISE, -1, 0, n, Advice.SEQUENTIAL, tr.f)
    a = tr.mmap(n)
    tr.read(a, 0, n)
    tr.op(Op.MUNMAP, a, 0, n)
    return tr


def test_pmd_sized_file_folio_mapped_by_one_fault():
    # filemap_map_pages() -> filemap_map_pmd() -> do_set_pmd(): a cached PMD-sized (order-9) folio
    # whose first page starts the fault-around window (a fault in its first 16 pages) is mapped by
    # one PMD -- 512 pages, one fault --
    # as long as that 2 MiB of the vma has no page table yet (pmd_none). Once a PTE table exists
    # there (a page of it was mapped first by a PTE), the range stays PTE-mapped: 16-page
    # fault-around windows.
    n = 8192
    tr = read_once_and_unmapped(n)
    tr.b.phase(tr.tick(), 1, "pmd")
    b = tr.mmap(n)
    tr.read(b, 6144, 512)                  # [6144, 6656): one order-9 folio, no page table yet
    tr.b.phase(tr.tick(), 1, "pte table first")
    c = tr.mmap(n)
    tr.read(c, 6144 + 100)                 # a fault whose window starts mid-folio: PTE-mapped, and
                                           # the page table now exists for these 2 MiB
    tr.read(c, 6144, 512)
    res = tr.run(**LARGE_FOLIOS)
    pp = res.per_phase
    assert res.summary["pgpgin"] == n                      # nothing evicted, nothing re-read
    assert pp.loc["pmd", "pgfault"] == 1
    assert pp.loc["pte table first", "pgfault"] == 1 + (512 // 16 - 1)   # that window, then the 31 others
    # kernel memory: a's tables went with it (free_pgtables), b's 2 MiB is a huge PMD (do_set_pmd()
    # frees the preallocated table), c's has its PTE table: one left. The xarray (lib/xarray.c) has
    # a 64-slot leaf per 64 pages cached in folios below order 6 ([0, 3072): orders 0, 2, 4); the
    # order-6, -8 and -9 folios are multi-index entries one level up, no leaf.
    assert (res.summary["nr_page_table_pages"], res.summary["nr_xa_nodes"]) == (1, 3072 // 64)


def test_kernel_memory_is_charged_and_never_reclaimed():
    # Kernel memory charged with __GFP_ACCOUNT (memcg_kmem_charge_page(), obj_cgroup_charge()) counts
    # against memory.limit_in_bytes as folios do but sits on no LRU. In a 64-page cgroup: 20 pages of
    # slab the trace names (KMEM), one anonymous vma's PTE table (its first PTE: __pte_alloc()) and
    # the file's two xarray leaves (pages 0-99: 2 x 576 bytes, one page) leave 41 pages to the page
    # cache (beside the one anonymous page): 100 pages read(2) through it never hold more.
    tr = T()
    tr.op(Op.KMEM, n=20)
    a = tr.mmap(16, file=False, flags=ANON_RW)
    tr.op(Op.MLOCK, a, 0, 1)                 # the one anonymous page stays (mlocked)
    tr.fread(0, 100)
    res = tr.run(memcg_limit=64 * 4096, sample_ms=1e-6)
    s = res.summary
    assert (s["nr_page_table_pages"], s["nr_xa_nodes"], s["nr_kernel_pages"]) == (1, 2, 22)
    assert res.timeline["nr_file_pages"].max() == 64 - 22 - 1
    assert s["peak_resident_bytes"] == 64 * 4096      # memory.max_usage_in_bytes counts it too
    # unmapped, the vma's table is freed (free_pgtables()); the slab stays charged
    tr.op(Op.MUNMAP, a, 0, 16)
    s = tr.run(memcg_limit=64 * 4096).summary
    assert (s["nr_page_table_pages"], s["nr_kernel_pages"]) == (0, 21)


def test_populate_marks_pte_mapped_folios_not_pmd_mapped():
    # populate_vma_page_range() -> __get_user_pages(FOLL_TOUCH) walks the range page by page:
    # follow_page_pte() calls folio_mark_accessed() for each PTE-mapped page, so an order-0 page is
    # left PG_referenced on the inactive list and a large folio is activated by its second page;
    # follow_huge_pmd() only makes the PMD young (touch_pmd()), so a PMD-mapped order-9 folio stays
    # inactive and unreferenced. Orders as in the test above: read-around at order 0 ([0, 1024)),
    # then async windows of 1024 pages two orders up each: order 2 at [1024, 2048), order 9 from 5120.
    n = 8192
    tr = T(file_pages=n)
    tr.op(Op.FADVISE, -1, 0, n, Advice.SEQUENTIAL, tr.f)
    tr.mmap(n, flags=SHARED_RO | MapFlag.POPULATE)
    res = tr.run(**LARGE_FOLIOS)
    R, A, REF = PageState.RESIDENT, PageState.ACTIVE, PageState.REFERENCED
    assert res.summary["pgpgin"] == n
    assert state(res, 0) == R | REF                        # order 0: marked once
    assert state(res, 1024) & (R | A) == R | A             # order 2: activated by its second page
    assert state(res, 6144) == R                           # order 9, PMD-mapped: not marked at all


def test_munmap_marks_each_folio_once():
    # zap_pte_range() -> zap_present_ptes(): a run of present PTEs mapping one folio within one page
    # table is cleared at once (folio_pte_batch(), young bits merged), and zap_present_folio_ptes()
    # calls folio_mark_accessed() once for the run; a PMD-mapped folio is one entry (zap_huge_pmd()).
    # So unmapping a young folio leaves it PG_referenced whatever its size; marking each page would
    # activate every large folio (a second folio_mark_accessed() moves it to the active list). Orders
    # as above: order 0 at [0, 1024), order 2 at [1024, 2048), order 9 (PMD-mapped) from 5120.
    # Checked live: a 256 MiB file read once through a mapping and unmapped at exit leaves the
    # cgroup's file pages all inactive (memory.stat active_file 17 pages of 40,450).
    n = 8192
    res = read_once_and_unmapped(n).run(**LARGE_FOLIOS)
    R, REF = PageState.RESIDENT, PageState.REFERENCED
    assert res.summary["pgpgin"] == n
    assert res.summary["nr_active_file"] == 0
    assert [state(res, p) for p in (0, 1024, 6144)] == [R | REF] * 3


def full_then_activated(n):
    """The stale-statistics tests' trace, for a 64-page cgroup: 70 pages read once (the first
    reclaim), then n new pages from page 100 each read twice (folio_mark_accessed() activates them)."""
    tr = T(file_pages=512)
    tr.fread(0, 70)
    for p in range(100, 100 + n):
        tr.fread(p)
        tr.fread(p)
    return tr


def test_reclaim_decides_by_the_last_flushed_statistics():
    # lruvec_page_state() reads a memcg's statistics as of their last rstat flush
    # (mem_cgroup_flush_stats(): every 2 s, or when memory.stat is read). In a 64-page cgroup, 70
    # pages read once make the first reclaim. Then 40 pages read twice each are activated
    # (folio_mark_accessed() twice), and 200 new pages stream through. Read as they are, the lists
    # say the inactive one is low (inactive_is_low()): reclaim deactivates the 40
    # (shrink_active_list()) and drops them. Flushed once a second from the start, a trace of a few
    # microseconds keeps the new memcg's statistics: no list low, no refault activation since the
    # last snapshot (prepare_scan_control()), so nothing is deactivated and the 40 stay active.
    def run(stats_flush_ms):
        tr = full_then_activated(40)
        tr.fread(200, 200)
        res = tr.run(memcg_limit=64 * 4096, stats_flush_ms=stats_flush_ms)
        kept = [state(res, p) for p in range(100, 140)]
        return sum(bool(x & PageState.ACTIVE) for x in kept), res.summary["pgdeactivate"]
    assert run(0) == (0, 40)
    assert run(1000) == (40, 0)


def test_statistics_are_as_the_flush_timer_last_found_them():
    # flush_memcg_stats_dwork() runs on a timer of its own, so where its flushes fall against a run
    # is the run's chance (Config.stats_flush_phase_ms); until the first, reclaim reads a new memcg's
    # statistics (nothing), after it the lists as they stood when it ran. In a 64-page cgroup, 70
    # pages are read once and 40 twice (activated), then 10 pages just evicted refault:
    # workingset_test_recent() activates a refault whose distance the flushed workingset size (the
    # active file list: no swap) covers. Flushed 150 ns in, after the 40 were activated: all ten are.
    # Flushed only at the start, or first at 200 ns, after the refaults: the active list is empty as
    # far as reclaim knows, and none is. Read as they are: none either, since reclaim deactivated 21
    # of the 40 on its way (inactive_is_low()), which leaves 19, short of the distance.
    def run(stats_flush_ms, phase_ms=0.0):
        tr = full_then_activated(40)
        assert tr.t == 151
        tr.fread(45, 10)
        s = tr.run(memcg_limit=64 * 4096, stats_flush_ms=stats_flush_ms, stats_flush_phase_ms=phase_ms).summary
        return s["workingset_refault_file"], s["workingset_activate_file"], s["pgdeactivate"]
    assert run(1, 0.00015) == (10, 10, 0)
    assert run(1) == run(1, 0.0002) == (10, 0, 0)
    assert run(0) == (10, 0, 21)
    with pytest.raises(InputError, match="stats_flush_phase_ms"):
        Emulator(Config(mem="1G", stats_flush_ms=1, stats_flush_phase_ms=2))


def test_reclaim_deactivates_regardless_when_stale_statistics_left_it_nothing():
    # do_try_to_free_pages(): when a whole priority loop reclaimed nothing and an active list was
    # left alone because may_deactivate said no (shrink_list() sets sc->skipped_deactivate), reclaim
    # retries with sc->force_deactivate: prepare_scan_control() then deactivates both lists whatever
    # the ratios say. In a 64-page cgroup, 70 pages read once make the first reclaim; then 100 new
    # pages are each read twice (folio_mark_accessed() activates them), so the inactive list
    # empties. Read as they are, the lists say it is low and reclaim deactivates; flushed once a
    # second from the start, they still say what the new memcg had (nothing: no list low) and
    # nothing refaulted, so the first loop skips the active list and reclaims nothing, and the
    # retry deactivates. (Without the retry the charge failed and the cgroup OOM-killed the process
    # before its last page.)
    def run(stats_flush_ms):
        tr = full_then_activated(100)
        res = tr.run(memcg_limit=64 * 4096, stats_flush_ms=stats_flush_ms)
        return res.summary["oom_kill"], bool(state(res, 199) & PageState.RESIDENT), res.summary["pgdeactivate"] > 0
    assert run(0) == (0, True, True)
    assert run(1000) == (0, True, True)


def test_llama_load_folio_layout_matches_the_kernel():
    # llama.cpp's load of tiny-f16 (36,488 pages, header in pages [0, 194)), recorded live on 6.18
    # (mm_filemap_add_to_page_cache, before any eviction): gguf_init_from_file() freads the header
    # through a FILE of its own; the ramp of page_cache_async_ra() -- two orders up per round, each
    # window's end rounded down to that folio size -- gives [0,4) o0, [4,24) o2, [24,32) o3,
    # [32,96) o4, [96,128) o5, [128,384) o6, [384,512) o7, [512,768) o8: 21 folios. The loader
    # then opens the file again (fresh file_ra_state), fadvises SEQUENTIAL (4,096-page window) and
    # populates the mapping: the first fault meets the PG_readahead folio at 512 with no window to
    # match, so a window starts at the next miss (768) at order 2, then 4, 6, 8, 9: [768,4864) o2,
    # [4864,8960) o4, [8960,13056) o6, [13056,17408) o8, [17408,36352) o9, then [36352,36480) o7 and
    # [36480,36488) o3 at EOF: 1,400 folios.
    n, hdr = 36488, 194
    tr = T(file_pages=n)
    tr.b.phase(tr.tick(), 1, "header")
    tr.fread(0, hdr)
    tr.b.phase(tr.tick(), 1, "populate")
    tr.op(Op.OPEN, flags=tr.f)
    tr.op(Op.FADVISE, -1, 0, n, Advice.SEQUENTIAL, tr.f)
    tr.mmap(n, flags=SHARED_RO | MapFlag.POPULATE)
    res = tr.run(mem=1 << 30, read_ahead_kb=8192, fault_around_bytes=65536, max_folio_order=9)
    pp = res.per_phase
    assert (pp.loc["header", "file_folios_added"], pp.loc["header", "file_pages_added"]) == (21, 768)
    assert (pp.loc["populate", "file_folios_added"], pp.loc["populate", "file_pages_added"]) == (1400, n - 768)
    # order 0: the header's first four pages only; the populate's ramp starts at order 2
    assert (pp.loc["header", "file_pages_added_order0"], pp.loc["populate", "file_pages_added_order0"]) == (4, 0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lru_order_survives_every_way_in(seed):
    # The plain LRU serves a trace's READ events with the list order deferred (a FIFO of references,
    # and whole runs of single-page events in one call) and relinks the list before anything else
    # follows it: read(2), a phase mark, the invariant check. Whatever the mix, every reference moves
    # its page to the head and a full memory drops exactly the tail, so the misses and the final
    # resident set are those of an exact LRU (an OrderedDict) over the same references.
    rng = np.random.default_rng(seed)
    pages, cap = 64, 16
    b = TraceBuilder("test")
    f = b.file("/obj", pages)
    b.process(0, 1, "p")
    m = b.mmap(1, 1, "m", pages, file=f, flags=MapFlag.SHARED | MapFlag.READ)
    t, misses = 2, 0
    d = OrderedDict()

    def ref(x):
        nonlocal misses
        if x in d:
            d.move_to_end(x)
            return
        misses += 1
        d[x] = None
        if len(d) > cap:
            d.popitem(last=False)

    for _ in range(120):
        kind = rng.integers(0, 4)
        if kind == 0:                                   # a run of single-page events
            for x in rng.integers(0, pages, rng.integers(1, 40)).tolist():
                b.event(t, 1, Op.READ, m, x, 1); t += 1; ref(x)
        elif kind == 1:                                 # a range
            x = int(rng.integers(0, pages - 4)); n = int(rng.integers(2, 5))
            b.event(t, 1, Op.READ, m, x, n); t += 1
            for p in range(x, x + n): ref(p)
        elif kind == 2:                                 # read(2) of one page: the list itself
            x = int(rng.integers(0, pages))
            b.event(t, 1, Op.FREAD, -1, x, 1, 0, f); t += 1; ref(x)
        else:
            b.phase(t, 1, f"ph{t}"); t += 1
    res = Emulator(Config(mem=cap * 4096, policy="lru", sample_ms=0.005)).replay(
        b.build(), check_invariants=True)
    resident = set(np.flatnonzero(res.page_states["/obj"] & 1).tolist())
    assert resident == set(d)
    assert res.summary["misses"] == misses          # read(2) counts its misses too (filemap_read)


@pytest.mark.parametrize("exec_,order,advice,expect,folios", [
    (True, 0, None, 509, 509), (False, 0, None, 2048, None), (True, 0, Advice.RANDOM, 509, 509),
    (False, 0, Advice.RANDOM, 1, 1), (True, 4, None, 512, 32), (True, -1, None, 2048, None)])
def test_do_sync_mmap_readahead_exec_reads_forward_within_the_vma(exec_, order, advice, expect, folios):
    # do_sync_mmap_readahead() (6.17+, "allow arch to request folio size for exec memory"): a fault
    # on an executable mapping reads from the faulting page forward, ra_pages at most, in folios of
    # exec_folio_order() (x86 0; arm64 4: the start rounded down to 64 KiB), and stops at the vma's
    # end; MADV_RANDOM does not turn it off. A data mapping, or any mapping before 6.17 (order -1),
    # reads ra_pages (2048 here) centred on the fault, past the vma, and nothing around under
    # MADV_RANDOM. The vma maps file pages 4096..5119; the fault is at 4611: the x86 exec window is
    # 4611..5119, arm64's 4608..5119.
    t = T(file_pages=16384)
    m = t.mmap(1024, flags=MapFlag.READ | (MapFlag.EXEC if exec_ else 0), pgoff=4096)
    if advice is not None:
        t.op(Op.MADVISE, m, 0, 1024, advice)
    t.read(m, 515)
    s = t.run(mem="1G", read_ahead_kb=8192, max_folio_order=9, exec_folio_order=order).summary
    assert s["file_pages_added"] == expect
    if folios is not None:
        assert s["file_folios_added"] == folios
    assert s["pgmajfault"] == 1


def test_readahead_under_read_is_not_reclaimed_and_gives_up_at_the_limit():
    # A read-around window bigger than the room the cgroup has left, nothing else reclaimable (the
    # anonymous pages have no swap). The window's folios are locked until their read completes:
    # shrink_folio_list()'s folio_trylock() fails and keeps them. Readahead charges with
    # readahead_gfp_mask()'s __GFP_NORETRY, so try_charge_memcg() gives up after two reclaim rounds
    # ("goto nomem"), page_cache_ra_unbounded() breaks on -ENOMEM and the window ends where the room
    # does: the faulting page is read, nothing is evicted, no one is OOM-killed. Of the ten pages left
    # the anonymous vma's PTE table and the file's first xarray node (both charged to the memcg:
    # GFP_PGTABLE_USER, XA_FLAGS_ACCOUNT) take two.
    tr = T(file_pages=1000)
    a = tr.mmap(90, file=False, flags=ANON_RW)
    tr.write(a, 0, 90)
    m = tr.mmap(1000)
    tr.read(m, 0)                      # read-around: [0, 32), the faulting page first
    res = tr.run(memcg_limit=100 * 4096, read_ahead_kb=128, max_folio_order=9)
    s = res.summary
    assert s["file_pages_added"] == 8 and s["file_pages_deleted"] == 0
    assert (s["nr_page_table_pages"], s["nr_xa_nodes"]) == (2, 1)     # the file's table once mapped
    assert s["oom_kill"] == 0 and s["accesses"] == 91
    assert state(res, 0) != 0


# Storage time (bio.c): 1 ms latency and 1 ms per page, so reads are still in flight when the next
# events come (the trace's clock ticks 1 ns per event). read_ahead_kb 2048: a read-around window of
# 512 pages, two bios of BIO_MAX_VECS (256) folios. The device serves the bios in flight together
# at equal shares (bio.c), so a window's two bios complete together, LAT + 512 pages after it went.
IO = dict(read_ahead_kb=2048, fault_around_bytes=65536, io_latency_us=1000, io_read_gbps=4096 / 1e6)
LAT = NS = 1_000_000


def test_a_reader_waits_for_its_window_and_fault_around_skips_folios_under_read():
    # read_pages() submits the window [0, 512) as two bios (ext4_mpage_readpages(): BIO_MAX_VECS
    # folios each); mpage_end_io() unlocks a bio's folios together when the device has read it.
    # filemap_fault()'s lock_folio_maybe_drop_mmap() waits for page 0: LAT + 512 pages, the two
    # bios sharing the device. Page 384 is then uptodate and carries PG_readahead (read-around's
    # async_size, ra_pages / 4): do_async_mmap_readahead() submits [512, 1024). Page 600 is still
    # being read a tick later: next_uptodate_folio() skips it and filemap_fault() waits for it.
    tr = T(file_pages=4096)
    m = tr.mmap(4096)
    tr.read(m, 0)
    tr.read(m, 384)
    tr.read(m, 600)
    s = tr.run(memcg_limit=1 << 30, **IO).summary
    assert (s["pgfault"], s["pgmajfault"], s["io_waits"]) == (3, 1, 2)
    assert s["io_wait_ns"] == 2 * (LAT + 512 * NS) - 1
    assert s["file_pages_added"] == 1024
    # each window's two bios end together, LAT + 512 pages after their submit_bio(): the counters
    # validation compares with the live bios (readio) count four and that time each
    assert (s["bio_reads"], s["bio_read_ns"]) == (4, 4 * (LAT + 512 * NS))


def test_a_populate_waits_at_every_second_window():
    # The device serves queued bios together, each at an equal share (processor sharing), as the
    # live kernel's disk does: llama.cpp's populate of the model (MAP_POPULATE, FADV_SEQUENTIAL,
    # one window ahead) waits at every second 16 MiB window and not at the one between (llama-1B at
    # 120%: 34 waits of 24-45 ms and 34 of 0.2 ms in each of four runs, docs/validation.md), where
    # reads served in submission order make it wait at each bio (32 here). FADV_SEQUENTIAL doubles
    # ra_pages to 1024: eight windows. The first (read-around, [0, 1024)) is waited for alone; its
    # mark at 768 submits the second; the second's first folio, reached while it is read, submits
    # the third and waits for both; the third is then done and its first folio submits the fourth,
    # which is waited for with the fifth, and so on: waits at windows 1, 2, 4, 6 and 8.
    tr = T(file_pages=8192)
    tr.op(Op.FADVISE, -1, 0, 8192, int(Advice.SEQUENTIAL), tr.f)
    tr.mmap(8192, flags=SHARED_RO | MapFlag.POPULATE)
    s = tr.run(memcg_limit=1 << 30, **IO).summary
    assert (s["file_pages_added"], s["pgmajfault"], s["io_waits"]) == (8192, 1, 5)


def _in_flight_trace():
    tr = T(file_pages=4096)
    m = tr.mmap(4096)
    tr.read(m, 0)          # window [0, 512): waits for it
    tr.read(m, 384)        # its PG_readahead mark: [512, 1024) is submitted and still being read
    tr.read(m, 2000)       # window [1744, 2256) needs room the cgroup lacks
    return tr


def test_a_folio_under_read_is_not_reclaimed():
    # A folio is locked from its allocation until its bio completes. shrink_folio_list()'s
    # folio_trylock() fails on it (keep), so the third window's reclaim takes the first window's
    # pages and none of the second's, still being read; the window, charged with
    # readahead_gfp_mask()'s __GFP_NORETRY, ends where the room does (page_cache_ra_unbounded()
    # breaks on -ENOMEM). With reads that complete at once (no storage time) the same reclaim goes
    # on into the second window, and the third is read whole.
    # The kept ones are counted (file_scan_busy: what mm_vmscan_lru_shrink_inactive leaves unnamed,
    # scanned and neither reclaimed, activated nor kept by reference): every pass of the third
    # window's reclaim meets the second window's 512 folios.
    limit = dict(memcg_limit=900 * 4096)
    res = _in_flight_trace().run(**limit, **IO)
    assert all(state(res, p) & PageState.RESIDENT for p in range(512, 1024))
    assert not any(state(res, p) & PageState.RESIDENT for p in range(16, 384))
    assert state(res, 2000) & PageState.RESIDENT
    assert res.summary["file_pages_added"] < 1536
    s = res.summary
    assert s["file_scan_busy"] >= 512 and s["pgsteal_file"] + s["file_scan_busy"] <= s["pgscan_file"]
    quick = _in_flight_trace().run(**limit, read_ahead_kb=2048, fault_around_bytes=65536)
    assert not all(state(quick, p) & PageState.RESIDENT for p in range(512, 1024))
    assert quick.summary["file_pages_added"] == 1536 and quick.summary["io_waits"] == 0
    assert quick.summary["file_scan_busy"] == 0 < quick.summary["pgscan_file"]


def test_threads_of_a_graph_node_wait_together():
    # Events at one trace time are one graph node its threads share (ggml_graph_compute: every
    # thread works on the node, then the barrier). With two threads, one waits for its read while the
    # other goes on and submits its own, which shares the device with the first: both windows
    # complete together, LAT + 1024 pages after the node began; the clock moves only when both
    # wait, and the node's compute, 10 s here, covers the rest. One thread waits for its reads in
    # turn: each window alone, each with its latency.
    def trace():
        tr = T(file_pages=4096)
        m = tr.mmap(4096)
        t0 = tr.tick()
        tr.b.event(t0, 1, Op.READ, m, 0, 1)        # window [0, 512)
        tr.b.event(t0, 1, Op.READ, m, 2000, 1)     # window [1744, 2256)
        tr.b.event(t0 + 10**10, 1, Op.READ, m, 4000, 0)   # the next node, 10 s of compute later
        return tr
    one = trace().run(memcg_limit=1 << 30, threads=1, **IO).summary
    two = trace().run(memcg_limit=1 << 30, threads=2, **IO).summary
    assert one["io_wait_ns"] == 2 * LAT + 1024 * NS
    assert two["io_wait_ns"] == LAT + 1024 * NS


def _matmul_trace(chunk, filler=0):
    # A decode matmul's weight, pages [100, 116), read by the node's threads in chunks (trace READ
    # arg); before it, `filler` pages of another part of the file read with read(2), so the cgroup
    # is full of unmapped page cache when the weight is read.
    tr = T(file_pages=4096)
    if filler:
        tr.op(Op.FREAD, -1, 2000, filler, 0, tr.f)
    m = tr.mmap(4096)
    tr.op(Op.READ, m, 100, 16, chunk)
    return tr


def test_threads_of_a_matmul_start_on_their_own_chunks():
    # ggml_compute_forward_mul_mat(): thread i starts on chunk i, both at once. One reader faults on
    # page 100 (read-around [84, 116): ra_pages / 2 back, do_sync_mmap_readahead()) and at the
    # window's mark (108) pushes an async window [116, 148): one major fault, 64 pages. Two threads
    # with 8-page chunks fault on pages 100 and 108 together: thread 0 adds its window a folio at
    # a time (page_cache_ra_unbounded()), in turn with thread 1, which finds no folio at 108 yet
    # (filemap_fault(): a major fault of its own) and adds [92, 124); they add alternate pages, each
    # skipping what the other has added, so their union [84, 124) is read. Thread 0's mark lands on
    # 108, which thread 1 faulted on before it was there: do_async_mmap_readahead() runs only on a
    # fault that finds its folio, so no async window.
    one = _matmul_trace(0).run(memcg_limit=1 << 30, read_ahead_kb=128, threads=2).summary
    two = _matmul_trace(8).run(memcg_limit=1 << 30, read_ahead_kb=128, threads=2).summary
    assert (one["pgmajfault"], one["file_pages_added"]) == (1, 64)
    assert (two["pgmajfault"], two["file_pages_added"]) == (2, 40)


def test_a_window_another_thread_is_still_adding_is_a_miss():
    # Under the limit each folio's charge reclaims first (try_charge_memcg() ->
    # try_to_free_mem_cgroup_pages()), and the task pays for the folios it drops (file_folio_us),
    # so the two threads' clocks part: thread 0's charges reclaim, thread 1's find the room that
    # made and take no time. A folio is in the page cache from its charge on, on the clock of the
    # thread that added it: thread 1 reaches page 114, which thread 0's window [84, 116) added later
    # than thread 1's clock, finds no folio there and takes one more major fault than the threads
    # take when reclaim costs nothing (the test above), reading around it again.
    kw = dict(memcg_limit=300 * 4096, read_ahead_kb=128, threads=2, max_folio_order=9, fault_around_bytes=65536)
    slow = _matmul_trace(8, filler=400).run(file_folio_us=10, **kw).summary
    quick = _matmul_trace(8, filler=400).run(**kw).summary
    one = _matmul_trace(0, filler=400).run(file_folio_us=10, **kw).summary
    assert (one["pgmajfault"], quick["pgmajfault"], slow["pgmajfault"]) == (1, 2, 3)
    assert slow["file_pages_added"] > quick["file_pages_added"]


def test_a_thread_faults_only_once_it_has_computed_the_rows_before():
    # A thread reaches a page of its chunk once it has computed the rows before it (the node's
    # compute, shared by its threads: 1 ms over 16 pages and 2 threads, 125 us a page). Thread 1's
    # chunk [108, 116) starts with four pages already mapped, so it faults on 112 500 us into the
    # node; thread 0 faulted on 100 at the node's start and its read-around [84, 116)
    # (do_sync_mmap_readahead()) has added 112 by then: thread 1 finds the folio (filemap_fault():
    # no major fault, at most a wait on its lock), as one reader would.
    def run(chunk):
        tr = T(file_pages=4096)
        m = tr.mmap(4096)
        tr.op(Op.MADVISE, m, 0, 4096, Advice.RANDOM)      # VM_RAND_READ: one page per fault
        tr.read(m, 108, 4)
        tr.op(Op.MADVISE, m, 0, 4096, Advice.NORMAL)
        tr.op(Op.READ, m, 100, 16, chunk)
        tr.t += 1_000_000
        tr.op(Op.MADVISE, m, 0, 4096, Advice.NORMAL)      # the next node, 1 ms later
        return tr.run(memcg_limit=1 << 30, read_ahead_kb=128, threads=2).summary
    one, two = run(0), run(8)
    assert one["pgmajfault"] == 4 + 1                    # the four mapped pages, then page 100
    assert two["pgmajfault"] == one["pgmajfault"]


def test_reclaim_goes_in_batches_and_charges_the_task_per_folio():
    # shrink_lruvec() hands shrink_inactive_list() at most SWAP_CLUSTER_MAX (32) pages a call, and
    # isolate_lru_folios() takes order-0 folios one page each; the memcg's reclaim at each charge
    # (try_to_free_mem_cgroup_pages(), nr_to_reclaim = max(nr_pages, SWAP_CLUSTER_MAX)) makes a
    # list call at least. The task pays for each folio its own reclaim drops (file_folio_us), and
    # stall_reclaim_ns is what that put on its clock.
    tr = T(file_pages=4096)
    m = tr.mmap(4096)
    tr.read(m, 0, 4096)
    s = tr.run(memcg_limit=256 * 4096, file_folio_us=2.0).summary
    assert s["pgsteal_file"] >= 4096 - 256 and s["stall_reclaim_file_folios"] == s["pgsteal_file"]
    assert s["pgscan_file"] <= 32 * s["stall_reclaim_lists"]
    assert s["stall_reclaim_lists"] >= s["reclaim_runs"] > 0
    assert s["stall_reclaim_ns"] == 2000 * s["stall_reclaim_file_folios"]


def test_reclaim_charges_each_list_it_shrinks_and_each_page_of_a_large_folio():
    # What a memcg reclaim call costs by the work it does (kmemsim profile fits it on the calls of
    # recorded runs, issue 45): per shrink_inactive_list() call (list_us: isolation under the LRU lock,
    # lru_add_drain(), the priority loop's pass around it), per file folio dropped (file_folio_us)
    # and per page of it (file_page_us: a large folio's PTEs unmapped one by one,
    # try_to_unmap_one()). Readahead adds large folios (page_cache_ra_order()), so the folios are
    # fewer than their pages, and every cost lands on the task's clock.
    tr = T(file_pages=8192)
    m = tr.mmap(8192)
    tr.read(m, 0, 8192)
    kw = dict(memcg_limit=512 * 4096, read_ahead_kb=512, fault_around_bytes=65536, max_folio_order=4)
    s = tr.run(list_us=3.0, file_folio_us=2.0, file_page_us=0.5, **kw).summary
    assert s["stall_reclaim_file_pages"] > s["stall_reclaim_file_folios"] > 0
    assert s["stall_reclaim_ns"] == (3000 * s["stall_reclaim_lists"] + 2000 * s["stall_reclaim_file_folios"]
                                     + 500 * s["stall_reclaim_file_pages"])
    # the counts do not depend on what the time costs
    free = tr.run(**kw).summary
    assert all(free[k] == s[k] for k in ("pgsteal_file", "stall_reclaim_lists", "stall_reclaim_file_pages"))
