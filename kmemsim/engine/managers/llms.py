"""LLMS (Yin, Xu, Li, Liu; arXiv 2403.11805; ../shared/reference/seed-systems.md §2): the LLM as a system
service holding many apps' contexts in a memory budget, and the paper's four baselines.

A context's KV cache is split into chunks of 16 tokens (all layers of those tokens). A call
(callLLM) needs every chunk of its context in memory, locked; the time to get them there is the
switching latency. What each system does:
- `llms`: chunks kept INT8 and compressed further by tolerance (§3.2: per-chunk information density,
  ranks and thresholds give 8/8, 4/8 or 2/8 of the bits, 50% overall: `assign_levels`); missing
  chunks partly read from flash and partly recomputed from their text, layer by layer, overlapped
  (§3.3: the split of Eq. 4 by linear programming, `plan_split`; the time the pipeline model's
  critical path, `pipeline_seconds`); ahead-of-time swap-out of the chunks a call modified, so
  reclaiming later only drops them, and eviction by the LCTRU queue: the least compressed chunks
  first, least recently used within a level (§3.4).
- `lmk`: whole contexts killed when the budget is short (least recently used first) and recomputed
  from their text when called again.
- `swap`: whole contexts written to flash when evicted (at the switch that needs the room) and read
  back whole.
- `vllm-s`: vLLM-style paged KV of 16-token blocks, fp16, least recently used blocks swapped out at
  the switch and the missing ones read back; `vllm-sq`: the same with INT8 KV.
- the ablations `llms-no-lifecycle` (no ahead-of-time swap-out, LRU instead of LCTRU),
  `llms-no-compression` (every chunk 8/8) and `llms-no-pipeline` (missing chunks read, never
  recomputed).
Costs: T_IO(m) and T_re(x) are linear (§3.3), from the device profile: chunk files read one after
another at queue depth 1 (`Device.flash_throughput`), and recompute on the accelerator (`[gpu]`
weight_gbps: the weights streamed once per pass; gmac_s: the multiply-accumulates of the recomputed
tokens, their attention over the context included). Writes are charged at the read rate (the
profiles have no write figures). Accuracy is not modelled.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ...core.errors import InputError
from ..time.pipeline import Pipeline

CHUNK_TOKENS = 16
LEVELS = np.array([1.0, 0.5, 0.25])     # bits kept of INT8: 8/8, 4/8, 2/8 (§4)
GLOBAL_RATIO = 0.5                       # ratio_global (§4)


# ---- the model and the device's costs -------------------------------------------------------------
@dataclass(frozen=True)
class LlmShape:
    """What LLMS needs of an LLM: per token, the K and V elements of all layers and the weight
    multiply-accumulates; the weights' bytes (streamed once per recompute pass); the context window."""
    name: str
    n_layer: int
    kv_elems: int              # K + V elements per token per layer
    macs_per_token: float
    weight_bytes: float
    max_ctx: int
    n_embd: int

    def chunk_bytes(self, elem_bytes: float, chunk: int = CHUNK_TOKENS) -> float:
        return chunk * self.n_layer * self.kv_elems * elem_bytes


def shape_of(name, hp: dict, weight_bytes: float, max_ctx: int) -> LlmShape:
    """An LlmShape from a layout's hparams (n_layer, n_embd, n_head_kv, head_dim, n_ff, n_vocab)."""
    L, d = int(hp["n_layer"]), int(hp["n_embd"])
    kv = 2 * int(hp["n_head_kv"]) * int(hp["head_dim"])
    ff = int(hp["n_ff"])
    q_o = 2 * d * int(hp["n_head"]) * int(hp["head_dim"])
    macs = L * (q_o + d * kv + 3 * d * ff) + d * int(hp["n_vocab"])
    return LlmShape(name, L, kv, float(macs), float(weight_bytes), int(max_ctx), d)


