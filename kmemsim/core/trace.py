"""The trace: one schema for everything that touches memory (docs/trace-format.md).

A trace is a table of range events (one row covers a whole page range, not one page) plus a small
metadata block naming files, processes, mappings and phases. On disk it is Parquet with the schema
version in the file metadata; in memory it is a dict of numpy columns.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

import numpy as np

from .atomic import atomic_path
from .errors import InputError
from .paths import input_file
from .units import PAGE_SIZE

SCHEMA_VERSION = 1
META_KEY = b"kmemsim.trace"


class Op(IntEnum):
    """Event operations. Values are stable: they are stored on disk and read by the C core."""
    PROC_START = 0   # arg = oom_score_adj (lmkd kill priority: higher dies first)
    PROC_EXIT = 1
    MMAP = 2         # map: new mapping id; page = file pgoff (0 for anon); npages = length;
                     # arg = file id or -1 for anonymous; flags = MapFlag | class << CLASS_SHIFT
    MUNMAP = 3       # map, page, npages: the range to unmap (whole mapping when npages covers it)
    READ = 4         # map, page (index in mapping), npages; arg > 0: a matmul's weight, read by
                     # the emulator's threads in chunks of arg pages taken in turn (0: one reader)
    WRITE = 5        # flags: WriteFlag
    MADVISE = 6      # map, page, npages, arg = Advice
    FADVISE = 7      # arg = Advice; map = -1; page/npages are file pages; flags = file id
    MLOCK = 8
    MUNLOCK = 9
    PHASE = 10       # arg = phase id (index into meta["phases"]); marks the start of that phase
    FREAD = 11       # read(2)/pread of a file: map = -1, flags = file id, page/npages = file pages
    SET_OOM_ADJ = 12 # arg = the process's new oom_score_adj (Android moves apps as they switch)
    OPEN = 13        # open(2) of a file: a new struct file, so fresh readahead state; flags = file id
    KMEM = 14        # npages of kernel memory charged to the memcg that the trace does not model
                     # otherwise (slab: dentries, inodes, task structs); never reclaimed
    DIO_READ = 15    # pread(2) of an O_DIRECT fd: map = -1, flags = file id, page/npages = file pages;
                     # from the device, not through the page cache (pgpgin; the task waits for it);
                     # arg 1: one of a batch in flight together, the batch's next read without it
                     # waits for all (an I/O worker pool: llama.cpp #25294's expert reads)
    DIO_WRITE = 16   # pwrite(2) of an O_DIRECT fd: as DIO_READ; pgpgout, and the range's cached
                     # pages are removed from the page cache with no shadow entry


class MapFlag(IntFlag):
    SHARED = 1 << 0      # MAP_SHARED (else MAP_PRIVATE)
    READ = 1 << 1        # PROT_READ
    WRITE = 1 << 2       # PROT_WRITE
    EXEC = 1 << 3        # PROT_EXEC (VM_EXEC: shrink_active_list keeps referenced exec file folios)
    POPULATE = 1 << 4    # MAP_POPULATE
    LOCKED = 1 << 5      # MAP_LOCKED / mlock at map time (unevictable)
    WEIGHTS = 1 << 6     # model weights (DW's flag; also used for reporting by class)


class WriteFlag(IntFlag):
    """flags of WRITE events."""
    ZERO = 1 << 0        # the write stores zeros (memset, ggml_backend_buffer_clear): same-filled in zram


CLASS_SHIFT = 8          # bits 8..15 of MMAP flags: content class for the zram compressibility model


class PageClass(IntEnum):
    """What an anonymous page holds; decides its compressed size in zram (see zram.c)."""
    HEAP = 0       # generic app heap (~ the kernel doc's 2.7:1 mixed data)
    ZERO = 1       # never written or cleared: same-filled, stored without data
    KV_F16 = 2     # fp16 KV cache: barely compresses (mzCache: residual 0.92)
    KV_Q8 = 3      # 8-bit KV cache
    WEIGHTS_Q = 4  # quantised weights copied to anonymous memory (repack, --no-mmap)
    WEIGHTS_F16 = 5
    COMPUTE = 6    # activations/compute buffers


# The operations whose `flags` column is a file id (one list: validation, merge and the replay's
# dense renumbering all go by it).
FILE_ID_OPS = (Op.FADVISE, Op.FREAD, Op.OPEN, Op.DIO_READ, Op.DIO_WRITE)


class Advice(IntEnum):
    """madvise/fadvise advice codes, as in include/uapi/linux/mman.h and fadvise.h."""
    NORMAL = 0
    RANDOM = 1
    SEQUENTIAL = 2
    WILLNEED = 3
    DONTNEED = 4
    COLD = 20         # MADV_COLD
    PAGEOUT = 21      # MADV_PAGEOUT


COLUMNS = {
    "t": np.int64,       # nanoseconds since trace start, never decreasing
    "pid": np.int32,
    "op": np.uint8,
    "map": np.int32,     # mapping id, -1 when the op has none
    "page": np.int64,
    "npages": np.int64,
    "arg": np.int64,
    "flags": np.uint32,
}

MAX_PAGES = 1 << 40      # 4 PiB of 4 KiB pages: anything larger is corrupt


@dataclass
class Trace:
    """Columns (numpy arrays of equal length) plus metadata.

    meta keys: files: [{id, path, pages}], processes: [{pid, name}], maps: [{id, name}],
    phases: [name, ...], source: free text.
    """
    cols: dict
    meta: dict = field(default_factory=dict)
    validated: bool = False    # set by validate(): consumers skip a second check

    def __len__(self):
        return len(self.cols["t"])

    def __getitem__(self, name):
        return self.cols[name]


def empty_meta():
    return {"files": [], "processes": [], "maps": [], "phases": [], "source": ""}


def from_rows(rows, meta=None) -> Trace:
    """Build a trace from (t, pid, op, map, page, npages, arg, flags) tuples. For tests and small
    generators; large generators fill the column arrays directly."""
    arr = np.array(rows, dtype=np.int64).reshape(-1, len(COLUMNS))
    cols = {name: arr[:, i].astype(dt) for i, (name, dt) in enumerate(COLUMNS.items())}
    return Trace(cols, meta if meta is not None else empty_meta())


def concat(parts: list[np.ndarray] | list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]).astype(dt) for k, dt in COLUMNS.items()}


def _meta_list(meta, key, kind):
    v = meta.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, kind) for x in v):
        raise InputError(f"trace metadata {key!r} is not a list of "
                         f"{'objects' if kind is dict else 'names'}")
    return v


def _meta_int(entry, key, where, lo, hi):
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InputError(f"trace metadata {where}: {key} = {v!r}, expected a whole number in {lo}..{hi:,}")
    return v


def validate_meta(meta) -> None:
    """The metadata block: files (unique ids, sizes in range), processes, maps, phases."""
    if not isinstance(meta, dict):
        raise InputError(f"trace metadata is a {type(meta).__name__}, expected an object")
    ids = set()
    for i, f in enumerate(_meta_list(meta, "files", dict)):
        fid = _meta_int(f, "id", f"files[{i}]", 0, (1 << 32) - 1)
        _meta_int(f, "pages", f"files[{i}]", 0, MAX_PAGES)
        if not isinstance(f.get("path"), str):
            raise InputError(f"trace metadata files[{i}]: path = {f.get('path')!r}, expected a string")
        if fid in ids:
            raise InputError(f"trace metadata files[{i}]: file id {fid} appears twice")
        ids.add(fid)
    for i, p in enumerate(_meta_list(meta, "processes", dict)):
        _meta_int(p, "pid", f"processes[{i}]", -(1 << 31), (1 << 31) - 1)
    for i, m in enumerate(_meta_list(meta, "maps", dict)):
        _meta_int(m, "id", f"maps[{i}]", 0, (1 << 31) - 1)
    _meta_list(meta, "phases", str)


def validate(tr: Trace) -> None:
    """Check a trace before anything consumes it; raise InputError naming the first bad row."""
    c = tr.cols
    validate_meta(tr.meta)
    missing = [k for k in COLUMNS if k not in c]
    if missing:
        raise InputError(f"trace lacks column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    n = len(c["t"])
    for k, dt in COLUMNS.items():
        if len(c[k]) != n:
            raise InputError(f"trace column {k!r} has {len(c[k])} rows, column 't' has {n}")
        if not np.issubdtype(np.asarray(c[k]).dtype, np.integer):
            raise InputError(f"trace column {k!r} is {c[k].dtype}, expected integers ({np.dtype(dt)})")
        info = np.iinfo(dt)
        if n and (c[k].min() < info.min or c[k].max() > info.max):
            bad = int(np.flatnonzero((c[k] < info.min) | (c[k] > info.max))[0])
            raise InputError(f"trace row {bad}: {k} = {c[k][bad]} does not fit its column ({np.dtype(dt)})")
    for k, dt in COLUMNS.items():
        c[k] = np.ascontiguousarray(c[k], dtype=dt)

    def first(mask, what):
        """Fail at the first row of a boolean mask over all rows."""
        first_of(np.flatnonzero(mask), what)

    def first_of(rows, what):
        """Fail at the first of some row numbers (in increasing order)."""
        if len(rows):
            i = int(rows[0])
            row = ", ".join(f"{k}={c[k][i]}" for k in COLUMNS)
            raise InputError(f"trace row {i}: {what} ({row})")

    first(c["t"] < 0, "negative time")
    first_of(np.flatnonzero(c["t"][1:] < c["t"][:-1]) + 1, "time goes backwards")
    first(c["op"] > max(Op), f"unknown op (known: 0..{int(max(Op))})")
    first((c["npages"] < 0) | (c["npages"] > MAX_PAGES), "page count out of range")
    first((c["page"] < 0) | (c["page"] > MAX_PAGES), "page number out of range")
    op = c["op"]
    ranged = np.isin(op, [Op.MMAP, Op.MUNMAP, Op.READ, Op.WRITE, Op.MADVISE, Op.MLOCK, Op.MUNLOCK])
    first(ranged & (c["map"] < 0), "range operation without a mapping id")

    file_pages = {int(f["id"]): int(f["pages"]) for f in tr.meta.get("files", [])}
    mm = op == Op.MMAP
    known_files = np.fromiter(file_pages, np.int64, len(file_pages))
    first(mm & (c["arg"] != -1) & ~np.isin(c["arg"], known_files),
          "MMAP names a file not in the trace metadata (arg is a file id, or -1 for anonymous)")
    first(mm & (c["npages"] == 0), "MMAP of zero pages")
    first(mm & ((c["flags"] >> CLASS_SHIFT) & 0xFF > max(PageClass)),
          f"MMAP of an unknown page class (flags bits 8..15: 0..{int(max(PageClass))})")
    first(np.isin(op, FILE_ID_OPS)
          & ~np.isin(c["flags"].astype(np.int64), known_files),
          "FADVISE/FREAD/OPEN/DIO_READ/DIO_WRITE names a file not in the trace metadata (flags is the file id)")
    first((op == Op.READ) & (c["arg"] < 0), "READ with a negative chunk (arg: pages each thread takes, or 0)")
    first((op == Op.PHASE) & ((c["arg"] < 0) | (c["arg"] >= max(1, len(tr.meta.get("phases", []))))),
          "PHASE names a phase not in the trace metadata")
    first(np.isin(op, [Op.PROC_START, Op.SET_OOM_ADJ]) & ((c["arg"] < -1000) | (c["arg"] > 1000)),
          "oom_score_adj outside -1000..1000")

    # Every mapping is created once, before it is used, and accesses stay inside it.
    mids = c["map"]
    map_rows = np.flatnonzero(mm)
    ids, first_idx = np.unique(mids[map_rows], return_index=True)
    if len(ids) != len(map_rows):
        dup = np.setdiff1d(np.arange(len(map_rows)), first_idx)[0]
        first_of([map_rows[dup]], "mapping id created twice")
    uses = np.flatnonzero(ranged & ~mm)
    pos = np.searchsorted(ids, mids[uses])
    pos_ok = pos < len(ids)
    found = np.zeros(len(uses), bool)
    found[pos_ok] = ids[pos[pos_ok]] == mids[uses][pos_ok]
    first_of(uses[~found], "mapping used but never created")
    created_at = np.full(len(uses), -1)
    created_at[found] = map_rows[first_idx[pos[found]]]
    first_of(uses[found & (created_at > uses)], "mapping used before it is created")
    length = np.zeros(len(uses), np.int64)
    length[found] = c["npages"][map_rows[first_idx[pos[found]]]]
    first_of(uses[found & (c["page"][uses] + c["npages"][uses] > length)],
             "range runs past the end of its mapping")
    if mm.any():
        fmask = mm & (c["arg"] >= 0)
        ends = c["page"][fmask] + c["npages"][fmask]
        sizes = np.array([file_pages.get(int(f), 0) for f in c["arg"][fmask]], np.int64)
        first_of(np.flatnonzero(fmask)[ends > sizes], "file mapping runs past the end of the file")
    tr.validated = True


def save(tr: Trace, path: str) -> None:
    """Write Parquet atomically (temp file, then rename): a failed write leaves nothing behind."""
    import pyarrow as pa                 # here, as in load(): 0.2 s to import, and every command imports this module
    import pyarrow.parquet as pq
    validate(tr)
    meta = dict(tr.meta)
    meta["schema_version"] = SCHEMA_VERSION
    table = pa.table({k: tr.cols[k] for k in COLUMNS})
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def load(path: str) -> Trace:
    """Read and validate a kmemsim Parquet trace."""
    import pyarrow as pa                 # here, as in save(): 0.2 s to import (start-up)
    import pyarrow.parquet as pq
    path = input_file(path, expected="kmemsim trace (.parquet)")
    try:
        table = pq.read_table(path)
        names = table.column_names
    except FileNotFoundError:
        raise InputError(f"{path}: no such file")
    except (pa.ArrowException, OSError, ValueError) as e:     # ValueError: names not UTF-8
        raise InputError(f"{path}: not a readable Parquet trace ({(str(e).splitlines() or [''])[0][:120]})")
    md = table.schema.metadata or {}
    if META_KEY not in md:
        raise InputError(f"{path}: Parquet file without kmemsim trace metadata; "
                         "write traces with kmemsim or convert them first")
    try:
        meta = json.loads(md[META_KEY])
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: its kmemsim trace metadata is not JSON ({(str(e).splitlines() or [''])[0][:80]})")
    if not isinstance(meta, dict):
        raise InputError(f"{path}: its kmemsim trace metadata is a {type(meta).__name__}, expected an object")
    ver = meta.pop("schema_version", None)
    if ver != SCHEMA_VERSION:
        raise InputError(f"{path}: trace schema version {ver}, this kmemsim reads version {SCHEMA_VERSION}")
    cols = {}
    for k in COLUMNS:
        if k not in names:
            raise InputError(f"{path}: trace lacks column {k!r}")
        try:
            cols[k] = table.column(k).to_numpy()
        except (pa.ArrowException, ValueError, TypeError) as e:
            raise InputError(f"{path}: trace column {k!r} cannot be read as numbers "
                             f"({(str(e).splitlines() or [''])[0][:80]})")
    tr = Trace(cols, meta)
    try:
        validate(tr)
    except InputError as e:
        raise InputError(f"{path}: {e}")
    return tr


class TraceBuilder:
    """Collects events in vectorised chunks and names files, mappings and phases as it goes.

    Generators call `file`, `mmap`, `phase` for the few structural events and `ranges` with whole
    numpy arrays for the many accesses; `build` sorts stably by time and returns a Trace.
    """

    def __init__(self, source=""):
        self.meta = empty_meta()
        self.meta["source"] = source
        self._chunks = []
        self._next_map = 0
        self._phase_ids = {}

    def file(self, path, pages):
        fid = len(self.meta["files"])
        self.meta["files"].append({"id": fid, "path": str(path), "pages": int(pages)})
        return fid

    def process(self, t, pid, name, oom_score_adj=0):
        self.meta["processes"].append({"pid": int(pid), "name": name})
        self.event(t, pid, Op.PROC_START, arg=oom_score_adj)

    def mmap(self, t, pid, name, npages, file=-1, pgoff=0, flags=0, cls=PageClass.HEAP):
        mid = self._next_map
        self._next_map += 1
        self.meta["maps"].append({"id": mid, "name": name})
        self.event(t, pid, Op.MMAP, mid, pgoff, npages, file, int(flags) | (int(cls) << CLASS_SHIFT))
        return mid

    @property
    def next_map(self) -> int:
        """The id the next mmap() gets."""
        return self._next_map

    def alive_maps(self, pid, first=0) -> list:
        """(map id, pages) of pid's mappings with id >= first that no MUNMAP so far took whole."""
        size, gone = {}, set()
        for c in self._chunks:
            op, mp, pg, npg, p = c["op"], c["map"], c["page"], c["npages"], c["pid"]
            sel = (mp >= first) & (p == pid) & ((op == Op.MMAP) | (op == Op.MUNMAP))
            for o, m, a, n in zip(op[sel], mp[sel], pg[sel], npg[sel]):
                m = int(m)
                if o == Op.MMAP:
                    size[m] = int(n)
                elif a == 0 and int(n) == size.get(m):
                    gone.add(m)
        return [(m, n) for m, n in sorted(size.items()) if m not in gone]

    def phase(self, t, pid, name):
        if name not in self._phase_ids:
            self._phase_ids[name] = len(self.meta["phases"])
            self.meta["phases"].append(name)
        self.event(t, pid, Op.PHASE, arg=self._phase_ids[name])

    def event(self, t, pid, op, map=-1, page=0, npages=0, arg=0, flags=0):
        self._chunks.append({k: np.array([v], dt) for (k, dt), v in
                             zip(COLUMNS.items(), (t, pid, op, map, page, npages, arg, flags))})

    def ranges(self, t, pid, op, map, page, npages, arg=0, flags=0):
        """Many events of one op at once; every argument may be a scalar or an array."""
        t = np.asarray(t, np.int64)
        n = max(np.size(x) for x in (t, pid, map, page, npages, arg, flags))
        vals = (t, pid, op, map, page, npages, arg, flags)
        self._chunks.append({k: np.broadcast_to(np.asarray(v, dt), (n,)).copy()
                             for (k, dt), v in zip(COLUMNS.items(), vals)})

    def build(self) -> Trace:
        cols = concat(self._chunks) if self._chunks else {k: np.zeros(0, dt) for k, dt in COLUMNS.items()}
        order = np.argsort(cols["t"], kind="stable")
        tr = Trace({k: v[order] for k, v in cols.items()}, self.meta)
        validate(tr)
        return tr


