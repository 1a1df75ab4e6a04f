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
from ...core.trace import MapFlag, Op, PageClass
from ...core.units import PAGE_SIZE, pages

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


def costs_of(dev, codec="flexgen8") -> MzCosts:
    """A device profile's costs for mzCache (Device.engine_costs: [gpu], [codecs])."""
    c = dev.engine_costs()
    return MzCosts(alloc=c["svm_alloc_gbps"] * 1e9, decomp=c[f"{codec}_decomp_gbps"] * 1e9,
                   gpu_bytes=c["gpu_weight_gbps"] * 1e9, gpu_macs=c["gpu_gmac_s"] * 1e9)


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


@dataclass
class Job:
    """One piece of a restore: a weight layer or a chunk, its allocation and its refill task."""
    layer: int
    chunk: int                    # -1 for a weight layer
    kind: str                     # "weight", "chunk" (compressed: decompressed), "stored" (read)
    alloc: object = None
    refill: object = None


def restore(state: MzState, q: Query, costs: MzCosts, pipeline, ablation="ARP"):
    """The restore and the query's prefill as a pipeline (kmemsim.engine.time.pipeline.Pipeline, given
    empty): swapin_generate()'s streams, in restore order (layer up, chunk up), with the ablation's
    overlaps. Returns (Schedule, jobs, arena reloads): TTFT is the schedule's makespan."""
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
    first = {i: read.read(f"arena {i}", nbytes=int((state.chunks[i] == COMPRESSED).sum()) * m.compressed_bytes,
                          io_bytes=m.compressed_bytes, queue_depth=READ_CORES)
             for i in range(m.n_layer) if state.offloaded[i]}
    before = list(first.values())
    jobs = []                                  # in restore order
    for i in range(m.n_layer):
        if not state.weights[i]:
            jobs.append(Job(i, -1, "weight"))
        for j in np.flatnonzero(state.chunks[i] != RAW):
            jobs.append(Job(i, int(j), "chunk" if state.chunks[i, j] == COMPRESSED else "stored"))
    size = lambda job: m.weight_layer_bytes if job.kind == "weight" else m.chunk_bytes
    for job in jobs:
        job.alloc = alloc.work(f"alloc {job.kind} L{job.layer}", seconds=size(job) / costs.alloc, after=before)
    sync = pipeline.stream("sync", pipeline.resource("sync", 1))  # barriers: one task waits for many
    # NO and RP: restoration waits for every allocation (the allocation stream runs them in order)
    gate = ([sync.work("all allocated", seconds=0.0, after=[j.alloc for j in jobs[-1:]] + before)]
            if ablation in ("NO", "RP") else None)
    done = {i: [] for i in range(m.n_layer)}
    for job in jobs:
        after = gate if gate is not None else [job.alloc]
        b = size(job)
        if job.kind == "chunk":
            job.refill = dec.work(f"decomp L{job.layer}", seconds=b / costs.decomp, after=after)
        elif job.kind == "stored":
            job.refill = read.read(f"read L{job.layer}", nbytes=b, after=after, **reads)
        else:
            job.refill = read.read(f"weights L{job.layer}", nbytes=b, io_bytes=b, queue_depth=READ_CORES, after=after)
        done[job.layer].append(job.refill)
    every = [sync.work("all restored", seconds=0.0,
                       after=[j.refill for j in jobs] + [j.alloc for j in jobs[-1:]] + before)]
    per_layer = layer_seconds(m, q, costs)
    for i in range(m.n_layer):
        # wait_for_layer_sync(i): the layer's chunks and weights; NO and AR prefill after all of it
        gpu.work(f"layer {i}", seconds=per_layer, after=every if ablation in ("NO", "AR") else done[i] + before)
    hp = q.hp
    head = hp["n_vocab"] * hp["n_embd"] * 2           # the output head (fp16), for the query's last token
    gpu.work("output", seconds=head / costs.gpu_bytes + head / 2 / costs.gpu_macs)
    return pipeline.run(), jobs, first


