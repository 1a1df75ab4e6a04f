"""llama.cpp #25294's expert slot cache ("llama : stream MoE routed experts from disk"): each MoE layer
keeps `slots` expert slabs of its own; after the router's top-k, an id remap sends each routed expert
to its slot, and a miss is read from the GGUF with pread(2) on an O_DIRECT descriptor into the least
recently used slot of that layer ("the page cache cannot help and otherwise thrashes competing for
the same memory"). A ubatch that routes more experts than the layer has slots runs in waves (the PR's
Wave-Partitional Prefill): each touched expert is loaded once per ubatch, the GEMMs of a wave reading
the slots it loaded.

The slabs are one anonymous buffer of the engine's (n_layer x slots x one expert's gate, up and down
slices, each page-aligned as O_DIRECT wants): memory the kernel charges to the process and, unlocked,
may swap to zram. The reads go around the page cache (fs/iomap/direct-io.c: no folio, no readahead,
no workingset; counted in pgpgin: c_ext/direct_io.c). Python loops per routed expert, never per page.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ...core.trace import MapFlag, Op, PageClass
from ...core.units import PAGE_SIZE, pages


class ExpertSlots:
    """The slot cache of one llama.cpp process. `layers[il]` is the layer's expert tensors as
    (file byte offset, bytes per expert) in graph order (gate, up, down); `fid` the GGUF's file id."""
    name = "direct"

    def __init__(self, layers: dict, n_expert: int, slots: int, fid: int, events):
        self.layers = layers
        self.X = int(n_expert)
        self.slots = int(slots)
        self.fid = fid
        self.events = events
        L = max(layers) + 1 if layers else 0
        # one slot: each tensor's slice from a page boundary (the O_DIRECT buffer's alignment)
        sizes = [[pages(sl) for _, sl in layers[il]] for il in layers]
        self.part = np.asarray(sizes[0] if sizes else [], np.int64)      # pages of each tensor's slice
        self.part_at = np.concatenate([[0], np.cumsum(self.part)[:-1]]) if len(self.part) else self.part
        self.slot_pages = int(self.part.sum())
        self.n_layer = L
        self.lru = {il: OrderedDict() for il in layers}    # (expert -> slot), least recent first
        self.free = {il: list(range(self.slots - 1, -1, -1)) for il in layers}
        self.map = -1
        self.hits = self.misses = 0
        self.bytes = L * self.slots * self.slot_pages * PAGE_SIZE
        self.waves = 0
        self._pending = []                 # reads queued for the worker pool: (file page, pages, slot page, pages)

    def create(self, t):
        """The slabs: one anonymous buffer, allocated at context creation and touched as it fills."""
        self.map = self.events.mmap(t, "MoE expert slots", max(1, self.n_layer * self.slots * self.slot_pages),
                                    flags=MapFlag.READ | MapFlag.WRITE | MapFlag.WEIGHTS, cls=PageClass.WEIGHTS_Q)

    def _slot_page(self, il, slot):
        return (il * self.slots + slot) * self.slot_pages

    def _load(self, t, il, e, slot):
        """pread(O_DIRECT) of expert e's slice of each of the layer's tensors into the slot: queued
        for the PR's I/O worker pool (_wait)."""
        for (off, sl), at, n in zip(self.layers[il], self.part_at, self.part):
            a = (off + e * sl) // PAGE_SIZE
            b = -(-(off + (e + 1) * sl) // PAGE_SIZE)
            self._pending.append((a, b - a, self._slot_page(il, slot) + at, n))

    def _wait(self, t):
        """The queued reads in flight together (batched DIO_READs, c_ext/direct_io.c), the last one
        waiting for them all before the layer's GEMMs; each writes its slot's pages."""
        for k, (a, n, sp, sn) in enumerate(self._pending):
            self.events.event(t, Op.DIO_READ, -1, a, n, int(k < len(self._pending) - 1), self.fid)
            self.events.event(t, Op.WRITE, self.map, sp, sn)
        self._pending = []

    def _fetch(self, t, il, e) -> int:
        lru = self.lru[il]
        if e in lru:
            lru.move_to_end(e)
            self.hits += 1
            return lru[e]
        self.misses += 1
        slot = self.free[il].pop() if self.free[il] else lru.popitem(last=False)[1]
        lru[e] = slot
        self._load(t, il, e, slot)
        return slot

    def _read_slots(self, t, il, slots, j=None):
        """The GEMMs reading the slots' slices: tensor j's, or all of them."""
        parts = range(len(self.part)) if j is None else (j,)
        for jj in parts:
            a = np.asarray([self._slot_page(il, s) + self.part_at[jj] for s in slots], np.int64)
            self.events.ranges(t, Op.READ, self.map, a, np.full(len(a), self.part[jj], np.int64))

    def route(self, t, il, experts) -> bool:
        """The layer's routed experts brought into slots. True when the ubatch needed waves (more
        experts than slots): then the waves' GEMMs were read here and `read` adds nothing."""
        experts = [int(e) for e in experts]
        if len(experts) <= self.slots:
            self._cur = {e: self._fetch(t, il, e) for e in experts}
            self._wait(t)
            return False
        self.waves += 1
        for w in range(0, len(experts), self.slots):
            wave = experts[w:w + self.slots]
            slots = [self._fetch(t, il, e) for e in wave]
            self._wait(t)
            self._read_slots(t, il, slots)
        self._cur = None
        return True

    def read(self, t, il, j, experts):
        """Tensor j's GEMM over the routed experts' slots (mul_mat_id on the remapped ids)."""
        if self._cur is None:
            return
        self._read_slots(t, il, [self._cur[int(e)] for e in experts], j)

    def meta(self) -> dict:
        return {"expert_slots": self.slots, "expert_slot_bytes": self.bytes, "expert_slot_hits": self.hits,
                "expert_slot_misses": self.misses, "expert_slot_waves": self.waves}
