"""mzCache (Yu, Kim, Park, Lee; MobiCom 2026; mzcache-project/mzcache): the LLM's memory as
fine-grained buffers it evicts itself, under pressure, and restores concurrently with the GPU's prefill.

What is modelled, each from the artifact (../shared/reference/seed-systems.md §1 gives the file and
line facts; `mzcache/` below is the artifact's library):
- KV in chunks of 256 tokens per layer (mzcache_types.h TOKENS_PER_CHUNK), K and V of a chunk sharing
  one state: Raw (fp16, resident), Compressed (in an arena in RAM), Stored (raw fp16 in the layer's
  flash file, written and read with O_DIRECT). A chunk's bytes: 256 x kv_hidden x 2 B for K and as much
  for V.
- Codecs (mzcache_core.cpp COMP_FREED_NUM/DEN): FlexGen 8-bit keeps 17/32 of a chunk (K and V halved,
  mins/maxs raw/32), freeing 15/32; FlexGen 4-bit keeps 9/32, freeing 23/32.
- The planner's two constants from the device profile mz_device_profile measures (mzcache_profile.cpp):
  decomp_load_ratio = D / (D + R_kv) (the compressed share of each step, so the decompress and
  store-read streams finish together) and per_layer_balance = round(weight_layer_bytes / R_w x D /
  chunk_bytes) (the chunks whose decompression takes as long as reading one weight layer).
- The swap-out ladder (mzcache_core.cpp swapout_impl, derive_swapout_plan in mzcache_kv_state.cpp):
  phase 1 in steps of 20 chunks, int(20 x decomp_load_ratio) compressed and the rest stored, until all
  but per_layer_balance x num_layers chunks are processed; phase 2, per layer from the last, compress
  per_layer_balance more chunks and unload one weight layer; phase 3, once everything is processed
  and every weight layer unloaded, offload the compressed arenas to flash layer by layer from the
  last. It stops as soon as the remaining share of the LLM's memory (weights + KV) is at or below the
  target. Inside the KV, "backward-out": a per-layer chunk_bound splits each layer into a compress
  region [0, bound) and a store region [bound, N); both cursors start at the last layer's last chunk
  of their region and walk down (chunk, then layer). The first layers, up to per_layer_balance x
  num_layers chunks, are compress-only.
- Restore (mzcache_core.cpp swapin_generate, the Send button): offloaded arenas read back first, then
  per chunk an allocation and a decompression (compressed) or an O_DIRECT read (stored), per unloaded
  weight layer an allocation and a read, in the opposite order of eviction (layer up, chunk up), on the
  artifact's core sets (ALLOC {0..5}, DECOMP {6,7}, READ {0,1}); the GPU's layer k waits for layer k's
  chunks and weights (wait_for_layer_sync). The four ablations of EVALUATION.md §4: NO (allocate,
  then restore, then prefill), AR (allocation overlapped with restoration), RP (restoration
  overlapped with the prefill), ARP (all of it: mzCache).
The planner's D, R_kv and R_w are what mz_device_profile would measure on the emulated device (its
decompression rate, and the flash model's throughput at the chunk's and the layer's read size and the
READ set's two threads); the device profile's [reference] keeps the artifact's own S25+ figures beside.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...core.errors import InputError

CHUNK_TOKENS = 256        # mzcache_types.h TOKENS_PER_CHUNK
MAX_CHUNKS = 256          # mzcache_types.h MAX_CHUNKS_PER_TENSOR: at most 65,536 tokens
STEP_CHUNKS = 20          # swapout_impl phase 1: chunks per step
RAW, COMPRESSED, STORED = 0, 1, 2
# resident share of a chunk's raw bytes once compressed (mzcache_core.cpp COMP_FREED_NUM/DEN 15/32 for
# FLEXGEN_8BIT, the default build; FLEXGEN 4-bit frees 23/32)
CODECS = {"flexgen8": (17, 32), "flexgen4": (9, 32)}
ALLOC_CORES, DECOMP_CORES, READ_CORES = 6, 2, 2     # default_core_configs (SM8750, FLEXGEN builds)
ABLATIONS = ("NO", "AR", "RP", "ARP")


@dataclass(frozen=True)
class MzModel:
    """The LLM as mzCache sizes it: layers, the KV's hidden size, the context's chunks, one weight
    layer's bytes."""
    n_layer: int
    kv_hidden: int                     # n_head_kv x head_dim
    n_chunks: int                      # ceil(context / 256)
    weight_layer_bytes: int
    codec: str = "flexgen8"

    def __post_init__(self):
        if self.codec not in CODECS:
            raise InputError(f"unknown codec {self.codec!r}: choose {', '.join(CODECS)}")
        if not 1 <= self.n_chunks <= MAX_CHUNKS:
            raise InputError(f"context of {self.n_chunks} chunks: mzCache holds 1 to {MAX_CHUNKS} chunks of "
                             f"{CHUNK_TOKENS} tokens (at most {MAX_CHUNKS * CHUNK_TOKENS:,} tokens)")

    @property
    def chunk_bytes(self) -> int:
        """K and V of one chunk of one layer, fp16 (256 x kv_hidden x 2 B each)."""
        return CHUNK_TOKENS * self.kv_hidden * 2 * 2

    @property
    def compressed_bytes(self) -> int:
        num, den = CODECS[self.codec]
        return self.chunk_bytes * num // den

    @property
    def full_bytes(self) -> int:
        """mzcache_core swapout_impl's full_bytes: every weight layer and every chunk, raw."""
        return (self.weight_layer_bytes + self.chunk_bytes * self.n_chunks) * self.n_layer


