"""A fuzzing harness over every loader (issue 44): hypothesis writes GGUF headers and metadata,
trace tables, scenario TOML and command-line numbers, and each goes through the real command
(click's CliRunner, in-process): it must succeed (exit 0) or say what is wrong on exactly one stderr
line `kmemsim: ...` with exit 2; anything else (a traceback, another exit code, more lines) fails.
Examples are bounded so the whole file runs in well under a minute; the event budget is kept small
(KMEMSIM_MAX_EVENTS) so that inputs that pass still finish quickly. The C core's own cases are in
test_fuzz_core.py (make asan runs them under the sanitizers)."""
import math
import os
import tempfile

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as Q, GGUFValueType as VT
from hypothesis import HealthCheck, event, given, settings, strategies as st

from hardening import inputs as I
from kmemsim.cli import main

# KMEMSIM_FUZZ_EXAMPLES=N fuzzes longer, with fresh random draws each run (make fuzz); by default
# each test draws the same 60 examples every time
LONG = int(os.environ.get("KMEMSIM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=LONG or 60, deadline=None, derandomize=not LONG, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def small_budget(monkeypatch):
    monkeypatch.setenv("KMEMSIM_MAX_EVENTS", "200000")


def one_line_or_success(args, where):
    """Run the command in an empty directory; exit 0, or exit 2 with one `kmemsim:` line and no
    output file."""
    with tempfile.TemporaryDirectory() as out:
        args = [a.replace("{out}", out) for a in args]
        r = CliRunner().invoke(main, args)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise AssertionError(f"{where}: {type(r.exception).__name__} escaped: {r.exception!r}") from r.exception
        if r.exit_code == 0:
            event(f"{where}: ok")
            return "ok"
        lines = r.stderr.splitlines()
        assert r.exit_code == 2, (where, r.exit_code, r.stderr[-1000:])
        assert len(lines) == 1 and lines[0].startswith("kmemsim: "), (where, r.stderr[-1000:])
        assert "Traceback" not in r.stderr
        assert os.listdir(out) == [], (where, os.listdir(out))
        event(f"{where}: refused")
        return lines[0]


# ---- GGUF headers and metadata ------------------------------------------------------------------

INT_TYPES = [VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64, VT.INT64]
RANGES = {VT.UINT8: (0, 255), VT.INT8: (-128, 127), VT.UINT16: (0, 65535), VT.INT16: (-32768, 32767),
          VT.UINT32: (0, 2**32 - 1), VT.INT32: (-2**31, 2**31 - 1), VT.UINT64: (0, 2**64 - 1),
          VT.INT64: (-2**63, 2**63 - 1)}
KEYS = ["llama.block_count", "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.attention.key_length", "llama.context_length", "llama.expert_count",
        "llama.expert_used_count", "general.alignment", "general.architecture", "tokenizer.ggml.bos_token_id"]


@st.composite
def kv_value(draw):
    vt = draw(st.sampled_from(INT_TYPES + [VT.STRING, VT.FLOAT32, VT.BOOL, VT.ARRAY]))
    if vt in RANGES:
        lo, hi = RANGES[vt]
        return vt, draw(st.one_of(st.integers(max(lo, 0), min(hi, 300)), st.integers(lo, hi),
                                   st.sampled_from([lo, hi, 0, 1])))
    if vt == VT.STRING:
        return vt, draw(st.text(max_size=12))
    if vt == VT.FLOAT32:
        return vt, draw(st.floats(width=32))
    if vt == VT.BOOL:
        return vt, draw(st.booleans())
    return vt, (VT.UINT32, draw(st.lists(st.integers(0, 2**32 - 1), max_size=4)))


@st.composite
def gguf_files(draw):
    kv, ts = I.shape(layers=draw(st.integers(1, 2)))
    for _ in range(draw(st.integers(0, 3))):                 # metadata values of any type and size
        vt, v = draw(kv_value())
        kv = I.replace_kv(kv, draw(st.sampled_from(KEYS)), vt, v)
    if draw(st.booleans()):                                   # tensors dropped, doubled, reshaped
        ts = [list(t) for t in ts]
        for _ in range(draw(st.integers(1, 3))):
            i = draw(st.integers(0, len(ts) - 1))
            what = draw(st.sampled_from(["drop", "dup", "dims", "type"]))
            if what == "drop":
                ts.pop(i)
            elif what == "dup":
                ts.append(list(ts[i]))
            elif what == "dims":
                ts[i][1] = tuple(draw(st.lists(st.sampled_from([0, 1, 32, 64, 300, 2**31, 2**40]), min_size=0,
                                               max_size=5)))
            else:
                ts[i][2] = draw(st.sampled_from([Q.F32, Q.F16, Q.Q8_0, Q.Q4_0, 40, 99]))
            if not ts:
                break
    version = draw(st.sampled_from([3, 3, 3, 2, 1, 4]))
    data = I.gguf_bytes(kv, ts, version=version)
    cut = draw(st.one_of(st.just(len(data)), st.integers(0, len(data))))
    return data[:cut]


@FUZZ
@given(gguf_files())
def test_gguf_loaders(data):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.gguf")
        with open(p, "wb") as f:
            f.write(data)
        one_line_or_success(["workload", "llama", p, "--prompt", "4", "--decode", "1", "--ctx", "64",
                             "-o", "{out}/t.parquet"], "workload llama")
        one_line_or_success(["compare", p, "--prompt", "4", "--decode", "1", "--ctx", "64", "--policy",
                             "stock", "-o", "{out}/cmp"], "compare")


# ---- trace tables -------------------------------------------------------------------------------

EDGES = [-(2**63), -1, 0, 1, 2**31 - 1, 2**31, 2**40, 2**40 + 1, 2**62, 2**63 - 1]


@st.composite
def trace_files(draw):
    """Parquet traces: sane rows with fields sent to the edges, and metadata that may lie."""
    rows = [list(r) for r in I.ok_rows(draw(st.sampled_from([1, 8, 64])))]
    for _ in range(draw(st.integers(0, 8))):
        rows.append([rows[-1][0] + draw(st.integers(0, 5)), 1, draw(st.integers(0, 17)), draw(st.integers(-1, 2)),
                     draw(st.integers(0, 70)), draw(st.integers(0, 70)), draw(st.integers(-2, 30)),
                     draw(st.integers(0, 300))])
    for _ in range(draw(st.integers(0, 2))):                  # a field anywhere in its column's range
        r, c = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, 7))
        rows[r][c] = draw(st.sampled_from(EDGES))
    dts = list(I.COLS.values())
    cols = {}
    for c, (k, dt) in enumerate(I.COLS.items()):
        info = np.iinfo(dts[c])
        cols[k] = np.array([min(max(int(r[c]), info.min), info.max) for r in rows], dt)
    meta = {}
    if draw(st.booleans()):
        meta["files"] = draw(st.lists(st.fixed_dictionaries({
            "id": st.one_of(st.integers(-1, 3), st.text(max_size=2)),
            "path": st.one_of(st.text(max_size=5), st.integers()),
            "pages": st.one_of(st.integers(0, 100), st.sampled_from(EDGES), st.floats())}), max_size=3))
    if draw(st.booleans()):
        meta["phases"] = draw(st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3))
    if draw(st.booleans()):
        meta["schema_version"] = draw(st.sampled_from([1, 1, 2, "1", None]))
    return rows, cols, meta


