"""Multitasking scenarios (kmemsim/workload/scenario.py, docs/scenarios.md). Each statistical check names the
paper and table it reproduces."""
from __future__ import annotations

import os
import tomllib

import numpy as np
import pytest

from kmemsim.workload import scenario as sc
from kmemsim.core.errors import InputError
from kmemsim.core.trace import CLASS_SHIFT, Op, PageClass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCEN = os.path.join(ROOT, "workloads", "scenarios")
BUNDLED = ["small", "mzcache-ten-apps", "llms-sessions", "speculative", "kv-prealloc", "contention", "dynakv-decoding"]


def write(tmp_path, text, name="s.toml"):
    """A scenario in tmp_path that finds the bundled app definitions."""
    p = tmp_path / name
    p.write_text(f'apps_dir = "{os.path.join(ROOT, "workloads", "apps")}"\n' + text)
    return str(p)


APPS3 = """
seed = 5
duration = 200
[apps]
messenger = { from = "messenger" }
music = { from = "music" }
gallery = { from = "gallery" }
"""

LLM_MIN = """
[llm]
model = { preset = "Qwen3-0.6B", type = "q4_0", layers = 1 }
ctx = 256
decode = 4
[[llm.session]]
delta = [8, 16]
"""


# ---------------------------------------------------------------------------------------------
# Parsing: every bundled file is valid.

@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scenarios_parse_and_plan(name):
    s = sc.load(os.path.join(SCEN, name + ".toml"))
    p = sc.plan(s)
    assert p.slots, name
    assert all(0 <= x.t0 < x.t1 <= s.duration for x in p.slots)
    assert all(a.t1 <= b.t0 for a, b in zip(p.slots, p.slots[1:])), "slots overlap"


# ---------------------------------------------------------------------------------------------
# Switch patterns: LLMS (arXiv 2403.11805) §5.1 / §2.6 — Random (uniform), Markov (first-order,
# favours the recently used), Gaussian (w.r.t. delta length: moderate contexts likeliest).

def test_random_pattern_is_uniform():
    # LLMS §2.6 "Random": every context equally likely. 60,000 draws over 6 items: each count
    # within 3% of 10,000 (the binomial sd is ~91, so 3% is > 3 sd) and a chi-square test passes.
    seq = sc.sequence("random", 6, 60000, seed=11)
    counts = np.bincount(seq, minlength=6)
    assert np.all(np.abs(counts - 10000) < 300), counts
    chi2 = ((counts - 10000) ** 2 / 10000).sum()
    assert chi2 < 20.5, chi2          # chi-square(5) 99.9th percentile


def test_markov_pattern_follows_its_transition_matrix():
    # LLMS §2.6 "Markov": first-order, favours the recently used context. With an explicit matrix the
    # empirical transition frequencies match it; the diagonal (stay on the last-used item) dominates.
    M = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.25, 0.25, 0.5]])
    seq = sc.sequence("markov", 3, 60000, seed=3, matrix=M.tolist())
    T = np.zeros((3, 3))
    np.add.at(T, (seq[:-1], seq[1:]), 1)
    T /= T.sum(1, keepdims=True)
    assert np.abs(T - M).max() < 0.02, T
    # Default matrix (no `matrix` key): P(stay) = stay, the rest uniform; the most recent item is the
    # likeliest next one from every state.
    seq = sc.sequence("markov", 5, 50000, seed=4, stay=0.6)
    same = np.mean(seq[1:] == seq[:-1])
    assert abs(same - 0.6) < 0.015, same
    T = np.zeros((5, 5))
    np.add.at(T, (seq[:-1], seq[1:]), 1)
    assert np.all(T.argmax(1) == np.arange(5))
    # versus Random, the Markov chain repeats the last item far more often (1/5 for uniform)
    r = sc.sequence("random", 5, 50000, seed=4)
    assert abs(np.mean(r[1:] == r[:-1]) - 0.2) < 0.015


