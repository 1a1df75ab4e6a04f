"""How an MoE model's experts are paged: the load modes `page-cache`, `willneed`, `direct:SLOTS`,
`pin-hot:N` and `cold:T` of the llama workload, each emitting what llama.cpp's code for it does.

    page-cache    plain mmap (llama_mmap: MAP_POPULATE + WILLNEED of the file at load), the routed
                  slices read through page faults: filemap_fault's read-around brings the
                  neighbouring experts' bytes too
    willneed      llama.cpp #26003 (--lazy-experts): no populate; the dense tensors WILLNEED at load;
                  after each layer's router, madvise(MADV_WILLNEED) over the routed experts' slices
                  (madvise_willneed -> vfs_fadvise -> force_page_cache_ra: exactly those pages, read
                  ahead of the faults), and once the layer's experts are used madvise(MADV_DONTNEED)
                  over them (the PR's "mark an uploaded mmap tensor as DONTNEED": zap_page_range, the
                  page cache keeps the folios, now unmapped)
    direct:SLOTS  llama.cpp #25294: the routed experts pread(O_DIRECT) into SLOTS slots per layer of
                  the engine's own (kmemsim.engine.managers.expert_slots), LRU over the slots
    pin-hot:N     llama.cpp #26414 (--pin-hot-experts N, --load-mode mmap+pin): the dense tensors
                  mlocked at load, then the N (layer, expert) pairs routed most often so far mlocked
                  (mlock -> populate + unevictable list), re-chosen every REPIN tokens from the
                  counts its ffn_moe_topk callback keeps (munlock of those that fell out)
    cold:T        page-cache, and madvise(MADV_COLD) over an expert's slices once it has gone T
                  steps unrouted (madvise_cold -> folio_deactivate: the inactive list's head,
                  reclaimed first)

A strategy is one class here with the hooks the session calls: `load_prefetch` (instead of the
whole file's populate), `loaded` (after the model's tensors are in place), `routed` (after a layer's
router), `read` (a layer's expert tensor's GEMM) and `step_done` (after a ubatch).
"""
from __future__ import annotations

import numpy as np

from ...core.errors import InputError
from ...core.limits import MAX_TOKENS, check_int
from ...core.trace import Advice, MapFlag, Op
from ...core.units import PAGE_SIZE as P, page_runs, page_span
from ...engine.managers.expert_slots import ExpertSlots

MOE_MODES = ("page-cache", "willneed", "direct:SLOTS", "pin-hot:N", "cold:T")
REPIN = 16          # pin-hot: tokens between re-choosing the pinned set (the PR updates it on the fly)


def is_moe_mode(mode) -> bool:
    return str(mode).split(":", 1)[0] in {m.split(":")[0] for m in MOE_MODES}


def parse(mode, hp: dict):
    """(strategy class, its number) for an MoE load mode; InputError for a dense model, a missing or
    out-of-range number."""
    kind, _, arg = str(mode).partition(":")
    cls = STRATEGIES[kind]
    if not hp.get("n_expert"):
        raise InputError(f"--load-mode {mode}: the model has no experts (expert_count is 0); "
                         "MoE load modes need an MoE model, use mmap")
    if cls.arg is None:
        if arg:
            raise InputError(f"--load-mode {mode}: {kind} takes no number")
        return cls, None
    if not arg:
        raise InputError(f"--load-mode {mode}: give {cls.arg}, e.g. {kind}:{cls.example}")
    try:
        n = int(arg)
    except ValueError:
        raise InputError(f"--load-mode {mode}: {cls.arg} must be an integer") from None
    X, L, k = hp["n_expert"], hp["n_layer"], hp["n_expert_used"]
    hi = {"direct": X, "pin-hot": X * L, "cold": MAX_TOKENS}[kind]
    lo = {"direct": k, "pin-hot": 1, "cold": 1}[kind]
    why = {"direct": f" (a layer has {X} experts and routes {k} per token)",
           "pin-hot": f" (the model has {L} layers x {X} experts)", "cold": " tokens"}[kind]
    check_int(n, f"--load-mode {kind}:{cls.arg}", lo, hi, why)
    return cls, n


