"""A kmemsim trace as a libCacheSim trace (`kmemsim trace export`): one request per page referenced,
so any of libCacheSim's policies can run a llama.cpp or scenario trace.

Objects are pages. Every page a trace can name gets one object id, in one flat space: each file's
pages first (file id order, `meta["files"][i]["pages"]` each), then each anonymous mapping's pages
(mapping id order); a file mapping's page p is its file's page `pgoff + p`, so two mappings of one
file, and read(2) of it, name the same objects, as they share one page cache in the kernel. Every
object has size PAGE_SIZE (4,096 bytes): a libCacheSim cache of `--mem` bytes holds as many objects
as kmemsim's plain LRU (`replay --policy lru --mem`) holds pages.

What is a reference (a request, in the trace's order, a range's pages in address order):
- READ and WRITE events: the range's pages;
- FREAD (read(2)): the file's pages;
- MMAP with MAP_POPULATE or MAP_LOCKED, and MLOCK: every page of the range (mm_populate() touches
  each, FOLL_TOUCH, as `populate_vma_page_range()` does in c_ext/mmap.c).
What is not: hints (madvise/fadvise WILLNEED is a prefetch, not a reference; kmemsim's plain LRU does
no readahead either), O_DIRECT reads and writes (they bypass the page cache), and the events that
free pages before the trace ends (munmap of anonymous memory, MADV_DONTNEED, FADV_DONTNEED, a
process's exit, an O_DIRECT write's invalidation): libCacheSim's formats have no delete, so its cache
keeps such pages until they age out. `frees()` counts those events so the command can say so.

Time: oracleGeneral's clock_time is whole seconds of trace time (t // 1e9); the csv format is one
object id per line under an `obj_id` header (what `kmemsim replay` and libCacheSim's csv reader with
`obj-id-col=1, has-header=true` take). Vectorised: no Python loop runs per request.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from ..core.limits import check_memory
from ..core.trace import Advice, MapFlag, Op, Trace
from ..core.units import PAGE_SIZE
from . import libcachesim_io as lio

FORMATS = ("oracleGeneral", "csv")
# bytes of this machine's memory per request while exporting: ids, times, the record, argsort's
# indices and the next-access column
BYTES_PER_REQUEST = 72


@dataclass
class Requests:
    """The trace's page references: object ids and times (ns), in trace order."""
    obj_id: np.ndarray     # uint64
    t: np.ndarray          # int64, ns
    objects: int           # size of the object space (files' pages + anonymous mappings' pages)

    def distinct(self) -> int:
        """Objects requested at least once (the misses of a cache that holds them all)."""
        seen = np.zeros(self.objects, bool)
        seen[self.obj_id] = True
        return int(seen.sum())


def _map_table(tr: Trace):
    """Per mapping id: (first object id of its page 0, its length in pages); files' bases."""
    c = tr.cols
    files = tr.meta.get("files", [])
    fpages = np.array([int(f["pages"]) for f in files], np.int64)
    fbase = np.concatenate(([0], np.cumsum(fpages)))
    mm = np.flatnonzero(c["op"] == Op.MMAP)
    ids = c["map"][mm].astype(np.int64)
    if len(np.unique(ids)) != len(ids):
        raise InputError(f"{tr.meta.get('source') or 'trace'}: a mapping id is mapped twice; "
                         "the export needs one MMAP per mapping id")
    nmaps = int(ids.max()) + 1 if len(ids) else 0
    base = np.full(nmaps, -1, np.int64)
    length = np.zeros(nmaps, np.int64)
    fid = c["arg"][mm].astype(np.int64)
    npg = c["npages"][mm].astype(np.int64)
    is_file = fid >= 0
    anon_len = np.where(is_file, 0, npg)
    anon_base = int(fbase[-1]) + np.concatenate(([0], np.cumsum(anon_len)[:-1]))
    base[ids] = np.where(is_file, fbase[np.clip(fid, 0, len(files))] + c["page"][mm].astype(np.int64), anon_base)
    length[ids] = npg
    return base, length, fbase, int(fbase[-1] + anon_len.sum())


def _expand(start: np.ndarray, n: np.ndarray, t: np.ndarray):
    """Each range [start, start + n) as its ids, in order; each id with its range's time."""
    n = n.astype(np.int64)
    total = int(n.sum())
    off = np.concatenate(([0], np.cumsum(n)[:-1]))
    ids = np.repeat(start.astype(np.int64) - off, n) + np.arange(total, dtype=np.int64)
    return ids, np.repeat(t, n)


def references(tr: Trace) -> Requests:
    c = tr.cols
    op = c["op"]
    base, _, fbase, objects = _map_table(tr)
    mflags = c["flags"]
    on_map = (op == Op.READ) | (op == Op.WRITE) | (op == Op.MLOCK) | \
             ((op == Op.MMAP) & ((mflags & (MapFlag.POPULATE | MapFlag.LOCKED)) != 0))
    on_file = op == Op.FREAD
    sel = np.flatnonzero(on_map | on_file)
    page = c["page"][sel].astype(np.int64)
    start = np.where(on_file[sel], fbase[np.clip(c["flags"][sel], 0, len(fbase) - 1)] + page,
                     0)
    m = on_map[sel]
    maps = c["map"][sel][m].astype(np.int64)
    # an MMAP's page is its pgoff (already in the base): the populate starts at the mapping's page 0
    mpage = np.where(op[sel][m] == Op.MMAP, 0, page[m])
    start[m] = base[maps] + mpage
    n = c["npages"][sel].astype(np.int64)
    need = int(n.sum())
    check_memory(need * BYTES_PER_REQUEST, f"exporting {need:,} page references")
    ids, t = _expand(start, n, c["t"][sel].astype(np.int64))
    return Requests(ids.astype(np.uint64), t, objects)


def frees(tr: Trace) -> int:
    """Events before the trace's last reference that free or drop pages (an anonymous mapping's
    munmap, DONTNEED, an exit, an O_DIRECT write): what libCacheSim's formats cannot replay. A file
    mapping's munmap frees nothing: its pages stay in the page cache."""
    c = tr.cols
    op, arg = c["op"], c["arg"]
    mm = op == Op.MMAP
    anon = np.zeros(int(c["map"][mm].max()) + 1 if mm.any() else 0, bool)
    anon[c["map"][mm]] = c["arg"][mm] < 0
    unmap = op == Op.MUNMAP
    unmap[unmap] = anon[c["map"][unmap]]
    ev = (unmap | (op == Op.PROC_EXIT) | (op == Op.DIO_WRITE)
          | (((op == Op.MADVISE) | (op == Op.FADVISE)) & (arg == Advice.DONTNEED)))
    refs = np.flatnonzero((op == Op.READ) | (op == Op.WRITE) | (op == Op.FREAD))
    return int(ev[:refs[-1]].sum()) if len(refs) else 0


def write(reqs: Requests, out, fmt: str) -> None:
    """The requests as a libCacheSim trace at `out` (a path; the caller writes it whole-or-absent)."""
    if fmt == "oracleGeneral":
        lio.write_oracle_general(str(out), reqs.obj_id, obj_size=PAGE_SIZE,
                                 clock_time=(reqs.t // 1_000_000_000).astype(np.uint32))
    elif fmt == "csv":
        lio.write_csv_ids(str(out), reqs.obj_id, header="obj_id")
    else:
        raise InputError(f"--format: {fmt!r}; known: {', '.join(FORMATS)}")
