"""One llama.cpp process's page events on their way to a TraceBuilder: the sink the session, the host
program's warm set and the KV manager (kmemsim.engine.managers) all write to.

Access events are collected as numpy chunks and handed to the builder in one piece per step
(TraceBuilder.event/ranges per row is slow); flushed before the builder adds anything that must sort
after them (phase marks, mmaps, exit)."""
from __future__ import annotations

import numpy as np

from ...core.trace import Op
from ...core.units import page_span


class Events:
    def __init__(self, builder, pid):
        self.b = builder
        self.pid = int(pid)
        self._buf = []                     # scalar events, as 8-tuples of the trace's columns
        self._chunks = []                  # numpy column chunks, in order after the scalars before them
        self.anon_maps = {}                # the process's anonymous buffers: map -> pages
        self.seen = {}                     # buffer -> pages touched so far (kept when track_seen)
        self.track_seen = False            # the host's growth asks what is new: keep `seen`

    def event(self, t, op, m=-1, page=0, npages=0, arg=0, flags=0):
        self._buf.append((int(t), self.pid, int(op), int(m), int(page), int(npages), int(arg), int(flags)))

    def access(self, t, op, m, off, nbytes, arg=0):
        """An event over the pages of byte range [off, off + nbytes) of mapping m."""
        a, n = page_span(off, nbytes)
        self._buf.append((int(t), self.pid, int(op), int(m), int(a), int(n), int(arg), 0))

    def ranges(self, t, op, m, a, n, arg=0):
        """One event per page run (first pages a, counts n) of mapping m, all at time t (arg: a
        madvise's advice)."""
        self._scalars_to_chunk()
        k = len(a)
        full = lambda v: np.full(k, v, np.int64)
        self._chunks.append((full(t), full(self.pid), full(int(op)), full(m), np.asarray(a, np.int64),
                             np.asarray(n, np.int64), full(int(arg)), full(0)))

    def _scalars_to_chunk(self):
        if self._buf:
            a = np.array(self._buf, np.int64)
            self._chunks.append(tuple(a[:, i] for i in range(8)))
            self._buf = []

    def flush(self):
        self._scalars_to_chunk()
        if self._chunks:
            if self.track_seen:
                for mm, mask in self.touched().items():
                    seen = self.seen.setdefault(mm, np.zeros(len(mask), bool))
                    seen |= mask
            cols = [np.concatenate([c[i] for c in self._chunks]) for i in range(8)]
            self.b.ranges(*cols)
            self._chunks = []

    def mmap(self, t, name, npages, **kw):
        """A new mapping of this process (TraceBuilder.mmap's keywords); anonymous ones are tracked."""
        self.flush()
        m = self.b.mmap(t, self.pid, name, npages, **kw)
        if kw.get("file", -1) < 0:
            self.anon_maps[m] = npages
        return m

    def file(self, path, npages):
        return self.b.file(path, npages)

    def touched(self):
        """Per anonymous buffer, the pages the events collected since the last flush (one ubatch's,
        after a phase mark) access: {map: bool array}."""
        self._scalars_to_chunk()
        if not self._chunks:
            return {}
        op, m, a, n = (np.concatenate([c[i] for c in self._chunks]) for i in (2, 3, 4, 5))
        sel = np.isin(m, list(self.anon_maps)) & ((op == Op.READ) | (op == Op.WRITE))
        out = {}
        for mm in np.unique(m[sel]):
            k = sel & (m == mm)
            size = self.anon_maps[int(mm)]
            d = np.zeros(size + 1, np.int64)
            np.add.at(d, np.minimum(a[k], size), 1)
            np.add.at(d, np.minimum(a[k] + n[k], size), -1)
            out[int(mm)] = np.cumsum(d[:-1]) > 0
        return out
