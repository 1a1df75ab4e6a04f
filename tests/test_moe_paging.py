"""MoE expert paging (issue 42): the routing model, the five load modes each emitting what llama.cpp's
code for it does, what the kernel emulation makes of them, the experiment, and bad input."""
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core.errors import InputError
from kmemsim.core.trace import Advice, MapFlag, Op, TraceBuilder
from kmemsim.core.units import PAGE_SIZE
from kmemsim.engine.time import device as devmod
from kmemsim.experiment import moe_paging
from kmemsim.workload import llama as lw
from kmemsim.workload.llama import routing
from kmemsim.workload.synth import layout_from_preset

L2 = layout_from_preset("Qwen3-30B-A3B", "q8_0", 2)       # 128 experts, 8 routed, 2 layers
HP = L2.hparams


def session(mode, decode=8, prompt=4, spec="zipf:1.2", **kw):
    b = TraceBuilder()
    s = lw.generate(L2, prompt, decode, 256, load_mode=mode, moe_routing=spec, builder=b, repack="none", **kw)
    return s, b.build()


def ev(tr, op, arg=None):
    c = tr.cols
    k = c["op"] == op
    if arg is not None:
        k &= c["arg"] == arg
    return {x: c[x][k] for x in ("t", "map", "page", "npages", "arg", "flags")}


def slice_pages(name, experts):
    """File pages of the experts' slices of tensor `name`."""
    t = L2.tensor(name)
    sl = t.n_bytes // HP["n_expert"]
    out = set()
    for e in experts:
        a, b = (t.data_offset + e * sl) // PAGE_SIZE, -(-(t.data_offset + (e + 1) * sl) // PAGE_SIZE)
        out |= set(range(a, b))
    return out


# ---- routing ------------------------------------------------------------------------------------

def rows_of(spec, n, layers=2, seed=0):
    hp = dict(HP, n_expert=8, n_expert_used=2, n_layer=layers)
    r = routing.Router(spec, hp, np.random.default_rng(seed))
    return r, [r.rows(il, n) for il in range(layers)]


def test_stick_repeats_the_first_choice_as_mixtral_does():
    # Mixtral of Experts (arXiv:2401.04088) Table 5: layer 15 repeats its first choice for 27.9% of
    # consecutive tokens against 12.5% at random (8 experts); a row reused with probability 0.15 gives
    # 0.15 + 0.85 * base. Here "same expert among the k" of consecutive tokens, uniform routing.
    _, (free, _) = rows_of("uniform", 20000)
    _, (stuck, _) = rows_of("uniform,stick=0.15", 20000)
    same = lambda r: np.mean([bool(set(a) & set(b)) for a, b in zip(r[:-1], r[1:])])
    base = same(free)
    assert abs(base - (1 - 6 * 5 / (8 * 7))) < 0.02          # P(two random pairs of 8 overlap) = 1 - C(6,2)/C(8,2)
    assert abs(same(stuck) - (0.15 + 0.85 * base)) < 0.02


def test_layer_correlation_carries_rank_for_rank():
    r, (a, b) = rows_of("zipf:1.0,corr=0.3", 20000)
    rank_a = r.rank[0][a]
    rank_b = r.rank[1][b]
    same = np.mean([set(x) == set(y) for x, y in zip(rank_a, rank_b)])
    _, (a0, b0) = rows_of("zipf:1.0", 20000)
    base = np.mean([set(x) == set(y) for x, y in zip(r.rank[0][a0], r.rank[1][b0])])
    assert abs(same - (0.3 + 0.7 * base)) < 0.02


def test_skew_concentrates_routing_and_uniform_does_not():
    _, (u, _) = rows_of("uniform", 20000)
    _, (z, _) = rows_of("zipf:2", 20000)
    top = lambda r: np.bincount(r.ravel(), minlength=8).max() / r.size
    assert abs(top(u) - 1 / 8) < 0.01
    assert top(z) > 0.3


