"""Direct I/O (c_ext/direct_io.c): pread(2)/pwrite(2) of an O_DIRECT file descriptor, the trace's
DIO_READ and DIO_WRITE. Each test works out by hand what the kernel function it names does (Linux
6.x: ext4_dio_read_iter()/ext4_dio_write_iter() -> iomap_dio_rw(), fs/iomap/direct-io.c; submit_bio(),
block/blk-core.c; invalidate_inode_pages2_range(), mm/truncate.c). Small limits make the arithmetic
visible."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kmemsim.core.errors import InputError
from kmemsim.core.trace import (Advice, MapFlag, Op, PageClass, TraceBuilder, empty_meta, from_rows, load, merge,
                                save, validate)
from kmemsim.engine.kernel import Config, Emulator, PageState

SHARED_RO = MapFlag.SHARED | MapFlag.READ
# No readahead, no fault-around, order-0 folios: one page per miss, so counts can be worked out by hand.
PLAIN = dict(read_ahead_kb=0, fault_around_bytes=4096, max_folio_order=0, sample_ms=0)


class T:
    """One process, one file, a clock that ticks per event."""

    def __init__(self, file_pages=4096):
        self.b = TraceBuilder("test")
        self.t = 0
        self.f = self.b.file("/f", file_pages)
        self.b.process(self.tick(), 1, "p")

    def tick(self):
        self.t += 1
        return self.t

    def op(self, op, page, n, t=None):
        """A file op (FREAD, DIO_READ, DIO_WRITE, FADVISE's range) of pages [page, page + n)."""
        self.b.event(self.tick() if t is None else t, 1, op, -1, page, n, 0, self.f)

    def fread(self, page, n=1):
        """read(2) of single pages, one event each (as a buffered reader would)."""
        for p in range(page, page + n):
            self.op(Op.FREAD, p, 1)

    def mmap(self, npages, flags=SHARED_RO):
        return self.b.mmap(self.tick(), 1, "m", npages, file=self.f, flags=flags)

    def run(self, **cfg):
        kw = dict(PLAIN)
        kw.update(cfg)
        return Emulator(Config(**kw)).replay(self.b.build(), check_invariants=True)


def added(res):
    return int(res.files.set_index("path").loc["/f", "pages_added"])


def resident(res):
    return int(res.files.set_index("path").loc["/f", "resident_pages"])


# --------------------------------------------------------------------------------------------------
# DIO_READ


def test_a_direct_read_adds_no_page_cache_pages_and_counts_pgpgin():
    # __iomap_dio_rw() for a read: iomap_dio_bio_iter() reads the range from the device into the
    # task's buffer; no folio is looked up or added (no filemap_add_folio(), no readahead), so the
    # file gains no page-cache page. submit_bio() counts the bios' sectors in PGPGIN (pgpgin: 64 pages).
    # The same range read with read(2) (filemap_read(): a folio added per missing page, no readahead
    # here) adds its 64 pages, with the same 64 pages of pgpgin.
    direct, buffered = T(), T()
    direct.op(Op.DIO_READ, 100, 64)
    buffered.op(Op.FREAD, 100, 64)
    d, b = direct.run(memcg_limit=1 << 30), buffered.run(memcg_limit=1 << 30)
    assert added(d) == 0 and resident(d) == 0
    assert d.summary["nr_file_pages"] == 0 and d.summary["file_pages_added"] == 0
    assert d.summary["pgpgin"] == 64
    assert not d.page_states["/f"].any()                  # no folio, no shadow anywhere
    assert d.summary["accesses"] == d.summary["misses"] == 0   # no page-cache lookup at all
    assert added(b) == 64 and b.summary["nr_file_pages"] == 64 and b.summary["pgpgin"] == 64


def test_a_direct_read_leaves_cached_pages_and_readahead_state_alone():
    # A direct read invalidates nothing (only a direct write does) and does not reference the
    # folios cached in its range: kiocb_write_and_wait() only writes back dirty ones (none here),
    # and no folio_mark_accessed() runs. Nor does it touch file->f_ra (the direct path never
    # reaches filemap_read()'s ra->prev_pos or page_cache_sync_ra()). So page states, activations
    # and the later buffered reads' readahead are as if the direct read had not happened.
    def run(direct):
        tr = T()
        tr.op(Op.FREAD, 0, 64)                # 64 pages read(2) sequentially: readahead on
        tr.fread(10, 1)                       # page 10 referenced twice: PG_referenced
        if direct:
            tr.op(Op.DIO_READ, 0, 128)        # over the cached pages and past them
        tr.op(Op.FREAD, 64, 64)               # the sequential reader goes on
        return tr.run(memcg_limit=1 << 30, read_ahead_kb=128)
    with_dio, without = run(True), run(False)
    assert (with_dio.page_states["/f"] == without.page_states["/f"]).all()
    for k in ("file_pages_added", "readahead_pages", "pgactivate", "file_pages_deleted"):
        assert with_dio.summary[k] == without.summary[k], k
    assert with_dio.summary["pgpgin"] == without.summary["pgpgin"] + 128


def test_a_direct_read_under_a_memcg_limit_charges_nothing_and_reclaims_nothing():
    # Nothing a direct read does allocates a page: no folio for the page cache (the data goes to
    # the task's own buffer), so mem_cgroup_charge() is never called and nothing is reclaimed, even
    # with the cgroup full and the read 16 times its limit.
    tr = T(file_pages=8192)
    tr.op(Op.FREAD, 0, 60)                    # 60 of the cgroup's 64 pages
    before = tr.run(memcg_limit=64 * 4096).summary
    tr.op(Op.DIO_READ, 0, 1024)
    s = tr.run(memcg_limit=64 * 4096).summary
    assert s["memcg_usage"] == before["memcg_usage"] and s["peak_resident_bytes"] == before["peak_resident_bytes"]
    assert s["nr_file_pages"] == 60
    for k in ("pgscan_memcg", "pgsteal_memcg", "pgscan_direct", "pgscan_kswapd", "allocstall",
              "pgalloc", "file_pages_added", "file_pages_deleted"):
        assert s[k] == before[k], k
    assert s["pgpgin"] == before["pgpgin"] + 1024


# Storage time (bio.c), as in test_core_mechanisms.py: 1 ms latency and 1 ms per page, so what the
# device does shows in whole milliseconds; max_sectors_kb 1024: requests of 256 pages.
IO = dict(io_latency_us=1000, io_read_gbps=4096 / 1e6, max_sectors_kb=1024, read_ahead_kb=2048)
LAT = NS = 1_000_000


def test_a_direct_read_waits_as_a_synchronous_read_of_a_cold_file():
    # __iomap_dio_rw() of a synchronous kiocb submits the bios and sleeps (blk_io_schedule()) until
    # the last one's iomap_dio_bio_end_io() wakes it. 512 pages: iomap_dio_bio_iter() makes two
    # bios of BIO_MAX_VECS (256) pages (max_sectors_kb 1024 is as large), in flight together,
    # sharing the device (bio.c's processor sharing): both end LAT + 512 pages after submission. A
    # read(2) of the same 512 pages of a cold file waits exactly as long: filemap_read()'s miss
    # reads a 512-page readahead window (read_ahead_kb 2048) as two bios of 256 order-0 folios
    # (BIO_MAX_VECS) and filemap_update_page() waits for them. Asserted equal: the clock's wait
    # (io_wait_ns), the waits (io_waits), the stall counters the serial time model reads
    # (stall_read_ios: one synchronous read; stall_read_pages: 512) and the bios that ended with
    # their time from submit_bio() (bio_reads, bio_read_ns). pgpgin is 512 for the direct read; the
    # buffered one reads on: page_cache_sync_ra() marks PG_readahead at page 256 (async_size =
    # size >> 1 when the window is no larger than the request), the read passes it and
    # page_cache_async_ra() submits the next 512-page window, which nobody waits for.
    direct, buffered = T(), T()
    direct.op(Op.DIO_READ, 0, 512)
    buffered.op(Op.FREAD, 0, 512)
    d, b = direct.run(memcg_limit=1 << 30, **IO).summary, buffered.run(memcg_limit=1 << 30, **IO).summary
    assert d["io_wait_ns"] == b["io_wait_ns"] == LAT + 512 * NS
    assert d["io_waits"] == b["io_waits"] == 1
    assert (d["stall_read_ios"], d["stall_read_pages"]) == (b["stall_read_ios"], b["stall_read_pages"]) == (1, 512)
    assert (d["bio_reads"], d["bio_read_ns"]) == (b["bio_reads"], b["bio_read_ns"]) == (2, 2 * (LAT + 512 * NS))
    assert d["pgpgin"] == 512 and b["pgpgin"] == 1024
    assert d["file_pages_added"] == 0 and b["file_pages_added"] == 1024
    # without a storage time the read costs no time, and the counts stay
    quick = direct.run(memcg_limit=1 << 30, max_sectors_kb=1024).summary
    assert (quick["io_wait_ns"], quick["io_waits"], quick["bio_reads"]) == (0, 0, 0)
    assert (quick["stall_read_ios"], quick["stall_read_pages"], quick["pgpgin"]) == (1, 512, 512)


def test_a_direct_reads_bios_are_bio_max_vecs_pages_at_most_max_sectors_kb():
    # iomap_dio_bio_iter(): a bio holds at most BIO_MAX_VECS bvecs (bio_iov_vecs_to_alloc()), a
    # page each for a buffer of 4 KiB pages not physically contiguous: 1024 pages are four bios
    # (the live kernel sends a 4 MiB O_DIRECT read as 3 or 4: tests/test_direct_io_live.py),
    # however large max_sectors_kb is; a smaller
    # max_sectors_kb splits them further (bio_split_to_limits()): 16 KiB, 256 bios of 4 pages. They
    # are all in flight together and end together, so the wait is the same: LAT + 1024 pages.
    def run(kb):
        tr = T()
        tr.op(Op.DIO_READ, 0, 1024)
        return tr.run(memcg_limit=1 << 30, **dict(IO, max_sectors_kb=kb)).summary
    for kb, bios in ((4096, 4), (16, 256)):
        s = run(kb)
        assert s["bio_reads"] == bios and s["bio_read_ns"] == bios * (LAT + 1024 * NS)
        assert s["io_wait_ns"] == LAT + 1024 * NS and s["stall_read_ios"] == 1


def test_a_direct_read_moves_the_clock_before_the_next_event():
    # Synchronous: the task's clock is at the read's end when its next event comes. A second
    # direct read a tick later is submitted after the first ended, so it has the device alone and
    # waits LAT + 512 pages again (were the first still in flight, they would share it and the
    # second would wait longer). So 2 x (LAT + 512 pages) in all.
    tr = T()
    tr.op(Op.DIO_READ, 0, 512)
    tr.op(Op.DIO_READ, 1024, 512)
    s = tr.run(memcg_limit=1 << 30, **IO).summary
    assert s["io_wait_ns"] == 2 * (LAT + 512 * NS)
    assert (s["bio_reads"], s["bio_read_ns"]) == (4, 4 * (LAT + 512 * NS))
    assert (s["stall_read_ios"], s["stall_read_pages"]) == (2, 1024)


def test_direct_reads_of_a_graph_nodes_threads_share_the_device():
    # Events at one trace time are a graph node its threads share (bio.c): with two threads, one
    # sleeps in its direct read while the other submits its own; the four bios share the device
    # and all end LAT + 1024 pages after the node began. One thread reads one after the other:
    # each read alone, each with its latency.
    def trace():
        tr = T()
        t0 = tr.tick()
        tr.op(Op.DIO_READ, 0, 512, t=t0)
        tr.op(Op.DIO_READ, 2048, 512, t=t0)
        tr.op(Op.DIO_READ, 4000, 0, t=t0 + 10**10)    # the next node, 10 s of compute later
        return tr
    one = trace().run(memcg_limit=1 << 30, threads=1, **IO).summary
    two = trace().run(memcg_limit=1 << 30, threads=2, **IO).summary
    assert one["io_wait_ns"] == 2 * (LAT + 512 * NS)
    assert two["io_wait_ns"] == LAT + 1024 * NS
    assert one["bio_reads"] == two["bio_reads"] == 4


def test_a_batch_of_direct_reads_is_in_flight_together_and_waited_for_once():
    # An I/O worker pool (llama.cpp #25294 loads a layer's missed experts with one): each worker
    # sleeps in its own pread(); the thread that needs them waits for the last. A batched DIO_READ
    # (arg 1) is submitted and not waited for; the next unbatched one waits for the batch: the four
    # bios of the two 512-page reads share the device and end LAT + 1024 pages after submission,
    # one stall for the set (as one readahead window of several bios is one), where one reader
    # waits 2 x (LAT + 512 pages) (test_a_direct_read_moves_the_clock_before_the_next_event).
    tr = T()
    t0 = tr.tick()
    tr.b.event(t0, 1, Op.DIO_READ, -1, 0, 512, 1, tr.f)
    tr.b.event(t0, 1, Op.DIO_READ, -1, 1024, 512, 0, tr.f)
    s = tr.run(memcg_limit=1 << 30, **IO).summary
    assert s["io_wait_ns"] == LAT + 1024 * NS
    assert (s["stall_read_ios"], s["stall_read_pages"], s["pgpgin"]) == (1, 1024, 1024)
    assert s["bio_reads"] == 4


# --------------------------------------------------------------------------------------------------
# DIO_WRITE


def test_a_direct_write_removes_the_cached_pages_it_overwrites_without_shadows():
    # __iomap_dio_rw() for a write: kiocb_invalidate_pages() -> invalidate_inode_pages2_range() of
    # the range before the bios, again after them (kiocb_invalidate_post_direct_write()). Each folio
    # found goes through folio_unmap_invalidate() -> __filemap_remove_folio(folio, NULL): out of the
    # page cache (pages_deleted, mm_filemap_delete_from_page_cache) with no shadow entry. submit_bio()
    # counts the write's 32 pages in PGPGOUT. Reading them again is then no refault
    # (workingset_refault() finds no shadow): 32 pages added anew, workingset_refault_file 0.
    tr = T()
    tr.op(Op.FREAD, 0, 64)
    tr.op(Op.DIO_WRITE, 16, 32)
    w = tr.run(memcg_limit=1 << 30)
    assert w.summary["pgpgout"] == 32
    f = w.files.set_index("path").loc["/f"]
    assert (f["pages_added"], f["pages_deleted"], f["resident_pages"]) == (64, 32, 32)
    assert w.summary["file_pages_deleted"] == 32 and w.summary["nr_file_pages"] == 32
    st = w.page_states["/f"]
    assert not st[16:48].any()                                    # neither cached nor a shadow
    assert (st[:16] & PageState.RESIDENT).all() and (st[48:64] & PageState.RESIDENT).all()
    assert w.summary["pgpgin"] == 64                              # a write reads nothing
    tr.op(Op.FREAD, 16, 32)
    again = tr.run(memcg_limit=1 << 30)
    assert added(again) == 96 and again.summary["workingset_refault_file"] == 0


def test_a_direct_write_erases_the_shadows_of_pages_reclaim_took():
    # invalidate_inode_pages2_range() also erases the shadow entries it finds (clear_shadow_entries()):
    # pages reclaimed earlier (workingset_eviction() left a shadow) are no refault after a direct write
    # over them. Without the write, reading them again refaults each one.
    def run(write):
        tr = T(file_pages=8192)
        tr.op(Op.FREAD, 0, 64)                # 64 pages ...
        tr.op(Op.FREAD, 1000, 64)             # ... pushed out by 64 more through a 64-page cgroup
        if write:
            tr.op(Op.DIO_WRITE, 0, 64)
        tr.op(Op.FREAD, 0, 32)
        return tr.run(memcg_limit=64 * 4096)
    kept, erased = run(False), run(True)
    assert kept.summary["workingset_refault_file"] == 32
    assert erased.summary["workingset_refault_file"] == 0
    assert erased.summary["file_pages_deleted"] == kept.summary["file_pages_deleted"]   # nothing was cached there


def test_a_direct_write_unmaps_the_pages_it_invalidates_but_not_private_copies():
    # invalidate_inode_pages2_range(): a mapped folio is unmapped first (unmap_mapping_pages() of the
    # rest of the range, even_cows = false; unmap_mapping_folio()), from every vma, then removed:
    # the shared mapping's next read of it faults and reads it again. A private mapping's COW copy
    # is the task's own anonymous page (should_zap_folio(): not even_cows) and stays mapped.
    tr = T()
    shared = tr.mmap(64)
    priv = tr.mmap(64, flags=MapFlag.READ | MapFlag.WRITE)
    tr.b.event(tr.tick(), 1, Op.READ, shared, 0, 64)
    tr.b.event(tr.tick(), 1, Op.READ, priv, 0, 64)
    tr.b.event(tr.tick(), 1, Op.WRITE, priv, 8, 1)       # page 8's COW copy
    tr.op(Op.DIO_WRITE, 0, 16)
    w = tr.run(memcg_limit=1 << 30)
    s = w.summary
    assert s["file_pages_deleted"] == 16 and resident(w) == 48
    assert s["nr_anon_pages"] == 1                       # the COW copy stays
    assert not w.page_states["/f"][:16].any()
    faults = s["pgmajfault"]
    tr.b.event(tr.tick(), 1, Op.READ, shared, 0, 16)     # unmapped: faults again, reads them anew
    tr.b.event(tr.tick(), 1, Op.READ, priv, 8, 1)        # its own copy: still mapped, no fault
    again = tr.run(memcg_limit=1 << 30)
    assert again.summary["pgmajfault"] == faults + 16 and added(again) == 64 + 16
    assert again.summary["nr_anon_pages"] == 1


def test_a_direct_write_takes_a_large_folio_and_its_multi_index_shadow_whole():
    # find_get_entries() finds the folio or shadow entry covering each index of the range, a large
    # one also where it reaches outside it: folio_unmap_invalidate() removes the whole folio, and
    # clear_shadow_entries()' xas_store(NULL) erases a multi-index shadow entry with all its sibling
    # slots. The file is populated with FADV_SEQUENTIAL through a cgroup a quarter its size:
    # read_ahead_kb 128 doubled to a 64-page window, and page_cache_ra_order() raises the folio
    # order by two a window up to the window's ilog2, so after the first windows every folio is of
    # order 6, 64 pages at a multiple of 64 (a multi-index entry of the i_pages xarray). The last
    # quarter stays cached, the rest was reclaimed and left order-6 shadows.
    n = 65536

    def run(write_at=None, read=False):
        b = TraceBuilder("test")
        f = b.file("/f", n)
        b.process(0, 1, "p")
        b.event(1, 1, Op.FADVISE, -1, 0, n, Advice.SEQUENTIAL, f)
        m = b.mmap(2, 1, "m", n, file=f, flags=SHARED_RO | MapFlag.POPULATE)
        b.event(3, 1, Op.MUNMAP, m, 0, n)
        if write_at is not None:
            b.event(4, 1, Op.DIO_WRITE, -1, write_at, 1, 0, f)
        if read:
            b.event(5, 1, Op.FREAD, -1, 20480, 512, 0, f)
        cfg = Config(memcg_limit=n // 4 * 4096, read_ahead_kb=128, sample_ms=0)
        return Emulator(cfg).replay(b.build(), check_invariants=True)
    base = run()
    cached = base.page_states["/f"] & PageState.RESIDENT
    assert cached[n - n // 4 + 256:].all() and not cached[:20480 + 512].any()
    # one page written in a cached folio: the folio [59968, 60032) goes whole
    w = run(60000)
    gone = np.flatnonzero(cached & ~(w.page_states["/f"] & PageState.RESIDENT))
    assert (gone[0], gone[-1], len(gone)) == (59968, 60031, 64)
    assert w.summary["file_pages_deleted"] - base.summary["file_pages_deleted"] == 64
    assert not w.page_states["/f"][59968:60032].any()           # and leaves no shadow
    # one page written in a reclaimed folio's range: its whole shadow [20544, 20608) is erased, so
    # reading the 512 pages around it refaults 64 fewer, and nothing cached is deleted
    kept, erased = run(read=True), run(20480 + 100, read=True)
    assert kept.summary["workingset_refault_file"] == 512
    assert erased.summary["workingset_refault_file"] == 512 - 64
    assert run(20480 + 100).summary["file_pages_deleted"] == base.summary["file_pages_deleted"]
    shadow = run(20480 + 100).page_states["/f"] & PageState.SHADOW
    assert not shadow[20544:20608].any() and shadow[20480:20544].all() and shadow[20608:20992].all()


def test_a_direct_write_waits_for_a_folio_under_read():
    # invalidate_inode_pages2_range()'s folio_lock() sleeps while the folio is being read
    # (PG_locked until its bio ends: bio.c), then removes it. A fault on page 0 reads around it,
    # [0, 512), and waits; page 384 carries the window's PG_readahead mark, so the fault there
    # submits [512, 1024) (do_async_mmap_readahead()) and goes on. A tick later the direct write of
    # page 600 finds that folio still being read: it waits for the window's bios, LAT + 512 pages
    # after their submission, then removes the page.
    tr = T()
    m = tr.mmap(4096)
    tr.b.event(tr.tick(), 1, Op.READ, m, 0, 1)
    tr.b.event(tr.tick(), 1, Op.READ, m, 384, 1)
    tr.op(Op.DIO_WRITE, 600, 1)
    io = dict(IO, max_sectors_kb=4096)
    w = tr.run(memcg_limit=1 << 30, fault_around_bytes=65536, **io)
    s = w.summary
    assert s["file_pages_deleted"] == 1 and s["file_pages_added"] == 1024
    assert not w.page_states["/f"][600] and w.page_states["/f"][601] & PageState.RESIDENT
    assert s["io_waits"] == 2 and s["io_wait_ns"] == 2 * (LAT + 512 * NS) - 1


# --------------------------------------------------------------------------------------------------
# The trace


def test_direct_ops_survive_a_parquet_round_trip_and_validate(tmp_path):
    tr = T()
    tr.op(Op.FREAD, 0, 64)
    tr.op(Op.DIO_READ, 100, 64)
    tr.op(Op.DIO_WRITE, 16, 8)
    trace = tr.b.build()
    validate(trace)
    save(trace, str(tmp_path / "t.parquet"))
    back = load(str(tmp_path / "t.parquet"))
    assert back.validated
    for k in trace.cols:
        assert (back.cols[k] == trace.cols[k]).all(), k
    assert [Op(x) for x in back["op"][-2:]] == [Op.DIO_READ, Op.DIO_WRITE]
    r1 = Emulator(Config(memcg_limit=1 << 30, **PLAIN)).replay(trace)
    r2 = Emulator(Config(memcg_limit=1 << 30, **PLAIN)).replay(back)
    assert r1.summary == r2.summary
    assert (r1.summary["pgpgin"], r1.summary["pgpgout"], r1.summary["file_pages_deleted"]) == (128, 8, 8)


@pytest.mark.parametrize("op", [Op.DIO_READ, Op.DIO_WRITE])
def test_a_direct_op_on_a_file_not_in_the_metadata_is_refused(op):
    tr = T()
    tr.b.event(tr.tick(), 1, op, -1, 0, 1, 0, 7)
    with pytest.raises(InputError, match="names a file not in the trace metadata"):
        tr.b.build()


def test_direct_ops_name_their_file_through_renumbering():
    # A direct op's file is its flags column, as FREAD's: the Emulator's dense renumbering of file
    # ids and merge()'s renumbering by path carry it, so the write lands on its own file.
    rows = [(0, 1, Op.PROC_START, -1, 0, 0, 0, 0),
            (1, 1, Op.FREAD, -1, 0, 8, 0, 9),
            (2, 1, Op.FREAD, -1, 0, 8, 0, 5),
            (3, 1, Op.DIO_WRITE, -1, 0, 4, 0, 9),
            (4, 1, Op.DIO_READ, -1, 0, 16, 0, 5)]
    meta = empty_meta()
    meta["files"] = [{"id": 5, "path": "/five", "pages": 100}, {"id": 9, "path": "/nine", "pages": 100}]
    r = Emulator(Config(memcg_limit=1 << 30, **PLAIN)).replay(from_rows(rows, meta), check_invariants=True)
    f = r.files.set_index("path")
    assert (f.loc["/nine", "pages_deleted"], f.loc["/five", "pages_deleted"]) == (4, 0)
    assert r.summary["pgpgin"] == 8 + 8 + 16 and r.summary["pgpgout"] == 4

    def part(path):
        b = TraceBuilder(path)
        fid = b.file(path, 64)
        b.process(0, 1, "p")
        m = b.mmap(1, 1, "m", 64, file=fid, flags=SHARED_RO)
        b.event(2, 1, Op.READ, m, 0, 64)
        return b, fid
    a, _ = part("/a")
    b, fb = part("/b")
    b.event(3, 1, Op.DIO_WRITE, -1, 0, 16, 0, fb)
    merged = merge([a.build(), b.build()])
    r = Emulator(Config(memcg_limit=1 << 30, **PLAIN)).replay(merged, check_invariants=True)
    f = r.files.set_index("path")
    assert (f.loc["/b", "pages_deleted"], f.loc["/a", "pages_deleted"]) == (16, 0)


# --------------------------------------------------------------------------------------------------
# Invariants (as tests/test_core_invariants.py, with direct I/O in the mix)


@st.composite
def dio_traces(draw):
    b = TraceBuilder("hypothesis dio")
    f = b.file("/f", 512)
    g = b.file("/g", 256)
    t = 0
    maps = []
    for pid in (1, 2)[:draw(st.integers(1, 2))]:
        b.process(t, pid, f"p{pid}")
        t += 1
        for _ in range(draw(st.integers(1, 2))):
            n = draw(st.integers(1, 256)); off = draw(st.integers(0, 512 - n))
            flags = MapFlag.READ | draw(st.sampled_from([MapFlag.SHARED, MapFlag.WRITE, MapFlag.SHARED | MapFlag.POPULATE]))
            maps.append((pid, b.mmap(t, pid, "f", n, file=f, pgoff=off, flags=flags), n))
            t += 1
        if draw(st.booleans()):
            n = draw(st.integers(1, 128))
            maps.append((pid, b.mmap(t, pid, "a", n, flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.HEAP), n))
            t += 1
    for _ in range(draw(st.integers(1, 50))):
        pid, m, n = draw(st.sampled_from(maps))
        op = draw(st.sampled_from([Op.READ, Op.WRITE, Op.FREAD, Op.FREAD, Op.DIO_READ, Op.DIO_READ,
                                   Op.DIO_WRITE, Op.DIO_WRITE, Op.MADVISE, Op.MLOCK]))
        if op in (Op.FREAD, Op.DIO_READ, Op.DIO_WRITE):
            file, size = draw(st.sampled_from([(f, 512), (g, 256)]))
            p = draw(st.integers(0, size - 1))
            b.event(t, pid, op, -1, p, draw(st.integers(1, 600)), 0, file)   # may run past the end
        else:
            p = draw(st.integers(0, n - 1)); k = draw(st.integers(1, n - p))
            if op == Op.MADVISE:
                b.event(t, pid, op, m, p, k, draw(st.sampled_from([Advice.PAGEOUT, Advice.DONTNEED, Advice.WILLNEED])))
            elif op == Op.READ:
                b.event(t, pid, op, m, p, k, draw(st.sampled_from([0, 0, 4])))
            else:
                b.event(t, pid, op, m, p, k)
        t += draw(st.sampled_from([0, 1, 1, 1]))          # some events share a graph node
    return b.build()


@st.composite
def dio_configs(draw):
    io = draw(st.booleans())
    return Config(memcg_limit=draw(st.integers(48, 600)) * 4096,
                  mem=draw(st.sampled_from([None, 2000 * 4096])),
                  zram=draw(st.sampled_from([None, "lz4:1M"])),
                  read_ahead_kb=draw(st.sampled_from([0, 128, 512])),
                  fault_around_bytes=draw(st.sampled_from([4096, 65536])),
                  max_folio_order=draw(st.sampled_from([0, 2, 9])),
                  max_sectors_kb=draw(st.sampled_from([16, 1024])),
                  policy=draw(st.sampled_from(["stock", "lru", "dw"])),
                  threads=draw(st.integers(1, 3)),
                  io_latency_us=100.0 if io else 0.0,
                  io_read_gbps=draw(st.sampled_from([0.0, 2.0])) if io else 0.0,
                  sample_ms=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dio_traces(), dio_configs())
def test_invariants_hold_with_direct_io(trace, cfg):
    r1 = Emulator(cfg).replay(trace, check_invariants=True)
    assert all(v >= 0 for v in r1.summary.values()), r1.summary
    r2 = Emulator(cfg).replay(trace, check_invariants=True)
    assert r1.summary == r2.summary
    assert r1.timeline.equals(r2.timeline)
    assert r1.files.equals(r2.files)
    assert all((r1.page_states[k] == r2.page_states[k]).all() for k in r1.page_states)
    # a trace whose only file accesses are direct adds nothing to the page cache
    ops = trace["op"]
    if not np.isin(ops, [Op.FREAD, Op.READ, Op.WRITE, Op.MADVISE, Op.MLOCK]).any() and \
            not (trace["flags"][ops == Op.MMAP] & MapFlag.POPULATE).any():
        assert r1.summary["file_pages_added"] == 0 and r1.summary["nr_file_pages"] == 0
