"""DynaKV's DRAM cache (kmemsim.engine.managers.dynakv) as anonymous memory of the LLM process, for a
replay under the kernel emulation (`kmemsim experiment dynakv-phone`).

The retrieval manager accounts for its DRAM itself: an entry it holds is a hit, served at DRAM speed,
and only its misses cost flash reads. On a phone that cache is anonymous memory of the process, and a
kernel reclaiming for other apps may swap its pages to zram; a hit on such a page faults
(do_swap_page()) before attention can read it. What this module turns into page events, and what it
assumes:
- What each step needs and what it served from DRAM: the manager's own retrieval, run through a head
  class that records its select() per step (`retrieve`), and dynakv.Step.hits.
- Residency (`residency`): an entry is in DRAM from when it entered (read from flash on a miss, or
  produced by the step that decoded its token and kept: DynaKV's write buffers, a cached cluster's new
  entries) to its last hit before its next miss. [assumption: its slot is free after that last hit;
  the manager evicts it at some later step, and nothing reads a slot in between, so no access differs]
- Slots: a pool of entry-sized slots (2 x head_dim bytes, FP8 K and V), the lowest free slot taken
  first (a bitmap allocator: the pool stays as compact as its occupancy) [assumption: the paper does
  not describe its allocator]; a slot's page is slot // (PAGE_SIZE // entry bytes). An entry entering
  WRITEs its page (a page the kernel swapped out is faulted back first, as the kernel does for any
  write to it); a hit READs it.
- Heads: dynakv-latency simulates a few sampled heads and scales their reads to all the model's KV
  heads; here likewise each sampled head stands for `copies` heads (over all layers) whose pools are
  used in lockstep with it. Their pages lie side by side in one mapping (page p of the sampled pool
  -> pages p x copies .. p x copies + copies - 1), so a run of the sampled pool's pages is one run of
  the mapping, and each page of the mapping is one page of one head's pool, touched when that head's
  is (the same pages and the same recency as `copies` separate pools).
- Weights: the model file mmapped (FP8: n_layer x layer bytes; embeddings and output head left out, as
  dynakv-latency's step time leaves them out) and read whole by every step, as llama.cpp's CPU
  backend streams every layer: file pages reclaim may drop, which the next step faults back.
Not events: the flash reads (O_DIRECT: no folio, no page cache, nothing reclaim changes; their time is
the manager's, dynakv.io_seconds), the flash writes (O_DIRECT appends and splits), the centroids
(read every step: never cold), compute buffers, and §6's virtual cache (a layer's cache offloaded while
other layers run), which dynakv.py does not model either.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.errors import InputError
from ...core.trace import MapFlag, Op, PageClass, TraceBuilder
from ...core.units import PAGE_SIZE
from . import dynakv as dk


def _recording(cls):
    """A subclass of the head class `cls` that keeps, per step, the entries its select() retrieves."""
    class Recording(cls):
        def select(self, t):
            need = super().select(t)
            self.needs.append(np.asarray(need, np.int64))
            return need
    Recording.__name__ = Recording.__qualname__ = f"Recording{cls.__name__}"
    return Recording


def retrieve(system, keys, queries, n_prefill, p: dk.Params, kmeans, rng) -> tuple[list, list]:
    """dynakv.simulate's steps of one head, and the entries each step needed: (steps, needs)."""
    if system not in dk.HEADS:
        raise InputError(f"unknown system {system!r}; known: {', '.join(dk.HEADS)}")
    h = _recording(dk.HEADS[system])(keys, queries, n_prefill, p, kmeans, rng)
    h.needs = []
    steps = [h.step(t) for t in range(n_prefill, len(keys))]
    # what the residency below relies on: one select() a step, whose entries hold every hit
    if len(h.needs) != len(steps) or any(len(s.hits) and not np.isin(s.hits, n).all()
                                         for s, n in zip(steps, h.needs)):
        raise RuntimeError(f"{system}: a step's DRAM hits are not among the entries its select() retrieved")
    return steps, h.needs


@dataclass
class Touches:
    """One head's pool accesses over a decoding: per access, its step, its slot, the entry, and whether
    it is the entry entering (WRITE) or a hit (READ); `slots`, the pool's size (its peak occupancy)."""
    step: np.ndarray
    slot: np.ndarray
    entry: np.ndarray
    write: np.ndarray
    slots: int