class PageCache:
    """Plain mmap: the routed slices read through the mapping."""
    name, arg, example = "page-cache", None, None
    populate = True                  # llama_mmap's MAP_POPULATE + WILLNEED of the whole file

    def __init__(self, session, n=None):
        self.s = session
        self.n = n
        hp = session.hp
        self.X = hp["n_expert"]
        # per layer: [(tensor, mapping kind, base)] of its expert tensors in graph order
        self.exps = {}
        for kind, name in session.order:
            if kind == "exps":
                il = int(name.split(".")[1])
                self.exps.setdefault(il, []).append(session.L.tensor(name))

    def bind(self, session):
        """The context running the next ubatch: its events sink (every context of the model shares
        the mappings and this strategy's state)."""
        self.s = session
        if getattr(self, "slots", None) is not None:
            self.slots.events = session.events

    def runs(self, tt, experts):
        """Page runs of the experts' slices of tensor tt in its mapping."""
        where, base = self.s.where[tt.name]
        sl = tt.n_bytes // self.X
        ex = np.asarray(experts, np.int64)
        return (self.s.map_of(where),) + page_runs(base + ex * sl, base + (ex + 1) * sl)

    def dense_ranges(self):
        """(first page, pages) of every mmapped tensor that is not an expert tensor."""
        out = []
        for tt in self.s.L.tensors:
            if "_exps" not in tt.name and self.s.where[tt.name][0] == "file":
                out.append(page_span(tt.data_offset, tt.n_bytes))
        return out

    def load_prefetch(self, t):
        """Instead of the whole file's populate: WILLNEED over the dense tensors."""
        for a, n in self.dense_ranges():
            self.s.events.event(t, Op.MADVISE, self.s.m_file, a, n, int(Advice.WILLNEED))

    def loaded(self, t):
        pass

    def routed(self, t, il, experts, rows):
        pass

    def read(self, t, il, j, tt, experts):
        m, a, n = self.runs(tt, experts)
        self.s.events.ranges(t, Op.READ, m, a, n)

    def step_done(self, t, n_tok):
        pass

    def meta(self) -> dict:
        return {}