def test_gaussian_pattern_favours_moderate_sizes():
    # LLMS §2.6 "Gaussian" w.r.t. delta length, over the six Table 3 tasks: P ∝ exp(-(x-mean)^2/2sd^2)
    # on each task's mean delta length, so moderate tasks (agnews, cnn_dailymail, wmt17) are drawn
    # more often than the extremes (sst2, xsum).
    tasks = list(sc.TASKS)
    x = np.array([(a + b) / 2 for a, b in sc.TASKS.values()])
    seq = sc.sequence("gaussian", len(tasks), 60000, seed=9, sizes=x)
    freq = np.bincount(seq, minlength=len(tasks)) / len(seq)
    w = np.exp(-((x - x.mean()) ** 2) / (2 * x.std() ** 2))
    assert np.abs(freq - w / w.sum()).max() < 0.01, freq
    mid, ext = tasks.index("cnn_dailymail"), tasks.index("xsum")
    assert freq[mid] > 2 * freq[ext]


def test_poisson_arrivals_mean_300_s(tmp_path):
    # LLMS §5.1: "call times ... Poisson, average rate one request per 5 minutes". Over ~3000
    # requests the mean inter-arrival is 300 s within 4% (sd of the mean is 300/sqrt(3000) = 5.5 s)
    # and the coefficient of variation is 1 (exponential gaps).
    p = write(tmp_path, "seed = 1\nduration = 900000\n" + LLM_MIN
              + "[llm.requests]\narrival = \"poisson\"\nmean_interval = 300\n")
    plan = sc.plan(sc.load(p))
    t = np.array([q.t for q in plan.requests])
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert len(gaps) > 2800
    assert abs(gaps.mean() - 300) < 12, gaps.mean()
    assert abs(gaps.std() / gaps.mean() - 1) < 0.06
    # delta lengths inside the session's range (LLMS Table 3 style [low, high])
    assert all(8 <= q.delta <= 16 for q in plan.requests)


def test_delta_lengths_follow_llms_table3(tmp_path):
    # LLMS Table 3: xsum 1k-2k, sst2 0.01k-0.1k tokens per call.
    p = write(tmp_path, "seed = 2\nduration = 300000\n" + """
[llm]
model = { preset = "Qwen3-0.6B", type = "q4_0", layers = 1 }
ctx = 4096
[[llm.session]]
task = "xsum"
[[llm.session]]
task = "sst2"
[llm.requests]
mean_interval = 300
""")
    s = sc.load(p)
    reqs = sc.plan(s).requests
    for i, (lo, hi) in enumerate([(1000, 2000), (10, 100)]):
        d = np.array([q.delta for q in reqs if q.session == i])
        assert len(d) > 100 and d.min() >= lo and d.max() <= hi
        assert abs(d.mean() - (lo + hi) / 2) < 0.08 * (hi - lo)


# ---------------------------------------------------------------------------------------------
# mzCache (MobiCom 2026) Fig 15 / scripts/mzcache/record_demo_rounds.sh: ten apps per round, dwell
# 20 s (PUBG 30 s), a 5 s `visit` of the LLM app, return + Send, rounds paced to 275 s.

def test_ten_app_round_period_and_dwell():
    s = sc.load(os.path.join(SCEN, "mzcache-ten-apps.toml"))
    p = sc.plan(s)
    assert len(p.rounds) == 10                               # the paper's run: 10 rounds
    assert np.allclose(np.diff(p.rounds), 275.0)             # ROUND_PERIOD
    apps = [x for x in p.slots if x.app != "llm"]
    assert len(apps) == 100                                  # ten apps per round
    for x in apps:
        assert x.t1 - x.t0 == pytest.approx(30.0 if x.app == "pubg" else 20.0)
    r1 = [x.app for x in p.slots if p.rounds[0] <= x.t0 < p.rounds[1]]
    # R1 = "chrome tiktok snow youtube visit pubg facebook instagram camera roblox netflix" + return
    assert r1 == ["chrome", "tiktok", "snow", "youtube", "llm", "pubg", "facebook", "instagram",
                  "camera", "roblox", "netflix", "llm"]
    visits = [x for x in p.slots if x.app == "llm" and not x.request]
    assert all(x.t1 - x.t0 == pytest.approx(5.0) for x in visits)        # VISIT_S
    assert len(p.requests) == 10                                          # one Send per round
    assert {x.app for x in apps} == {"instagram", "facebook", "youtube", "tiktok", "netflix",
                                     "roblox", "pubg", "camera", "snow", "chrome"}


