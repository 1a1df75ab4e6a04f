"""libCacheSim traces as kmemsim traces, and back.

Two of libCacheSim's formats (github.com/1a1a11a/libCacheSim, traceReader/):
- `oracleGeneral` binary: little-endian 24-byte records
  `{uint32 clock_time; uint64 obj_id; uint32 obj_size; int64 next_access_vtime}`
  (customizedReader/oracle/oracleGeneralBin.h). Like libCacheSim's reader with its default
  `ignore_size_zero_req`, requests of size 0 are skipped.
- csv with one object id per line (generalReader/csv.c). An optional first line that is not a number
  is a header (libCacheSim guesses a header the same way, from letters versus digits). Ids are
  decimal unsigned 64-bit integers; blank lines are skipped.

Either may be zstd-compressed (`.zst`, as libCacheSim's data sets are shipped): read through
zstandard, frame after frame.

Each object becomes 4 KiB pages of one file, as many as its largest size in the trace needs (at
least one: a csv, and oracleGeneral objects of up to 4 KiB, take one page each), and each request a
READ of all of them. Object ids are numbered densely in id order (as np.unique would) and laid out
in that order, so the file has as many pages as the trace's objects need; one process maps the
whole file once, shared and read-only, as llama.cpp maps a model. Request i is at i microseconds of
trace time (or, on request, at the trace's own clock; see ids_to_trace).

No copies on the way: an oracleGeneral file is mapped (mmap, read through numpy.frombuffer) and its
ids read where they lie, made dense in C in one pass with a hash table of the distinct ids
(c_ext/idmap.c: memory grows with objects, not requests), the file's pages given back as they are
read; only the distinct ids are sorted; the trace's columns are built once, already in order and
valid by construction. No Python loop runs per request.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

from ..core.errors import InputError
from ..core import trace
from ..core.limits import check_memory
from ..core.paths import input_file
from ..core.units import PAGE_SIZE
from ..core.trace import COLUMNS, MapFlag, Op, Trace, TraceBuilder

RECORD = np.dtype([("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"),
                   ("next_access_vtime", "<i8")])
assert RECORD.itemsize == 24

PID = 1
NS_PER_REQUEST = 1000   # time="index": one request per microsecond of trace time
BINARY_EXTS = (".oraclegeneral", ".oraclegeneral.bin", ".bin")
ZST = ".zst"
SLICE = 1 << 20               # records read between two give-backs of a mapped file's pages
STREAM_SLICE = 1 << 16        # records a stream reads and replays at a time: its buffers (2.6 MiB) stay in cache
STREAM_KEEP = 1 << 28         # requests whose object numbers (4 bytes each) a stream keeps between its passes
ZERO_COLUMNS = ("map", "arg", "flags")    # a libCacheSim trace's requests: mapping 0, no chunk, no flags
CSV_EXTS = (".csv", ".txt")
PARQUET_EXTS = (".parquet", ".pq")


# ------------------------------------------------------------------------------------------------
# readers

def read_oracle_general(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(clock_time, obj_id, obj_size) of the requests in an oracleGeneral file, size-0 requests
    dropped: views of the file mapped read-only (no copy unless size-0 requests must be left out), or
    of its decompressed bytes for a `.zst` file."""
    if path.lower().endswith(ZST):
        data = _read_bytes(path)
        nbytes = len(data)
    else:
        input_file(path, expected="trace file")
        nbytes = os.path.getsize(path)
    _whole_records(path, nbytes)
    if nbytes == 0:
        rec = np.zeros(0, RECORD)
    elif path.lower().endswith(ZST):
        rec = np.frombuffer(data, RECORD)
    else:
        try:
            with open(path, "rb") as f:
                rec = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), RECORD)
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})")
    keep = rec["obj_size"] != 0
    if not keep.all():
        rec = rec[keep]
    if len(rec) == 0:
        raise InputError(f"{path}: empty trace: no requests (of nonzero size) in the oracleGeneral file")
    return rec["clock_time"], rec["obj_id"], rec["obj_size"]


