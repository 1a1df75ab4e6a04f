"""llama.cpp's own KV cache (llama_kv_cache, src/llama-kv-cache.cpp of the llama.cpp that
llama-cpp-python 0.3.36 vendors): one anonymous CPU buffer holding cache_k_l{il} [n_embd_k_gqa,
kv_size, n_stream] and cache_v_l{il} for every layer in turn, each padded to TENSOR_ALIGNMENT,
cleared at creation (ggml_backend_buffer_clear(buf, 0) writes every page); cells in order; V
transposed (row d: the d-th element of every cell, kv_size cells long) when flash attention is off,
as llama-cpp-python's Llama() leaves it. Nothing is locked: reclaim may swap the buffer to zram."""
from __future__ import annotations

import numpy as np

from ...core.trace import MapFlag, Op, WriteFlag
from ...core.units import PAGE_SIZE as P, pad, page_runs, page_span, pages
from .base import KV_TYPES, TENSOR_ALIGNMENT, KVCache, KVGeometry
from .registry import register


def layout(g: KVGeometry) -> dict:
    """Where each layer's K and V tensors lie in the buffer (byte offsets), as the ctor creates them:
    k_l0, v_l0, k_l1, ... each of cell_bytes x kv_size x n_stream, padded to TENSOR_ALIGNMENT. The
    live IS controller finds and pages out this very layout (kmemsim.validate.live_is)."""
    bsz, blk, _ = KV_TYPES[g.kv_type]
    row = g.cell_bytes
    tensor = row * g.kv_size * g.n_stream
    k_off, v_off, off = [], [], 0
    for _ in range(g.n_layer):
        k_off.append(off)
        off += pad(tensor, TENSOR_ALIGNMENT)
        v_off.append(off)
        off += pad(tensor, TENSOR_ALIGNMENT)
    return {"kv_size": g.kv_size, "n_layer": g.n_layer, "row_bytes": row, "n_embd_v": g.n_embd_kv,
            "v_elt": bsz / blk, "tensor_bytes": tensor, "k_off": k_off, "v_off": v_off, "kv_bytes": off,
            "v_trans": g.v_trans}


@register
class LlamaCppKV(KVCache):
    name = "llamacpp"
    description = "llama.cpp's KV cache: one anonymous buffer, cells in order, V transposed without flash attention"

    def __init__(self, geometry, events):
        super().__init__(geometry, events)
        self.lay = layout(geometry)
        self.bytes = self.lay["kv_bytes"]
        self.map = -1
        self._vt_cache = {}

    def create(self, t):
        g = self.g
        n = pages(self.bytes)
        self.map = self.events.mmap(t, f"KV cache ({g.kv_type}, {g.kv_size} cells x {g.n_layer} layers x "
                                       f"{g.n_stream} seqs)", n, flags=MapFlag.READ | MapFlag.WRITE,
                                    cls=KV_TYPES[g.kv_type][2])
        self.events.event(t, Op.WRITE, self.map, 0, n, flags=WriteFlag.ZERO)   # buffer_clear(0)

    def update(self, t, layer, pos0, n, n_kv, streams):
        """cpy_k / cpy_v (ggml_set_rows of the new cells), then K*Q over cells [0, n_kv) and V*KQ
        (llama_kv_cache::get_k / get_v views; V^T rows when flash attention is off)."""
        lay = self.lay
        row = lay["row_bytes"]
        ko, vo = lay["k_off"][layer], lay["v_off"][layer]
        ks = row * self.g.kv_size                 # bytes of one stream of K
        writes, reads = [], []
        for s in streams:
            writes.append(page_span(ko + s * ks + pos0 * row, n * row))
        for s in streams:
            if not self.g.v_trans:
                writes.append(page_span(vo + s * ks + pos0 * row, n * row))
            else:
                start = vo + s * ks
                wa, wn, ra, rn = self._vt_runs(start % P, pos0, n, n_kv)
                shift = start // P
                writes.append((wa + shift, wn))
                reads.append((ra + shift, rn))
        for s in streams:
            reads.insert(0, page_span(ko + s * ks, n_kv * row))
            if not self.g.v_trans:
                reads.append(page_span(vo + s * ks, n_kv * row))
        for op, lst in ((Op.WRITE, writes), (Op.READ, reads)):
            for a, npg in lst:
                if np.ndim(a):
                    self.events.ranges(t, op, self.map, a, npg)
                else:
                    self.events.event(t, op, self.map, a, npg)

    def _vt_runs(self, rem, pos0, n, n_kv):
        """Page runs of a V^T tensor (row d = one head dimension, kv_size cells long) for writing cells
        [pos0, pos0+n) and reading cells [0, n_kv), relative to the tensor's first page; the pattern
        is the same for every layer whose V tensor starts at the same offset within a page."""
        key = (rem, pos0, n, n_kv)
        r = self._vt_cache.get(key)
        if r is None:
            e = int(self.lay["v_elt"])
            base = rem + np.arange(self.g.n_embd_kv, dtype=np.int64) * (self.g.kv_size * e)
            wa, wn = page_runs(base + pos0 * e, base + (pos0 + n) * e)
            ra, rn = page_runs(base, base + n_kv * e)
            approx = 0
            if len(ra) > self.g.max_runs:         # strided beyond the cap: one covering range
                approx += 1
                ra, rn = ra[:1], np.array([ra[-1] + rn[-1] - ra[0]])
            if len(wa) > self.g.max_runs:         # written pages are a subset of this step's read pages
                approx += 1
                wa, wn = ra, rn
            if len(self._vt_cache) > 4096:
                self._vt_cache.clear()
            r = self._vt_cache[key] = (wa, wn, ra, rn, approx)
        self.approx_accesses += r[4]
        return r[:4]
