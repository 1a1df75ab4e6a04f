"""The multi-generational LRU (c_ext/lru_gen.c, c_ext/workingset_lru_gen.c; docs/mglru.md): one small
hand-built trace per mechanism, each worked out from the kernel function it names (Linux 6.6.y as
Android's android15-6.6 GKI builds it; 6.1.y the same in what these tests look at). Result.lru_gen is
the lruvec's MGLRU state at the end (max_seq, min_seq, each generation's pages, the PID controller's
per-tier counters, what the aging did)."""
import dataclasses
import tomllib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kmemsim.core.data import DEVICES

from kmemsim.core.errors import InputError
from kmemsim.core.trace import MapFlag, Op, TraceBuilder
from kmemsim.engine.kernel import Config, Emulator, PageState
from kmemsim.engine.time import device as devmod
from test_core_invariants import configs, traces
from test_core_mechanisms import ANON_RW, PLAIN, T, state

MIN_NR_GENS = 2
MIN_LRU_BATCH = 64


def run(tr, **cfg):
    kw = dict(PLAIN, lru="mglru")
    kw.update(cfg)
    return Emulator(Config(**kw)).replay(tr.b.build(), check_invariants=True)


def resident(res, lo, hi):
    return int((res.page_states["/model"][lo:hi] & PageState.RESIDENT).sum())


def gen_pages(res, seq, kind):
    return next(g[kind] for g in res.lru_gen["gens"] if g["seq"] == seq)


def test_lru_gen_add_folio_places_each_folio_by_how_it_came():
    # lru_gen_init_lruvec(): max_seq = MIN_NR_GENS + 1 = 3, min_seq 0. lru_gen_add_folio(): a folio
    # added in a fault is active (folio_add_lru() with lru_gen_in_fault()) -> max_seq, file and anon
    # alike; a read(2) folio is neither -> min_seq + 1 (min_seq + MIN_NR_GENS < max_seq). The two
    # youngest generations count as active in the compatibility sizes (lru_gen_is_active()).
    tr = T()
    m = tr.mmap(64)
    tr.read(m, 0, 16)
    tr.fread(100, 8)
    a = tr.mmap(32, file=False, flags=ANON_RW)
    tr.write(a, 0, 10)
    res = run(tr, memcg_limit=1024 * 4096)
    g = res.lru_gen
    assert g["max_seq"] == MIN_NR_GENS + 1 and g["min_seq"] == {"anon": 0, "file": 0}
    assert gen_pages(res, 3, "file") == 16 and gen_pages(res, 3, "anon") == 10
    assert gen_pages(res, 1, "file") == 8
    s = res.summary
    assert (s["nr_active_file"], s["nr_inactive_file"], s["nr_active_anon"], s["nr_inactive_anon"]) == (16, 8, 10, 0)


def test_folio_inc_refs_counts_accesses_without_activating():
    # folio_mark_accessed() with MGLRU is folio_inc_refs(): PG_referenced, then PG_workingset, then
    # LRU_REFS; no list move, no PGACTIVATE (the classic lists activate on the second read).
    tr = T()
    for _ in range(4):
        tr.fread(5, 1)
    classic = run(tr, memcg_limit=64 * 4096, lru="classic")
    mglru = run(tr, memcg_limit=64 * 4096)
    assert classic.summary["pgactivate"] == 1
    assert mglru.summary["pgactivate"] == 0
    assert state(mglru, 5) == PageState.RESIDENT | PageState.REFERENCED


def test_evict_folios_takes_the_oldest_generation_first():
    # evict_folios() -> isolate_folios() -> scan_folios(): from the tail of min_seq's list, until
    # MIN_LRU_BATCH pages are isolated. X then Y were read (min_seq + 1, each added at the head), C was
    # faulted in before them (max_seq): a 64-page batch takes all of X and Y's first 16 pages; C, in the
    # youngest generation, is not looked at. Each is counted in evicted[file][tier 0] (lru_gen_eviction()).
    tr = T()
    c = tr.mmap(64)
    tr.read(c, 0, 32)
    tr.fread(100, 48)                # X
    tr.fread(200, 48)                # Y
    tr.fread(300, 40)                # 8 pages over the limit: one reclaim
    res = run(tr, memcg_limit=160 * 4096)
    assert resident(res, 0, 32) == 32
    assert resident(res, 100, 148) == 0
    assert resident(res, 200, 216) == 0 and resident(res, 216, 248) == 32
    assert res.summary["pgsteal_memcg"] == MIN_LRU_BATCH
    assert res.lru_gen["evicted"]["file"] == [MIN_LRU_BATCH, 0, 0, 0]


