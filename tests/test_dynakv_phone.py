"""DynaKV's DRAM cache as anonymous memory under the kernel emulation (kmemsim.engine.managers.dynakv_process,
`kmemsim experiment dynakv-phone`): the pool's accesses follow the manager's own hits and misses, and the
kernel's latency differs from the manager's by what reclaim did to those pages, nothing else."""
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli.main import main
from kmemsim.engine.managers import dynakv as dk
from kmemsim.engine.managers.dynakv_process import page_runs, residency, retrieve
from kmemsim.workload.llama.keys import kmeans, synthetic_keys


def replay_pool(tc, needs, hits, n_prefill):
    """Walk the accesses in time order (an entry entering before a hit at the same step) and check
    them against what the manager did: returns nothing, asserts."""
    owner = {}
    o = np.lexsort((tc.write.astype(int) * -1, tc.step))
    for s, slot, e, w in zip(tc.step[o], tc.slot[o], tc.entry[o], tc.write[o]):
        if w:
            owner[int(slot)] = int(e)
        else:                              # a hit reads the slot its entry was last written to
            assert owner.get(int(slot)) == int(e), (s, slot, e)
    # every hit is read once at its step; every miss enters the pool at its step
    for s, (nd, h) in enumerate(zip(needs, hits)):
        at = tc.step == s
        assert sorted(tc.entry[at & ~tc.write]) == sorted(h)
        miss = np.setdiff1d(nd, h)
        entered = tc.entry[at & tc.write]
        assert set(miss) <= set(entered)
        # the rest entered here because they were decoded here and are hit later
        assert set(entered) - set(miss) <= {n_prefill + s}


def test_residency_by_hand():
    # prefill 4; step 0 reads 0 and 1 from flash; step 1 hits 0 and its own token 5 (kept in DRAM since
    # it was decoded); step 2 misses 1 again (evicted after step 0); step 3 hits 0 and 1
    needs = [[0, 1], [0, 5], [1], [0, 1]]
    hits = [[], [0, 5], [], [0, 1]]
    tc = residency(needs, hits, 4)
    replay_pool(tc, needs, hits, 4)
    w = {(int(s), int(e)) for s, e, x in zip(tc.step, tc.entry, tc.write) if x}
    assert w == {(0, 0), (0, 1), (1, 5), (2, 1)}
    # 0 stays in its slot throughout; 1's first stay ended at step 0, so 5 and then 1 again take its slot
    assert tc.slots == 2


@pytest.mark.parametrize("system", dk.SYSTEMS)
def test_the_recorded_retrieval_is_the_managers_and_the_pool_follows_it(system):
    keys, queries = synthetic_keys(256, 160, 64, 1, np.random.default_rng(3))
    p = dk.Params(cluster_size=16, cache_entries=128, entry_bytes=128)
    ref = dk.simulate(system, keys[0], queries[0], 256, p, kmeans, np.random.default_rng(5))
    steps, needs = retrieve(system, keys[0], queries[0], 256, p, kmeans, np.random.default_rng(5))
    assert len(steps) == len(ref) == len(needs) == 160
    for a, b, n in zip(steps, ref, needs):
        assert np.array_equal(a.runs, b.runs) and np.array_equal(a.hits, b.hits) and a.retrieved == len(n)
    hits = [s.hits for s in steps]
    assert sum(map(len, hits)) > 0            # the cache serves something, so the check below checks hits
    tc = residency(needs, hits, 256)
    replay_pool(tc, needs, hits, 256)
    # the pool is as small as the manager's DRAM contents allow: as many slots as stays overlap at most
    # (a stay: from an entry's entering to its last hit before it enters again)
    cover = np.zeros(160 + 1, int)
    for e in np.unique(tc.entry):
        m = tc.entry == e
        st, wr = tc.step[m], tc.write[m]
        o = np.lexsort((~wr, st))
        st, wr = st[o], wr[o]
        starts = np.flatnonzero(wr)
        for i, a in enumerate(starts):
            b = st[starts[i + 1] - 1] if i + 1 < len(starts) else st[-1]
            cover[st[a]] += 1
            cover[b + 1] -= 1
    assert tc.slots == np.cumsum(cover).max()