def test_recorded_routing_replays_and_cycles(tmp_path):
    rows = [(il, np.array([[il, 5], [7, 1]], np.int32)) for il in range(2)]
    p = tmp_path / "r.npz"
    routing.save_recording(str(p), rows, 8)
    r = routing.Router(f"recorded:{p}", dict(HP, n_expert=8, n_expert_used=2, n_layer=2), None)
    assert r.rows(1, 3).tolist() == [[1, 5], [7, 1], [1, 5]]
    with pytest.raises(InputError, match="the model has 128"):
        routing.Router(f"recorded:{p}", HP, None)
    (tmp_path / "bad.npz").write_bytes(b"no")
    with pytest.raises(InputError, match="not a routing recording"):
        routing.Router(f"recorded:{tmp_path / 'bad.npz'}", HP, None)


# ---- what each load mode emits -------------------------------------------------------------------

def test_page_cache_is_plain_mmap():
    s, tr = session("page-cache")
    _, ref = session("mmap")
    assert np.array_equal(tr.cols["op"], ref.cols["op"]) and np.array_equal(tr.cols["page"], ref.cols["page"])
    mm = ev(tr, Op.MMAP)
    assert mm["flags"][0] & MapFlag.POPULATE             # llama_mmap: MAP_POPULATE of the whole file


def test_willneed_advises_exactly_the_routed_slices_around_their_reads():
    # llama.cpp #26003: WILLNEED over the routed tensors once routed (madvise_willneed ->
    # vfs_fadvise -> force_page_cache_ra: only those pages), DONTNEED once used ("mark an uploaded
    # mmap tensor as DONTNEED"); no MAP_POPULATE of the file, the dense tensors WILLNEED at load.
    s, tr = session("willneed", decode=3)
    assert not ev(tr, Op.MMAP)["flags"][0] & MapFlag.POPULATE
    c = tr.cols
    dec = np.flatnonzero((c["op"] == Op.PHASE))
    last = dec[-2]                                        # the last decode token's mark
    seg = slice(last, len(c["op"]))
    wn = (c["op"][seg] == Op.MADVISE) & (c["arg"][seg] == Advice.WILLNEED)
    dn = (c["op"][seg] == Op.MADVISE) & (c["arg"][seg] == Advice.DONTNEED)
    got = set()
    for a, n in zip(c["page"][seg][wn], c["npages"][seg][wn]):
        got |= set(range(a, a + n))
    routed = s.router.last                                # the last layer's experts of the last token
    want = slice_pages("blk.1.ffn_down_exps.weight", np.unique(routed))
    assert want <= got
    exps = sum(t.n_bytes for t in L2.tensors if "_exps" in t.name) // HP["n_expert"] * HP["n_expert_used"]
    assert len(got) * PAGE_SIZE <= exps + 2 * 3 * 8 * 2 * PAGE_SIZE   # 8 experts x 3 tensors x 2 layers, page-rounded
    # every WILLNEED comes before the reads of its layer, every DONTNEED after them
    i_w, i_d = np.flatnonzero(wn), np.flatnonzero(dn)
    assert len(i_w) == len(i_d) and (i_w < i_d).all()


