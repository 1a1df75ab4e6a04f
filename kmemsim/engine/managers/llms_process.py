"""The LLMS service (kmemsim.engine.managers.llms) as page events of its process, for a scenario's
timeline (`llm.engine = "llms"`): what the kernel then does to those pages is the emulation's.

LLMS keeps its own accounting of memory: a budget of resident chunks. The kernel does not know it.
Here its memory is what a Linux process has:
- the weights: the model file mmapped (file pages: reclaim drops them, a pass faults them back); every
  pass of the model (a recompute, the call's prefill, each decode step) reads all of them;
- each context's chunks: one anonymous arena per context, a slot per chunk of the window (the slot of
  absolute chunk a is a mod slots), a chunk at level w filling the first ratio_w of its slot's pages
  (anonymous memory: zram can take it, which LLMS's accounting does not see);
- each context's chunk file (LLMS swaps with pickle: buffered I/O): written through the page cache (a
  shared mapping of the file, written), read back with read(2).
A call's switch: the evictions (chunk pages dropped, MADV_DONTNEED; written first where they must be),
the loads (read(2) of the chunk file, written into the arena) and the recomputes (a pass over the
weights, the chunks written), then the locked context read whole (its working set: a chunk the kernel
swapped out faults back here). Then the call itself: its prefill and decode passes over the weights
and the context, the chunks it grew written, and the ahead-of-time swap-out written to the files.
"""
from __future__ import annotations

import numpy as np

from ...core.trace import Advice, MapFlag, Op, PageClass
from ...core.units import PAGE_SIZE
from .llms import LEVELS, Service


class LlmsProcess:
    def __init__(self, model_path: str, file_pages: int, events, service: Service):
        self.ev, self.svc = events, service
        self.model_path, self.file_pages = model_path, int(file_pages)
        self.chunk_pages = -(-int(service.full) // PAGE_SIZE)
        self.slots = -(-service.shape.max_ctx // service.chunk) + 1
        self.arena, self.files, self.fmaps = {}, {}, {}
        self.weights = None
        self.calls = []            # per call: t (ns), ctx, llms_s (its own latency), recompute_s, label

    def level_pages(self, levels):
        lv = np.asarray(levels, int)
        ratio = LEVELS[lv] if self.svc.compressed else np.ones(len(lv))
        return np.ceil(self.chunk_pages * ratio).astype(np.int64)

    def context(self, t, k):
        if k not in self.arena:
            self.arena[k] = self.ev.mmap(t, f"LLMS context {k} chunks", self.slots * self.chunk_pages,
                                         flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.KV_Q8)
            self.files[k] = self.ev.file(f"<llms: ctx{k}.pkl>", self.slots * self.chunk_pages)
            self.fmaps[k] = self.ev.mmap(t, f"LLMS context {k} chunk file", self.slots * self.chunk_pages,
                                         file=self.files[k], flags=MapFlag.SHARED | MapFlag.READ | MapFlag.WRITE)
        return self.arena[k]

    def _slots(self, chunks, levels):
        first = (np.asarray(chunks, np.int64) % self.slots) * self.chunk_pages
        return first, self.level_pages(levels)

    def load(self, t) -> int:
        """The model mmapped and read once (the service starts)."""
        fid = self.ev.file(self.model_path, self.file_pages)
        self.weights = self.ev.mmap(t, "weights (mmap)", self.file_pages, file=fid,
                                    flags=MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS)
        self.ev.event(t, Op.READ, self.weights, 0, self.file_pages)
        return t

    def _pass(self, t):
        self.ev.event(t, Op.READ, self.weights, 0, self.file_pages)

    def _apply(self, t, act, k):
        kind = act[0]
        if kind == "evict":
            _, owner, chunks, levels, written, wlevels = act
            if len(written):
                a, n = self._slots(written, wlevels)
                self.ev.ranges(t, Op.WRITE, self.fmaps[owner], a, n)
            a, n = self._slots(chunks, levels)
            for x, y in zip(a, n):
                self.ev.event(t, Op.MADVISE, self.arena[owner], int(x), int(y), int(Advice.DONTNEED))
        elif kind == "read" and len(act[2]):
            a, n = self._slots(act[2], act[3])
            for x, y in zip(a, n):
                self.ev.event(t, Op.FREAD, -1, int(x), int(y), 0, self.files[k])
            self.ev.ranges(t, Op.WRITE, self.arena[k], a, n)
        elif kind == "recompute" and len(act[2]):
            self._pass(t)
            self.ev.ranges(t, Op.WRITE, self.arena[k], *self._slots(act[2], act[3]))
        elif kind == "grow" and len(act[2]):
            self.ev.ranges(t, Op.WRITE, self.arena[act[1]], *self._slots(act[2], act[3]))
        elif kind == "write" and len(act[2]):
            self.ev.ranges(t, Op.WRITE, self.fmaps[act[1]], *self._slots(act[2], act[3]))

    def delete(self, t, k):
        """delLLMCtx: the service drops the context; its arena is unmapped, its file deleted (its pages
        leave the page cache)."""
        self.svc.delete(k)
        if k in self.arena:
            n = self.slots * self.chunk_pages
            self.ev.event(t, Op.MUNMAP, self.arena.pop(k), 0, n)
            self.ev.event(t, Op.MUNMAP, self.fmaps.pop(k), 0, n)
            self.ev.event(t, Op.FADVISE, -1, 0, n, int(Advice.DONTNEED), self.files.pop(k))

    def call(self, t, k, new_tokens, decode, label) -> int:
        """callLLM on context k at t: phase `label + " switch"` with the switch's events over [t, t +
        LLMS's latency], then phase `label` with the call's passes (its prefill, then a decode step
        per output token, at the accelerator's speed). Returns the end of the call."""
        self.context(t, k)
        ev, costs = self.ev, self.svc.costs
        ev.flush()
        ev.b.phase(t, ev.pid, f"{label} switch")
        lat = self.svc.call(k, int(new_tokens) + int(decode))
        acts = self.svc.actions
        re = sum(len(a[2]) for a in acts if a[0] == "recompute")
        c0 = self.svc.ctxs[k]
        self.calls.append(dict(t=int(t), ctx=k, llms_s=lat, recompute_s=float(costs.t_re(re, c0.tokens)),
                               label=label))
        g = next((i for i, a in enumerate(acts) if a[0] == "grow"), None)
        for act in acts[:g]:
            self._apply(t, act, k)
        c = self.svc.ctxs[k]
        t_sw = t + int(lat * 1e9)
        whole = c.base + np.arange(len(c.level))
        if g is not None:                       # the locked context as it was, read whole: the call's
            old = whole < acts[g][4]            # working set (a chunk the kernel swapped faults here)
            self.ev.ranges(t_sw, Op.READ, self.arena[k], *self._slots(whole[old], c.level[old]))
        t_sw += 1
        ev.flush()
        ev.b.phase(t_sw, ev.pid, label)
        if g is not None:
            self._apply(t_sw, acts[g], k)      # the prompt's and the output's chunks written
        tt = t_sw
        steps = [costs.pass_s + new_tokens * costs.chunk_s(c.tokens) / costs.chunk] + [costs.pass_s] * int(decode)
        for s in steps:                         # the prefill, then each decode step
            tt += int(s * 1e9) + 1
            self._pass(tt)
            self.ev.ranges(tt, Op.READ, self.arena[k], *self._slots(whole, c.level))
        for act in acts[(g + 1) if g is not None else len(acts):]:
            self._apply(tt, act, k)
        ev.flush()
        return tt + 1