# ------------------------------------------------------------------------------------------------
# mzCache as a process of a trace

class MzEngine:
    """mzCache's memory as page events of its process, for a scenario's timeline (the ten-app round):
    what the kernel emulation then does to it is Linux's.

    Buffers: the GPU's shared virtual memory (weight layers, raw KV chunks: OpenCL SVM on kgsl pages,
    which the kernel does not reclaim) as mlocked anonymous mappings, one per weight layer and one per
    chunk of a layer (the fine-grained buffers: a chunk is freed alone); the compressed arenas, one per
    layer, malloc'd anonymous memory, mlocked at the end of each swap-out when `arena_mlock` (the
    artifact's way: "an ordinary malloc pool is anonymous memory zram swaps out, turning the next swapin
    into a major-fault storm") or left to the kernel; per layer a flash file for stored chunks, one for
    the offloaded arena and the weight layer's dump, read and written with O_DIRECT.
    Signals: trim(step) is onTrimMemory (swapout(ratio - step)); request() is the Send button
    (swapin_generate(): the restore, its events at their pipeline times, then the query and its decode
    on the GPU), after which the ratio is 1.0 again.
    Not modelled: the GPU's reads of SVM memory (mlocked: nothing the kernel does depends on them), the
    swap-out's own time (its events are placed at the signal's time), the mins/maxs pool apart from the
    arena (counted in the arena's 17/32)."""

    def __init__(self, layout, events, dev, costs: MzCosts, codec="flexgen8", arena_mlock=True):
        self.L, self.ev, self.dev, self.costs = layout, events, dev, costs
        self.codec, self.arena_mlock = codec, bool(arena_mlock)
        self.hp = hp = layout.hparams
        self.n_layer = hp["n_layer"]
        self.tokens = 0
        self.ratio = 1.0
        self.state = None
        self.logged = 0                   # entries of state.log already emitted
        self.chunk_map = {}               # (layer, chunk) -> map id of the raw chunk's SVM buffer
        self.weight_map = {}              # layer -> map id of the weight layer's SVM buffer
        self.arena_map = {}               # layer -> map id of its compressed arena
        self.requests = []                # (arrival ns, TTFT s, jobs restored)
        m = self.model(1)
        self.files = {}
        for i in range(self.n_layer):
            self.files["kv", i] = events.file(f"<mzcache: KV_L{i}.bin>", pages(m.chunk_bytes) * MAX_CHUNKS)
            self.files["arena", i] = events.file(f"<mzcache: arena_L{i}.bin>", pages(m.compressed_bytes) * MAX_CHUNKS)
            self.files["weights", i] = events.file(f"<mzcache: weights_L{i}.bin>", pages(m.weight_layer_bytes))

    def model(self, tokens) -> MzModel:
        return model_of(self.L, max(1, int(tokens)), self.codec)

    def profile(self, m: MzModel) -> MzProfile:
        """What mz_device_profile would measure on the device (as the experiment's planner)."""
        return MzProfile(decomp=self.costs.decomp, kv_read=self.dev.flash_throughput(m.chunk_bytes // 2, READ_CORES),
                         weight_read=self.dev.flash_throughput(m.weight_layer_bytes, READ_CORES))

    def _svm(self, t, name, nbytes, cls):
        """clSVMAlloc: a buffer of the GPU's shared memory, off the kernel's LRU (mlocked), filled."""
        m = self.ev.mmap(t, name, pages(nbytes), flags=MapFlag.READ | MapFlag.WRITE | MapFlag.LOCKED, cls=cls)
        self.ev.event(t, Op.WRITE, m, 0, pages(nbytes))
        return m

    # ---- load and prefill ----------------------------------------------------------------------
    def load(self, t) -> int:
        """The model read from its GGUF (mmap, the page cache) into one SVM buffer per weight layer and
        one for the rest (token_embd, output, norms); the file's pages stay cached, reclaimable."""
        L = self.L
        fid = self.ev.file(L.path or f"<layout:{L.name}>", L.file_pages)
        self.ev.event(t, Op.OPEN, -1, 0, 0, 0, fid)
        fm = self.ev.mmap(t, "weights (GGUF, mmap)", L.file_pages, file=fid,
                          flags=MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS)
        self.ev.event(t, Op.READ, fm, 0, L.file_pages)
        t += int(L.file_size / self.dev.flash_throughput(int(self.dev.kernel.get("max_sectors_kb", 512)) * 1024, 8) * 1e9)
        layer = self.model(1).weight_layer_bytes
        rest = L.file_size - layer * self.n_layer
        self.weight_map["rest"] = self._svm(t, "SVM weights (token_embd, output)", rest, PageClass.WEIGHTS_F16)
        for i in range(self.n_layer):
            self.weight_map[i] = self._svm(t, f"SVM weights L{i}", layer, PageClass.WEIGHTS_F16)
        self.ev.event(t, Op.MUNMAP, fm, 0, L.file_pages)
        return t

    def prefill(self, t, n, timed=True) -> int:
        """n tokens appended to the context: the chunks they fill created (mz_grow_chunks) and written;
        the GPU's prefill time (a layer's weights and KV streamed, every weight element per token)
        unless a restore's schedule has timed it already (`timed` False)."""
        old = self.tokens
        self.tokens += int(n)
        m = self.model(self.tokens)
        for i in range(self.n_layer):
            for j in range(-(-old // CHUNK_TOKENS), m.n_chunks):
                self.chunk_map[i, j] = self._svm(t, f"SVM KV L{i} chunk {j}", m.chunk_bytes, PageClass.KV_F16)
        if timed:
            t += int(m.n_layer * layer_seconds(m, Query(int(n), self.tokens, self.hp), self.costs) * 1e9)
        self.state = MzState(m, self.profile(m))
        self.logged, self.ratio = 0, 1.0
        return t

    # ---- onTrimMemory -------------------------------------------------------------------------
    def trim(self, t, step) -> float:
        """onTrimMemory: swapout(ratio - step); the evictions as events at t. Returns the new ratio."""
        self.ratio = max(0.0, self.ratio - float(step))
        st, m = self.state, self.state.m
        st.swapout(self.ratio)
        for what, i, j in st.log[self.logged:]:
            if what == "compress":
                raw = self.chunk_map.pop((i, j))
                self.ev.event(t, Op.READ, raw, 0, pages(m.chunk_bytes))
                arena = self._arena(t, i, m)
                self.ev.event(t, Op.WRITE, arena, j * pages(m.compressed_bytes), pages(m.compressed_bytes))
                self.ev.event(t, Op.MUNMAP, raw, 0, pages(m.chunk_bytes))
            elif what == "store":
                raw = self.chunk_map.pop((i, j))
                self.ev.event(t, Op.READ, raw, 0, pages(m.chunk_bytes))
                self.ev.event(t, Op.DIO_WRITE, -1, j * pages(m.chunk_bytes), pages(m.chunk_bytes), 0, self.files["kv", i])
                self.ev.event(t, Op.MUNMAP, raw, 0, pages(m.chunk_bytes))
            elif what == "unload":
                w = self.weight_map.pop(i)
                self.ev.event(t, Op.MUNMAP, w, 0, pages(m.weight_layer_bytes))
            elif what == "offload" and i in self.arena_map:
                a = self.arena_map.pop(i)
                n = m.n_chunks * pages(m.compressed_bytes)
                self.ev.event(t, Op.READ, a, 0, n)
                self.ev.event(t, Op.DIO_WRITE, -1, 0, n, 0, self.files["arena", i])
                self.ev.event(t, Op.MUNMAP, a, 0, n)
        self.logged = len(st.log)
        if self.arena_mlock:              # mlock of the arenas' used bytes at the end of the swap-out
            for i, a in self.arena_map.items():
                self.ev.event(t, Op.MLOCK, a, 0, m.n_chunks * pages(m.compressed_bytes))
        return self.ratio

    def _arena(self, t, i, m):
        if i not in self.arena_map:
            self.arena_map[i] = self.ev.mmap(t, f"compressed arena L{i}", m.n_chunks * pages(m.compressed_bytes),
                                             flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.KV_Q8)
        return self.arena_map[i]

    # ---- Send -----------------------------------------------------------------------------------
    def request(self, t, new, decode, pipeline) -> int:
        """swapin_generate(): the restore as a pipeline (ARP), each job's events at its task's times from
        t; then the query's n tokens and `decode` tokens on the GPU. Returns the end time."""
        st, m = self.state, self.state.m
        q = Query(int(new), self.tokens + int(new), self.hp)
        sched, jobs, reloads = restore(st, q, self.costs, pipeline, "ARP")
        at = lambda x: t + int(x * 1e9)
        for i, task in reloads.items():           # offloaded arenas read back into a fresh arena
            self.arena_map[i] = a = self.ev.mmap(at(sched.start(task)), f"compressed arena L{i}",
                                                 m.n_chunks * pages(m.compressed_bytes),
                                                 flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.KV_Q8)
            n = m.n_chunks * pages(m.compressed_bytes)
            self.ev.event(at(sched.start(task)), Op.DIO_READ, -1, 0, n, 0, self.files["arena", i])
            self.ev.event(at(sched.end(task)), Op.WRITE, a, 0, n)
        for job in jobs:
            t0, t1 = at(sched.start(job.alloc)), at(sched.end(job.refill))
            if job.kind == "weight":
                w = self.ev.mmap(t0, f"SVM weights L{job.layer}", pages(m.weight_layer_bytes),
                                 flags=MapFlag.READ | MapFlag.WRITE | MapFlag.LOCKED, cls=PageClass.WEIGHTS_F16)
                self.ev.event(at(sched.start(job.refill)), Op.DIO_READ, -1, 0, pages(m.weight_layer_bytes), 0,
                              self.files["weights", job.layer])
                self.ev.event(t1, Op.WRITE, w, 0, pages(m.weight_layer_bytes))
                self.weight_map[job.layer] = w
                continue
            raw = self.ev.mmap(t0, f"SVM KV L{job.layer} chunk {job.chunk}", pages(m.chunk_bytes),
                               flags=MapFlag.READ | MapFlag.WRITE | MapFlag.LOCKED, cls=PageClass.KV_F16)
            if job.kind == "chunk":               # decompressed from the arena: its pages are read
                self.ev.event(at(sched.start(job.refill)), Op.READ, self.arena_map[job.layer],
                              job.chunk * pages(m.compressed_bytes), pages(m.compressed_bytes))
            else:
                self.ev.event(at(sched.start(job.refill)), Op.DIO_READ, -1, job.chunk * pages(m.chunk_bytes),
                              pages(m.chunk_bytes), 0, self.files["kv", job.layer])
            self.ev.event(t1, Op.WRITE, raw, 0, pages(m.chunk_bytes))
            self.chunk_map[job.layer, job.chunk] = raw
        t_end = at(sched.makespan)
        for i, a in list(self.arena_map.items()):  # restored: the arenas are freed
            self.ev.event(t_end, Op.MUNMAP, a, 0, m.n_chunks * pages(m.compressed_bytes))
            del self.arena_map[i]
        self.requests.append((t, sched.makespan, len(jobs)))
        t = self.prefill(t_end, new, timed=False)  # the query's cells (its prefill is the schedule's GPU)
        per_token = m.n_layer * layer_seconds(m, Query(1, self.tokens, self.hp), self.costs)
        return t + int(decode * per_token * 1e9)
