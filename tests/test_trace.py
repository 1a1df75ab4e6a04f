"""The trace schema (docs/trace-format.md): round trip, validation naming the first bad row, merge."""
import numpy as np
import pytest

from kmemsim.core import trace
from kmemsim.core.errors import InputError
from kmemsim.core.trace import MapFlag, Op, TraceBuilder


def small():
    b = TraceBuilder("t")
    f = b.file("/m", 100)
    b.process(0, 1, "p")
    m = b.mmap(1, 1, "w", 100, file=f, flags=MapFlag.SHARED | MapFlag.READ)
    b.phase(2, 1, "decode token 0")
    b.ranges(np.arange(3, 13), 1, Op.READ, m, np.arange(10) * 10, 10)
    return b.build()


def test_round_trip(tmp_path):
    tr = small()
    p = tmp_path / "t.parquet"
    trace.save(tr, str(p))
    back = trace.load(str(p))
    assert back.meta["phases"] == ["decode token 0"]
    for k in trace.COLUMNS:
        assert (back[k] == tr[k]).all() and back[k].dtype == tr[k].dtype


@pytest.mark.parametrize("col,row,value,msg", [
    ("t", 5, 0, "time goes backwards"),
    ("op", 4, 99, "unknown op"),
    ("npages", 6, -1, "page count out of range"),
    ("map", 7, 5, "mapping used but never created"),
    ("page", 8, 95, "range runs past the end of its mapping"),
    ("arg", 1, 7, "MMAP names a file not in the trace metadata"),
    ("arg", 2, 7, "PHASE names a phase not in the trace metadata"),
    ("arg", 4, -3, "READ with a negative chunk"),
])
def test_validation_names_the_first_bad_row(col, row, value, msg):
    tr = small()
    tr.cols[col] = tr.cols[col].copy()
    tr.cols[col][row] = value
    with pytest.raises(InputError, match=rf"row {row}: {msg}"):
        trace.validate(tr)


def test_truncated_and_foreign_files(tmp_path):
    p = tmp_path / "t.parquet"
    trace.save(small(), str(p))
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="not a readable Parquet trace"):
        trace.load(str(p))
    import pyarrow as pa, pyarrow.parquet as pq
    pq.write_table(pa.table({"x": [1]}), str(tmp_path / "f.parquet"))
    with pytest.raises(InputError, match="without kmemsim trace metadata"):
        trace.load(str(tmp_path / "f.parquet"))


def test_failed_save_leaves_nothing(tmp_path):
    tr = small()
    tr.cols["t"] = tr.cols["t"][::-1].copy()
    with pytest.raises(InputError):
        trace.save(tr, str(tmp_path / "x.parquet"))
    assert list(tmp_path.iterdir()) == []


def test_merge_renumbers_and_shares_files():
    a, b = small(), small()
    m = trace.merge([a, b])
    assert len(m) == len(a) + len(b)
    assert len(m.meta["files"]) == 1                      # same path: one page cache
    assert sorted(set(m["map"][m["map"] >= 0].tolist())) == [0, 1]
    assert m.meta["phases"] == ["decode token 0"]
    assert (np.diff(m["t"]) >= 0).all()


def test_merge_and_replay_renumber_every_file_id():
    # Every op whose flags name a file (FILE_ID_OPS: FADVISE, FREAD, OPEN, DIO_READ, DIO_WRITE) follows
    # its file through merge()'s renumbering and the replay's dense ids: a read(2) of the second
    # trace's file reads that file, not whichever the first trace numbered alike.
    from kmemsim.core.trace import FILE_ID_OPS, merge
    from kmemsim.engine.kernel import Config, Emulator
    a, b = TraceBuilder("a"), TraceBuilder("b")
    fa = a.file("/a", 64)
    a.event(0, 1, Op.FREAD, -1, 0, 8, 0, fa)
    b.file("/unused", 64)
    fb = b.file("/b", 32)
    b.event(1, 2, Op.OPEN, -1, 0, 0, 0, fb)
    b.event(2, 2, Op.FREAD, -1, 0, 16, 0, fb)
    tr = merge([a.build(), b.build()])
    assert set(FILE_ID_OPS) >= {Op.FREAD, Op.OPEN}
    res = Emulator(Config(mem="64M", read_ahead_kb=0)).replay(tr)
    added = dict(zip(res.files["path"], res.files["pages_added"]))
    assert added["/a"] == 8 and added["/b"] == 16 and added.get("/unused", 0) == 0, added
