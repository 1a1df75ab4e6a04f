"""`kmemsim trace export` (issue 43, item 5): a llama.cpp trace written as a libCacheSim trace, one
request per page referenced, replayed by libCacheSim's own LRU (libcachesim's LRU.c through its
Python binding), misses exactly as `kmemsim replay --policy lru` of the llama trace itself does, at
every cache size from one page to more than the trace's pages."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core import trace
from kmemsim.workload import libcachesim_export as ex
from kmemsim.workload import libcachesim_io as lio


def cli(*args):
    r = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A llama.cpp trace of a synthetic model: weights mmap'ed with MAP_POPULATE and WILLNEED (llama.cpp's
    defaults), the header read with read(2), llama.cpp's unmap of the fragment before the first tensor,
    the KV cache and compute buffers written, two requests."""
    d = tmp_path_factory.mktemp("export")
    cli("model", "synth", d / "m.gguf", "--arch", "llama", "--layers", "4", "--dim", "256", "--ffn", "512",
        "--heads", "4", "--kv-heads", "2", "--vocab", "2000", "--type", "q8_0")
    cli("workload", "llama", d / "m.gguf", "--prompt", "64", "--decode", "8", "--ctx", "256", "--requests", "2",
        "-o", d / "llama.parquet")
    out = cli("trace", "export", d / "llama.parquet", "--format", "oracleGeneral", "-o", d / "llama.oracleGeneral")
    assert "requests (one per page referenced)" in out
    return d


def libcachesim_lru(path, cache_bytes):
    """libCacheSim's LRU over the exported file: (requests, misses). Objects are 4,096 bytes and the
    cache size is in bytes, so it holds cache_bytes / 4096 objects (object metadata not counted)."""
    import libcachesim as lcs
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    n = reader.get_num_of_req()
    miss_ratio, _ = lcs.LRU(cache_bytes).process_trace(reader)
    return n, int(round(miss_ratio * n))


def test_one_request_per_page_referenced(llama):
    tr = trace.load(str(llama / "llama.parquet"))
    c = tr.cols
    refs = ex.references(tr)
    # READ/WRITE/FREAD ranges, and the weights' MAP_POPULATE (every page of the mapping)
    rw = np.isin(c["op"], [trace.Op.READ, trace.Op.WRITE, trace.Op.FREAD])
    pop = (c["op"] == trace.Op.MMAP) & ((c["flags"] & trace.MapFlag.POPULATE) != 0)
    assert pop.any()
    assert len(refs.obj_id) == int(c["npages"][rw].sum() + c["npages"][pop].sum())
    clock, ids, _ = lio.read_oracle_general(str(llama / "llama.oracleGeneral"))
    assert np.array_equal(ids, refs.obj_id)
    rec = np.fromfile(llama / "llama.oracleGeneral", lio.RECORD)
    assert (rec["obj_size"] == 4096).all()
    # next_access_vtime as libCacheSim's traceConv writes it: the next request's index, else -1
    nxt = rec["next_access_vtime"]
    has = nxt >= 0
    assert (rec["obj_id"][nxt[has]] == rec["obj_id"][has]).all() and (nxt[has] > np.flatnonzero(has)).all()


def test_libcachesim_lru_misses_as_kmemsim_replay_lru(llama):
    path = llama / "llama.oracleGeneral"
    ids = lio.read_oracle_general(str(path))[1]
    distinct = len(np.unique(ids))
    sizes = sorted({1, 16, distinct // 4, distinct // 2, distinct - 40, distinct - 1, distinct, distinct + 500})
    seen = set()
    for pages in sizes:
        n, misses = libcachesim_lru(path, pages * 4096)
        out = json.loads(cli("replay", llama / "llama.parquet", "--policy", "lru", "--mem", pages * 4096, "--json"))
        c = out["counters"]
        assert (c["accesses_pages"], c["misses_pages"]) == (n, misses), pages
        seen.add(misses)
    assert min(seen) == distinct and len(seen) >= 5        # the sizes span cold misses only to thrashing


def test_csv_export_replays_the_same(llama):
    cli("trace", "export", llama / "llama.parquet", "--format", "csv", "-o", llama / "llama.csv")
    pages = 300
    a = json.loads(cli("replay", llama / "llama.csv", "--policy", "lru", "--mem", pages * 4096, "--json"))
    b = json.loads(cli("replay", llama / "llama.parquet", "--policy", "lru", "--mem", pages * 4096, "--json"))
    ca, cb = a["counters"], b["counters"]
    assert (ca["accesses_pages"], ca["misses_pages"]) == (cb["accesses_pages"], cb["misses_pages"])


@pytest.mark.parametrize("args,msg", [
    (["--format", "arc"], "--format"),
    ([], "no such file"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, msg):
    src = tmp_path / "none.parquet"
    r = CliRunner().invoke(main, ["trace", "export", str(src), "-o", str(tmp_path / "o.bin"), *args])
    assert r.exit_code == 2, r.output
    assert msg in r.output and not (tmp_path / "o.bin").exists()