@dataclass(frozen=True)
class Costs:
    """The linear profiles of §3.3 on one device: T_IO(m) = m x io_s_per_byte (chunk files read one
    after another), T_re(x) = pass_s + x x chunk_s(n) for x chunks of a context of n tokens."""
    io_s_per_byte: float       # reading (and writing) chunk files, 1 / Device.flash_throughput(S, 1)
    pass_s: float              # one recompute pass streams the weights
    gmac_s: float              # the accelerator's multiply-accumulates, 1e9 per second
    shape: LlmShape
    chunk: int = CHUNK_TOKENS  # tokens per chunk

    def t_io(self, nbytes):
        return np.asarray(nbytes, float) * self.io_s_per_byte

    def chunk_s(self, n_ctx):
        """Recompute time of one chunk in a context of n_ctx tokens: its tokens' weight MACs and their
        attention under the causal mask over the merged K/V (§3.3: Q.K and A.V, 2 x n_head x head_dim
        = 2 x n_embd MACs per layer per earlier token; a chunk at a uniformly random position has on
        average n_ctx / 2 of them)."""
        s = self.shape
        attn = 2.0 * (n_ctx / 2.0) * s.n_embd * s.n_layer
        return self.chunk * (s.macs_per_token + attn) / (self.gmac_s * 1e9)

    def t_re(self, x, n_ctx):
        x = np.asarray(x, float)
        return np.where(x > 0, self.pass_s + x * self.chunk_s(n_ctx), 0.0)


def costs_of(dev, shape: LlmShape, elem_bytes: float = 1.0, chunk: int = CHUNK_TOKENS) -> Costs:
    """The device's profiles for this model: [gpu] weight_gbps and gmac_s (the accelerator the service
    runs on), the flash read at queue depth 1 in INT8 chunk files."""
    eng = dev.engine
    missing = [k for k in ("gpu_weight_gbps", "gpu_gmac_s") if k not in eng]
    if missing:
        raise InputError(f"device {dev.name}: no [gpu] {', '.join(k.removeprefix('gpu_') for k in missing)} "
                         "(the accelerator an LLM service runs on; see jetson-orin-nx.toml)")
    size = shape.chunk_bytes(elem_bytes, chunk)
    return Costs(io_s_per_byte=1.0 / dev.flash_throughput(size, 1),
                 pass_s=shape.weight_bytes / (eng["gpu_weight_gbps"] * 1e9),
                 gmac_s=float(eng["gpu_gmac_s"]), shape=shape, chunk=int(chunk))


# ---- tolerance-aware compression (§3.2) ----------------------------------------------------------
def assign_levels(density, global_ratio=GLOBAL_RATIO, levels=LEVELS) -> np.ndarray:
    """Each chunk's level (index into LEVELS) from its information density (Eq. 1's D_i): chunks
    ranked by density, the densest band kept at 8/8, the next at 4/8, the rest at 2/8 (Eq. 2), the
    bands' sizes chosen to keep the most information, sum over chunks of ratio x D, with the
    average ratio held at global_ratio (Eq. 3; with three levels one size is free: f4 = 1 - 3 f8,
    f2 = 2 f8 for 50%, searched over every whole number of chunks). We read Eq. 3's objective as
    the information kept (ratio x D): the densest chunks should keep the most bits (§3.2)."""
    d = np.asarray(density, float)
    n = len(d)
    if n == 0:
        return np.zeros(0, np.int8)
    order = np.argsort(-d, kind="stable")
    ds = np.concatenate([[0.0], np.cumsum(d[order])])
    r0, r1, r2 = (float(x) for x in levels)
    n0 = np.arange(n + 1)                      # chunks at 8/8; the ratio fixes those at 4/8:
    n1 = np.rint((global_ratio * n - r2 * n - (r0 - r2) * n0) / (r1 - r2)).astype(int)   # r0 n0 + r1 n1 + r2 n2 = g n
    ok = (n1 >= 0) & (n0 + n1 <= n)
    n0, n1 = n0[ok], n1[ok]
    info = r0 * ds[n0] + r1 * (ds[n0 + n1] - ds[n0]) + r2 * (ds[n] - ds[n0 + n1])
    b = int(np.argmax(info))                   # the first best: the fewest 8/8 chunks on a tie
    a0, a1 = int(n0[b]), int(n1[b])
    lv = np.empty(n, np.int8)
    lv[order[:a0]], lv[order[a0:a0 + a1]], lv[order[a0 + a1:]] = 0, 1, 2
    return lv