def _hot_and_stream(retouch):
    tr = T()
    m = tr.mmap(4096)
    tr.read(m, 0, 64)                # the hot set H, faulted in
    for k in range(12):
        tr.read(m, 1024 + 64 * k, 64)            # a stream of new mapped pages
        if retouch:
            tr.read(m, 0, 64)                    # H referenced again: young PTEs
    return run(tr, memcg_limit=160 * 4096)


def test_aging_increments_max_seq_and_the_walk_promotes_young_pages():
    # try_to_inc_max_seq(): when the lruvec runs out of cold folios (should_run_aging(), not at
    # DEF_PRIORITY) every task's page tables are walked (walk_mm() -> walk_pte_range(): young PTEs
    # cleared, their folios moved to max_seq by folio_update_gen()) and inc_max_seq() adds one:
    # max_seq = 3 + the agings. The stream's pages, referenced once, age out; H, referenced between
    # agings, stays young and is never evicted. Not referenced again, H ages out like the stream.
    hot = _hot_and_stream(retouch=True)
    g = hot.lru_gen
    assert g["agings"] >= 1 and g["max_seq"] == MIN_NR_GENS + 1 + g["agings"]
    assert g["mm_walks"] == g["agings"] and g["walk_young"] > 0
    assert resident(hot, 0, 64) == 64
    cold = _hot_and_stream(retouch=False)
    assert resident(cold, 0, 64) == 0
    assert cold.lru_gen["max_seq"] == MIN_NR_GENS + 1 + cold.lru_gen["agings"]


def _sparse_table(young_pages):
    tr = T(16384)
    dense = tr.mmap(512)                          # one PTE table, all of it referenced every round
    sparse = tr.mmap(512, pgoff=512)              # a PTE table once any of it is mapped
    stream = tr.mmap(8192, pgoff=2048)
    tr.read(dense, 0, 512)
    for k in range(10):
        tr.read(dense, 0, 512)
        if young_pages:
            tr.read(sparse, 0, young_pages)
        tr.read(stream, 512 * k, 512)
    return run(tr, memcg_limit=1400 * 4096).lru_gen


def test_bloom_filter_leaves_out_a_table_with_few_young_ptes():
    # walk_pmd_range(): a PTE table is walked only if the Bloom filter of max_seq holds it
    # (test_bloom_filter()), and goes into max_seq + 1's only if suitable_to_scan() (a young PTE per
    # 8: young * 8 >= total); the first iteration walks every table (force_scan). One page of a
    # second mapping referenced every round: its table (1 young PTE in 512) is walked by the first
    # aging only, and left out by every later one (the look-around never reports it either: 1 young
    # PTE in its window of 64). The same trace without that page ages the same number of times.
    none, one = _sparse_table(0), _sparse_table(1)
    assert one["agings"] == none["agings"] >= 3
    assert one["tables_walked"] - none["tables_walked"] == 1
    assert one["tables_filtered"] - none["tables_filtered"] == one["agings"] - 1


def _tiers(reads):
    tr = T(8192)
    for k in range(10):
        for _ in range(reads):
            tr.fread(0, 96)                       # H: read `reads` times a round (read(2): tiers)
        tr.fread(1000 + 150 * k, 150)             # a stream read once
    return run(tr, memcg_limit=200 * 4096)


def test_a_refaulted_tier_is_protected():
    # Read twice, H's folios are in tier 1 (PG_referenced + PG_workingset: folio_lru_refs() 1,
    # lru_tier_from_refs() 1); the stream's in tier 0. H is evicted once with the stream and refaults
    # at once (lru_gen_test_recent(): still min_seq's): refaulted[file][1] = 96 >= MIN_LRU_BATCH, at a
    # higher rate than tier 0's, so get_tier_idx() finds positive_ctrl_err() false for tier 1 and
    # returns 0: sort_folio() protects tier 1 (folio_inc_gen(), counted in protected[file][1]) and H
    # never refaults again. Read once a round, H stays in tier 0 and keeps refaulting.
    twice = _tiers(2)
    g = twice.lru_gen
    assert twice.summary["workingset_refault_file"] == 96
    assert g["refaulted"]["file"][1] == 96 and g["protected"]["file"][1] > 0
    assert resident(twice, 0, 96) == 96
    once = _tiers(1)
    assert once.summary["workingset_refault_file"] > 5 * 96
    assert sum(once.lru_gen["protected"]["file"]) == 0
    assert resident(once, 0, 96) < 96