def test_direct_reads_misses_around_the_page_cache_into_lru_slots():
    # llama.cpp #25294: a miss pread(O_DIRECT)s the expert into the layer's least recently used slot
    s, tr = session("direct:16", decode=12)
    m = s.moe.slots
    dio = ev(tr, Op.DIO_READ)
    assert m.misses * 3 == len(dio["page"])               # gate, up, down of each miss
    assert m.hits > 0
    # a layer's (a wave's) reads are in flight together: all batched but the last, which waits
    # for them (c_ext/direct_io.c); a layer that missed waits once, a prefill's waves once each
    waits = (dio["arg"] == 0).sum()
    assert dio["arg"][-1] == 0 and len(np.unique(dio["t"])) <= waits <= len(np.unique(dio["t"])) + s.moe.slots.waves
    # the experts are never read through the mapping
    rd = ev(tr, Op.READ)
    exps = set()
    for t in L2.tensors:
        if "_exps" in t.name:
            # the pages wholly the tensor's (its first and last may hold a neighbour's bytes too)
            exps |= set(range(-(-t.data_offset // PAGE_SIZE), (t.data_offset + t.n_bytes) // PAGE_SIZE))
    fmap = ev(tr, Op.MMAP)["map"][0]
    for a, n in zip(rd["page"][rd["map"] == fmap], rd["npages"][rd["map"] == fmap]):
        assert not (set(range(a, a + n)) & exps)


def test_direct_lru_keeps_a_repeated_expert():
    from kmemsim.engine.managers import ExpertSlots
    class Sink:
        def __init__(self):
            self.evs = []
        def mmap(self, *a, **k):
            return 7
        def event(self, *a):
            self.evs.append(a)
        def ranges(self, *a, **k):
            pass
    sink = Sink()
    c = ExpertSlots({0: [(0, 4096)]}, 8, 2, 0, sink)
    c.create(0)
    for ex in ([1], [2], [1], [3], [2]):                 # 3 evicts 2 (least recent), so 2 misses again
        c.route(0, 0, ex)
    assert (c.hits, c.misses) == (1, 4)


def test_pin_hot_locks_dense_then_the_hottest_and_emulator_keeps_them():
    # llama.cpp #26414: dense tensors mlocked first, then the N experts counted hottest from
    # ffn_moe_topk; mlock -> mlock_fixup() + populate, the folios on the unevictable list
    # (mm/mlock.c), so reclaim never takes them
    s, tr = session("pin-hot:20", decode=16)            # re-chosen after the prompt and after token 16
    locked = [m for m in tr.meta["maps"] if m["name"].startswith("mlock expert")]
    assert len({m["name"] for m in locked}) >= 20
    hot = np.argsort(-s.moe.counts, axis=None, kind="stable")[:20]
    assert {tuple(int(v) for v in p) for p in zip(*np.unravel_index(hot, s.moe.counts.shape))} == set(s.moe.pinned)
    dev = devmod.load("this-machine")
    from kmemsim.report import compare as cm
    dense = moe_paging.sizes(L2)["dense"]
    lim = dense + 20 * moe_paging.sizes(L2)["expert"] + 64 * 2**20
    r = cm.run(cm.Workload(tr, "m", "x", {"request 0": 4}), ["stock"], dev, cm.base_config(dev, memcg_limit=lim),
               progress=False).runs[0]
    assert r.timeline["nr_unevictable"].max() * PAGE_SIZE >= dense
    # mlock's cost: pinning beyond the limit kills the process (the memcg OOM killer)
    r2 = cm.run(cm.Workload(tr, "m", "x", {"request 0": 4}), ["stock"], dev,
                cm.base_config(dev, memcg_limit=dense // 2), progress=False).runs[0]
    assert r2.summary["oom_kill"] == 1


def test_cold_advises_an_expert_once_it_is_idle_t_steps():
    # MADV_COLD (madvise_cold -> folio_deactivate) over an expert unrouted for T steps, once
    s, tr = session("cold:3", decode=12, spec="uniform")
    cold = ev(tr, Op.MADVISE, Advice.COLD)
    assert len(cold["page"]) and s.moe.colded > 0
    # none advised is routed in the T steps before
    last = s.moe.last
    assert ((s.moe.step - last[last >= 0]) >= 0).all()


def test_willneed_reads_only_routed_pages_where_page_cache_reads_around():
    # filemap_fault -> do_sync_mmap_readahead reads ra_pages around the fault (this machine's
    # read_ahead_kb 8192, doubled by llama.cpp's POSIX_FADV_SEQUENTIAL), bringing other experts'
    # bytes; force_page_cache_ra reads only the range asked. At a quarter of the model, page-cache
    # reads several times willneed's bytes per token on this machine.
    dev = devmod.load("this-machine")
    pc = moe_paging.point(dev, L2, 0.25, 0.0, "page-cache", 8, 8)
    wn = moe_paging.point(dev, L2, 0.25, 0.0, "willneed", 8, 8)
    routed = sum(t.n_bytes for t in L2.tensors if "_exps" in t.name) // HP["n_expert"] * HP["n_expert_used"]
    assert wn["storage_bytes_per_token"] < 1.3 * routed + sum(t.n_bytes for t in L2.tensors if "_exps" not in t.name)
    assert pc["storage_bytes_per_token"] > 2 * wn["storage_bytes_per_token"]


# ---- the experiment ------------------------------------------------------------------------------

def test_experiment_quick_writes_summary_and_winner(tmp_path):
    out = tmp_path / "moe"
    r = CliRunner().invoke(main, ["experiment", "moe-paging", "-o", str(out), "--quick", "--set", "fractions=0.25,1.0",
                                  "--set", "devices=this-machine"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "summary.csv")
    assert list(df.columns[:8]) == moe_paging.COLUMNS
    assert set(df["strategy"]) == set(moe_paging.STRATEGIES)
    assert (out / "winner.png").stat().st_size > 1000
    w = pd.read_csv(out / "winners.csv")
    # at the whole model in memory nothing is read in decode by page-cache (the populate holds it)
    full = df[(df.mem_fraction == 1.0) & (df.strategy == "page-cache")]
    assert (full["storage_bytes_per_token"] == 0).all()
    assert len(w) == 2 * 2                                # one winner per fraction and skew
    assert set(w["winner"]) <= set(moe_paging.STRATEGIES)


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("args,fragment", [
    (["--layout-only", "Llama-3.2-1B", "--load-mode", "willneed"], "the model has no experts"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--load-mode", "direct:129"], "direct:SLOTS"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--load-mode", "direct:4"], "direct:SLOTS"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--load-mode", "direct"], "give SLOTS"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--load-mode", "pin-hot:x"], "must be an integer"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--moe-routing", "zipf:11"], "0 < S <= 10"),
    (["--layout-only", "Qwen3-30B-A3B", "--layers", "1", "--moe-routing", "zipf:1,stick=2"], "stick=P"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, args, fragment):
    out = tmp_path / "t.parquet"
    r = CliRunner().invoke(main, ["workload", "llama", "--prompt", "4", "--decode", "4", "--ctx", "256", "-o", str(out)]
                           + args)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemsim: ") and fragment in lines[0], r.output
    assert not out.exists()


def test_experiment_skew_out_of_range_writes_nothing(tmp_path):
    out = tmp_path / "moe"
    r = CliRunner().invoke(main, ["experiment", "moe-paging", "-o", str(out), "--quick", "--set", "skews=12"])
    assert r.exit_code == 2 and "outside 0..10" in r.output
    assert not out.exists() or not any(out.iterdir())


# ---- kmemsim compare ----------------------------------------------------------------------------

TINY_MOE = dict(arch="qwen3moe", n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, head_dim=64,
                n_vocab=1024, n_expert=16, n_expert_used=2, n_ff_exp=128)


def test_compare_takes_the_load_modes(tmp_path):
    from kmemsim.workload.synth import write_model
    model = str(tmp_path / "moe.gguf")
    write_model(model, None, "q8_0", progress=False, **TINY_MOE)
    out = tmp_path / "cmp"
    r = CliRunner().invoke(main, ["compare", model, "--policy", "stock", "--load-mode",
                                  "page-cache,willneed,direct:4,pin-hot:4,cold:2", "--memcg-limit", str(64 << 20),
                                  "--prompt", "8", "--decode", "8", "--ctx", "256", "-o", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "summary.csv")
    assert list(df["policy"]) == ["page-cache", "willneed", "direct:4", "pin-hot:4", "cold:2"]
    # dense model given an MoE mode, slots above the expert count: one line, exit 2, nothing written
    dense = str(tmp_path / "dense.gguf")
    write_model(dense, None, "q8_0", progress=False, **{**TINY_MOE, "arch": "qwen3", "n_expert": 0,
                                                         "n_expert_used": 0, "n_ff_exp": None})
    for m, mode, frag in ((dense, "willneed", "the model has no experts"), (model, "direct:17", "at most 16")):
        o = tmp_path / f"bad-{mode}"
        r = CliRunner().invoke(main, ["compare", m, "--load-mode", f"page-cache,{mode}", "-o", str(o)])
        assert r.exit_code == 2 and frag in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert not o.exists()


def test_apps_variant_counts_what_mlock_costs_the_other_apps(tmp_path):
    # #26414 pins experts with mlock: unevictable (mm/mlock.c), so under the phone's pressure the
    # kernel cannot take them and lmkd kills cached apps instead (by oom_score_adj), where willneed's
    # experts stay reclaimable page cache. None of the three PRs measured this.
    out = tmp_path / "apps"
    r = CliRunner().invoke(main, ["experiment", "moe-paging", "-o", str(out), "--quick", "--set", "scenario=apps",
                                  "--set", "devices=galaxy-s25plus", "--set", "fractions=0.25", "--set", "skews=1.2",
                                  "--set", "strategies=willneed,pin-hot"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "summary.csv")
    apps = df[df.device == "galaxy-s25plus+apps"].set_index("strategy")
    assert set(apps.index) == {"willneed", "pin-hot"}
    assert apps.loc["pin-hot", "lmk_kills"] > apps.loc["willneed", "lmk_kills"]


@pytest.mark.llama
def test_routing_recorded_from_real_llama_cpp_replays(tmp_path):
    # llama.cpp's build_moe_ffn names the router's top-k ids ffn_moe_topk-<il> ([n_expert_used,
    # n_tokens], a view of the argsort); cb_eval asks for it and reads it computed. The last layer
    # routes the output rows only (inp_out_ids): 1 row in the prompt.
    from skips import needs_llama_cpp
    needs_llama_cpp()
    from kmemsim.workload.synth import write_model
    model = str(tmp_path / "moe.gguf")
    write_model(model, None, "q8_0", progress=False, **TINY_MOE)
    rec = tmp_path / "r.npz"
    r = CliRunner().invoke(main, ["trace", "llama", model, "--prompt", "8", "--decode", "4", "--ctx", "64",
                                  "-o", str(tmp_path / "t.parquet"), "--routing-out", str(rec)])
    assert r.exit_code == 0, r.output
    got = routing.load_recording(str(rec))
    assert got["n_expert"] == 16 and sorted(got["experts"]) == [0, 1]
    assert got["experts"][0].shape == (8 + 4, 2) and got["experts"][1].shape == (1 + 4, 2)
    assert all(len(set(row)) == 2 for rows in got["experts"].values() for row in rows)
    # the generator replays it: each decode step reads exactly the recorded experts' slices
    r = CliRunner().invoke(main, ["workload", "llama", model, "--prompt", "8", "--decode", "4", "--ctx", "64",
                                  "--moe-routing", f"recorded:{rec}", "-o", str(tmp_path / "g.parquet")])
    assert r.exit_code == 0, r.output
    from kmemsim.core import trace as trmod
    from kmemsim.workload.gguf_layout import read_layout
    tr, L = trmod.load(str(tmp_path / "g.parquet")), read_layout(model)
    c = tr.cols
    last = np.flatnonzero(c["op"] == Op.PHASE)[-2]       # the last decode token
    t = L.tensor("blk.0.ffn_down_exps.weight")
    sl = t.n_bytes // 16
    lo, hi = t.data_offset // PAGE_SIZE, (t.data_offset + t.n_bytes) // PAGE_SIZE
    k = (np.arange(len(c["op"])) > last) & (c["op"] == Op.READ) & (c["page"] >= lo) & (c["page"] < hi)
    read = {int((p * PAGE_SIZE - t.data_offset) // sl) for p in c["page"][k] + 1}
    assert read == set(got["experts"][0][-1].tolist())


def test_experiment_on_the_sweep_runner_writes_the_serial_rows(tmp_path):
    # sweep/experiments.py cuts moe-paging's grid by device (no loop carries state across them)
    args = ["--quick", "--set", "fractions=0.5", "--set", "skews=0", "--set", "strategies=page-cache,direct"]
    for name, extra in (("serial", []), ("local", ["--scheduler", "local"])):
        r = CliRunner().invoke(main, ["experiment", "moe-paging", "-o", str(tmp_path / name)] + args + extra)
        assert r.exit_code == 0, r.output
    a, b = (pd.read_csv(tmp_path / n / "summary.csv")[moe_paging.COLUMNS] for n in ("serial", "local"))
    pd.testing.assert_frame_equal(a, b)