def merge(traces: list[Trace], source="merged") -> Trace:
    """Put several traces on one timeline: file, mapping and phase ids are renumbered (files with the
    same path become one file, so processes share its page cache); events sort stably by time."""
    meta = empty_meta()
    meta["source"] = source
    parts = []
    paths, phases, next_map = {}, {}, 0
    for tr in traces:
        c = {k: v.copy() for k, v in tr.cols.items()}
        fmap = {}
        for f in tr.meta.get("files", []):
            if f["path"] not in paths:
                paths[f["path"]] = len(meta["files"])
                meta["files"].append({"id": paths[f["path"]], "path": f["path"], "pages": f["pages"]})
            fmap[int(f["id"])] = paths[f["path"]]
        pmap = {}
        for i, name in enumerate(tr.meta.get("phases", [])):
            phases.setdefault(name, len(meta["phases"]))
            if phases[name] == len(meta["phases"]):
                meta["phases"].append(name)
            pmap[i] = phases[name]
        op = c["op"]
        has_map = c["map"] >= 0
        c["map"][has_map] += next_map
        for m in tr.meta.get("maps", []):
            meta["maps"].append({"id": int(m["id"]) + next_map, "name": m["name"]})
        # the next trace's ids start past every id this one used (in events or metadata)
        next_map = max(int(c["map"].max(initial=-1)), max((m["id"] for m in meta["maps"]), default=-1)) + 1
        remap = np.vectorize(lambda x: fmap.get(int(x), x), otypes=[np.int64])
        fm = (op == Op.MMAP) & (c["arg"] >= 0)
        if fm.any():
            c["arg"][fm] = remap(c["arg"][fm])
        fa = np.isin(op, FILE_ID_OPS)
        if fa.any():
            c["flags"][fa] = remap(c["flags"][fa].astype(np.int64)).astype(np.uint32)
        ph = op == Op.PHASE
        if ph.any():
            c["arg"][ph] = np.vectorize(lambda x: pmap[int(x)], otypes=[np.int64])(c["arg"][ph])
        meta["processes"] += tr.meta.get("processes", [])
        parts.append(c)
    cols = concat(parts)
    order = np.argsort(cols["t"], kind="stable")
    out = Trace({k: v[order] for k, v in cols.items()}, meta)
    validate(out)
    return out
