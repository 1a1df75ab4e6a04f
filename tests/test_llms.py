"""LLMS's context service (kmemsim.engine.managers.llms) against the paper (arXiv 2403.11805;
../shared/reference/seed-systems.md §2): tolerance-aware levels (§3.2, Eqs. 2-3), the
swapping-recompute split (§3.3, Eq. 4) against brute force, the layer pipeline against the pipeline
time model, LCTRU and ahead-of-time swap-out (§3.4), and the baselines' accounting."""
import itertools

import numpy as np
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.engine.managers import llms
from kmemsim.engine.time import device

RAW = {
    "name": "hand", "memory": {"ram": "8G", "available": "4G"}, "kernel": {"zram": "lz4:1G"},
    "storage": {"io_kb": [4, 4096], "latency_us": [100, 100], "bandwidth_gbps": [1.0, 1.0]},
    "zram": {"compress_gbps": {"lz4": 1.0}, "decompress_gbps": {"lz4": 1.0}, "zero_page_us": 1.0},
    "reclaim": {"scan_us_per_page": 0.5}, "compute": {"weight_gbps": 10.0, "matmul_gmac_s": 100.0},
    "gpu": {"weight_gbps": 100.0, "gmac_s": 2000.0},
}
# a small model: 4 layers, 1024 K+V elements per token per layer: an INT8 chunk is 64 KiB
SHAPE = llms.LlmShape("toy", n_layer=4, kv_elems=1024, macs_per_token=1e9, weight_bytes=1e9, max_ctx=256, n_embd=512)


def hand():
    return device.parse(RAW, "hand.toml")


def test_levels_keep_half_the_bits_and_the_densest_chunks_whole():
    # Eq. 3: the bands hold the average ratio at ratio_global (50% of INT8's bits); Eq. 2: the
    # densest chunks get the most bits. Sinks-like densities: a few chunks carry most of it.
    rng = np.random.default_rng(0)
    d = rng.lognormal(0, 1, 96)
    d[:3] += 50
    lv = llms.assign_levels(d)
    assert abs(llms.LEVELS[lv].mean() - 0.5) <= 0.25 / len(d) + 1e-9
    assert (lv[:3] == 0).all()
    # ranks decide: a denser chunk never has fewer bits than a sparser one
    order = np.argsort(-d)
    assert (np.diff(lv[order]) >= 0).all()


@pytest.mark.parametrize("seed", range(12))
def test_the_lp_split_equals_brute_force(seed):
    # Eq. 4 solved by linear programming (scipy linprog, then the best whole-number point around it)
    # against every whole-number split, on small cases with varied costs
    rng = np.random.default_rng(seed)
    costs = llms.Costs(io_s_per_byte=float(rng.uniform(1e-10, 5e-9)), pass_s=float(rng.uniform(0, 0.05)),
                       gmac_s=float(rng.uniform(200, 5000)), shape=SHAPE)
    counts = rng.integers(0, 6, 3)
    sizes = SHAPE.chunk_bytes(1.0) * llms.LEVELS
    n_ctx = int(rng.integers(16, 256))
    x, d = llms.plan_split(counts, sizes, costs, n_ctx)
    xb, db = llms.brute_split(counts, sizes, costs, n_ctx)
    assert d == pytest.approx(db, rel=1e-12, abs=1e-15), (x, xb)
    assert (x <= counts).all() and (x >= 0).all()


@pytest.mark.parametrize("read,recompute,write", [(4e6, 0, 0), (0, 7, 0), (3e6, 5, 0), (1e6, 40, 2e6), (9e6, 1, 1e6)])
def test_the_layer_pipeline_in_closed_form_is_the_pipeline_models(read, recompute, write):
    # §3.3: the I/O thread reads layer l+1 while layer l is recomputed, which needs layer l's K/V;
    # the closed form used per call equals the pipeline time model's critical path
    dev = hand()
    costs = llms.costs_of(dev, SHAPE)
    assert llms.pipeline_seconds(costs, read, recompute, 200, write) == pytest.approx(
        llms.pipeline_model(dev, costs, read, recompute, 200, write), rel=1e-9)


def test_lctru_evicts_the_least_compressed_first_then_the_least_recently_used():
    # §3.4: Q_LCTRU is one LRU sub-queue per compression level, the heaviest (8/8) popped first
    svc = llms.service("llms", 1e12, SHAPE, hand(), lambda k, t, n: np.ones(n))
    level = np.array([2, 0, 1, 0, 2])
    last = np.array([1, 5, 2, 3, 0])
    assert list(svc.order(level, last)) == [3, 1, 2, 4, 0]
    lru = llms.service("llms-no-lifecycle", 1e12, SHAPE, hand(), lambda k, t, n: np.ones(n))
    assert list(lru.order(level, last)) == [4, 0, 2, 3, 1]


