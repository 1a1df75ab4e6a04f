"""The KV-cache seam: where an inference engine keeps a context's KV cells, and what appending cells
and attending over them does to pages.

The llama workload (kmemsim.workload.llama) writes logical KV operations; a manager, one file each
in this folder, turns them into page events of the engine's process. Like the C core's policy_ops,
the interface is small and the caller never asks which manager it drives:

    create(t)                                  llama_init_from_model: the cache's buffers exist
    update(t, layer, pos0, n, n_kv, streams)   one layer of a ubatch: the n new cells from pos0 written
                                               in each stream (cpy_k, cpy_v), then attention over
                                               cells [0, n_kv) (K*Q, V*KQ)
    clear(t, stream=None)                      cells dropped (llama_memory_clear, seq_rm)
    meta()                                     what the trace records of it

A manager is built with the cache's KVGeometry and the process's event sink, whose methods are:

    mmap(t, name, npages, flags=MapFlag..., cls=PageClass..., file=-1, pgoff=0) -> map id
    event(t, op, map, page, npages, arg=0, flags=0)        one event (kmemsim.core.trace.Op)
    ranges(t, op, map, first_pages, counts)                 one event per page run (numpy arrays)
    file(path, pages) -> file id                            a file of the manager's own (its flash copy)

The kernel emulation does to those pages what Linux would: an unlocked anonymous arena is memory
zram can take, an mlocked one is not, a file read goes through the page cache. No manager has a
branch in the C core.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.trace import PageClass

TENSOR_ALIGNMENT = 32   # ggml-cpu buffer alignment (ggml/src/ggml-impl.h TENSOR_ALIGNMENT)
# the ggml types a KV cache holds: bytes per block, elements per block, and the page class zram sees
KV_TYPES = {"f16": (2, 1, PageClass.KV_F16), "q8_0": (34, 32, PageClass.KV_Q8)}


@dataclass(frozen=True)
class KVGeometry:
    """What a llama context asks of its KV cache (llama_kv_cache's constructor arguments)."""
    n_layer: int
    n_embd_kv: int              # K (and V) elements of one cell in one layer: head_dim x n_head_kv
    kv_size: int                # cells per stream (n_ctx_seq, padded to 256)
    n_stream: int = 1           # sequences with a stream of their own (kv_unified = false)
    kv_type: str = "f16"        # a key of KV_TYPES
    v_trans: bool = True        # V stored transposed: flash attention off
    max_runs: int = 64          # a strided access of more page runs is taken as one covering range

    @property
    def cell_bytes(self) -> int:
        """Bytes of one cell's K (and of its V) in one layer."""
        bsz, blk, _ = KV_TYPES[self.kv_type]
        return self.n_embd_kv // blk * bsz


class KVCache:
    """The base of every KV manager: holds the geometry and the sink, and counts the accesses it
    approximated. A subclass sets `name` (the registry's key) and `description`, and fills create,
    update and, where dropping cells moves memory, clear."""
    name = ""
    description = ""

    def __init__(self, geometry: KVGeometry, events):
        self.g = geometry
        self.events = events
        self.bytes = 0                   # the cache's memory, as its engine reports it
        self.approx_accesses = 0         # strided accesses taken as one covering range

    def create(self, t) -> None:
        raise NotImplementedError

    def update(self, t, layer, pos0, n, n_kv, streams) -> None:
        raise NotImplementedError

    def clear(self, t, stream=None) -> None:
        """Dropping cells frees nothing by default: llama.cpp keeps its buffer and only forgets the
        cells (llama_kv_cells::rm), so their pages stay as they were."""

    def meta(self) -> dict:
        return {"kv_manager": self.name, "kv_bytes": self.bytes, "approx_kv_accesses": self.approx_accesses}