# ---- the swapping-recompute split (§3.3, Eq. 4) ----------------------------------------------------
def _delay(x, counts, sizes, costs, n_ctx):
    x = np.asarray(x, float)
    return float(max(costs.t_re(x.sum(), n_ctx), costs.t_io(np.dot(np.asarray(counts) - x, sizes))))


def plan_split(counts, sizes, costs: Costs, n_ctx) -> tuple[np.ndarray, float]:
    """How many missing chunks of each level to recompute (the rest are read): minimise
    max(T_re(sum x_w), T_IO(sum (X_w - x_w) size_w)) with 0 <= x_w <= X_w (Eq. 4), by linear
    programming over (x, z): min z, z >= T_re(.), z >= T_IO(.), then the best whole-number point around
    the LP's optimum (and the two pure plans: read all, recompute all). Returns (x, delay)."""
    from scipy.optimize import linprog      # here: scipy.optimize takes 0.3 s to import, only the plan needs it
    counts = np.asarray(counts, float)
    sizes = np.asarray(sizes, float)
    if counts.sum() == 0:
        return np.zeros(len(counts), int), 0.0
    k = len(counts)
    c = np.r_[np.zeros(k), 1.0]
    cs = costs.chunk_s(n_ctx)
    # z >= pass + cs sum x   ->  cs sum x - z <= -pass
    # z >= io (sum X s - sum x s)  ->  -io s.x - z <= -io X.s
    a_ub = np.array([np.r_[np.full(k, cs), -1.0], np.r_[-costs.io_s_per_byte * sizes, -1.0]])
    b_ub = np.array([-costs.pass_s, -costs.io_s_per_byte * float(counts @ sizes)])
    lp = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, x) for x in counts] + [(0, None)], method="highs")
    cand = [np.zeros(k), counts.copy()]
    if lp.success:
        x = lp.x[:k]
        for f in itertools.product(*[(math.floor(v), math.ceil(v)) for v in x]):
            cand.append(np.minimum(np.asarray(f, float), counts))
    best = min(cand, key=lambda x: (_delay(x, counts, sizes, costs, n_ctx), x.sum()))
    return best.astype(int), _delay(best, counts, sizes, costs, n_ctx)


def brute_split(counts, sizes, costs: Costs, n_ctx) -> tuple[np.ndarray, float]:
    """Every whole-number split, for checking plan_split on small cases."""
    grid = itertools.product(*[range(int(x) + 1) for x in counts])
    best = min((np.asarray(x, float) for x in grid),
               key=lambda x: (_delay(x, counts, sizes, costs, n_ctx), x.sum()))
    return best.astype(int), _delay(best, counts, sizes, costs, n_ctx)


def pipeline_seconds(costs: Costs, read_bytes: float, recompute: int, n_ctx: int, write_bytes=0.0) -> float:
    """The loading as the layer pipeline runs it (§3.3, §4): an I/O thread reads layer l+1's share of
    the chunks while the accelerator recomputes layer l's, which needs layer l's loaded K and V;
    evicted chunks that must be written go first on the flash. Two streams of L equal steps, read r
    and recompute c per layer: write + r + (L - 1) max(r, c) + c (pipeline_model() builds the same
    on kmemsim.engine.time.pipeline, and a test holds the two equal)."""
    w = float(costs.t_io(write_bytes))
    r = float(costs.t_io(read_bytes)) / costs.shape.n_layer
    c = float(costs.t_re(recompute, n_ctx)) / costs.shape.n_layer
    if r == 0 and c == 0:
        return w
    return w + r + (costs.shape.n_layer - 1) * max(r, c) + c