@FUZZ
@given(trace_files(), st.sampled_from(["64M", "1G", "4K", "1T"]))
def test_trace_loaders(trace, mem):
    rows, cols, meta = trace
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.parquet")
        I.write_trace(p, [], meta=meta, cols=cols)          # the columns, each clamped to its type
        one_line_or_success(["replay", p, "--mem", mem, "--zram", "lz4:64M"], "replay")
        one_line_or_success(["trace", "info", p], "trace info")


# ---- scenario TOML ------------------------------------------------------------------------------

def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


NUM = st.one_of(st.integers(-5, 100), st.floats(allow_nan=True, allow_infinity=True),
                st.sampled_from([0, 0.0, 1e-9, 1e15, 2592001, 10**30]))


@st.composite
def scenario_files(draw):
    switch = {"pattern": draw(st.sampled_from(["random", "markov", "gaussian", "round", "x"]))}
    for k in draw(st.lists(st.sampled_from(["dwell", "gap", "start", "stay", "sigma", "center", "rounds",
                                            "period", "visit", "matrix", "orders"]), unique=True, max_size=4)):
        switch[k] = {"matrix": draw(st.lists(st.lists(NUM, min_size=2, max_size=2), min_size=2, max_size=2)),
                     "orders": [["chat", "maps"]], "rounds": draw(st.integers(-1, 10**12)),
                     "dwell": draw(st.one_of(NUM, st.lists(NUM, min_size=2, max_size=2)))}.get(k, draw(NUM))
    if switch["pattern"] == "round" and "orders" not in switch:
        switch["orders"] = [["chat", "maps"]]
    llm = ""
    if draw(st.booleans()):
        rq = {"arrival": draw(st.sampled_from(["poisson", "times", "calls", "round"]))}
        for k in draw(st.lists(st.sampled_from(["mean_interval", "count", "times", "calls", "sigma"]), unique=True,
                               max_size=2)):
            rq[k] = {"times": draw(st.lists(NUM, max_size=3)), "count": draw(st.integers(-2, 10**6)),
                     "calls": [[draw(NUM), "s0"]]}.get(k, draw(NUM))
        keys = {k: draw(st.one_of(st.integers(-2, 2**40), NUM)) for k in draw(st.lists(
            st.sampled_from(["batch", "ubatch", "paths", "start", "sessions"]), unique=True, max_size=2))}
        llm = I.llm(keys="\n".join(f"{k} = {toml_value(v)}" for k, v in keys.items()),
                    requests="\n".join(f"{k} = {toml_value(v)}" for k, v in rq.items()))
    app = "\n".join(f"{k} = {toml_value(draw(NUM))}" for k in draw(st.lists(
        st.sampled_from(["scale", "launch"]), unique=True, max_size=2)))
    text = I.scenario(duration=toml_value(draw(st.one_of(st.just(60.0), NUM))),
                      switch="\n".join(f"{k} = {toml_value(v)}" for k, v in switch.items()), llm=llm, app=app)
    return text.encode("utf-8") if draw(st.integers(0, 9)) else text.encode("utf-8")[:draw(st.integers(0, 200))]


