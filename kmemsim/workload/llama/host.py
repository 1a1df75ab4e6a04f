"""The program hosting llama.cpp (the interpreter, llama-cpp-python, the libraries' code): the pages it
touches around each llama_decode call, measured on the live kernel (kmemsim.validate.measure), and how
a session writes them."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.trace import Op
from ...core.units import PAGE_SIZE as P, spread


@dataclass
class HostSet:
    """The pages the program hosting llama.cpp (the interpreter, llama-cpp-python, the libraries'
    code) touches around each llama_decode call, measured on the live kernel without a limit
    (kmemsim.validate.measure.engine_warm_set). Kept referenced every step, reclaim activates them
    (folio_check_references: anon -> activate, VM_EXEC file -> activate).
      heap, heap_pages: the host's anonymous mapping and its size;
      anon: per kind ("prompt", "decode"), the anonymous pages one step references, llama.cpp's own
        buffers included: the session touches in `heap` only what its buffers do not account for;
      files: per kind, [(map, pages)]: the pages of each library mapping touched; kind "load": those
        llama_model_load_from_file runs, read as the load starts (most of it runs before the model is
        mapped, and MAP_POPULATE runs inside mmap(2), with no user code);
      call_anon: per kind, the anonymous pages the llama_decode call alone references (buffers
        included); the rest of the step's, the interpreter's before the call (reading the logits,
        sampling), is written once as the ubatch starts. A kind not in it: all within the call;
      growth, grow, grow_pages: the pages the process's anonymous memory grows by (buffers included)
        over the prompt ("prompt", once) and in each decode step ("decode"); what the session's own
        buffers do not account for is written as new pages of `grow` (a mapping of grow_pages),
        among the pages the call references;
      base, built: the heap pages from `base` on are those Llama() allocates (the context's
        structures among them): `built` of them are written as the context is created, and the pages
        a call references are the first of them; the interpreter's, before the call, are the heap's
        first (its objects from the import);
      load_growth: what the process's anonymous memory grows by over llama_model_load_from_file,
        its load-time buffers included: as much of `built` as that leaves beyond the buffers the
        session allocates in the load (CPU_REPACK; the weights without mmap) is written as the load
        starts, before the model is mapped (llama_model_load: the loader's GGUF metadata and
        load_vocab come before load_tensors maps the file), the rest as the context is created;
      context_old: the heap pages from before Llama() that the context's creation references
        (llama_init_from_model, with the interpreter's work after the load: what the warm run's
        `context` window references beyond what the process gains in it), written then, spread
        over the heap below `base` (the import's)."""
    heap: int
    heap_pages: int
    anon: dict
    files: dict
    call_anon: dict = field(default_factory=dict)
    growth: dict = field(default_factory=dict)
    grow: int = -1
    grow_pages: int = 0
    base: int = 0
    built: int = 0
    load_growth: int = 0
    context_old: int = 0


class HostTouch:
    """A session's writer of its HostSet: the loader's pages as the model loads, the rest of Llama()'s
    heap as the context is created, and each llama_decode call's pages (touch)."""

    def __init__(self, host: HostSet, events):
        self.h = host
        self.ev = events
        events.track_seen = bool(host.growth)   # only the growth asks what is new
        self.hi = 0                        # heap pages [0, hi) have been written by a call
        self.grow_hi = 0                   # growth pages [0, grow_hi) written
        self.loaded = 0                    # heap pages Llama() allocates written in the load
        self.grown = {}                    # growth written per kind (the prompt's counts once)

    def load_code(self, t):
        """The loader's code (gguf, vocabulary, hparams), read as the load starts."""
        for m, n in self.h.files.get("load", ()):
            self.ev.access(t, Op.READ, m, 0, n * P)

    def load_heap(self, t, buffer_pages):
        """The loader's metadata and vocabulary: as much of `built` as the load's growth leaves
        beyond the buffers the session allocates in the load (buffer_pages)."""
        h = self.h
        if h.built:
            self.loaded = min(h.built, max(0, h.load_growth - buffer_pages))
            if self.loaded:
                self.ev.event(t, Op.WRITE, h.heap, h.base, self.loaded)

    def context(self, t):
        """The rest of the heap Llama() allocates, written as the context is created; and the
        import's heap the creation reads, spread: which pages, per-mapping counts do not say."""
        h = self.h
        if h.built > self.loaded:
            self.ev.event(t, Op.WRITE, h.heap, h.base + self.loaded, h.built - self.loaded)
        if h.context_old:
            span = h.base or h.heap_pages
            first, count = spread(min(h.context_old, span), span)
            self.ev.flush()
            self.ev.b.ranges(t, self.ev.pid, Op.WRITE, h.heap, first, count)

    def touch(self, start, ts, kind):
        """The host program's pages around this llama_decode call (HostSet): its anonymous pages
        beyond those of llama.cpp's buffers this ubatch touched, and its libraries' pages, read at the
        call's end (ts[-1]). Of the anonymous ones, those the call references are written at each
        time in ts (after each graph node, then at the call's end): llama.cpp's graph (the context's
        meta buffer, rebuilt by every llama_decode) and ggml's work buffer serve every node; the
        interpreter's own, before the call, at `start`. The memory the process gains in this call
        beyond the buffers' own new pages (the measured growth: ggml's work buffer, the graph
        reaching further into the compute buffer, the logits rows the interpreter keeps) is part of
        what the call references: new pages of `grow`, in place of as many heap pages."""
        h = self.h
        masks = self.ev.touched()          # the session's buffers' pages this ubatch touched
        own = sum(int(k.sum()) for k in masks.values())
        extra = min(h.heap_pages - h.base, h.anon.get(kind, 0) - own)
        call = max(0, min(extra, h.call_anon.get(kind, h.anon.get(kind, 0)) - own))
        # of those, the pages no earlier event touched: memory the process gains in this ubatch
        seen = self.ev.seen
        fresh = sum(int((k & ~seen[mm]).sum()) if mm in seen else int(k.sum()) for mm, k in masks.items())
        grow = h.growth.get(kind, 0) - fresh - self.grown.get(kind, 0)
        grow = max(0, min(grow, h.grow_pages - self.grow_hi))
        g0, self.grow_hi = self.grow_hi, self.grow_hi + grow
        if kind != "decode":                      # the prompt's growth is the process's once
            self.grown[kind] = self.grown.get(kind, 0) + grow
        heap_call = max(0, call - grow)
        # the interpreter's pages are none of those a call writes (no call runs that code): its
        # objects from before Llama() (the heap's first pages), then past the most any call wrote
        self.hi = max(self.hi, heap_call)
        py = extra - call
        old = max(0, min(py, h.base))
        new = max(0, min(py - old, h.heap_pages - h.base - self.hi))
        acc = self.ev.access
        if old:
            acc(start, Op.WRITE, h.heap, 0, old * P)
        if new:
            acc(start, Op.WRITE, h.heap, (h.base + self.hi) * P, new * P)
        for t in ts:
            if heap_call > 0:
                acc(t, Op.WRITE, h.heap, h.base * P, heap_call * P)
            if grow > 0:
                acc(t, Op.WRITE, h.grow, g0 * P, grow * P)
        for m, n in h.files.get(kind, ()):
            acc(ts[-1], Op.READ, m, 0, n * P)
