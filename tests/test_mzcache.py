"""mzCache's model (kmemsim.engine.managers.mzcache) against its artifact's code facts
(mzcache-project/mzcache; ../shared/reference/seed-systems.md §1), its restore pipeline's ablations
(EVALUATION.md §4), `kmemsim experiment mzcache-ttft` (Fig 9) and `mzcache-apps` (Fig 15)."""
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core.data import SCENARIOS
from kmemsim.core.trace import Op
from kmemsim.engine.kernel import LMKD_REASONS, Config, Emulator
from kmemsim.engine.managers import mzcache as mz, partial_offload as po
from kmemsim.engine.time import device
from kmemsim.engine.time.pipeline import Pipeline
from kmemsim.experiment import mzcache_ttft as X
from kmemsim.workload import scenario as sc
from kmemsim.workload.synth import layout_from_preset

QWEN = layout_from_preset("Qwen3-0.6B", type="f16")
EXAONE = layout_from_preset("EXAONE-4.0-1.2B", type="f16")
# the artifact's FLEXGEN_8BIT profile measured on the Galaxy S25+ (scripts/compression/accuracy/profiles/)
S25 = mz.MzProfile(decomp=5.92561e9, kv_read=3.25037e9, weight_read=3.82981e9)


def test_sizes_are_the_artifacts():
    m = mz.model_of(QWEN, 32700)
    # mzcache_types.h: 256 tokens a chunk; K and V of 256 x kv_hidden(1024) x 2 B each: 1 MiB
    assert m.n_chunks == 128 and m.chunk_bytes == 1 << 20
    # mzcache_core.cpp: FLEXGEN_8BIT frees 15/32, FLEXGEN (4-bit) 23/32
    assert m.chunk_bytes - m.compressed_bytes == m.chunk_bytes * 15 // 32
    m4 = mz.model_of(QWEN, 32700, "flexgen4")
    assert m4.chunk_bytes - m4.compressed_bytes == m4.chunk_bytes * 23 // 32
    # weight_layer_bytes hard-coded in mzcache_core.cpp: Qwen3-0.6B 31,469,568, EXAONE 71,323,648
    assert abs(m.weight_layer_bytes / 31_469_568 - 1) < 1e-3
    assert abs(mz.model_of(EXAONE, 8193).weight_layer_bytes / 71_323_648 - 1) < 1e-3
    # README: Qwen3-0.6B's 32,700-token prefill state is about 3.7 GB (2 x 28 x 1,024 x 2 B per token)
    assert 3.6e9 < m.chunk_bytes * m.n_chunks * m.n_layer < 3.9e9


def test_planner_constants():
    # mzcache_profile.cpp: decomp_load_ratio = D / (D + R_kv) = 0.646 on the S25+'s 8-bit profile;
    # per_layer_balance = round(W / R_w x D / chunk_bytes) = 46 chunks for Qwen3-0.6B (seed-systems.md §1.5)
    assert round(S25.decomp_load_ratio, 3) == 0.646
    assert S25.per_layer_balance(mz.model_of(QWEN, 32700)) == 46


def test_backward_out_order_and_the_ladder():
    m = mz.model_of(QWEN, 32700)
    s = mz.MzState(m, S25)
    L, N, plb = m.n_layer, m.n_chunks, s.plb
    # derive_swapout_plan(): the first layers, up to per_layer_balance x num_layers chunks, are
    # compress-only; the rest store from chunk_bound up
    compress_only = plb * L // N
    assert s.bound[:compress_only] == [N] * compress_only and all(b < N for b in s.bound[compress_only:])
    s.swapout(0.9)
    # the cursors start at the last layer's last chunk of each region and walk down (backward-out)
    comp = [(l, c) for w, l, c in s.log if w == "compress"]
    store = [(l, c) for w, l, c in s.log if w == "store"]
    assert comp[0] == (L - 1, s.bound[L - 1] - 1) and store[0] == (L - 1, N - 1)
    assert comp == sorted(comp, reverse=True) and store == sorted(store, reverse=True)
    # phase 1: each step of 20 chunks compresses int(20 x ratio) = 12 and stores 8
    assert [w for w, _, _ in s.log[:20]].count("compress") == int(20 * s.dlr) == 12
    assert s.weights.all()                   # phase 2 (weight unloading) is not reached at 0.9
    assert s.remaining() <= 0.9