def pipeline_model(dev, costs: Costs, read_bytes, recompute, n_ctx, write_bytes=0.0) -> float:
    """pipeline_seconds on the pipeline time model: its reference."""
    p = Pipeline(dev)
    io, acc = p.stream("io", p.flash()), p.stream("recompute", p.resource("accelerator", 1))
    L = costs.shape.n_layer
    w = io.work("write evicted", float(costs.t_io(write_bytes))) if write_bytes > 0 else None
    r, c = float(costs.t_io(read_bytes)) / L, float(costs.t_re(recompute, n_ctx)) / L
    for layer in range(L):
        rd = io.work(f"read L{layer}", r) if r > 0 else None
        if c > 0:
            acc.work(f"recompute L{layer}", c, after=[t for t in (rd, w) if t is not None])
    return float(p.run().makespan) if (r > 0 or c > 0 or w is not None) else 0.0


# ---- the service ----------------------------------------------------------------------------------
@dataclass
class Ctx:
    """One context's chunks: level (index into LEVELS), resident, a valid copy on flash, last use."""
    tokens: int = 0
    level: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    resident: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    on_disk: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    last: np.ndarray = field(default_factory=lambda: np.zeros(0))
    base: int = 0              # the absolute number of chunk 0 (chunks slid out of the window before it)