def model_of(layout, context, codec="flexgen8") -> MzModel:
    """An MzModel from a GGUF layout (kmemsim.workload.gguf_layout.ModelLayout) and a context length:
    a weight layer is blk.0's tensors (the artifact hard-codes 31,469,568 B for Qwen3-0.6B and 71,323,648 B
    for EXAONE-4.0-1.2B; the layouts give 31,466,496 and 71,319,552, 0.01% less)."""
    hp = layout.hparams
    context = int(context)
    if context < 1:
        raise InputError(f"context {context}: must be at least 1 token")
    if hp.get("n_ctx_train") and context > hp["n_ctx_train"]:
        raise InputError(f"context {context:,} is above the model's maximum ({hp['n_ctx_train']:,} tokens)")
    layer = sum(t.n_bytes for t in layout.tensors if t.name.startswith("blk.0."))
    return MzModel(hp["n_layer"], hp["head_dim"] * hp["n_head_kv"], -(-context // CHUNK_TOKENS), layer, codec)


@dataclass(frozen=True)
class MzProfile:
    """The three throughputs mz_device_profile measures (bytes per second): the decompression of raw
    chunk bytes (D), a stored chunk's O_DIRECT read (R_kv), a weight layer's (R_w)."""
    decomp: float
    kv_read: float
    weight_read: float

    @property
    def decomp_load_ratio(self) -> float:
        return self.decomp / (self.decomp + self.kv_read)

    def per_layer_balance(self, m: MzModel) -> int:
        return int(round(m.weight_layer_bytes / self.weight_read * self.decomp / m.chunk_bytes))


@dataclass
class MzState:
    """Where every chunk and weight layer of an MzModel is, and the ladder's cursors."""
    m: MzModel
    prof: MzProfile
    chunks: np.ndarray = None          # [layer, chunk]: RAW, COMPRESSED, STORED
    weights: np.ndarray = None         # [layer]: True while loaded
    offloaded: np.ndarray = None       # [layer]: the layer's compressed arena written to flash
    log: list = field(default_factory=list)   # (what, layer, chunk) in eviction order

    def __post_init__(self):
        L, N = self.m.n_layer, self.m.n_chunks
        self.chunks = np.full((L, N), RAW, np.int8)
        self.weights = np.ones(L, bool)
        self.offloaded = np.zeros(L, bool)
        self.dlr = self.prof.decomp_load_ratio
        self.plb = self.prof.per_layer_balance(self.m)
        self.bound = self._chunk_bound()
        self.comp_cur = (L - 1, self.bound[L - 1] - 1)          # cur_layer/chunk_idx_to_compress
        self.store_cur = (L - 1, N - 1)                         # cur_layer/chunk_idx_to_store
        self.unload_cur = L - 1                                 # cur_layer_idx_to_unload
        self.offload_cur = L - 1                                # next_layer_to_offload

    def _chunk_bound(self) -> list:
        """derive_swapout_plan(): compress-only layers up to per_layer_balance x num_layers chunks, the
        boundary layer comp_only + (N - comp_only) x ratio, the rest N x ratio."""
        L, N = self.m.n_layer, self.m.n_chunks
        nb, cum, out = self.plb * L, 0, []
        for _ in range(L):
            if cum + N <= nb:
                out.append(N)
                cum += N
            elif cum < nb:
                comp_only = nb - cum
                out.append(comp_only + int((N - comp_only) * self.dlr))
                cum = nb
            else:
                out.append(int(N * self.dlr))
        return out

    # ---- accounting ---------------------------------------------------------------------------
    def freed_bytes(self) -> int:
        m = self.m
        comp = self.chunks == COMPRESSED
        n_comp, n_stored = int(comp.sum()), int((self.chunks == STORED).sum())
        n_off = int(comp[self.offloaded].sum())
        return (n_comp * (m.chunk_bytes - m.compressed_bytes) + n_off * m.compressed_bytes
                + n_stored * m.chunk_bytes + int((~self.weights).sum()) * m.weight_layer_bytes)

    def remaining(self) -> float:
        """The share of the LLM's memory still in RAM: 1 - freed / full_bytes."""
        return 1.0 - self.freed_bytes() / self.m.full_bytes

    def resident_bytes(self) -> int:
        return self.m.full_bytes - self.freed_bytes()

    # ---- the ladder ---------------------------------------------------------------------------
    def _compress_next(self) -> bool:
        layer, chunk = self.comp_cur
        while layer >= 0 and chunk < 0:
            layer -= 1
            chunk = self.bound[layer] - 1 if layer >= 0 else -1
        if layer < 0:
            self.comp_cur = (layer, chunk)
            return False
        self.chunks[layer, chunk] = COMPRESSED
        self.log.append(("compress", layer, chunk))
        self.comp_cur = (layer, chunk - 1)
        return True

    def _store_next(self) -> bool:
        layer, chunk = self.store_cur
        while layer >= 0 and chunk < self.bound[layer]:
            layer -= 1
            chunk = self.m.n_chunks - 1
        if layer < 0:
            self.store_cur = (layer, chunk)
            return False
        self.chunks[layer, chunk] = STORED
        self.log.append(("store", layer, chunk))
        self.store_cur = (layer, chunk - 1)
        return True

    def processed(self) -> int:
        return int((self.chunks != RAW).sum())

    def swapout(self, target: float) -> float:
        """mzcache_core::swapout(target_ratio): evict until the remaining share is at most `target`
        (0..1), from wherever the last call left the cursors; returns the remaining share."""
        if not 0.0 <= target <= 1.0:
            raise InputError(f"remaining ratio {target}: expected 0..1")
        L = self.m.n_layer
        total = L * self.m.n_chunks
        phase1_end = total - self.plb * L
        want_comp = int(STEP_CHUNKS * self.dlr)
        while self.remaining() > target and self.processed() < phase1_end:
            done = 0
            for _ in range(want_comp):
                done += self._compress_next()
            for _ in range(STEP_CHUNKS - want_comp):
                done += self._store_next()
            if not done:
                break
        while self.remaining() > target and self.unload_cur >= 0:
            for _ in range(self.plb):
                self._compress_next()
            self.weights[self.unload_cur] = False
            self.log.append(("unload", self.unload_cur, -1))
            self.unload_cur -= 1
        if self.processed() == total and not self.weights.any():
            while self.remaining() > target and self.offload_cur >= 0:
                self.offloaded[self.offload_cur] = True
                self.log.append(("offload", self.offload_cur, -1))
                self.offload_cur -= 1
        return self.remaining()

    def summary(self) -> dict:
        c = self.chunks
        return {"remaining": self.remaining(), "resident_bytes": self.resident_bytes(),
                "chunks_compressed": int((c == COMPRESSED).sum()), "chunks_stored": int((c == STORED).sum()),
                "weight_layers_unloaded": int((~self.weights).sum()), "arenas_offloaded": int(self.offloaded.sum()),
                "decomp_load_ratio": self.dlr, "per_layer_balance": self.plb}


@dataclass(frozen=True)
class MzCosts:
    """What restoring and prefilling cost on a device (bytes or MACs per second): allocating raw chunk
    and weight-layer buffers (clSVMAlloc on the ALLOC core set), decompressing (the DECOMP set), and
    the GPU's streaming of weights and KV and its multiply-accumulates. Flash reads take the device's
    flash model (kmemsim.engine.time.pipeline)."""
    alloc: float
    decomp: float
    gpu_bytes: float
    gpu_macs: float


@dataclass(frozen=True)
class Query:
    """The request the restore serves: a query of `tokens` over the context's `context` tokens on a
    model with these hparams (n_head, head_dim, n_embd, n_vocab)."""
    tokens: int
    context: int
    hp: dict


def layer_seconds(m: MzModel, q: Query, c: MzCosts) -> float:
    """One layer of the GPU's prefill of the query: its weights and the layer's KV streamed, and its
    MACs (every weight element per query token; attention: query x context x heads x head_dim for
    K*Q and again for V*KQ)."""
    hp = q.hp
    kv = q.context * m.kv_hidden * 2 * 2
    macs = q.tokens * m.weight_layer_bytes // 2 + 2 * q.tokens * q.context * hp["n_head"] * hp["head_dim"]
    return (m.weight_layer_bytes + kv) / c.gpu_bytes + macs / c.gpu_macs


def restore(state: MzState, q: Query, costs: MzCosts, pipeline, ablation="ARP"):
    """The restore and the query's prefill as a pipeline (kmemsim.engine.time.pipeline.Pipeline, given
    empty): swapin_generate()'s streams, in restore order (layer up, chunk up), with the ablation's
    overlaps. Returns (pipeline's Schedule, the GPU's last task): TTFT is the schedule's makespan."""
    if ablation not in ABLATIONS:
        raise InputError(f"unknown ablation {ablation!r}: choose {', '.join(ABLATIONS)}")
    m = state.m
    flash = pipeline.flash()
    read = pipeline.stream("read", flash)
    alloc = pipeline.stream("alloc", pipeline.cores("alloc", 1))
    dec = pipeline.stream("decomp", pipeline.cores("decomp", 1))
    gpu = pipeline.stream("gpu", pipeline.resource("gpu", 1))
    reads = dict(io_bytes=m.chunk_bytes // 2, queue_depth=READ_CORES)   # K and V: a pread each
    # offloaded arenas come back first (swapin_generate reloads them before launching the decode)
    first = [read.read(f"arena {i}", nbytes=int((state.chunks[i] == COMPRESSED).sum()) * m.compressed_bytes,
                       io_bytes=m.compressed_bytes, queue_depth=READ_CORES)
             for i in range(m.n_layer) if state.offloaded[i]]
    jobs = []                                  # (layer, kind, bytes) in restore order
    for i in range(m.n_layer):
        if not state.weights[i]:
            jobs.append((i, "weight", m.weight_layer_bytes))
        for j in np.flatnonzero(state.chunks[i] != RAW):
            jobs.append((i, "chunk" if state.chunks[i, j] == COMPRESSED else "stored", m.chunk_bytes))
    allocs = [alloc.work(f"alloc {k} L{i}", seconds=b / costs.alloc, after=first) for i, k, b in jobs]
    sync = pipeline.stream("sync", pipeline.resource("sync", 1))  # barriers: one task waits for many
    # NO and RP: restoration waits for every allocation (the allocation stream runs them in order)
    gate = [sync.work("all allocated", seconds=0.0, after=allocs[-1:] + first)] if ablation in ("NO", "RP") else None
    done = {i: [] for i in range(m.n_layer)}
    for (i, kind, b), a in zip(jobs, allocs):
        after = gate if gate is not None else [a]
        if kind == "chunk":
            t = dec.work(f"decomp L{i}", seconds=b / costs.decomp, after=after)
        elif kind == "stored":
            t = read.read(f"read L{i}", nbytes=b, after=after, **reads)
        else:
            t = read.read(f"weights L{i}", nbytes=b, io_bytes=b, queue_depth=READ_CORES, after=after)
        done[i].append(t)
    every = [sync.work("all restored", seconds=0.0, after=[t for ts in done.values() for t in ts] + allocs[-1:] + first)]
    per_layer = layer_seconds(m, q, costs)
    last = None
    for i in range(m.n_layer):
        # wait_for_layer_sync(i): the layer's chunks and weights; NO and AR prefill after all of it
        after = every if ablation in ("NO", "AR") else done[i] + first
        last = gpu.work(f"layer {i}", seconds=per_layer, after=after)
    hp = q.hp
    head = hp["n_vocab"] * hp["n_embd"] * 2           # the output head (fp16), for the query's last token
    last = gpu.work("output", seconds=head / costs.gpu_bytes + head / 2 / costs.gpu_macs)
    return pipeline.run(), last
