"""Trace loading without copies (issue 39): an oracleGeneral file is mapped, not read; object ids are
made dense in C with a hash table (c_ext/idmap.c) to exactly the numbering np.unique gives (so every
replay is as before: digests in tests/harness/digests.py); `.zst` traces (libCacheSim's data sets
are shipped so) read as their uncompressed selves."""
import json
import mmap

import numpy as np
import pytest
import zstandard
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.workload import libcachesim_io as lio


@pytest.mark.parametrize("ids", [
    np.random.default_rng(1).integers(0, 50, 5000).astype(np.uint64),           # few objects, many hits
    np.random.default_rng(2).integers(0, 2**64 - 1, 20000, dtype=np.uint64),    # ids over 2^63 (sorted unsigned)
    np.random.default_rng(3).integers(-2**40, 2**40, 30000),                    # int64 with negatives (sorted signed)
    np.arange(100000, 0, -1, dtype=np.uint64),                                  # every request a new object: the table grows
])
def test_dense_ids_number_as_np_unique(ids):
    uniq, inv = np.unique(ids, return_inverse=True)
    out = np.empty(ids.size, np.int64)
    assert lio.dense_ids(ids, out=out) == (uniq.size, None)
    np.testing.assert_array_equal(out, inv.reshape(-1))


def test_oracle_general_is_mapped_and_ids_read_where_they_lie(tmp_path):
    p = tmp_path / "t.oracleGeneral.bin"
    ids = np.random.default_rng(4).integers(0, 1000, 10000)
    lio.write_oracle_general(str(p), ids)
    clock, got, sizes = lio.read_oracle_general(str(p))
    base = got
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)   # a view of the mapped file
    assert got.strides == sizes.strides == (24,)                           # not copied out of its records
    out = np.empty(got.size, np.int64)
    assert lio.dense_ids(got, out=out, sizes=sizes)[0] == np.unique(ids).size
    np.testing.assert_array_equal(out, np.unique(ids, return_inverse=True)[1].reshape(-1))


def test_size_zero_requests_are_still_left_out(tmp_path):
    """libCacheSim's reader skips them (ignore_size_zero_req); a copy is made only then."""
    p = tmp_path / "z.oracleGeneral.bin"
    lio.write_oracle_general(str(p), np.arange(10), obj_size=np.array([1, 0] * 5))
    _, got, _ = lio.read_oracle_general(str(p))
    np.testing.assert_array_equal(got, np.arange(0, 10, 2))


def test_trace_is_what_the_builder_made(tmp_path):
    """The columns written at once equal TraceBuilder's (header, then one READ per request)."""
    from kmemsim.core.trace import MapFlag, Op, TraceBuilder
    ids = np.random.default_rng(5).integers(0, 300, 2000)
    tr = lio.ids_to_trace(ids, source="x")
    uniq, inv = np.unique(ids, return_inverse=True)
    tb = TraceBuilder(source="x")
    fid = tb.file("x", uniq.size)
    tb.process(0, lio.PID, "libcachesim-replay")
    mid = tb.mmap(0, lio.PID, "objects", uniq.size, file=fid, flags=MapFlag.SHARED | MapFlag.READ)
    tb.ranges(np.arange(ids.size) * lio.NS_PER_REQUEST, lio.PID, Op.READ, mid, inv.reshape(-1), 1)
    ref = tb.build()
    assert tr.meta == ref.meta
    for k in ref.cols:
        assert tr.cols[k].dtype == ref.cols[k].dtype, k
        np.testing.assert_array_equal(tr.cols[k], ref.cols[k], err_msg=k)


