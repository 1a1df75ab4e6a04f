"""`kmemsim sweep` on Dask (issue 41): a point's row is the single `compare` run's, on a LocalCluster
and on a scheduler with two workers started as processes of their own; a rerun resumes without
recomputing finished points, also after a kill -9; bad grids are one line, exit 2, nothing written;
the paper experiments split over the same runner write what their serial run writes."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.report.compare import COLUMNS

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "workloads" / "scenarios" / "kv-prealloc-small.toml"
KMEMSIM = [sys.executable, "-m", "kmemsim.cli"]
METRICS = [c for c in COLUMNS if c != "policy"]


def grid(path, axes, options='zram = "zstd:1G"', extra=""):
    path.write_text(f'workload = "{SMALL}"\n{extra}\n[options]\n{options}\n[axes]\n{axes}\n')
    return path


def journal(out):
    return [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """2 policies x 2 memory sizes on a LocalCluster of two worker processes."""
    d = tmp_path_factory.mktemp("sweep")
    g = grid(d / "g.toml", 'policy = ["stock", "is"]\nmem = ["1G", "2G"]')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(d / "out"), "--scheduler", "local", "--workers", "2"])
    assert r.exit_code == 0, r.output
    assert "LocalCluster, 2 worker processes" in r.output
    return d, g, d / "out"


def test_a_sweeps_rows_are_the_single_compare_runs(swept, tmp_path):
    d, g, out = swept
    res = pd.read_parquet(out / "results.parquet")
    assert len(res) == 4 and list(res.columns[:2]) == ["policy", "mem"]
    assert [(p, m) for p, m in zip(res.policy, res.mem)] == [("stock", "1G"), ("stock", "2G"), ("is", "1G"), ("is", "2G")]
    for mem in ("1G", "2G"):
        c = tmp_path / f"cmp-{mem}"
        r = CliRunner().invoke(main, ["compare", str(SMALL), "--policy", "stock,is", "--mem", mem,
                                      "--zram", "zstd:1G", "-o", str(c)])
        assert r.exit_code == 0, r.output
        want = pd.read_csv(c / "summary.csv").set_index("policy")
        # compare's CSV and the sweep's Parquet, the same numbers (the float columns to CSV's digits)
        got = pd.read_csv(out / "results.csv")
        got = got[got["mem"] == mem].set_index("policy")[METRICS]
        pd.testing.assert_frame_equal(got, want[METRICS], check_dtype=False, rtol=1e-12)
    # the IS point against stock at the same memory: what compare's own vs-stock column says
    assert res.set_index(["policy", "mem"]).loc[("is", "1G"), "peak_memory_vs_stock_pct"] < 0
    assert (out / "plots" / "major_faults.png").stat().st_size > 0
    man = json.loads((out / "sweep.json").read_text())
    assert man["points"] == 4 and man["done"] == 4 and man["status"] == "complete"
    assert len(list((out / "timelines").glob("*.parquet"))) == 4


def test_a_rerun_resumes_without_recomputing(swept, tmp_path):
    d, g, out = swept
    before = (out / "points.jsonl").read_bytes()
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "timelines").iterdir()}
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1].startswith("0 points run") and "4 points done before" in r.output
    assert (out / "points.jsonl").read_bytes() == before
    assert {p.name: p.stat().st_mtime_ns for p in (out / "timelines").iterdir()} == stamps
    # a grown grid (a third memory size) runs only its new points, serially here
    g2 = grid(tmp_path / "g2.toml", 'policy = ["stock", "is"]\nmem = ["1G", "2G", "3G"]')
    r = CliRunner().invoke(main, ["sweep", str(g2), "-o", str(out), "--scheduler", "serial"])
    assert r.exit_code == 0, r.output
    assert r.output.strip().splitlines()[-1].startswith("2 points run") and "4 points done before" in r.output
    assert (out / "points.jsonl").read_bytes().startswith(before)
    res = pd.read_parquet(out / "results.parquet")
    assert len(res) == 6 and set(res.mem) == {"1G", "2G", "3G"}


def test_dry_run_counts_and_writes_nothing(tmp_path):
    g = grid(tmp_path / "g.toml", 'policy = ["stock", "is", "dw"]\nmem = ["1G", "2G"]\nswappiness = [60, 100]')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o"), "--dry-run", "--scheduler", "serial"])
    assert r.exit_code == 0, r.output
    assert "12 points (0 done" in r.output and "12 to run" in r.output and "estimated" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("body,msg", [
    ('[axes]\npolicy = ["stock"]\nlimit = ["1G"]', "unknown axis 'limit'"),
    ('[axes]\npolicy = []', "axis policy: is empty"),
    ('[axes]\npolicy = "stock"', "takes a list"),
    ('[axes]\npolicy = ["stock", "nope"]', "unknown policy 'nope'"),
    ('[axes]\nmem = ["lots"]', "cannot read"),
    ('[axes]\nmem = ["1G"]\nmemcg_limit = ["1G"]', "not both"),
    ('[axes]\nctx = [1024]', "applies to a model"),
    ('metrics = ["speed"]\n[axes]\npolicy = ["stock"]', "unknown metric 'speed'"),
    ('[axes]\ndevice = ["nokia-3310"]', "unknown device"),
    ('[axes]\npolicy = ["stock", "stock"]', "listed twice"),
    ('[axes.set]\n"llm.nope" = [1, 2]', "nope"),
    ('[axes]\nswappiness = [300]', "outside 0..200"),
])
def test_bad_grids_are_one_line_exit_2_nothing_written(tmp_path, body, msg):
    g = tmp_path / "g.toml"
    g.write_text(f'workload = "{SMALL}"\n' + body + "\n")
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("kmemsim: ") and msg in lines[0], r.output
    assert not (tmp_path / "o").exists()


def test_a_model_grid_whose_tokens_do_not_fit_a_context_is_refused(tmp_path):
    # checked for every point before anything runs, not when a worker builds that trace
    (tmp_path / "m.gguf").write_bytes(b"GGUF" + bytes(64))
    g = tmp_path / "g.toml"
    g.write_text('workload = "m.gguf"\n[options]\nprompt = 512\ndecode = 256\n[axes]\nctx = [4096, 512]\n')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "prompt 512 + decode 256 do not fit ctx 512" in r.output, r.output
    assert not (tmp_path / "o").exists()
    g.write_text('workload = "m.gguf"\n[axes.set]\n"llm.ctx" = [1]\n')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "apply to a scenario" in r.output, r.output


def test_bad_sweep_options_and_directories(tmp_path):
    g = grid(tmp_path / "g.toml", 'policy = ["stock"]')
    for args, msg in ((["--scheduler", "yarn"], "--scheduler"), (["--workers", "0"], "--workers"),
                      ([], "give -o DIR")):
        o = [] if msg == "give -o DIR" else ["-o", str(tmp_path / "o")]
        r = CliRunner().invoke(main, ["sweep", str(g), *o, *args])
        assert r.exit_code == 2 and r.output.startswith("kmemsim: ") and msg in r.output, r.output
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(other)])
    assert r.exit_code == 2 and "not a sweep's output" in r.output
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    r = CliRunner().invoke(main, ["sweep", str(tmp_path / "none.toml"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "no such file" in r.output


def test_kill_9_loses_no_finished_point(tmp_path):
    # 64 points on a LocalCluster; the sweep's own process killed with SIGKILL once some have finished
    g = grid(tmp_path / "g.toml", 'policy = ["stock", "is", "dw", "is+dw"]\n'
                                  'mem = ["1G", "1280M", "1536M", "2G"]\nswappiness = [20, 60, 100, 140]')
    out = tmp_path / "out"
    p = subprocess.Popen([*KMEMSIM, "sweep", str(g), "-o", str(out), "--workers", "2", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    jp = out / "points.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if jp.exists() and len(jp.read_bytes().splitlines()) >= 4:
            break
        time.sleep(0.02)
    assert p.poll() is None, p.stderr.read().decode()[-2000:]
    children = [int(x) for x in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    # its worker processes notice and go (the nanny watches its parent)
    deadline = time.time() + 60
    while time.time() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
        time.sleep(0.2)
    for c in children:                       # whatever is left is ours to end, by pid
        if Path(f"/proc/{c}").exists():
            os.kill(c, signal.SIGKILL)
    finished = journal(out)
    assert 4 <= len(finished) < 64, len(finished)
    kept = jp.read_bytes()
    with open(jp, "ab") as f:                # and a line torn by the kill: ignored, its point reruns
        f.write(b'{"point": "0123456789abcdef", "row": {"major_')
    r = subprocess.run([*KMEMSIM, "sweep", str(g), "-o", str(out), "--scheduler", "serial", "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{64 - len(finished)} points run") and f"({len(finished)} points done before)" in r.stdout
    assert jp.read_bytes().startswith(kept)
    res = pd.read_parquet(out / "results.parquet")
    assert len(res) == 64 and res["point"].is_unique
    # the points the killed run finished are in the results as that run wrote them
    byk = res.set_index("point")
    for e in finished:
        assert byk.loc[e["point"], "major_faults"] == e["row"]["major_faults"]
        assert byk.loc[e["point"], "peak_memory_bytes"] == e["row"]["peak_memory_bytes"]


@pytest.fixture
def dask_cluster(tmp_path):
    """`dask scheduler` and two `dask worker`s, each a process of its own on this machine."""
    sf = tmp_path / "scheduler.json"
    bin_ = Path(sys.executable).parent / "dask"
    procs = [subprocess.Popen([str(bin_), "scheduler", "--scheduler-file", str(sf), "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.time() + 60
        while not sf.exists() and time.time() < deadline:
            time.sleep(0.1)
        assert sf.exists(), "dask scheduler did not start"
        for i in (1, 2):
            procs.append(subprocess.Popen([str(bin_), "worker", "--scheduler-file", str(sf), "--nthreads", "1",
                                           "--nworkers", "1", "--no-dashboard", "--name", f"w{i}"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client
        with Client(scheduler_file=str(sf), timeout="30s") as c:
            c.wait_for_workers(2, timeout=90)
            addr = c.scheduler.address
        yield addr
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_the_same_sweep_on_a_scheduler_with_two_worker_processes(swept, dask_cluster, tmp_path):
    d, g, out = swept
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o"), "--scheduler", dask_cluster])
    assert r.exit_code == 0, r.output
    assert f"Dask scheduler {dask_cluster}, 2 worker threads" in r.output
    a = pd.read_parquet(out / "results.parquet").drop(columns="replay_s")
    b = pd.read_parquet(tmp_path / "o" / "results.parquet").drop(columns="replay_s")
    # the module's sweep may have grown (test_a_rerun_resumes...): its rows of these four points
    pd.testing.assert_frame_equal(a.set_index("point").loc[b["point"]].reset_index(), b.set_index("point").reset_index())


def test_an_unreachable_scheduler_is_one_line(tmp_path):
    g = grid(tmp_path / "g.toml", 'policy = ["stock"]')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "o"), "--scheduler", "tcp://127.0.0.1:9"])
    assert r.exit_code == 2 and r.output.startswith("kmemsim: --scheduler tcp://127.0.0.1:9: cannot reach"), r.output
    assert not (tmp_path / "o" / "results.parquet").exists()


def test_an_experiment_on_the_cluster_writes_what_its_serial_run_writes(tmp_path):
    args = ["experiment", "llms-switch", "--quick", "--set", "hours=4"]
    r1 = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "serial")])
    r2 = CliRunner().invoke(main, [*args, "--scheduler", "local", "--workers", "2", "-o", str(tmp_path / "dask")])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    assert "2 cells on Dask LocalCluster" in r2.output          # contexts 2 and 8, a cell each
    assert sorted(os.listdir(tmp_path / "serial")) == sorted(os.listdir(tmp_path / "dask"))
    for f in ("summary.csv", "paper.csv"):
        assert (tmp_path / "serial" / f).read_bytes() == (tmp_path / "dask" / f).read_bytes(), f
    r = CliRunner().invoke(main, [*args, "--scheduler", "yarn", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--scheduler" in r.output and not (tmp_path / "x").exists()
