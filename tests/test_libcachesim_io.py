"""Readers for libCacheSim traces (github.com/1a1a11a/libCacheSim, traceReader/): the oracleGeneral
record layout of customizedReader/oracle/oracleGeneralBin.h and the csv reader of
generalReader/csv.c (one object id per line, optional header)."""
import numpy as np
import pytest

from kmemsim.workload import libcachesim_io as lio
from kmemsim.core.errors import InputError
from kmemsim.core.trace import Op, validate


def test_record_layout_is_oracle_general():
    # struct { uint32_t clock_time; uint64_t obj_id; uint32_t obj_size; int64_t next_access_vtime; }
    # read by oracleGeneralBin_read_one_req at byte offsets 0, 4, 12, 16: packed, 24 bytes
    assert lio.RECORD.itemsize == 24
    assert [lio.RECORD.fields[k][1] for k in ("clock_time", "obj_id", "obj_size", "next_access_vtime")] \
        == [0, 4, 12, 16]


def test_oracle_general_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 2**64 - 1, 1000, dtype=np.uint64, endpoint=True)
    ids[::3] = ids[0]
    p = tmp_path / "t.oracleGeneral"
    lio.write_oracle_general(str(p), ids, obj_size=4096)
    raw = np.fromfile(p, lio.RECORD)
    assert (raw["obj_id"] == ids).all() and (raw["obj_size"] == 4096).all()
    # next_access_vtime as libCacheSim's traceConv writes it: next index of the same object, or -1
    assert raw["next_access_vtime"][0] == 3 and raw["next_access_vtime"][-1] == -1
    clock, back, _ = lio.read_oracle_general(str(p))
    assert back.dtype == np.uint64 and (back == ids).all()
    assert (clock == np.arange(1000)).all()


def test_ids_to_trace_shape(tmp_path):
    ids = np.array([50, 7, 50, 9, 7, 50], np.uint64)
    p = tmp_path / "t.oracleGeneral"
    lio.write_oracle_general(str(p), ids)
    tr = lio.load_any(str(p))
    validate(tr)
    c = tr.cols
    # one file of 3 pages (the distinct objects), mapped once, shared and read-only
    assert tr.meta["files"][0]["pages"] == 3
    mm = c["op"] == Op.MMAP
    assert mm.sum() == 1 and c["npages"][mm][0] == 3 and c["arg"][mm][0] == 0
    rd = c["op"] == Op.READ
    # one single-page READ per request, pages numbered densely in id order: 7 -> 0, 9 -> 1, 50 -> 2
    assert rd.sum() == 6 and (c["npages"][rd] == 1).all()
    assert c["page"][rd].tolist() == [2, 0, 2, 1, 0, 2]
    # request i at i microseconds of trace time
    assert c["t"][rd].tolist() == [i * 1000 for i in range(6)]


def test_clock_going_back_keeps_request_order(tmp_path):
    p = tmp_path / "t.oracleGeneral"
    lio.write_oracle_general(str(p), [1, 2, 3, 4], clock_time=[5, 9, 7, 10])
    tr = lio.load_libcachesim(str(p), time="clock")
    rd = tr.cols["op"] == Op.READ
    assert tr.cols["page"][rd].tolist() == [0, 1, 2, 3]
    assert tr.cols["t"][rd].tolist() == [0, 4_000_000_000, 4_000_000_000, 5_000_000_000]


def test_size_zero_requests_skipped_as_libcachesim_does(tmp_path):
    # libCacheSim's reader default ignore_size_zero_req=true drops requests of size 0
    rec = np.zeros(3, lio.RECORD)
    rec["obj_id"] = [1, 2, 3]
    rec["obj_size"] = [1, 0, 1]
    p = tmp_path / "t.oracleGeneral"
    rec.tofile(p)
    assert lio.read_oracle_general(str(p))[1].tolist() == [1, 3]


def test_truncated_binary(tmp_path):
    p = tmp_path / "t.oracleGeneral"
    lio.write_oracle_general(str(p), [1, 2, 3])
    p.write_bytes(p.read_bytes()[:-5])
    with pytest.raises(InputError, match="truncated oracleGeneral trace: 67 bytes") as e:
        lio.load_any(str(p))
    assert "\n" not in str(e.value)


def test_empty_binary(tmp_path):
    p = tmp_path / "t.oracleGeneral"
    p.write_bytes(b"")
    with pytest.raises(InputError, match="empty trace"):
        lio.load_any(str(p))


def test_csv_round_trip_with_and_without_header(tmp_path):
    ids = np.random.default_rng(3).integers(0, 10**12, 5000, dtype=np.uint64)
    for header in (None, "obj_id"):
        p = tmp_path / f"t{header}.csv"
        lio.write_csv_ids(str(p), ids, header=header)
        assert (lio.read_csv_ids(str(p)) == ids).all()


def test_csv_details(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("id\n5\n 3\r\n\n18446744073709551615\n0\n7")      # CRLF, blank line, no final newline
    assert lio.read_csv_ids(str(p)).tolist() == [5, 3, 2**64 - 1, 0, 7]


@pytest.mark.parametrize("text,line,what", [
    ("1\n2\nabc\n", 3, "'abc' is not"),
    ("header\n1\nx2\n", 3, "'x2' is not"),
    ("1\n2 3\n", 2, "'2 3' is not"),
    ("1\n-2\n", 2, "'-2' is not"),
    ("1\n1.5\n", 2, "'1.5' is not"),
    ("18446744073709551616\n", 1, "does not fit in 64 bits"),
])
def test_csv_bad_ids_name_the_line(tmp_path, text, line, what):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        lio.load_any(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: ") and what in msg and "\n" not in msg


@pytest.mark.parametrize("text", ["", "obj_id\n", "\n\n"])
def test_csv_empty(tmp_path, text):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(InputError, match="empty trace"):
        lio.load_any(str(p))


def test_detect_format_from_content(tmp_path):
    a, b = tmp_path / "noext1", tmp_path / "noext2"
    lio.write_oracle_general(str(a), [1, 2, 3])
    lio.write_csv_ids(str(b), [1, 2, 3])
    assert lio.detect_format(str(a)) == "oracleGeneral"
    assert lio.detect_format(str(b)) == "csv"
    assert (lio.load_any(str(a)).cols["page"] == lio.load_any(str(b)).cols["page"]).all()


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        lio.load_any(str(tmp_path / "nope.csv"))