def budgeted(name, budget_chunks, calls):
    svc = llms.service(name, budget_chunks * SHAPE.chunk_bytes(1.0), SHAPE, hand(), lambda k, t, n: np.linspace(2, 1, n))
    out = []
    for k, n in calls:
        out.append(svc.call(k, n))
        assert svc.resident_bytes() <= svc.budget + 1e-6, name     # the budget holds after every call
    return svc, np.array(out)


CALLS = [(0, 160), (1, 160), (2, 160), (0, 16), (1, 16), (2, 16), (0, 32)] * 3


@pytest.mark.parametrize("name", list(llms.SYSTEMS))
def test_every_system_keeps_its_budget_and_a_resident_context_switches_free(name):
    svc, lat = budgeted(name, 40, CALLS)
    assert np.isfinite(lat).all() and (lat >= 0).all()
    # the first call of a context finds nothing to load
    assert lat[0] == 0.0
    # a call to the context just used needs nothing
    again = svc.call(0, 0), svc.call(0, 0)
    assert again[1] == 0.0


def test_ahead_of_time_swap_out_makes_reclaim_free():
    # §3.4: modified chunks are written at the end of every call, so the next switch's reclaim only
    # drops them; without it (and in vLLM-S) the switch writes the victims first
    for name, writes in (("llms", False), ("llms-no-lifecycle", True), ("vllm-sq", True)):
        svc, _ = budgeted(name, 40, CALLS[:3])
        c = svc.ctxs[0]
        assert c.resident.any()
        assert svc.evict(svc.resident_bytes(), skip=2) > 0 if writes else svc.evict(svc.resident_bytes(), skip=2) == 0