def test_page_runs_join_consecutive_pages_of_one_op_and_step():
    s, w, a, n = page_runs([0, 0, 0, 0, 1], [3, 4, 6, 4, 3], [False, False, False, True, False])
    assert list(zip(s, w, a, n)) == [(0, False, 3, 2), (0, False, 6, 1), (0, True, 4, 1), (1, False, 3, 1)]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynakv-phone")
    r = CliRunner().invoke(main, ["experiment", "dynakv-phone", "--quick", "-o", str(out / "q")])
    assert r.exit_code == 0, r.output
    return out / "q", r.output


def test_quick_writes_its_tables_and_says_what_the_paper_did_not_measure(quick):
    out, text = quick
    df = pd.read_csv(out / "summary.csv")
    assert set(df["system"]) == set(dk.SYSTEMS) and df["mem_bytes"].nunique() == 2
    assert {"manager_s", "kernel_s", "cache_swapin_pages", "slowdown"} <= set(df.columns)
    assert "not measured" in (out / "paper.csv").read_text()
    assert "Not measured by the paper" in (out / "report.md").read_text() and "Not measured by the paper" in text


def test_with_memory_to_spare_no_cache_page_is_swapped_and_the_latencies_agree(quick):
    # 12 GiB, the phone's RAM: every app, the weights and the pools fit; kswapd never wakes, nothing
    # reaches zram, so the kernel adds nothing to any step (do_swap_page() never runs)
    st = pd.read_csv(quick[0] / "steps.csv")
    roomy = st[st["mem_bytes"] == st["mem_bytes"].max()]
    assert (roomy["cache_swapin_pages"] == 0).all() and (roomy["swapin_pages"] == 0).all()
    assert np.array_equal(roomy["kernel_s"].to_numpy(), roomy["manager_s"].to_numpy())


def test_under_pressure_the_kernel_swaps_cache_pages_and_only_adds_time(quick):
    # 2 GiB: the apps' working sets and the weights do not fit; when a large app comes back (its hot
    # set touched at once), reclaim (shrink_folio_list -> add_to_swap) also takes pool pages the manager
    # holds as DRAM, and a hit on one faults it back (do_swap_page)
    st = pd.read_csv(quick[0] / "steps.csv")
    tight = st[st["mem_bytes"] == st["mem_bytes"].min()]
    assert tight["cache_swapin_pages"].sum() > 0
    assert (tight["kernel_s"] >= tight["manager_s"]).all()
    sw = tight["cache_swapin_pages"] > 0
    assert (tight.loc[sw, "kernel_s"] > tight.loc[sw, "manager_s"]).all()
    assert (tight.loc[sw, "swapin_s"] > 0).all()
    # the manager's accounting does not depend on the memory: the same steps at both sizes
    roomy = st[st["mem_bytes"] == st["mem_bytes"].max()]
    for s in dk.SYSTEMS:
        assert np.array_equal(tight.loc[tight["system"] == s, "manager_s"].to_numpy(),
                              roomy.loc[roomy["system"] == s, "manager_s"].to_numpy())


@pytest.mark.parametrize("args,msg", [
    (["--set", "mems=lots"], "mems"),
    (["--set", "systems=dynakv,flashcache"], "unknown 'flashcache'"),
    (["--set", "budget=0", "--set", "k=999"], "k=999"),
    (["--set", "buffer=0"], "buffer=0"),
    (["--set", "model=Llama-2-7B"], "no GQA metadata"),
    (["--set", "steps=0"], "steps >= 1"),
    (["--set", "heads=0"], "heads in"),
    (["--set", "budget=2"], "budget=2"),
    (["--set", "colour=red"], "KEY one of"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["experiment", "dynakv-phone", "--quick", *args, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