def residency(needs, hits, n_prefill) -> Touches:
    """The pool accesses of one head from what each step needed (needs[s]: entry ids) and what it
    served from DRAM (hits[s], a subset). Entry n_prefill + s is the token decoded at step s."""
    S = len(needs)
    E = np.concatenate([np.asarray(x, np.int64) for x in needs]) if S else np.zeros(0, np.int64)
    St = np.repeat(np.arange(S, dtype=np.int64), [len(x) for x in needs])
    if not len(E):
        z = np.zeros(0, np.int64)
        return Touches(z, z, z, np.zeros(0, bool), 0)
    T = int(max(E.max() + 1, n_prefill + S))
    hk = np.concatenate([s * T + np.asarray(h, np.int64) for s, h in enumerate(hits)])
    H = np.isin(St * T + E, hk)
    o = np.lexsort((St, E))                          # by entry, then step
    E, St, H = E[o], St[o], H[o]
    # a hit after an earlier record of the same entry: still resident (the manager kept it); a miss
    # starts a new stay (read from flash); a first record that is a hit: resident since its token
    # was decoded (a prefill entry cannot be: the cache starts empty; were it, it enters there)
    cont = np.r_[False, E[1:] == E[:-1]] & H
    first = np.flatnonzero(~cont)
    last = np.r_[first[1:], len(E)] - 1
    ent = E[first]
    born = H[first] & (ent >= n_prefill)
    start = np.where(born, ent - n_prefill, St[first])
    end = St[last]
    slot = np.empty(len(first), np.int64)
    by_start = np.argsort(start, kind="stable")
    by_free = np.argsort(end, kind="stable")          # free from step end + 1
    bs = np.searchsorted(start[by_start], np.arange(S + 1))
    bf = np.searchsorted(end[by_free] + 1, np.arange(S + 1))
    free, top = np.zeros(0, np.int64), 0
    for s in range(S):                                # per step (not per entry): the allocator's state
        rel = by_free[bf[s]:bf[s + 1]]
        if len(rel):
            free = np.sort(np.r_[free, slot[rel]])
        new = by_start[bs[s]:bs[s + 1]]
        take = free[:len(new)]
        free = free[len(take):]
        extra = len(new) - len(take)
        slot[new] = np.r_[take, top + np.arange(extra, dtype=np.int64)]
        top += extra
    iid = np.cumsum(~cont) - 1
    hit_rows = np.flatnonzero(H)
    return Touches(step=np.r_[start, St[hit_rows]], slot=np.r_[slot, slot[iid[hit_rows]]],
                   entry=np.r_[ent, E[hit_rows]],
                   write=np.r_[np.ones(len(first), bool), np.zeros(len(hit_rows), bool)], slots=int(top))


def page_runs(step, page, write):
    """Runs of consecutive pages touched by one op at one step: (step, write, first page, pages)."""
    if not len(step):
        z = np.zeros(0, np.int64)
        return z, np.zeros(0, bool), z, z
    page = np.asarray(page, np.int64)
    P = int(page.max()) + 1
    key = np.unique((np.asarray(step, np.int64) * 2 + np.asarray(write, np.int64)) * P + page)
    s, w, pg = key // (2 * P), (key // P) % 2, key % P
    brk = np.r_[True, (s[1:] != s[:-1]) | (w[1:] != w[:-1]) | (pg[1:] != pg[:-1] + 1)]
    head = np.flatnonzero(brk)
    n = np.diff(np.r_[head, len(s)])
    return s[head], w[head].astype(bool), pg[head], n


class DynakvProcess:
    """The LLM process running DynaKV's decoding: its weights mmapped, one anonymous pool per sampled
    head (standing for `copies` heads), a phase per decoding step (`dynakv step i`)."""

    def __init__(self, b: TraceBuilder, pid: int, model: str, weight_bytes: int, entry_bytes: int):
        self.b, self.pid, self.model = b, int(pid), model
        self.weight_pages = -(-int(weight_bytes) // PAGE_SIZE)
        self.per_page = max(1, PAGE_SIZE // int(entry_bytes))
        self.weights = None

    def load(self, t, adj):
        """The process starts, maps the model (FP8) and reads it once (llama.cpp's load)."""
        self.b.process(t, self.pid, f"llm (dynakv, {self.model})", oom_score_adj=adj)
        self.b.phase(t, self.pid, "load")
        fid = self.b.file(f"<dynakv: {self.model} fp8 weights>", self.weight_pages)
        self.weights = self.b.mmap(t, self.pid, "weights (mmap)", self.weight_pages, file=fid,
                                   flags=MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS)
        self.b.event(t, self.pid, Op.READ, self.weights, 0, self.weight_pages)

    def prefill(self, t):
        """The prompt: a pass over the weights (its KV goes to flash, O_DIRECT: no page events)."""
        self.b.phase(t, self.pid, "prefill")
        self.b.event(t, self.pid, Op.READ, self.weights, 0, self.weight_pages)

    def decode(self, t_steps, heads) -> list[int]:
        """Decoding steps starting at t_steps (ns, one per step); heads: (Touches, copies) per sampled
        head. Each step: its phase, a pass over the weights, then its pools' hits read and entering
        entries written. Returns each pool's mapping pages."""
        t_steps = np.asarray(t_steps, np.int64)
        pools = []
        for h, (tc, copies) in enumerate(heads):
            pages = -(-max(tc.slots, 1) // self.per_page) * int(copies)
            pools.append((self.b.mmap(int(t_steps[0]), self.pid, f"DynaKV cache pool, head {h} (x{copies})", pages,
                                      flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.KV_Q8), pages))
        for i, t in enumerate(t_steps):               # the marks first: at a step's time they sort before its events
            self.b.phase(int(t), self.pid, f"dynakv step {i}")
        self.b.ranges(t_steps, self.pid, Op.READ, self.weights, 0, self.weight_pages)
        for (tc, copies), (m, _) in zip(heads, pools):
            s, w, a, n = page_runs(tc.step, tc.slot // self.per_page, tc.write)
            rd = ~w                                   # a step's hits read, then what entered written
            self.b.ranges(t_steps[s[rd]], self.pid, Op.READ, m, a[rd] * copies, n[rd] * copies)
            self.b.ranges(t_steps[s[w]], self.pid, Op.WRITE, m, a[w] * copies, n[w] * copies)
        return [p for _, p in pools]