class Service:
    """A context store under a memory budget: call(ctx, new_tokens) makes the context resident
    (evicting others as the system does) and returns the switching latency, then appends the call's
    tokens. Subclasses set the bytes per element, the eviction order and what a missing chunk costs."""
    name = ""
    elem_bytes = 2.0           # fp16 KV
    compressed = False         # tolerance-aware levels (else every chunk whole)
    whole = False              # evicts whole contexts
    kills = False              # an evicted context is gone (recomputed from its text), not written
    aot = False                # ahead-of-time swap-out of modified chunks
    keep_disk = False          # a flash copy stays valid after a load (LLMS's chunk files); else
                               # the swap slot is freed when the chunk comes back

    def __init__(self, budget: float, shape: LlmShape, dev, density_of=None, chunk=CHUNK_TOKENS,
                 ratio=GLOBAL_RATIO):
        """density_of(ctx, tokens, n_chunks): the context's chunk densities (Eq. 1), for compression;
        chunk: tokens per chunk (the paper's 16, swept in its Fig 14); ratio: ratio_global."""
        if isinstance(chunk, bool) or int(chunk) != chunk or chunk < 1:
            raise InputError(f"chunk size {chunk!r}: a chunk holds at least 1 token (LLMS uses 16)")
        if not 0 < ratio <= 1:
            raise InputError(f"compression ratio {ratio!r} outside (0, 1]: the share of INT8's bits kept")
        if ratio < LEVELS.min():
            raise InputError(f"compression ratio {ratio} below the lightest level's {LEVELS.min()} (2 of 8 bits)")
        if self.compressed and density_of is None:
            raise InputError(f"{self.name}: tolerance-aware compression needs the chunks' densities")
        self.budget, self.shape, self.dev = float(budget), shape, dev
        self.chunk, self.ratio = int(chunk), float(ratio)
        self.costs = costs_of(dev, shape, 1.0, self.chunk)
        self.ctxs: dict = {}
        self.density_of = density_of
        self.clock = 0
        self.full = shape.chunk_bytes(self.elem_bytes, self.chunk)
        self.actions: list = []

    def level_bytes(self, lv):
        lv = np.asarray(lv)
        return self.full * LEVELS[lv] if self.compressed else np.full(lv.shape, self.full)

    def resident_bytes(self) -> float:
        return float(sum(self.level_bytes(c.level[c.resident]).sum() for c in self.ctxs.values()))

    def order(self, level, last):
        """The eviction order of candidate chunks (their levels and last uses): least recently used
        first."""
        return np.argsort(last, kind="stable")

    def evict(self, need: float, skip) -> float:
        """Free `need` bytes of other contexts' chunks (whole contexts if the system evicts so);
        returns the bytes that had to be written first."""
        if need <= 0:
            return 0.0
        keys = [k for k, c in self.ctxs.items() if k != skip and c.resident.any()]
        if not keys:
            return 0.0
        if self.whole:                         # whole contexts, least recently used first
            chosen, freed = [], 0.0
            for k in sorted(keys, key=lambda k: self.ctxs[k].last.max()):
                c = self.ctxs[k]
                chosen.append((k, np.flatnonzero(c.resident)))
                freed += float(self.level_bytes(c.level[c.resident]).sum())
                if freed >= need:
                    break
        else:
            owner = np.concatenate([np.full(int(self.ctxs[k].resident.sum()), j) for j, k in enumerate(keys)])
            idx = np.concatenate([np.flatnonzero(self.ctxs[k].resident) for k in keys])
            lv = np.concatenate([self.ctxs[k].level[self.ctxs[k].resident] for k in keys])
            last = np.concatenate([self.ctxs[k].last[self.ctxs[k].resident] for k in keys])
            o = self.order(lv, last)
            n = int(np.searchsorted(np.cumsum(self.level_bytes(lv[o])), need)) + 1
            pick = o[:n]
            chosen = [(keys[j], idx[pick[owner[pick] == j]]) for j in np.unique(owner[pick])]
        written = 0.0
        for k, i in chosen:
            c = self.ctxs[k]
            w = i[~c.on_disk[i]] if not self.kills else i[:0]
            written += float(self.level_bytes(c.level[w]).sum())
            c.on_disk[i] = not self.kills
            c.resident[i] = False
            self.actions.append(("evict", k, c.base + i, c.level[i].copy(), c.base + w, c.level[w].copy()))
        return written

    def load(self, c: Ctx, missing: np.ndarray, write_bytes: float) -> float:
        """Seconds to bring the missing chunks in, after writing write_bytes of evicted ones."""
        read = float(self.level_bytes(c.level[missing]).sum())
        self.actions.append(("read", None, c.base + missing, c.level[missing].copy()))
        return pipeline_seconds(self.costs, read, 0, c.tokens, write_bytes)

    def call(self, k, new_tokens: int) -> float:
        """callLLM on context k: its switching latency (inf if the context alone exceeds the
        budget), then the call's new_tokens (prompt and output) appended. `actions` lists what it
        did to chunks, in order (kmemsim.engine.managers.llms_process turns them into page events):
        ("evict", ctx, chunks, levels, written chunks, their levels), ("read" | "recompute", None,
        chunks, levels) of the called context, ("grow", ctx, chunks written, levels, the first new chunk),
        ("write", ctx, chunks, levels): ahead-of-time swap-out. Chunks are absolute numbers."""
        c = self.ctxs.setdefault(k, Ctx())
        self.clock += 1
        self.actions = []
        if float(self.level_bytes(c.level).sum()) > self.budget:
            return math.inf
        missing = np.flatnonzero(~c.resident)
        need = self.resident_bytes() + float(self.level_bytes(c.level[missing]).sum()) - self.budget
        written = self.evict(need, k)
        latency = self.load(c, missing, written) if len(missing) or written else 0.0
        c.resident[:] = True
        if not self.keep_disk:
            c.on_disk[missing] = False
        c.last[:] = self.clock
        self.grow(k, c, int(new_tokens))
        return latency

    def delete(self, k):
        """delLLMCtx: the context's chunks and its files are gone."""
        self.ctxs.pop(k, None)

    def grow(self, k, c: Ctx, new: int):
        """Append the call's tokens: the last partial chunk and new chunks are modified; past the
        model's window the oldest chunks slide out (§4: a sliding window over the context). With
        compression the context's chunks are ranked again by their densities now (Eqs. 2-3), so the
        context keeps half of INT8's bits. The paper does not say when levels are assigned; a chunk
        whose rank rose gets its bits back for free here (the densities of a context are stable,
        its recent chunks' ranks are what moves)."""
        if new <= 0:
            return
        n_old = len(c.level)
        old_end = c.base + n_old              # chunks from here on are new
        if c.tokens % self.chunk and n_old:
            c.on_disk[n_old - 1] = False
        total = c.tokens + new
        add = -(-total // self.chunk) - n_old
        c.level = np.r_[c.level, np.zeros(add, np.int8)]
        c.resident = np.r_[c.resident, np.ones(add, bool)]
        c.on_disk = np.r_[c.on_disk, np.zeros(add, bool)]
        c.last = np.r_[c.last, np.full(add, float(self.clock))]
        drop = max(0, -(-(total - self.shape.max_ctx) // self.chunk))
        if drop:
            c.level, c.resident, c.on_disk, c.last = (a[drop:] for a in (c.level, c.resident, c.on_disk, c.last))
            c.base += drop
        c.tokens = total - drop * self.chunk
        first = max(0, n_old - 1 - drop)
        if self.compressed:
            c.level = assign_levels(self.density_of(k, c.tokens, len(c.level)), self.ratio)
        self.actions.append(("grow", k, c.base + np.arange(first, len(c.level)), c.level[first:].copy(), old_end))
        if self.aot:                          # written back ahead of time, off the critical path
            w = np.flatnonzero(~c.on_disk)
            self.actions.append(("write", k, c.base + w, c.level[w].copy()))
            c.on_disk[:] = True
        # what the call added is in memory now: the budget holds at once, from the other contexts
        # first, then (a context grown past the budget alone) from its own, no longer locked
        self.evict(self.resident_bytes() - self.budget, k)
        self.evict(self.resident_bytes() - self.budget, None)


class Llms(Service):
    name = "llms"
    elem_bytes = 1.0           # INT8 KV (SmoothQuant-style, §4)
    compressed = True
    aot = True
    keep_disk = True
    pipeline = True
    lctru = True

    def order(self, level, last):
        """The LCTRU queue (§3.4): one LRU sub-queue per level, the least compressed popped first."""
        return np.lexsort((last, level)) if self.lctru else super().order(level, last)

    def load(self, c: Ctx, missing, write_bytes):
        lv = c.level[missing]
        counts = np.bincount(lv, minlength=len(LEVELS))
        sizes = self.level_bytes(np.arange(len(LEVELS)))
        if self.pipeline:
            x, _ = plan_split(counts, sizes, self.costs, c.tokens)
        else:
            x = np.zeros(len(LEVELS), int)
        read = float((counts - x) @ sizes)
        # which chunks: the first x_w missing chunks of each level are recomputed
        re = np.concatenate([missing[lv == w][:x[w]] for w in range(len(LEVELS))]) if len(missing) else missing
        rd = np.setdiff1d(missing, re)
        self.actions += [("read", None, c.base + rd, c.level[rd].copy()), ("recompute", None, c.base + re, c.level[re].copy())]
        return pipeline_seconds(self.costs, read, int(x.sum()), c.tokens, write_bytes)


class LlmsNoLifecycle(Llms):
    name = "llms-no-lifecycle"
    aot = False
    lctru = False


class LlmsNoCompression(Llms):
    name = "llms-no-compression"
    compressed = False


class LlmsNoPipeline(Llms):
    name = "llms-no-pipeline"
    pipeline = False


class Lmk(Service):
    """Kill and recompute: the least recently used contexts are killed whole; calling one recomputes
    it from its text (the memory-resident fragment, §3.1)."""
    name = "lmk"
    whole = True
    kills = True

    def load(self, c, missing, write_bytes):
        self.actions.append(("recompute", None, c.base + missing, c.level[missing].copy()))
        return pipeline_seconds(self.costs, 0.0, len(missing), c.tokens)


class Swap(Service):
    """Whole-context swapping: the least recently used contexts written out whole at the switch and
    read back whole."""
    name = "swap"
    whole = True


class VllmS(Service):
    name = "vllm-s"


class VllmSQ(VllmS):
    name = "vllm-sq"
    elem_bytes = 1.0


SYSTEMS = {cls.name: cls for cls in (Llms, Lmk, Swap, VllmS, VllmSQ, LlmsNoLifecycle, LlmsNoCompression,
                                     LlmsNoPipeline)}


def service(name, budget, shape, dev, density_of=None, chunk=CHUNK_TOKENS, ratio=GLOBAL_RATIO) -> Service:
    if name not in SYSTEMS:
        raise InputError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
    return SYSTEMS[name](budget, shape, dev, density_of, chunk, ratio)