def _whole_records(path: str, nbytes: int) -> None:
    """An oracleGeneral file of nbytes holds whole records, or one InputError."""
    if nbytes % RECORD.itemsize:
        raise InputError(f"{path}: truncated oracleGeneral trace: {nbytes} bytes is not a multiple "
                         f"of the {RECORD.itemsize}-byte record ({nbytes // RECORD.itemsize} whole "
                         f"records, {nbytes % RECORD.itemsize} bytes left over)")


def read_csv_ids(path: str) -> np.ndarray:
    """Object ids (uint64) of a csv trace with one id per line; raises InputError naming the first
    bad line (1-based)."""
    data = _read_bytes(path)
    buf = np.frombuffer(data, np.uint8)
    n = len(buf)
    if n == 0:
        raise InputError(f"{path}: empty trace: the csv file has no lines")
    NL, CR, SP, TAB = 10, 13, 32, 9
    is_nl = buf == NL
    # line number (0-based) of every byte; a newline belongs to the line it ends
    line_of = np.cumsum(is_nl) - is_nl
    n_lines = int(line_of[-1]) + 1
    is_digit = (buf >= 48) & (buf <= 57)
    is_space = (buf == SP) | (buf == TAB) | (buf == CR) | is_nl
    bad_byte = ~(is_digit | is_space)
    bad_line = np.zeros(n_lines, bool)
    bad_line[line_of[bad_byte]] = True
    # digits must form one run per line: a digit whose previous byte is a non-newline space and some
    # earlier byte on the same line is a digit means two numbers ("12 34")
    digits_per_line = np.bincount(line_of[is_digit], minlength=n_lines)
    run_start = is_digit & np.concatenate(([True], ~is_digit[:-1]))
    runs_per_line = np.bincount(line_of[run_start], minlength=n_lines)
    bad_line |= runs_per_line > 1
    bad_line |= digits_per_line > 20
    has_id = digits_per_line > 0

    first_data = 0
    if bad_line[0]:
        first_data = 1                      # a header line
        bad_line[0] = False
        has_id[0] = False
    bad = np.flatnonzero(bad_line)
    if bad.size:
        ln = int(bad[0])
        text = _line_text(data, buf, is_nl, ln)
        raise InputError(f"{path}:{ln + 1}: object id {text!r} is not a non-negative integer "
                         "(csv traces hold one numeric object id per line)")

    # value of each line's digit run: sum of digit * 10^(place), place counted from the run's end
    dpos = np.flatnonzero(is_digit)
    dline = line_of[dpos]
    if first_data:
        sel = dline >= 1
        dpos, dline = dpos[sel], dline[sel]
    if dpos.size == 0:
        raise InputError(f"{path}: empty trace: no object ids in the csv file")
    # index of each digit within its line's run, from the right
    lines_with_ids = np.flatnonzero(has_id)
    counts = digits_per_line[lines_with_ids]
    ends = np.cumsum(counts)
    place = np.repeat(ends, counts) - 1 - np.arange(dpos.size)
    pow10 = np.array([10 ** k for k in range(20)], np.uint64)
    with np.errstate(over="ignore"):
        contrib = (buf[dpos] - 48).astype(np.uint64) * pow10[place]
        ids = np.add.reduceat(contrib, np.concatenate(([0], ends[:-1])))
    # 20-digit ids may overflow uint64: compare their digits with 2**64 - 1, lexicographically
    big = np.flatnonzero(counts == 20)
    if big.size:
        starts = (ends - counts)[big]
        d = (buf[dpos[starts[:, None] + np.arange(20)]] - 48).astype(np.int8)
        umax = np.frombuffer(b"18446744073709551615", np.uint8).astype(np.int8) - 48
        diff = d != umax
        first = diff.argmax(axis=1)
        over = diff.any(axis=1) & (d[np.arange(big.size), first] > umax[first])
        if over.any():
            ln = int(lines_with_ids[big[np.flatnonzero(over)[0]]])
            raise InputError(f"{path}:{ln + 1}: object id "
                             f"{_line_text(data, buf, is_nl, ln)!r} does not fit in 64 bits")
    return ids


