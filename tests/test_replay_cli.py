"""`kmemsim replay` (issue 2, CLI): libCacheSim traces replayed with `--policy lru` give the same
accesses and misses as libCacheSim's LRU at the same capacity; bad input gives one line on stderr,
exit 2, no traceback, nothing on stdout."""
import json
import os
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
from click.testing import CliRunner

from kmemsim.workload import libcachesim_io as lio
from kmemsim.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(*args):
    """The real command in a fresh process: exit code, stdout, stderr."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "kmemsim.cli", *map(str, args)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    return p.returncode, p.stdout, p.stderr


def replay_json(*args):
    r = CliRunner().invoke(main, ["replay", *map(str, args), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["counters"]   # keys carry their unit: accesses_pages, ...


def libcachesim_lru(path, pages):
    """Misses and requests of libCacheSim's LRU holding `pages` objects: the file's objects have size 1
    and the cache size is `pages` (consider_obj_metadata is off, so capacity counts objects)."""
    import libcachesim as lcs
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    n = reader.get_num_of_req()
    miss_ratio, _ = lcs.LRU(pages).process_trace(reader)
    return int(round(miss_ratio * n)), n


def reference_lru(ids, pages):
    d, misses = OrderedDict(), 0
    for x in ids.tolist():
        if x in d:
            d.move_to_end(x)
        else:
            misses += 1
            d[x] = None
            if len(d) > pages:
                d.popitem(last=False)
    return misses


def zipf_ids(n=50_000, objects=8000, seed=11):
    rng = np.random.default_rng(seed)
    return (rng.zipf(1.1, n) % objects).astype(np.uint64) * 7919 + 3   # sparse, non-dense ids


def cyclic_ids(objects=3000, passes=5):
    return np.tile(np.arange(objects, dtype=np.uint64) * 13, passes)


@pytest.mark.parametrize("name,ids", [("zipf", zipf_ids()), ("cyclic", cyclic_ids())])
@pytest.mark.parametrize("pages", [1, 100, 1024, 2999, 4000])
def test_lru_matches_libcachesim(tmp_path, name, ids, pages):
    path = tmp_path / f"{name}.oracleGeneral"
    lio.write_oracle_general(str(path), ids, obj_size=1)
    lcs_misses, lcs_n = libcachesim_lru(path, pages)
    if pages in (100, 2999):   # libCacheSim's object-count semantics, checked independently
        assert lcs_misses == reference_lru(ids, pages)
    out = replay_json(path, "--policy", "lru", "--mem", pages * 4096)
    assert (out["accesses_pages"], out["misses_pages"]) == (lcs_n, lcs_misses)


def test_csv_and_binary_agree(tmp_path):
    ids = zipf_ids(20_000)
    b, c = tmp_path / "t.oracleGeneral", tmp_path / "t.csv"
    lio.write_oracle_general(str(b), ids)
    lio.write_csv_ids(str(c), ids, header="obj_id")
    args = ("--policy", "lru", "--mem", "2M")
    jb, jc = replay_json(b, *args), replay_json(c, *args)
    assert (jb["accesses_pages"], jb["misses_pages"]) == (jc["accesses_pages"], jc["misses_pages"]) == \
        (20_000, reference_lru(ids, 512))


def test_parquet_trace_and_table_output(tmp_path):
    from kmemsim.core.trace import save
    tr = lio.ids_to_trace(cyclic_ids(300, 3))
    p = tmp_path / "t.parquet"
    save(tr, str(p))
    code, out, err = run_cli("replay", p, "--mem", "1M")
    assert code == 0, err
    assert "pgfault" in out and "accesses" in out and "Traceback" not in err
    j = replay_json(p, "--mem", "1M")
    assert j["accesses_pages"] == 900


def test_stock_policy_with_zram_and_memcg(tmp_path):
    p = tmp_path / "t.oracleGeneral"
    lio.write_oracle_general(str(p), zipf_ids(5000))
    j = replay_json(p, "--mem-limit", "4M", "--zram", "lz4:64M", "--swappiness", "100")
    for k in ("accesses_pages", "misses_pages", "pgfault_count", "pgmajfault_count", "pgpgin_pages",
              "pswpin_pages", "pswpout_pages"):
        assert k in j, k
    assert j["accesses_pages"] == 5000


# ------------------------------------------------------------------------------------------------
# bad input: one line, exit 2, no traceback, no partial output

@pytest.fixture
def good(tmp_path):
    p = tmp_path / "good.oracleGeneral"
    lio.write_oracle_general(str(p), cyclic_ids(100, 2))
    return p


def truncated_parquet(tmp_path):
    from kmemsim.core.trace import save
    p = tmp_path / "trunc.parquet"
    save(lio.ids_to_trace(cyclic_ids(2000, 2)), str(p))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p


def bad_csv(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("1\n2\n3\nfour\n5\n")
    return p


def truncated_binary(tmp_path):
    p = tmp_path / "trunc.oracleGeneral"
    lio.write_oracle_general(str(p), [1, 2, 3])
    p.write_bytes(p.read_bytes()[:-1])
    return p


BAD = {
    "truncated parquet": (lambda tmp, good: [truncated_parquet(tmp), "--mem", "1G"], "Parquet"),
    "non-numeric csv id": (lambda tmp, good: [bad_csv(tmp), "--mem", "1G"], "bad.csv:4: object id 'four'"),
    "truncated binary": (lambda tmp, good: [truncated_binary(tmp), "--mem", "1G"], "truncated"),
    "negative mem": (lambda tmp, good: [good, "--mem", "-512M"], "--mem: '-512M' is negative"),
    "negative memcg limit": (lambda tmp, good: [good, "--memcg-limit", "-1G"], "negative"),
    "negative zram size": (lambda tmp, good: [good, "--mem", "1G", "--zram", "lz4:-1G"], "negative"),
    "mem 0": (lambda tmp, good: [good, "--mem", "0"], "--mem: '0' is zero"),
    "garbage mem": (lambda tmp, good: [good, "--mem", "lots"], "--mem: cannot read 'lots'"),
    "no memory": (lambda tmp, good: [good], "--mem SIZE"),
    "swappiness": (lambda tmp, good: [good, "--mem", "1G", "--swappiness", "201"], "--swappiness"),
    "unknown policy": (lambda tmp, good: [good, "--mem", "1G", "--policy", "nosuch"], "nosuch"),
    "missing trace": (lambda tmp, good: [tmp / "nope.oracleGeneral", "--mem", "1G"], "no such file"),
    "empty csv": (lambda tmp, good: [(tmp / "e.csv", (tmp / "e.csv").write_text(""))[0], "--mem", "1G"],
                  "empty trace"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(tmp_path, good, case):
    make, expect = BAD[case]
    code, out, err = run_cli("replay", *make(tmp_path, good))
    assert code == 2, (code, out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kmemsim: ") and expect in lines[0], lines[0]


def test_unknown_policy_lists_the_known_ones(good):
    code, out, err = run_cli("replay", good, "--mem", "1G", "--policy", "nosuch")
    assert code == 2 and out == ""
    assert "lru" in err and "stock" in err
