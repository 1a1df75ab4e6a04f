"""Issue 44's corpus (tests/hardening/cases.py): every bad input gets exactly one stderr line
`kmemsim: ...` holding its expected fragment, exit 2, no traceback, nothing on stdout and nothing
written: each case runs in an empty directory of its own (its working directory too, so `-o ''`
writing "here" would show) that must still be empty after it. Cases that once crashed the core or
hung run as subprocesses of the real CLI, bounded at 60 s (a timeout fails the case as a hang, a
signal as a crash); the rest run in-process through click's CliRunner, the same code path."""
import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from hardening.cases import CASES, make_inputs
from kmemsim.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 60
BY_ID = {c.id: c for c in CASES}


def _fill(args, d, out):
    return [a.replace("{d}", d).replace("{out}", out) for a in args]


def _run_proc(case, d, out, env):
    """(exit code or 'hang', stdout, stderr, seconds) of the real command in a fresh process."""
    t = time.monotonic()

    def limit_files():                                         # in the child, before it runs
        resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))

    try:
        p = subprocess.run([sys.executable, "-m", "kmemsim.cli", *_fill(case.args, d, out)], capture_output=True,
                           text=True, env={**env, **case.env}, cwd=out, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
                           preexec_fn=limit_files if case.fsize else None)
    except subprocess.TimeoutExpired as e:
        return "hang", e.stdout or "", e.stderr or "", time.monotonic() - t
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, request):
    """The inputs, and every selected subprocess case run up front, three at a time."""
    chosen = {item.callspec.params.get("cid") for item in request.session.items if hasattr(item, "callspec")}
    d = str(tmp_path_factory.mktemp("inputs"))
    make_inputs(d)
    runs = tmp_path_factory.mktemp("runs")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               KMEMSIM_CACHE=str(tmp_path_factory.mktemp("cache")))
    env.pop("KMEMSIM_MAX_EVENTS", None)
    outs = {c.id: str(runs / c.id) for c in CASES}
    for o in outs.values():
        os.mkdir(o)
    procs = [c for c in CASES if c.proc and c.id in chosen]
    with ThreadPoolExecutor(3) as pool:
        results = dict(zip([c.id for c in procs], pool.map(lambda c: _run_proc(c, d, outs[c.id], env), procs)))
    return d, outs, results


def _check(case, code, stdout, stderr, out, d):
    assert code != "hang", f"{case.id}: still running after {TIMEOUT_S} s"
    assert not (isinstance(code, int) and code < 0), f"{case.id}: killed by signal {-code}: {stderr[-2000:]}"
    assert "Traceback" not in stderr, f"{case.id}: {stderr[-3000:]}"
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kmemsim: "), f"{case.id}: stderr {stderr[-2000:]!r}"
    want = case.expect.replace("{d}", d).replace("{out}", out)
    assert want in lines[0], f"{case.id}: expected {want!r} in {lines[0]!r}"
    assert code == 2, f"{case.id}: exit {code}"
    assert stdout == "", f"{case.id}: stdout {stdout[:500]!r}"
    assert os.listdir(out) == [], f"{case.id}: wrote {os.listdir(out)}"


def test_corpus_is_large_and_unique():
    assert len(CASES) >= 150
    assert len(BY_ID) == len(CASES)


@pytest.mark.parametrize("cid", [c.id for c in CASES])
def test_bad_input(corpus, cid, monkeypatch):
    d, outs, results = corpus
    case, out = BY_ID[cid], outs[cid]
    if case.proc:
        code, stdout, stderr, _ = results[cid]
    else:
        monkeypatch.chdir(out)
        monkeypatch.delenv("KMEMSIM_MAX_EVENTS", raising=False)
        for k, v in case.env.items():
            monkeypatch.setenv(k, v)
        r = CliRunner().invoke(main, _fill(case.args, d, out))
        code, stdout, stderr = r.exit_code, r.stdout, r.stderr
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            import traceback                                   # here: only to show what escaped
            stderr += "Traceback\n" + "".join(traceback.format_exception(r.exception))
    _check(case, code, stdout, stderr, out, d)


def test_inputs_are_what_they_claim(corpus):
    """The corpus's good inputs are good: its GGUF reads with the gguf library and works, its trace
    replays and its scenario builds (so each bad case fails for its own reason)."""
    import gguf                                                 # here: the reference reader
    d, _, _ = corpus
    r = gguf.GGUFReader(os.path.join(d, "ok.gguf"))
    assert len(r.tensors) == 1 + 2 * 9 + 1
    runner = CliRunner()
    res = runner.invoke(main, ["replay", os.path.join(d, "ok.parquet"), "--mem", "1G", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["counters"]["pgfault_count"] > 0
    for args in (["workload", "llama", os.path.join(d, "ok.gguf"), "--prompt", "4", "--decode", "1", "--ctx", "64"],
                 ["workload", "scenario", os.path.join(d, "ok.toml")]):
        out = os.path.join(d, "good.parquet")
        res = runner.invoke(main, args + ["-o", out])
        assert res.exit_code == 0, res.output
        os.unlink(out)