@FUZZ
@given(scenario_files())
def test_scenario_loader(text):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "s.toml")
        with open(p, "wb") as f:
            f.write(text)
        one_line_or_success(["workload", "scenario", p, "--plan"], "scenario --plan")
        one_line_or_success(["workload", "scenario", p, "-o", "{out}/t.parquet"], "scenario")


# ---- command-line numbers -------------------------------------------------------------------------

NUMBER_TEXT = st.one_of(
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "", " ", "0x10", "1_000", "٣", "9" * 400]),
    st.tuples(st.sampled_from(["0", "1", "1.5", "-1", "4096", "99999999999", "1e3", "18446744073709551616"]),
              st.sampled_from(["", "K", "M", "G", "T", "KiB", "GB", "%", "P", "k"])).map("".join))


@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    I.write_trace(str(d / "ok.parquet"), I.ok_rows())
    kv, ts = I.shape()
    I.write_gguf(str(d / "ok.gguf"), kv, ts)
    return str(d)


@FUZZ
@given(st.sampled_from(["--mem", "--memcg-limit", "--zram", "--swappiness"]), NUMBER_TEXT)
def test_replay_numbers(small_inputs, opt, value):
    v = f"lz4:{value}" if opt == "--zram" else value
    args = ["replay", os.path.join(small_inputs, "ok.parquet"), opt, v]
    if opt != "--mem":
        args += ["--mem", "1G"]
    one_line_or_success(args, f"replay {opt} {v!r}")


@FUZZ
@given(st.sampled_from(["--prompt", "--decode", "--ctx", "--batch", "--ubatch", "--seqs", "--requests", "--pid",
                        "--seed", "--moe-routing"]), NUMBER_TEXT)
def test_workload_numbers(small_inputs, opt, value):
    args = ["workload", "llama", os.path.join(small_inputs, "ok.gguf"), "--prompt", "4", "--decode", "1",
            "--ctx", "64", "-o", "{out}/t.parquet", opt, value if opt != "--moe-routing" else f"zipf:{value}"]
    one_line_or_success(args, f"workload llama {opt} {value!r}")


@FUZZ
@given(st.sampled_from(["--mem-limit", "--stats-flush-ms", "--stats-flush-phase-ms", "--threads", "--zram"]),
       NUMBER_TEXT)
def test_predict_numbers_refused_or_run(small_inputs, opt, value):
    """predict's numbers: the tiny model has no tokenizer, so a run that gets past the door ends in
    llama.cpp's own refusal, one line too."""
    args = ["predict", os.path.join(small_inputs, "ok.gguf"), "--prompt", "4", "--decode", "1", "--ctx", "64",
            "--mem-limit", "1G", opt, value if opt != "--zram" else f"lz4:{value}"]
    one_line_or_success(args, f"predict {opt} {value!r}")