def test_the_ladder_reaches_every_target_from_where_it_stopped():
    # the Android app's onTrimMemory steps: swapout(cur - 0.15) each time (examples/llama.android)
    for layout, ctx in ((QWEN, 8193), (QWEN, 32700), (EXAONE, 16385)):
        s = mz.MzState(mz.model_of(layout, ctx), S25)
        before = s.resident_bytes()
        for target in (0.85, 0.70, 0.55, 0.40, 0.25, 0.10, 0.0):
            r = s.swapout(target)
            assert r <= target + 1e-12
            assert s.resident_bytes() <= before
            before = s.resident_bytes()
        # at 0 everything is out: all chunks processed, weights unloaded, arenas offloaded (phase 3)
        assert (s.chunks != mz.RAW).all() and not s.weights.any() and s.offloaded.all() and r == 0.0
        # weight layers were unloaded from the last layer down (cur_layer_idx_to_unload)
        assert [l for w, l, _ in s.log if w == "unload"] == list(range(s.m.n_layer - 1, -1, -1))


def ttft(state, ablation, dev):
    q = mz.Query(8, state.m.n_chunks * 256, QWEN.hparams)
    sched, *_ = mz.restore(state, q, X.mz_costs(dev), Pipeline(dev), ablation)
    return sched.makespan


@pytest.mark.parametrize("remaining", [0.0, 0.5, 0.75])
def test_ablations_are_ordered(remaining):
    # EVALUATION.md §4: NO (no overlap) slowest; AR (alloc/restore) and RP (restore/prefill) between;
    # ARP (all of it, mzCache) fastest
    dev = device.load("galaxy-s25plus")
    m = mz.model_of(QWEN, 16385)
    s = mz.MzState(m, X.mz_profile(dev, m))
    s.swapout(remaining)
    t = {a: ttft(s, a, dev) for a in mz.ABLATIONS}
    assert t["NO"] > t["AR"] > t["ARP"] and t["NO"] > t["RP"] > t["ARP"], t


def test_nothing_to_restore_is_the_prefill_alone():
    dev = device.load("galaxy-s25plus")
    m = mz.model_of(QWEN, 8193)
    s = mz.MzState(m, X.mz_profile(dev, m))
    t = {a: ttft(s, a, dev) for a in mz.ABLATIONS}
    per_layer = mz.layer_seconds(m, mz.Query(8, 8448, QWEN.hparams), X.mz_costs(dev))
    assert max(t.values()) == pytest.approx(min(t.values())) and min(t.values()) > m.n_layer * per_layer


def test_partial_offload_split():
    # the equal-fraction reconstruction (run_partial_offload.sh's for EXAONE): round((1 - r) x L)
    # layers of weights and of KV on flash; nothing at 100%, everything at 0%
    m = mz.model_of(QWEN, 16385)
    assert po.split(m, 1.0).offloaded_bytes == 0
    assert po.split(m, 0.0).remaining == pytest.approx(0.0)
    assert po.split(m, 0.5).weight_layers == po.split(m, 0.5).kv_layers == 14