class WillNeed(PageCache):
    name, arg = "willneed", None
    populate = False

    def loaded(self, t):
        """Loaded by a loader that populated the whole file (the live check's, around llama.cpp
        0.3.36: LlamaSession moe_populate): the experts given back before the first request, as a
        lazy load never read them: their PTEs zapped (madvise DONTNEED) and their clean page cache
        invalidated (posix_fadvise DONTNEED -> invalidate_mapping_pages)."""
        if not self.s.moe_populate:
            return
        for ts in self.exps.values():
            for tt in ts:
                a, n = page_span(tt.data_offset, tt.n_bytes)
                self.s.events.event(t, Op.MADVISE, self.s.m_file, a, n, int(Advice.DONTNEED))
                # generic_fadvise(): only the whole pages in the range (a partial first and last stay)
                lo, hi = -(-tt.data_offset // P), (tt.data_offset + tt.n_bytes) // P
                self.s.events.event(t, Op.FADVISE, -1, lo, hi - lo, int(Advice.DONTNEED), self.s.fid)

    def routed(self, t, il, experts, rows):
        for tt in self.exps[il]:
            m, a, n = self.runs(tt, experts)
            self.s.events.ranges(t, Op.MADVISE, m, a, n, int(Advice.WILLNEED))

    def read(self, t, il, j, tt, experts):
        super().read(t, il, j, tt, experts)
        if j == len(self.exps[il]) - 1:             # the layer's experts all used: DONTNEED them
            for tt2 in self.exps[il]:
                m, a, n = self.runs(tt2, experts)
                self.s.events.ranges(t, Op.MADVISE, m, a, n, int(Advice.DONTNEED))


class Direct(PageCache):
    name, arg, example = "direct", "SLOTS", 16
    populate = False

    def loaded(self, t):
        layers = {il: [(tt.data_offset, tt.n_bytes // self.X) for tt in ts] for il, ts in self.exps.items()}
        self.slots = ExpertSlots(layers, self.X, self.n, self.s.fid, self.s.events)
        self.slots.create(t)

    def routed(self, t, il, experts, rows):
        self.slots.route(t, il, experts)

    def read(self, t, il, j, tt, experts):
        self.slots.read(t, il, j, experts)

    def meta(self):
        return self.slots.meta()


class PinHot(PageCache):
    """mlock in place splits the weights' vma (mlock_fixup()); the emulator keeps VM_LOCKED per vma,
    so each locked range is a MAP_SHARED | MAP_LOCKED mapping of its own over the same file pages
    (mlock_range: populate, then the unevictable list; munmap of it: munlock, back to the inactive
    list)."""
    name, arg, example = "pin-hot", "N", 64

    def _lock(self, t, a, n, what):
        return self.s.events.mmap(t, f"mlock {what}", int(n), file=self.s.fid, pgoff=int(a),
                                  flags=MapFlag.SHARED | MapFlag.READ | MapFlag.LOCKED | MapFlag.WEIGHTS)

    def loaded(self, t):
        for a, n in self.dense_ranges():             # dense tensors first: used by every token
            self._lock(t, a, n, "dense tensor")
        self.counts = np.zeros((self.s.hp["n_layer"], self.X), np.int64)
        self.pinned = {}                              # (layer, expert) -> its locked mappings
        self.since = REPIN                            # choose at the first step's end
        self.repins = 0

    def routed(self, t, il, experts, rows):
        self.counts[il] += np.bincount(rows.ravel(), minlength=self.X)   # ffn_moe_topk: each token's experts

    def step_done(self, t, n_tok):
        self.since += n_tok
        if self.since < REPIN:
            return
        self.since = 0
        flat = np.argsort(-self.counts, axis=None, kind="stable")[:self.n]
        flat = flat[self.counts.ravel()[flat] > 0]
        want = {tuple(int(v) for v in p) for p in zip(*np.unravel_index(flat, self.counts.shape))}
        if want == set(self.pinned):
            return
        self.repins += 1
        for key in sorted(set(self.pinned) - want):   # munlock: the mapping goes
            for m, a, n in self.pinned.pop(key):
                self.s.events.event(t, Op.MUNMAP, m, 0, n)
        for il, e in sorted(want - set(self.pinned)):
            maps = []
            for tt in self.exps[il]:
                _, a, n = self.runs(tt, [e])
                maps.append((self._lock(t, a[0], n[0], f"expert {il}.{e}"), a[0], n[0]))
            self.pinned[(il, e)] = maps

    def meta(self):
        return {"pinned_experts": len(self.pinned), "repins": self.repins}


class Cold(PageCache):
    name, arg, example = "cold", "T", 8

    def loaded(self, t):
        self.step = 0
        self.last = np.full((self.s.hp["n_layer"], self.X), -1, np.int64)
        self.colded = 0

    def routed(self, t, il, experts, rows):
        self.last[il, np.asarray(experts, np.int64)] = self.step

    def step_done(self, t, n_tok):
        self.step += 1
        idle = np.argwhere((self.last >= 0) & (self.step - self.last == self.n))
        for il in np.unique(idle[:, 0]):
            ex = idle[idle[:, 0] == il, 1]
            for tt in self.exps[int(il)]:
                m, a, n = self.runs(tt, ex)
                self.s.events.ranges(t, Op.MADVISE, m, a, n, int(Advice.COLD))
        self.colded += len(idle)

    def meta(self):
        return {"cold_advised": self.colded}


STRATEGIES = {c.name: c for c in (PageCache, WillNeed, Direct, PinHot, Cold)}