def read_ids(path: str, fmt: str | None = None) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
    """(clock times in seconds or None, object ids, object sizes in bytes or None) of a libCacheSim
    trace in `fmt` ('oracleGeneral' or 'csv'; detected when None)."""
    fmt = fmt or detect_format(path)
    if fmt == "oracleGeneral":
        return read_oracle_general(path)
    if fmt == "csv":
        return None, read_csv_ids(path), None
    raise InputError(f"{path}: not a libCacheSim trace (format {fmt})")


def ids_to_trace(ids: np.ndarray, clock: np.ndarray | None = None, source: str = "",
                 time: str = "index", sizes: np.ndarray | None = None) -> Trace:
    """One file of the objects' pages, mapped once; one READ of its object's pages per request. An
    object takes ceil(size / 4 KiB) pages of its largest size in `sizes` (bytes, per request), one
    page without sizes or up to 4 KiB.

    Time (the trace's t column, ns): with time="index" (the default) request i is at i * 1 us, so
    the emulator's timeline (sampled every 10 ms of trace time by default) has a row per 10,000
    requests, and miss curves read per request as libCacheSim users plot them. With time="clock" t
    is the trace's own clock_time (seconds, second resolution) since the first request, held
    monotone (a clock that steps back keeps the last value, so the request order stays the
    trace's); a day-long trace then spans 86,400 s of trace time.
    """
    ids = np.asarray(ids)
    if ids.size == 0:
        raise InputError(f"{source or 'trace'}: empty trace: no requests")
    if time not in ("index", "clock"):
        raise ValueError(f"time must be 'index' or 'clock', not {time!r}")
    n = ids.size
    # two header rows, then the requests; columns that stay 0 come zeroed from the allocator, so
    # their pages are never written (nor counted in RSS)
    cols = {k: (np.zeros if k in ZERO_COLUMNS else np.empty)(n + 2, dt) for k, dt in COLUMNS.items()}
    pages = cols["page"][2:]
    # the mapped file's pages are not needed again (unless for the clock): RSS falls by them
    npages, obj_size = dense_ids(ids, out=pages, sizes=sizes, keep=time == "clock")
    span = None
    if obj_size is not None and (obj_size > PAGE_SIZE).any():
        span = np.maximum(1, -(-obj_size.astype(np.int64) // PAGE_SIZE))    # pages per object, id order
        first_page = np.concatenate(([0], np.cumsum(span)[:-1]))
        cols["npages"][2:] = span[pages]
        np.take(first_page, pages, out=pages)
        npages = int(span.sum())
    head, mid = _header(source, npages)
    for k in COLUMNS:
        cols[k][:2] = head.cols[k]
    # one READ of its object's pages per request, in request order: the rows TraceBuilder.ranges()
    # would give, written once into their columns; in time order and inside the mapping by construction
    t = cols["t"][2:]
    if time == "clock" and clock is not None:
        np.maximum.accumulate(np.asarray(clock, np.int64), out=t)
        t -= t[0]
        t *= 1_000_000_000
        _drop_pages(ids)
    else:
        t[:] = NS_PER_REQUEST                  # i * NS_PER_REQUEST, without an arange beside it
        np.cumsum(t, out=t)
        t -= NS_PER_REQUEST
    for k, v in (("pid", PID), ("op", Op.READ), ("map", mid), ("npages", 1), ("arg", 0), ("flags", 0)):
        if not (k == "npages" and span is not None) and not (k in ZERO_COLUMNS and v == 0):
            cols[k][2:] = v
    return Trace(cols, head.meta, validated=True)


def _header(source: str, npages: int) -> tuple[Trace, int]:
    """The trace's first two rows: the process and its mapping of the objects' file, at time 0
    (validated, small); and the mapping's id."""
    tb = TraceBuilder(source=source)
    fid = tb.file(source or "libcachesim-objects", npages)
    tb.process(0, PID, "libcachesim-replay")
    mid = tb.mmap(0, PID, "objects", npages, file=fid, flags=MapFlag.SHARED | MapFlag.READ)
    return tb.build(), mid


class OracleGeneralStream:
    """An oracleGeneral trace (plain or `.zst`) for `Emulator.replay_batches`, read twice a slice at a
    time into one buffer, never whole: memory grows with the objects, not the requests, and no page
    is faulted in afresh per request (a replay of a 64 M-request trace otherwise spends as long in
    the kernel faulting in its columns as in the emulator). The first pass numbers the distinct ids
    (c_ext/idmap.c) and keeps each object's largest size; the second looks each request's id up in
    the same table and fills the same column buffers batch after batch. The result is the one
    ids_to_trace()'s trace gives (time="index"), event for event.

    `header` is the trace's first rows (the process and its mapping), `events` the whole trace's
    count (header included, as len() of the loaded trace), `duration_ns` its span; `batches()` the
    requests, once."""

    def __init__(self, path: str, slice_records: int | None = None):
        self.path, self.n = path, slice_records or STREAM_SLICE
        slice_records = self.n
        if not path.lower().endswith(ZST):
            _whole_records(path, os.path.getsize(input_file(path, expected="trace file")))
        from ..engine.kernel import ffi, lib         # here: the C core (the readers above work without)
        self._ffi, self._lib = ffi, lib
        self._buf = bytearray(slice_records * RECORD.itemsize)
        self._first = np.empty(slice_records, np.int32)
        self._map = lib.km_idmap_new()
        if self._map == ffi.NULL:
            raise MemoryError
        # the first pass's numbers, while they take at most 4 * STREAM_KEEP bytes: the second pass
        # then reads them and not the file (no second lookup per request); past that, it looks up
        self._kept = []
        try:
            self.requests = 0
            for rec in self._slices():
                k = self._add(rec)
                self.requests += k
                if self._kept is not None and self.requests <= STREAM_KEEP:
                    self._kept.append(self._first[:k].copy())
                else:
                    self._kept = None
            if self.requests == 0:
                raise InputError(f"{path}: empty trace: no requests (of nonzero size) in the oracleGeneral file")
            uniq = np.empty(lib.km_idmap_size(self._map), np.uint64)
            lib.km_idmap_values(self._map, ffi.from_buffer("uint64_t[]", uniq))
            big = np.empty(uniq.size, np.uint32)
            lib.km_idmap_sizes(self._map, ffi.from_buffer("uint32_t[]", big))
        except BaseException:
            self.close()
            raise
        order = np.argsort(uniq, kind="stable")          # as dense_ids(): objects in id order
        span = np.maximum(1, -(-big[order].astype(np.int64) // PAGE_SIZE))
        first_page = np.concatenate(([0], np.cumsum(span)[:-1]))
        # per first-seen index: the object's first page and its page count
        self._page_of = np.empty(uniq.size, np.int64)
        self._page_of[order] = first_page
        self._span_of = None
        if (span > 1).any():
            self._span_of = np.empty(uniq.size, np.int64)
            self._span_of[order] = span
        self.header, self._mid = _header(os.path.basename(path), int(span.sum()))
        self.events = len(self.header) + self.requests
        self.duration_ns = (self.requests - 1) * NS_PER_REQUEST

    def close(self) -> None:
        if self._map is not None:
            self._lib.km_idmap_free(self._map)
            self._map = None

    def batches(self):
        """The requests as CoreBatch slices: the buffers are refilled for each, so a batch is good
        until the next one is asked for."""
        from ..engine.kernel import CoreBatch      # here: the C core's module (the readers above work without)
        n = self.n
        t0 = np.arange(n, dtype=np.int64) * NS_PER_REQUEST
        consts = {"task": np.zeros(n, np.int32), "op": np.full(n, Op.READ, np.uint8),
                  "map": np.zeros(n, np.int32), "arg": np.zeros(n, np.int64), "flags": np.zeros(n, np.uint32)}
        t, page = np.empty(n, np.int64), np.empty(n, np.int64)
        npages = np.ones(n, np.int64) if self._span_of is None else np.empty(n, np.int64)
        done = 0
        kept, self._kept = self._kept, None
        try:
            for i, rec in enumerate(kept if kept is not None else self._slices()):
                if kept is not None:                       # the first pass's numbers
                    k = len(rec)
                    np.take(self._page_of, rec, out=page[:k], mode="clip")
                    if self._span_of is not None:
                        np.take(self._span_of, rec, out=npages[:k], mode="clip")
                    kept[i] = None                         # given back as replayed
                else:                                      # the file again, each id looked up
                    rec = _nonzero(rec)
                    k = len(rec)
                    self._find(rec, self._page_of, page)
                    if self._span_of is not None:
                        self._find(rec, self._span_of, npages)
                np.add(t0[:k], done * NS_PER_REQUEST, out=t[:k])
                b = CoreBatch({k_: v[:k] for k_, v in consts.items()})
                b.update(t=t[:k], page=page[:k], npages=npages[:k])
                done += k
                if done > self.requests:                   # the file grew between the passes
                    raise InputError(f"{self.path}: the trace changed while it was read ({done:,} requests, "
                                     f"not the first pass's {self.requests:,}); replay it again once it is written")
                yield b
        finally:
            self.close()

    def _add(self, rec: np.ndarray) -> int:
        """Number the slice's ids (first pass); returns its request count."""
        ffi, rec = self._ffi, _nonzero(rec)
        if len(rec):
            base = ffi.cast("uint8_t *", rec.__array_interface__["data"][0])
            if self._lib.km_idmap_add(self._map, base + RECORD.fields["obj_id"][1], len(rec), RECORD.itemsize,
                                      ffi.cast("int32_t *", ffi.from_buffer("int32_t[]", self._first)),
                                      base + RECORD.fields["obj_size"][1]) < 0:
                raise MemoryError
        return len(rec)

    def _find(self, rec: np.ndarray, per_object: np.ndarray, out: np.ndarray) -> None:
        """out[i] = per_object[first-seen index of request i's object] (second pass: one lookup in C,
        no index array between)."""
        ffi = self._ffi
        base = ffi.cast("uint8_t *", rec.__array_interface__["data"][0]) + RECORD.fields["obj_id"][1]
        found = self._lib.km_idmap_find(self._map, base, len(rec), RECORD.itemsize,
                                        ffi.from_buffer("int64_t[]", per_object), ffi.from_buffer("int64_t[]", out))
        if found != len(rec):                          # the file changed between the passes
            raise InputError(f"{self.path}: the trace changed while it was read (an id the first pass "
                             "did not see); replay it again once it is written")

    def _slices(self):
        """The file's records, a slice at a time, read into the one buffer."""
        path, view = self.path, memoryview(self._buf)
        try:
            with open(path, "rb") as raw:
                f = _ZstReader(raw, path) if path.lower().endswith(ZST) else raw
                while True:
                    got = 0
                    while got < len(view):            # a stream may return less than asked
                        r = f.readinto(view[got:])
                        if not r:
                            break
                        got += r
                    if got % RECORD.itemsize:
                        raise InputError(f"{path}: truncated oracleGeneral trace: it ends inside a "
                                         f"{RECORD.itemsize}-byte record")
                    if got:
                        yield np.frombuffer(self._buf, RECORD, count=got // RECORD.itemsize)
                    if got < len(view):
                        return
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror})")


def _nonzero(rec: np.ndarray) -> np.ndarray:
    """The records of nonzero size (libCacheSim's ignore_size_zero_req): the slice itself when all are."""
    return rec if rec["obj_size"].all() else rec[rec["obj_size"] != 0]


def _zst_chunks(raw, path: str):
    """A zstd file's frames, one after another, decompressed a chunk at a time; a last frame that ends
    early is an InputError (zstandard's stream_reader would end quietly)."""
    import zstandard                          # here: only a compressed trace needs it
    dctx = zstandard.ZstdDecompressor()
    d, fed = dctx.decompressobj(), False
    while data := raw.read(1 << 20):
        try:
            while data:
                out = d.decompress(data)
                fed, data = True, b""
                if d.eof:                         # the next frame starts in what is left
                    data, d, fed = d.unused_data, dctx.decompressobj(), False
                if out:
                    yield out
        except zstandard.ZstdError as e:
            raise InputError(f"{path}: not a zstd-compressed trace ({e})") from None
    if fed and not d.eof:
        raise InputError(f"{path}: truncated zstd-compressed trace: its last frame ends early")


class _ZstReader:
    """readinto() over _zst_chunks()."""

    def __init__(self, raw, path: str):
        self.chunks, self.out = _zst_chunks(raw, path), memoryview(b"")

    def readinto(self, view) -> int:
        if not self.out:
            self.out = memoryview(next(self.chunks, b""))
        k = min(len(view), len(self.out))
        view[:k] = self.out[:k]
        self.out = self.out[k:]
        return k


def _drop_pages(a: np.ndarray, start: int = 0, length: int | None = None) -> None:
    """Let the kernel take back the resident pages of the mapped file `a` was read from, all or the
    whole pages of bytes [start, start + length) of `a` (a view of it stays readable: pages fault back
    in from the page cache if read again). Nothing for an array not read from a mapped file."""
    m, off = a, None
    while m is not None and not isinstance(m, mmap.mmap):
        m = m.obj if isinstance(m, memoryview) else getattr(m, "base", None)
    if m is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    if length is None:
        m.madvise(mmap.MADV_DONTNEED)
        return
    buf = np.frombuffer(m, np.uint8)
    off = a.__array_interface__["data"][0] - buf.__array_interface__["data"][0] + start
    lo = -(-off // mmap.PAGESIZE) * mmap.PAGESIZE            # whole pages inside the bytes only
    hi = min((off + length) // mmap.PAGESIZE * mmap.PAGESIZE, len(m))
    if hi > lo:
        m.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


def dense_ids(ids: np.ndarray, out: np.ndarray | None = None, sizes: np.ndarray | None = None,
              keep: bool = True) -> tuple[int, np.ndarray | None]:
    """Each request's object numbered densely in id order, into `out` (int64, or a new array: as
    np.unique(ids, return_inverse=True) numbers them). Returns the number of objects and, with
    `sizes` (per request, uint32, as an oracleGeneral file holds them), each object's largest size
    in id order. The C core's hash table finds the distinct ids in one pass over the ids where they
    lie (a strided view of a mapped file is not copied); only the distinct ids are sorted. With
    keep=False the pages of a mapped file the ids lie in are given back as they are read."""
    out = np.empty(ids.size, np.int64) if out is None else out
    try:
        from ..engine.kernel import ffi, lib      # here: the C core (a build without it sorts instead)
    except ImportError:
        uniq, inv = np.unique(ids, return_inverse=True)
        out[:] = inv.reshape(-1)
        if sizes is None:
            return int(uniq.size), None
        big = np.zeros(uniq.size, np.uint32)
        np.maximum.at(big, out, np.asarray(sizes, np.uint32))
        return int(uniq.size), big
    if ids.dtype.itemsize != 8 or ids.dtype.kind not in "iu" or ids.ndim != 1:
        ids = np.ascontiguousarray(ids.reshape(-1), np.int64 if ids.dtype.kind == "i" else np.uint64)
    if sizes is not None and (sizes.dtype != np.uint32 or sizes.shape != ids.shape or sizes.strides != ids.strides):
        both = np.empty(ids.size, [("id", ids.dtype), ("size", "<u4")])   # the core reads both one stride apart
        both["id"], both["size"] = ids, sizes
        ids, sizes = both["id"], both["size"]
    first = np.empty(ids.size, np.int32)
    m = lib.km_idmap_new()
    if m == ffi.NULL:
        raise MemoryError
    try:
        # a slice at a time, each slice's pages of a mapped file given back once read (keep=False)
        base = ffi.cast("uint8_t *", ids.__array_interface__["data"][0])
        sz = ffi.NULL if sizes is None else ffi.cast("uint8_t *", sizes.__array_interface__["data"][0])
        step, st = SLICE, ids.strides[0]
        for a in range(0, ids.size, step):
            k = min(step, ids.size - a)
            if lib.km_idmap_add(m, base + a * st, k, st, ffi.cast("int32_t *", ffi.from_buffer("int32_t[]", first)) + a,
                                ffi.NULL if sizes is None else sz + a * st) < 0:
                raise MemoryError
            if not keep:
                _drop_pages(ids, a * abs(st), k * abs(st))
        uniq = np.empty(lib.km_idmap_size(m), np.uint64)
        lib.km_idmap_values(m, ffi.from_buffer("uint64_t[]", uniq))
        big = None
        if sizes is not None:
            big = np.empty(uniq.size, np.uint32)
            lib.km_idmap_sizes(m, ffi.from_buffer("uint32_t[]", big))
    finally:
        lib.km_idmap_free(m)
    order = np.argsort(uniq.view(ids.dtype), kind="stable")
    rank = np.empty(uniq.size, np.int64)       # first-seen index -> place in id order
    rank[order] = np.arange(uniq.size)
    np.take(rank, first, out=out, mode="clip")      # (mode="raise" would buffer a copy of out)
    return int(uniq.size), (None if big is None else big[order])


def load_libcachesim(path: str, fmt: str | None = None, time: str = "index") -> Trace:
    # each request becomes a row of 45 bytes, with 4 more for its first-seen index and 4 for the
    # replay's task column, beside the mapped file: about 4 bytes of memory per byte of an
    # oracleGeneral file (24-byte records); a csv is parsed a byte at a time, more
    size = _content_size(input_file(path, expected="trace file"))
    check_memory(size * (4 if (fmt or detect_format(path)) == "oracleGeneral" else 24),
                 f"{path} ({size:,} bytes)")
    clock, ids, sizes = read_ids(path, fmt)
    return ids_to_trace(ids, clock, source=os.path.basename(path), time=time, sizes=sizes)


def load_any(path: str) -> Trace:
    """A trace in any format `kmemsim replay` takes: kmemsim Parquet, oracleGeneral, or csv."""
    fmt = detect_format(path)
    if fmt == "parquet":
        return trace.load(path)
    return load_libcachesim(path, fmt)


# ------------------------------------------------------------------------------------------------
# writers (tests and the benchmark)

def write_oracle_general(path: str, obj_ids, obj_size=1, clock_time=None) -> None:
    """Write requests as oracleGeneral records; next_access_vtime is computed as libCacheSim's
    traceConv does (index of the next request to the same object, -1 when none)."""
    obj_ids = np.asarray(obj_ids, np.uint64)
    n = obj_ids.size
    rec = np.zeros(n, RECORD)
    rec["clock_time"] = np.arange(n, dtype=np.uint32) if clock_time is None else clock_time
    rec["obj_id"] = obj_ids
    rec["obj_size"] = obj_size
    # next access: sort stably by id; within an id, the next row's index
    order = np.argsort(obj_ids, kind="stable")
    nxt = np.full(n, -1, np.int64)
    same = obj_ids[order[1:]] == obj_ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    rec["next_access_vtime"] = nxt
    with open(path, "wb") as f:
        f.write(rec.tobytes())


def write_csv_ids(path: str, obj_ids, header: str | None = None) -> None:
    obj_ids = np.asarray(obj_ids, np.uint64)
    with open(path, "w") as f:
        if header:
            f.write(header + "\n")
        np.savetxt(f, obj_ids, fmt="%d")


# ------------------------------------------------------------------------------------------------

def detect_format(path: str) -> str:
    """'parquet', 'oracleGeneral' or 'csv', from the extension, else from the content."""
    low = path.lower()
    if low.endswith(ZST):
        low = low[:-len(ZST)]                     # the name inside says the format; else its bytes
        if low.endswith(PARQUET_EXTS):
            raise InputError(f"{path}: a compressed Parquet trace; decompress it first (zstd -d {path}): "
                             "Parquet compresses its own columns")
    head = _read_bytes(path, 4096)
    if path.lower().endswith(ZST) and head.startswith(b"PAR1"):
        raise InputError(f"{path}: a compressed Parquet trace; decompress it first (zstd -d {path}): "
                         "Parquet compresses its own columns")
    if head.startswith(b"GGUF") or low.endswith(".gguf"):
        raise InputError(f"{path}: a GGUF model, not a trace; make its trace with "
                         "'kmemsim workload llama MODEL.gguf ... -o TRACE' (or compare the model directly)")
    if low.endswith(PARQUET_EXTS) or head.startswith(b"PAR1"):
        return "parquet"
    if low.endswith(BINARY_EXTS):
        return "oracleGeneral"
    if low.endswith(CSV_EXTS):
        return "csv"
    if not head:
        raise InputError(f"{path}: empty trace: the file is empty")
    text = all(32 <= b < 127 or b in (9, 10, 13) for b in head[:512])
    return "csv" if text else "oracleGeneral"


def _content_size(path: str) -> int:
    """The trace's size in bytes: a `.zst` file's decompressed size, from its frame header where the
    compressor wrote it (zstd does), else an estimate (10x, above the ratios of libCacheSim's traces)."""
    size = os.path.getsize(path)
    if not path.lower().endswith(ZST):
        return size
    import zstandard  # here: only a compressed trace needs it
    with open(path, "rb") as f:
        head = f.read(18)                             # a frame header's most
    try:
        known = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        known = -1
    return known if known >= 0 else 10 * size


def _read_bytes(path: str, n: int = -1) -> bytes:
    """The file's first n bytes (all by default; decompressed for a `.zst` file), or one clear
    InputError."""
    input_file(path, expected="trace file")
    try:
        with open(path, "rb") as f:
            if not path.lower().endswith(ZST):
                return f.read(n)
            import zstandard                      # here: only a compressed trace needs it
            dctx = zstandard.ZstdDecompressor()
            try:
                if n >= 0:
                    with dctx.stream_reader(f, read_across_frames=True) as z:
                        return z.read(n)
                return b"".join(_zst_chunks(f, path))
            except zstandard.ZstdError as e:
                raise InputError(f"{path}: not a zstd-compressed trace ({e})") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a trace file")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})")


def _line_text(data: bytes, buf: np.ndarray, is_nl: np.ndarray, ln: int, limit: int = 40) -> str:
    nls = np.flatnonzero(is_nl)
    start = 0 if ln == 0 else int(nls[ln - 1]) + 1
    end = int(nls[ln]) if ln < len(nls) else len(buf)
    s = data[start:end].decode("utf-8", "replace").strip()
    return s if len(s) <= limit else s[:limit] + "..."