def test_experiment_quick(tmp_path):
    r = CliRunner().invoke(main, ["experiment", "mzcache-ttft", "--quick", "-o", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "x" / "summary.csv")
    assert {"device", "model", "context", "remaining", "system", "ttft_s"} <= set(df.columns)
    assert set(df["system"]) == set(X.SYSTEMS)
    assert len(df) == len(X.SYSTEMS) * len(X.REMAINING)
    assert (tmp_path / "x" / "summary.parquet").exists() and (tmp_path / "x" / "ttft.png").exists()
    paper = pd.read_csv(tmp_path / "x" / "paper.csv")
    assert {"paper_lo", "paper_hi", "ours"} <= set(paper.columns)
    p = df.pivot_table(index="remaining", columns="system", values="ttft_s")
    ev = p[p.index < 1.0]
    # EVALUATION.md §3.4: mzCache below partial offload at every evicted point; the README's range:
    # 2.1-5.5x lower TTFT than partial offload (here the S25+, Qwen3-0.6B, 8193 tokens)
    assert (ev["mzcache"] < ev["partial-offload"]).all()
    ratio = ev["partial-offload"] / ev["mzcache"]
    assert ((ratio >= 2.1) & (ratio <= 5.5)).all(), ratio
    # §3.4: partial offload below OS paging at every point: OS paging's faults wait for kswapd, which
    # makes room by compressing the other apps' memory with zstd on one core
    assert (ev["partial-offload"] < ev["os-paging"]).all(), ev
    # OS paging's floor: fp16 KV barely compresses in zram (EVALUATION.md §8: remaining floors at
    # ~48-75% for Qwen3), so a target below it is not reached
    osp = df[df["system"] == "os-paging"].set_index("remaining")["achieved_remaining"]
    assert 0.45 < osp[0.0] < 0.8 and osp[0.0] == osp[0.25]


@pytest.mark.parametrize("args,msg", [
    (["--set", "codec=zip9"], "unknown codec"),
    (["--set", "remaining=1.5"], "outside 0..1"),
    (["--set", "contexts=70000"], "above the model's maximum"),
    (["--set", "nope=1"], "expected KEY=VALUE"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["experiment", "mzcache-ttft", "--quick", *args, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_ten_app_round(tmp_path):
    # mzCache Fig 15's round (scripts/mzcache/record_demo_rounds.sh), one round of each system.
    r = CliRunner().invoke(main, ["experiment", "mzcache-apps", "--quick", "--set", "rounds=1",
                                  "-o", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "x"
    for f in ("summary.csv", "summary.parquet", "requests.csv", "kills.csv", "paper.csv", "report.md"):
        assert (out / f).exists(), f
    df = pd.read_csv(out / "summary.csv")
    req = pd.read_csv(out / "requests.csv")
    at = lambda s, step: df[(df["system"] == s) & (df["trim_step"] == step)].iloc[0]
    # the paper's outcome for mzCache: it keeps its pid
    assert not df[df["system"] != "os-paging"]["llm_killed"].any()
    assert (df["requests_served"] == 1).all()
    # mzcache_kv_state.h: "an ordinary malloc pool is anonymous memory zram swaps out, turning the next
    # swapin into a major-fault storm" -- arenas still in RAM (trim step 0.05) and left to the kernel
    # fault back at the Send; mlocked ones (the artifact's way) never leave
    assert at("mzcache-swappable", 0.05)["restore_major_faults"] > 10_000
    assert at("mzcache", 0.05)["restore_major_faults"] == 0
    storm = req[(req["system"] == "mzcache-swappable") & (req["trim_step"] == 0.05)]
    calm = req[(req["system"] == "mzcache") & (req["trim_step"] == 0.05)]
    assert (storm["ttft_s"].to_numpy() > calm["ttft_s"].to_numpy()).all()
    # whatever lmkd killed, it killed for one of lmkd.cpp's reasons
    kills = pd.read_csv(out / "kills.csv")
    assert set(kills["by"]) <= {"lmkd"} and set(kills["reason"]) <= set(LMKD_REASONS)


def test_mzcache_engine_bypasses_the_page_cache():
    # mzCache's flash files are O_DIRECT (mzcache_kv_state.h): a round's trims write its chunks and
    # arenas and the Send reads them back without one page-cache page of those files
    scn = sc.load(str(SCENARIOS / "mzcache-ten-apps.toml"),
                  ['llm.engine="mzcache"', "llm.trim_step=0.25", "switch.rounds=1", "duration=330"])
    tr = sc.build(scn, device=device.load("galaxy-s25plus"))
    ops = tr["op"][tr["pid"] == sc.LLM_PID]
    assert (ops == Op.DIO_WRITE).sum() > 0 and (ops == Op.DIO_READ).sum() > 0
    res = Emulator(Config(mem="6G", zram="zstd:8G")).replay(tr)
    mz_files = res.files[res.files["path"].str.startswith("<mzcache:")]
    assert len(mz_files) > 0 and (mz_files["pages_added"] == 0).all(), mz_files