def _min_ttl_trace():
    b = TraceBuilder("min_ttl")
    f = b.file("/model", 8192)
    b.process(0, 1, "big", oom_score_adj=900)
    b.process(1, 2, "reader")
    a = b.mmap(2, 1, "heap", 600, flags=MapFlag.READ | MapFlag.WRITE)
    b.event(3, 1, Op.WRITE, a, 0, 600)
    for k, p in enumerate(range(0, 2000, 50)):   # read(2) 50 pages every microsecond
        b.event(4 + 1000 * k, 2, Op.FREAD, -1, p, 50, 0, f)
    return b.build()


def test_min_ttl_stops_eviction_and_oom_kills_instead():
    # lru_gen_age_node() (kswapd_age_node() at each priority of balance_pgdat()): with min_ttl_ms set,
    # lruvec_is_reclaimable() asks whether the oldest file generation was born more than min_ttl ago;
    # in a trace of 40 us none was, so kswapd calls out_of_memory() and the task with the most
    # badness (oom_score_adj 900) is killed instead of reclaiming the working set. Without min_ttl
    # kswapd simply evicts.
    kw = dict(PLAIN, lru="mglru", mem=1200 * 4096)
    ttl = Emulator(Config(**kw, min_ttl_ms=1000)).replay(_min_ttl_trace(), check_invariants=True)
    assert ttl.summary["oom_kill"] >= 1 and ttl.lru_gen["min_ttl_ooms"] >= 1
    assert ttl.kills.iloc[0]["pid"] == 1 and ttl.kills.iloc[0]["by"] == "oom"
    plain = Emulator(Config(**kw)).replay(_min_ttl_trace(), check_invariants=True)
    assert plain.summary["oom_kill"] == 0 and plain.summary["pgsteal_kswapd"] > 0
    assert plain.lru_gen["min_ttl_ooms"] == 0