# ---------------------------------------------------------------------------------------------
# The app side of the trace.

def app_only(tmp_path, extra=""):
    return sc.load(write(tmp_path, APPS3 + """
[switch]
pattern = "markov"
dwell = [5, 15]
prelaunch = ["music"]
[[event]]
t = 100
action = "kill"
app = "gallery"
""" + extra))


def test_apps_touch_memory_only_in_the_foreground(tmp_path):
    s = app_only(tmp_path)
    p = sc.plan(s)
    tr = sc.build(s)
    c = tr.cols
    names = {x["pid"]: x["name"] for x in tr.meta["processes"]}
    key_of = {a.name: k for k, a in s.apps.items()}
    acc = np.isin(c["op"], [Op.READ, Op.WRITE])
    t = c["t"][acc] / 1e9
    pid = c["pid"][acc]
    for i in range(len(t)):
        k = key_of[names[int(pid[i])]]
        fg = [x for x in p.slots if x.app == k and x.t0 - 1e-9 <= t[i] <= x.t1]
        launch = s.apps[k].launch
        pre = k in s.switch["prelaunch"] and t[i] <= 2 + launch
        assert fg or pre, (k, t[i])
    # the killed app exits, and comes back with a new pid when it is next switched to
    exits = c["pid"][c["op"] == Op.PROC_EXIT]
    assert len(exits) == 1
    starts = c["pid"][c["op"] == Op.PROC_START]
    assert len(starts) == len(set(starts.tolist()))
    # one page cache per path: the framework file shared by all apps is one file
    paths = [f["path"] for f in tr.meta["files"]]
    assert len(paths) == len(set(paths))
    assert any("boot-framework" in x for x in paths)
    # anonymous regions carry their PageClass
    mm = (c["op"] == Op.MMAP) & (c["arg"] == -1)
    assert np.all((c["flags"][mm] >> CLASS_SHIFT) == PageClass.HEAP)


def test_oom_score_adj_follows_the_foreground(tmp_path):
    # Android ProcessList: foreground 0, perceptible 200 (music keeps playing), previous 700,
    # cached 900+; the adj changes are SET_OOM_ADJ events on the app's pid.
    s = app_only(tmp_path)
    tr = sc.build(s)
    c = tr.cols
    ev = c["op"] == Op.SET_OOM_ADJ
    adj = {}
    for pid, v in zip(c["pid"][ev], c["arg"][ev]):
        adj.setdefault(int(pid), set()).add(int(v))
    music = next(x["pid"] for x in tr.meta["processes"] if x["name"] == "Music")
    assert adj[music] <= {0, 200}
    others = set().union(*(v for k, v in adj.items() if k != music))
    assert {0, 700} <= others and any(v >= 900 for v in others)
    start_adj = c["arg"][c["op"] == Op.PROC_START]
    assert np.all(start_adj == 0)          # launched into the foreground


def test_same_file_same_trace_apps(tmp_path):
    a = sc.build(app_only(tmp_path))
    b = sc.build(app_only(tmp_path))
    for k in a.cols:
        assert np.array_equal(a.cols[k], b.cols[k]), k
    assert a.meta == b.meta
    c = sc.build(sc.load(write(tmp_path, APPS3.replace("seed = 5", "seed = 6")
                               + "[switch]\npattern = \"markov\"\ndwell = [5, 15]\n")))
    assert len(c) != len(a) or not np.array_equal(c.cols["t"], a.cols["t"])


def test_set_override(tmp_path):
    p = os.path.join(SCEN, "speculative.toml")
    assert sc.load(p).llm.paths == 4
    assert sc.load(p, ["llm.paths=8"]).llm.paths == 8
    with pytest.raises(InputError, match="llm.paths"):
        sc.load(p, ["llm.paths=0"])