def _replay(path):
    r = CliRunner().invoke(main, ["replay", str(path), "--policy", "lru", "--mem", "800K", "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("fmt", ["oracleGeneral.bin", "csv"])
def test_zst_trace_replays_as_its_uncompressed_self(tmp_path, fmt):
    ids = np.random.default_rng(6).zipf(1.3, 5000) % 1000
    plain = tmp_path / f"t.{fmt}"
    (lio.write_oracle_general if fmt != "csv" else lio.write_csv_ids)(str(plain), ids)
    packed = tmp_path / f"t.{fmt}.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    a, b = _replay(plain), _replay(packed)
    assert a["counters"]["accesses_pages"] == b["counters"]["accesses_pages"] == ids.size
    assert a["counters"] == b["counters"]


def test_bad_zst_is_one_line(tmp_path):
    p = tmp_path / "t.oracleGeneral.bin.zst"
    p.write_bytes(b"not zstd at all" * 10)
    r = CliRunner().invoke(main, ["replay", str(p), "--policy", "lru", "--mem", "1M", "--json"])
    assert r.exit_code == 2
    assert r.output.startswith("kmemsim: ") and "zstd" in r.output and r.output.count("\n") == 1


def test_object_sizes_become_page_counts(tmp_path):
    """An object takes ceil(size / 4 KiB) pages of its largest size; objects of up to 4 KiB one page,
    exactly as without sizes. Under `lru` a request reads all its object's pages: a cyclic loop over
    3 objects of 3 pages each (9 pages) in 8 pages of memory misses every page of every request (LRU's
    worst case, as with single pages), and in 9 pages only the first pass misses."""
    p = tmp_path / "s.oracleGeneral.bin"
    ids = np.tile([5, 9, 7], 4)
    lio.write_oracle_general(str(p), ids, obj_size=np.tile([9000, 12288, 8193], 4))
    tr = lio.load_libcachesim(str(p))
    assert tr.meta["files"][0]["pages"] == 9
    np.testing.assert_array_equal(tr.cols["page"][2:5], [0, 6, 3])    # laid out in id order: 5, 7, 9
    np.testing.assert_array_equal(tr.cols["npages"][2:], 3)
    r = CliRunner().invoke(main, ["replay", str(p), "--policy", "lru", "--mem", "32K", "--json"])
    s = json.loads(r.stdout)["counters"]
    assert (s["accesses_pages"], s["misses_pages"]) == (36, 36)
    r = CliRunner().invoke(main, ["replay", str(p), "--policy", "lru", "--mem", "36K", "--json"])
    s = json.loads(r.stdout)["counters"]
    assert (s["accesses_pages"], s["misses_pages"]) == (36, 9)
    small = tmp_path / "one.oracleGeneral.bin"
    lio.write_oracle_general(str(small), ids, obj_size=4096)
    plain = lio.ids_to_trace(ids, source="one.oracleGeneral.bin")
    got = lio.load_libcachesim(str(small))
    for k in plain.cols:
        np.testing.assert_array_equal(got.cols[k], plain.cols[k], err_msg=k)


def test_a_mapped_file_read_in_slices_gives_the_same_numbering(tmp_path, monkeypatch):
    """The ids are read a slice at a time and each slice's pages given back (MADV_DONTNEED on the
    mapping): the numbering and sizes equal one pass's, and the mapping stays readable."""
    monkeypatch.setattr(lio, "SLICE", 1000)                  # many slices, a page boundary inside records
    p = tmp_path / "m.oracleGeneral.bin"
    ids = np.random.default_rng(9).integers(0, 700, 25_013)
    lio.write_oracle_general(str(p), ids, obj_size=np.random.default_rng(10).integers(1, 20_000, ids.size))
    clock, got, sizes = lio.read_oracle_general(str(p))
    out = np.empty(got.size, np.int64)
    n, big = lio.dense_ids(got, out=out, sizes=sizes, keep=False)
    uniq, inv = np.unique(ids, return_inverse=True)
    assert n == uniq.size
    np.testing.assert_array_equal(out, inv.reshape(-1))
    want = np.zeros(uniq.size, np.uint32)
    np.maximum.at(want, inv.reshape(-1), np.asarray(sizes))
    np.testing.assert_array_equal(big, want)
    np.testing.assert_array_equal(got, ids)                  # given back, still readable


@pytest.mark.parametrize("sizes", ["pages", "mixed"])
@pytest.mark.parametrize("zst", [False, True])
@pytest.mark.parametrize("keep", [1 << 28, 5000])
def test_replay_streams_an_oracle_general_file_as_the_whole_trace(tmp_path, monkeypatch, sizes, zst, keep):
    """`kmemsim replay` reads an oracleGeneral file a slice at a time into one buffer and replays the
    slices as batches (OracleGeneralStream, Emulator.replay_batches): every counter, the timeline and
    the page states equal one replay of the trace loaded whole, under the kernel model and under
    zram pressure, whether the first pass's object numbers are kept or the ids looked up again; size-0
    requests are left out in both (libCacheSim's ignore_size_zero_req)."""
    from kmemsim.engine import Config, Emulator
    monkeypatch.setattr(lio, "STREAM_SLICE", 997)              # slices that split nothing evenly
    monkeypatch.setattr(lio, "STREAM_KEEP", keep)              # numbers kept, or the file read again
    rng = np.random.default_rng(11)
    ids = np.concatenate([np.arange(3000), rng.zipf(1.2, 12_000) % 2500])
    size = (np.full(ids.size, 4096) if sizes == "pages" else rng.integers(0, 14_000, ids.size))
    p = tmp_path / "s.oracleGeneral.bin"
    lio.write_oracle_general(str(p), ids, obj_size=size)
    if zst:
        z = tmp_path / "s.oracleGeneral.bin.zst"
        c = zstandard.ZstdCompressor()
        raw = p.read_bytes()
        z.write_bytes(c.compress(raw[:24 * 5000]) + c.compress(raw[24 * 5000:]))   # two frames
        p = z
    whole = lio.load_libcachesim(str(p))
    s = lio.OracleGeneralStream(str(p))
    assert s.events == len(whole) and s.duration_ns == whole.cols["t"][-1] - whole.cols["t"][0]
    for k in whole.cols:
        np.testing.assert_array_equal(s.header.cols[k], whole.cols[k][:2], err_msg=k)
    assert s.header.meta == whole.meta
    for cfg in (dict(mem=600 * 4096, policy="lru"), dict(memcg_limit=900 * 4096, zram="lz4:64M")):
        a = Emulator(Config(**cfg)).replay(whole)
        b = Emulator(Config(**cfg)).replay_batches(lio.OracleGeneralStream(str(p)).header,
                                                   lio.OracleGeneralStream(str(p)).batches())
        assert a.summary == b.summary
        np.testing.assert_array_equal(a._raw["timeline"], b._raw["timeline"])
        for f in a.page_states:
            np.testing.assert_array_equal(a.page_states[f], b.page_states[f])


def test_a_truncated_zst_stream_is_one_line(tmp_path):
    p = tmp_path / "t.oracleGeneral.bin.zst"
    plain = tmp_path / "t.oracleGeneral.bin"
    lio.write_oracle_general(str(plain), np.arange(5000))
    p.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes())[:-9])
    r = CliRunner().invoke(main, ["replay", str(p), "--policy", "lru", "--mem", "1M", "--json"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "truncated" in r.output and r.output.count("\n") == 1