def test_lmk_recomputes_a_killed_context_from_its_text():
    # LMK: the least recently used context is killed whole; calling it again recomputes every chunk
    svc, lat = budgeted("lmk", 24, [(0, 160), (1, 160), (0, 16)])
    n = -(-160 // 16)
    assert lat[2] == pytest.approx(llms.pipeline_seconds(svc.costs, 0, n, 160))


def test_a_context_slides_past_the_window():
    # §4: a sliding window over the context: the oldest chunks go, the length stays at max_ctx
    svc = llms.service("vllm-s", 1e12, SHAPE, hand())
    for _ in range(5):
        svc.call(0, 100)
    c = svc.ctxs[0]
    assert c.tokens <= SHAPE.max_ctx and len(c.level) == -(-c.tokens // 16)


def test_experiment_quick(tmp_path):
    r = CliRunner().invoke(main, ["experiment", "llms-switch", "--quick", "--set", "hours=4", "-o", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    import pandas as pd
    df = pd.read_csv(tmp_path / "x" / "summary.csv")
    assert {"device", "pattern", "contexts", "budget_bytes", "system", "switch_latency_s"} <= set(df.columns)
    assert set(df["system"]) == set(llms.SYSTEMS)
    assert (tmp_path / "x" / "paper.csv").exists()


@pytest.mark.parametrize("args,msg", [
    (["--set", "contexts=0"], "contexts"),
    (["--set", "budget=lots"], "budget"),
    (["--set", "patterns=zigzag"], "unknown pattern"),
    (["--set", "models=GPT-5"], "unknown model"),
    (["--set", "chunk=0"], "chunk size"),
    (["--set", "ratio=1.5"], "outside (0, 1]"),
    (["--set", "ratio=0"], "outside (0, 1]"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["experiment", "llms-switch", "--quick", *args, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_the_service_inside_a_phone_faults_what_its_own_accounting_calls_resident(tmp_path):
    # What LLMS's accounting cannot see: its resident chunks are anonymous memory of its process, and
    # with apps beside it under a tight memory the kernel swaps some of them to zram
    # (shrink_folio_list() -> add_to_swap()); a call whose context LLMS counts as resident (its own
    # switching latency 0) then faults them back (do_swap_page()) before it can run.
    from kmemsim.core.data import SCENARIOS
    from kmemsim.engine.kernel import Config, Emulator
    from kmemsim.engine.time import serial
    from kmemsim.workload import scenario as sc
    dev = device.load("xiaomi-14")
    scn = sc.load(str(SCENARIOS / "llms-sessions.toml"), ['llm.engine="llms"', "duration=5400"])
    engines = []
    tr, occ = serial.split_phases(sc.build(scn, device=dev, engines=engines))
    calls = engines[0].calls
    assert len(calls) >= 10 and all(c["llms_s"] == 0 for c in calls)     # all within LLMS's 3 GiB budget
    res = Emulator(Config(**dict(dev.config_kwargs(), mem="4G"))).replay(tr)
    pp = res.per_phase.reset_index(drop=True).iloc[:len(occ)].set_axis(occ.index)
    sw = occ[(occ["pid"] == sc.LLM_PID) & occ["name"].str.endswith(" switch")].index
    assert len(sw) == len(calls)
    assert pp.loc[sw, "kv_swapin_pages"].sum() > 0       # the kernel took chunks LLMS counts resident
    # and with room for everything, the kernel takes none of them
    roomy = Emulator(Config(**dict(dev.config_kwargs(), mem="12G"))).replay(tr)
    rp = roomy.per_phase.reset_index(drop=True).iloc[:len(occ)].set_axis(occ.index)
    assert rp.loc[sw, "kv_swapin_pages"].sum() == 0


@pytest.mark.parametrize("name,cols", [
    ("llms-capacity", {"budget_bytes", "bound_s", "system", "max_contexts"}),
    ("llms-phone", {"mem_bytes", "service", "llms_s", "kernel_s"}),
])
def test_the_other_llms_experiments_quick(tmp_path, name, cols):
    import pandas as pd
    r = CliRunner().invoke(main, ["experiment", name, "--quick", "-o", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "x" / "summary.csv")
    assert cols <= set(df.columns) and len(df)
    assert (tmp_path / "x" / "paper.csv").exists() and (tmp_path / "x" / "report.md").exists()
    if name == "llms-capacity":
        # Fig 10: LLMS holds more contexts within the bound than any baseline
        caps = df.set_index("system")["max_contexts"]
        assert caps["llms"] > caps.drop("llms").max()


def test_capacity_interpolates_between_whole_contexts():
    from kmemsim.experiment.llms_capacity import capacity
    lat = {1: 0.001, 2: 0.004, 3: 0.008, 4: 0.012, 5: 0.02}
    f = lambda n: lat.get(n, 1.0)
    assert capacity(f, 0.010) == pytest.approx(3.5)       # 3 within 10 ms; halfway to 4's 12 ms
    assert capacity(f, 0.0005) == 0.0


def test_a_call_to_a_deleted_context_is_one_line(tmp_path):
    # LLMS Table 1: delLLMCtx ends a context; a callLLM to it afterwards is bad input
    f = tmp_path / "s.toml"
    f.write_text("""name = "del"
duration = 600
seed = 1
[llm]
model = { preset = "Llama-2-7B", type = "q4_0", layers = 2 }
ctx = 4096
engine = "llms"
[[llm.session]]
name = "a"
delta = [100, 200]
deleted = 300
[llm.requests]
arrival = "calls"
calls = [[10, "a"], [400, "a"]]
""")
    r = CliRunner().invoke(main, ["workload", "scenario", str(f), "-o", str(tmp_path / "t.parquet")])
    assert r.exit_code == 2 and "deleted at 300" in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "t.parquet").exists()


def test_a_deleted_context_leaves_the_service_and_the_page_cache():
    # delLLMCtx: LLMS drops the context; its arena is unmapped and its chunk file's pages go
    from kmemsim.core.trace import Op
    from kmemsim.workload import scenario as sc
    import tomllib
    scn = sc.parse(tomllib.loads("""name = "del"
duration = 900
seed = 1
[llm]
model = { preset = "Llama-2-7B", type = "q4_0", layers = 2 }
ctx = 4096
engine = "llms"
[[llm.session]]
name = "a"
delta = [200, 300]
deleted = 300
[[llm.session]]
name = "b"
delta = [200, 300]
[llm.requests]
arrival = "calls"
calls = [[10, "a"], [100, "b"], [200, "a"], [400, "b"]]
"""), "del.toml")
    engines = []
    tr = sc.build(scn, device=device.load("xiaomi-14"), engines=engines)
    proc = engines[0]
    assert 0 not in proc.svc.ctxs and 1 in proc.svc.ctxs
    ops = tr["op"][tr["pid"] == sc.LLM_PID]
    assert (ops == Op.FADVISE).sum() == 1 and (ops == Op.MUNMAP).sum() >= 2