# ---------------------------------------------------------------------------------------------
# The LLM side (kmemsim.workload.llama).

def test_same_file_same_trace_small():
    a = sc.build(sc.load(os.path.join(SCEN, "small.toml")))
    b = sc.build(sc.load(os.path.join(SCEN, "small.toml")))
    assert len(a) == len(b) and len(a) > 0
    for k in a.cols:
        assert np.array_equal(a.cols[k], b.cols[k]), k
    assert a.meta == b.meta
    ph = set(a.meta["phases"])
    assert "request 0 session chat" in ph and "request 1 session chat" in ph
    assert sc.LLM_PID in {x["pid"] for x in a.meta["processes"]}
    # kmemsim.engine.time.serial charges the LLM's steps their matmuls (MACs per token row from the session), as
    # the trace's own clock does; a scenario without them would time its prompts by bytes alone
    from kmemsim.engine.time import serial as timing
    _, occ = timing.split_phases(a)
    steps = occ[occ["kind"].isin(["prefill", "decode"])]
    assert len(steps) and (steps["pid"] == sc.LLM_PID).all() and (steps["macs_per_token"] > 0).all()


def kv_anon_bytes(tr):
    c = tr.cols
    mm = (c["op"] == Op.MMAP) & (c["arg"] == -1)
    cls = c["flags"][mm] >> CLASS_SHIFT
    kv = np.isin(cls, [PageClass.KV_F16, PageClass.KV_Q8])
    return int(c["npages"][mm][kv].sum()) * 4096


def test_speculative_paths_scale_kv(tmp_path):
    # The thesis (speculative decoding with multiple candidate paths): N paths = N KV sequences, so
    # the anonymous KV bytes scale with N.
    base = write(tmp_path, "seed = 1\nduration = 60\n" + LLM_MIN
                 + "[llm.requests]\narrival = \"times\"\ntimes = [1]\n")
    kv = {n: kv_anon_bytes(sc.build(sc.load(base, [f"llm.paths={n}"]))) for n in (1, 2, 4, 8)}
    assert kv[1] > 0
    for n in (2, 4, 8):
        assert kv[n] == pytest.approx(n * kv[1], rel=0.02), kv


# ---------------------------------------------------------------------------------------------
# Bad input: one line, exit 2.

BAD = [
    ("[switch]\npattern = \"zipf\"\n", "switch.pattern"),
    ("[apps.x]\nanon = [{ name = \"h\", mb = -5 }]\n", "mb"),
    ("[llm]\nctx = 512\n", "llm.model"),
    ("[llm]\nmodel = { path = \"nope.gguf\" }\nctx = 512\n", "llm.model.path"),
    ("[switch]\ndwel = 5\n", "switch.dwel"),
    ("[switch]\npattern = \"round\"\n", "switch.orders"),
    ("[switch]\napps = [\"ghost\"]\n", "ghost"),
    ("duration = -1\n", "duration"),
]


@pytest.mark.parametrize("text,key", BAD)
def test_bad_scenario_one_line_exit_2(tmp_path, text, key):
    from click.testing import CliRunner
    from kmemsim.cli import main
    base = APPS3 if "duration" not in text else APPS3.replace("duration = 200\n", "")
    p = write(tmp_path, base + text if not text.startswith("duration") else text + base)
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        sc.load(p)
    out = str(tmp_path / "o.parquet")
    r = CliRunner().invoke(main, ["workload", "scenario", p, "-o", out])
    assert r.exit_code == 2, r.output
    err = r.stderr if hasattr(r, "stderr") else r.output
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("kmemsim: ") and key.split(".")[-1] in lines[0]
    assert p in lines[0]                    # names the file
    assert not os.path.exists(out)


def test_not_toml_exit_2(tmp_path):
    import subprocess
    import sys
    p = tmp_path / "bad.toml"
    p.write_text("seed = = 3\n")
    r = subprocess.run([sys.executable, "-m", "kmemsim.cli", "workload", "scenario", str(p),
                        "-o", str(tmp_path / "o.parquet")], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "not valid TOML" in r.stderr and str(p) in r.stderr