def _two_types(hot, swappiness=100, n=512):
    tr = T(65536)
    a = tr.mmap(n, file=False, flags=ANON_RW)
    m = tr.mmap(65536)
    tr.write(a, 0, n)
    tr.read(m, 0, n)
    for k in range(40):
        if hot == "anon":                        # anon used again every round, file streamed
            tr.write(a, 0, n)
            tr.read(m, n + n // 2 * k, n // 2)
        elif hot == "file":                      # file used again, anon streamed (new mappings)
            tr.read(m, 0, n)
            b = tr.mmap(n // 2, file=False, flags=ANON_RW)
            tr.write(b, 0, n // 2)
        else:                                    # both used again
            tr.write(a, 0, n)
            tr.read(m, 0, n)
    return run(tr, memcg_limit=n * 3 // 2 * 4096, zram="lz4:64M", swappiness=swappiness).lru_gen


def test_pid_controller_shifts_scanning_between_anon_and_file():
    # get_type_to_scan(): the SP is anon's tier 0 (gain swappiness), the PV file's tier 0 (gain
    # MAX_SWAPPINESS - swappiness); positive_ctrl_err() -> file when the PV has fewer than
    # MIN_LRU_BATCH refaults or a lower refaulted/(evicted + protected), else anon. Only anon
    # refaulting: every choice is file. File refaulting: anon is chosen. Both refaulting: the gains
    # decide, and a higher swappiness picks anon more often.
    assert _two_types("anon")["pid_chose_anon"] == 0 and _two_types("anon")["pid_chose_file"] > 0
    file_hot = _two_types("file")
    assert file_hot["pid_chose_anon"] > file_hot["pid_chose_file"] > 0
    assert _two_types("both", swappiness=10)["pid_chose_anon"] < _two_types("both", swappiness=190)["pid_chose_anon"]


def test_6_1_memcg_reclaim_with_its_fairness_safeguards():
    # Linux 6.1.y's lru_gen_shrink_lruvec() (mm/vmscan.c, 6.1.192): get_nr_to_scan() ages a lruvec
    # low on cold folios below DEF_PRIORITY and returns nr_to_scan, so evict_folios() follows in the
    # same call (6.3+ returns -1 and leaves the lruvec); should_abort_scan() stops a memcg reclaimer
    # that aged twice (max_seq - seq > 1) or met nr_to_reclaim having evicted anon (need_swapping).
    # The aging and its walk behave as in 6.6: H, referenced between agings, stays; the stream ages
    # out; max_seq counts the agings; the PID controller still turns to anon when file refaults.
    for retouch, want in ((True, 64), (False, 0)):
        tr = T()
        m = tr.mmap(4096)
        tr.read(m, 0, 64)
        for k in range(12):
            tr.read(m, 1024 + 64 * k, 64)
            if retouch:
                tr.read(m, 0, 64)
        res = run(tr, memcg_limit=160 * 4096, lru_gen_fairness_safeguards=True)
        assert resident(res, 0, 64) == want
        assert res.lru_gen["agings"] >= 1 and res.lru_gen["max_seq"] == MIN_NR_GENS + 1 + res.lru_gen["agings"]
    tr = T(65536)
    a = tr.mmap(512, file=False, flags=ANON_RW)
    m = tr.mmap(65536)
    tr.write(a, 0, 512)
    tr.read(m, 0, 512)
    for k in range(40):
        tr.read(m, 0, 512)
        b = tr.mmap(256, file=False, flags=ANON_RW)
        tr.write(b, 0, 256)
    g = run(tr, memcg_limit=768 * 4096, zram="lz4:64M", swappiness=100, lru_gen_fairness_safeguards=True).lru_gen
    assert g["pid_chose_anon"] > 0 and g["pid_chose_file"] > 0


def _one_page_and_stream(retouch):
    tr = T(16384)
    one = tr.mmap(512)                           # page 0 alone in its PTE table
    stream = tr.mmap(8192, pgoff=2048)
    tr.read(one, 0)
    for k in range(16):
        tr.read(stream, 64 * k, 64)
        if retouch:
            tr.read(one, 0)
    return run(tr, memcg_limit=128 * 4096)


def test_look_around_finds_a_young_page_the_walks_leave_out():
    # Page 0 is alone in its PTE table: after the first walk the Bloom filter leaves the table out
    # (1 young PTE in 512), so referencing it again leaves a young PTE no walk clears. Reached in
    # the oldest generation, folio_referenced_one() finds it young and calls lru_gen_look_around(),
    # which clears it and gives the folio PG_referenced: folio_check_references() returns
    # FOLIOREF_ACTIVATE (referenced_ptes and referenced_folio, at the first reference: no "look
    # twice") and evict_folios() puts it in the youngest generation. Not referenced again, it is
    # evicted like the stream.
    kept, gone = _one_page_and_stream(True), _one_page_and_stream(False)
    assert state(kept, 0) & PageState.RESIDENT
    assert not state(gone, 0) & PageState.RESIDENT and state(gone, 0) & PageState.SHADOW
    assert kept.lru_gen["look_arounds"] > gone.lru_gen["look_arounds"]
    assert kept.summary["pgactivate"] > gone.summary["pgactivate"]


def test_configuration():
    # the classic lists by default, and in every bundled profile until MGLRU is checked live (the phone
    # profiles say so: docs/mglru.md); a profile's kernel.lru reaches the Config; the plain-LRU policy
    # keeps its own list whatever the setting
    assert Config().lru == "classic"
    for name in ("galaxy-s25plus", "xiaomi-14", "oneplus-12", "oneplus-ace5-pro", "this-machine", "oneplus-ace2",
                 "jetson-orin-nx"):
        assert devmod.load(name).config_kwargs().get("lru", "classic") == "classic"
    raw = tomllib.loads((DEVICES / "galaxy-s25plus.toml").read_text())
    raw["kernel"]["lru"] = "mglru"
    assert devmod.parse(raw, "mglru.toml").config_kwargs()["lru"] == "mglru"
    with pytest.raises(InputError):
        Emulator(Config(mem="1G", lru="lru_gen"))
    with pytest.raises(InputError):
        Emulator(Config(mem="1G", lru="mglru", min_ttl_ms=-1))
    tr = T()
    tr.fread(0, 100)
    assert run(tr, memcg_limit=64 * 4096, policy="lru").lru_gen is None
    assert run(tr, memcg_limit=64 * 4096, lru="classic").lru_gen is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), configs(), st.sampled_from([0, 0, 0.00001, 1000]))
def test_invariants_hold_with_mglru(trace, cfg, min_ttl_ms):
    # km_check_invariants() with lru_gen_check_invariants(): each resident folio on one list, the
    # generation and compatibility sizes what the folios add up to, every folio in a live generation,
    # seq_is_valid(); and the same input gives the same output
    cfg = dataclasses.replace(cfg, lru="mglru", min_ttl_ms=min_ttl_ms)
    r1 = Emulator(cfg).replay(trace, check_invariants=True)
    assert all(v >= 0 for v in r1.summary.values())
    r2 = Emulator(cfg).replay(trace, check_invariants=True)
    assert r1.summary == r2.summary and r1.lru_gen == r2.lru_gen
