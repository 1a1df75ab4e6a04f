"""Page-access trace of llama.cpp inference, generated from a GGUF file's tensor layout.

Semantics follow the llama.cpp vendored by llama-cpp-python 0.3.36 (llama.cpp commit
0c1e57098bba43ac29e6e3b677cdceebdd22334f); each piece names its source function. See docs/workloads.md.

Mappings of one session (pid):
  weights        the whole GGUF file, mmap(PROT_READ, MAP_SHARED)          llama_mmap::impl (llama-mmap.cpp)
  CPU_REPACK     anonymous copies of repacked weights                       ggml-cpu/repack.cpp
  CPU weights    anonymous copy of all other weights (--load-mode none)     llama_model_loader::load_all_data
  KV cache       anonymous, cache_k_l* / cache_v_l* for all layers           llama_kv_cache::llama_kv_cache
  compute        anonymous scheduler buffer, reused each ubatch             ggml_backend_sched_reserve
  output         anonymous logits buffer                                    llama_context::output_reserve
Every weight tensor read by a ubatch is ONE range event (its pages); token_embd is read per token row
(get_rows); MoE expert tensors are read per routed expert slice (mul_mat_id).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .gguf_layout import ModelLayout, TensorInfo, layout_of
from .trace import PAGE_SIZE, Advice, MapFlag, Op, PageClass, Trace, TraceBuilder, WriteFlag

P = PAGE_SIZE
TENSOR_ALIGNMENT = 32          # ggml-cpu buffer alignment (ggml/src/ggml-impl.h TENSOR_ALIGNMENT)
LOAD_MODES = ("mmap", "mmap+mlock", "none", "mlock")
KV_TYPES = {"f16": (2, 1, PageClass.KV_F16), "q8_0": (34, 32, PageClass.KV_Q8)}  # bytes per block, block

# ggml_repack_get_optimal_repack_type (ggml/src/ggml-cpu/repack.cpp): on x86 with AVX2, Q4_0, Q4_K,
# IQ4_NL and MXFP4 weights with ne[1] % 8 == 0 are repacked (8x8 interleave, same size); Q8_0 and F16
# are not (their repacks need ARM NEON/dotprod/i8mm or RISC-V V).
REPACK_TYPES = {"avx2": {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"},
                "avx512": {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4", "Q2_K"},
                "neon-i8mm": {"Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0"},
                "none": set()}


def host_cpu_features() -> str:
    """'avx512', 'avx2' or 'none' for this machine (what ggml_cpu_has_avx2() would say)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return "none"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "none"


@dataclass
class TimeModel:
    """llama.cpp's compute time: each graph node streams its weights from memory, then does its
    multiply-accumulates, one after the other: ns = weight bytes / weight_gbps + MACs / matmul_gmac_s
    (a matmul of n token rows against a weight of P elements: n x P MACs, whatever the weight type).
    On this machine (docs/validation.md) the two measured rates give the three validation models'
    prefill and decode within their own run-to-run spread or up to 20% outside it, where a roofline
    of bytes alone put llama-1B's prompt at 0.49 s against 1.0-1.3 s. A device profile
    gives them (kmemsim.device.Device.time_model; kmemsim profile measures this machine's); the
    default is the default device's. Loading copies at ns_per_load_byte."""
    weight_gbps: float = 0.0                 # 0: the default device's
    matmul_gmac_s: float = 0.0
    ns_per_load_byte: float = 0.5            # repack / read(2) copies at load
    ns_idle_between_requests: int = 0

    def __post_init__(self):
        if not (self.weight_gbps and self.matmul_gmac_s):
            from .device import load
            d = load()
            self.weight_gbps = self.weight_gbps or d.weight_gbps
            self.matmul_gmac_s = self.matmul_gmac_s or d.matmul_gmac_s

    def ns(self, weight_bytes, macs):
        """Nanoseconds of graph nodes that stream weight_bytes and do macs multiply-accumulates."""
        return weight_bytes / self.weight_gbps + macs / self.matmul_gmac_s


def get_rows_order(ids, nth):
    """The token_embd rows get_rows reads, in order: ggml_compute_forward_get_rows gives each of nth
    threads a block of dr = ceil(n / nth) of the batch's ids (ir0 = dr * ith), each read in batch
    order; the threads run side by side, so one stream takes the i-th id of every block in turn."""
    n = len(ids)
    dr = -(-n // nth)
    i = (np.arange(dr)[:, None] + dr * np.arange(nth)[None, :]).ravel()
    return ids[i[i < n]]


def mul_mat_chunk_pages(t: TensorInfo, n_rows: int, nth: int) -> int:
    """Pages of weight t in each chunk nth threads take (trace READ arg, the emulator's threads
    reading side by side); 0 for one reader. Thread i starts on chunk i and each takes the next as
    it finishes (ggml_threadpool_chunk_add()).
    - one token row (decode): ggml_compute_forward_mul_mat(), chunks of 64 weight rows, or nth
      chunks when that makes fewer than 4 per thread;
    - more: llamafile_sgemm() (it declines n < 2). tinyBLAS (F32, F16, BF16) takes jobs of
      RM * BM = 16 rows (8 or 4 where the rows do not divide, sgemm.cpp's matmul()); tinyBLAS_Q0_AVX
      (Q8_0, Q4_0 on x86) gives each thread one contiguous block of row tiles (gemm(): duty)."""
    if nth < 2 or len(t.shape) < 2:
        return 0
    rows = t.n_bytes // t.row_bytes
    if n_rows == 1:
        nchunk = -(-rows // 64)
        chunk = -(-rows // (nth if nchunk < nth * 4 else nchunk))
    elif t.type in ("F32", "F16", "BF16"):
        chunk = next((r for r in (16, 8, 4) if rows % r == 0 and (r < 16 or rows // 16 >= nth)), 0)
    elif t.type in ("Q8_0", "Q4_0"):
        chunk = -(-rows // nth)
    else:
        return 0
    return max(1, round(chunk * t.row_bytes / P)) if chunk else 0


def _pad(x, n):
    return -(-x // n) * n


def _page_span(off, nbytes):
    """First page and page count of byte range [off, off + nbytes)."""
    a = off // P
    return a, max(1, -(-(off + nbytes) // P) - a)


def _runs(starts, ends):
    """Coalesce byte ranges (arrays, sorted by start) into page runs: (first_pages, npages)."""
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    ps = starts // P
    pe = -(-ends // P)
    pe = np.maximum.accumulate(pe)
    brk = np.ones(len(ps), bool)
    brk[1:] = ps[1:] > pe[:-1]
    idx = np.flatnonzero(brk)
    last = np.append(idx[1:] - 1, len(ps) - 1)
    return ps[idx], pe[last] - ps[idx]


@dataclass
class HostSet:
    """The pages the program hosting llama.cpp (the interpreter, llama-cpp-python, the libraries'
    code) touches around each llama_decode call, measured on the live kernel without a limit
    (kmemsim.validate.engine_warm_set). Kept referenced every step, reclaim activates them
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


class _Layer:
    __slots__ = ("attn", "ffn", "router", "exps", "post")


def graph_order(layout: ModelLayout) -> list:
    """The weight tensors in the order the llama.cpp CPU graph reads them for one ubatch, as
    ('embd', name) | ('w', name) | ('kv', il) | ('exps', name) | ('router', name) items.

    Order: llm_build_llama / qwen2 / qwen3 / qwen3moe (src/models/*.cpp) built through
    llm_graph_context::build_attn (llama-graph.cpp: expands q, v, k, then cpy_k, cpy_v, then K*Q and V*KQ)
    and build_ffn (swiglu_split(gate, up) -> gate is visited first by ggml_visit_parents), checked
    against cb_eval recordings (tests/test_llama_trace.py)."""
    names = {t.name for t in layout.tensors}
    has = names.__contains__
    out = [("embd", "token_embd.weight")]
    for il in range(layout.hparams["n_layer"]):
        b = f"blk.{il}."
        seq = [b + "attn_norm.weight", b + "attn_q.weight", b + "attn_q.bias", b + "attn_q_norm.weight",
               b + "attn_v.weight", b + "attn_v.bias",
               b + "attn_k.weight", b + "attn_k.bias", b + "attn_k_norm.weight"]
        out += [("w", n) for n in seq if has(n)]
        out.append(("kv", il))
        out += [("w", n) for n in (b + "attn_output.weight", b + "ffn_norm.weight") if has(n)]
        if has(b + "ffn_gate_inp.weight"):
            out.append(("router", b + "ffn_gate_inp.weight"))
            out += [("exps", n) for n in (b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight",
                                          b + "ffn_down_exps.weight") if has(n)]
        else:
            out += [("w", n) for n in (b + "ffn_gate.weight", b + "ffn_up.weight", b + "ffn_down.weight")
                    if has(n)]
    out.append(("w", "output_norm.weight"))
    out.append(("w", "output.weight" if has("output.weight") else "token_embd.weight"))
    return out


def _is_matmul_weight(t: TensorInfo) -> bool:
    """The tensors llama.cpp uses as src0 of MUL_MAT / MUL_MAT_ID (llm_tensor_info_mapping)."""
    n = t.name
    return (len(t.shape) >= 2 and n.endswith(".weight") and not n.startswith("token_embd")
            and "norm" not in n and "ffn_gate_inp" not in n)


def _macs_per_row(kind: str, t: TensorInfo, hp: dict) -> int:
    """Multiply-accumulates a graph node does per token row: a matmul's weight elements (the output
    head, token_embd when tied, included; get_rows and norms none); an MoE row goes through
    n_expert_used of the n_expert slices."""
    if kind == "exps":
        return hp["n_expert_used"] * (t.n_elements // hp["n_expert"])
    if kind == "router" or kind == "w" and (_is_matmul_weight(t) or t.name == "token_embd.weight"):
        return t.n_elements
    return 0


def _output_rows_only(kind: str, name, last: str) -> bool:
    """Nodes that work on the output rows only: after inp_out_ids get_rows (llm_build_*: the last
    layer, once its attention is done) the last layer's FFN, then the output norm and head."""
    return kind != "kv" and (name.startswith(last + "ffn") or (kind == "w" and not name.startswith("blk.")))


def split_prompt(new: int, batch: int, ubatch: int, seqs: int):
    """The prefill ubatches of `new` prompt tokens, as llama_batch_allocr / split_simple cut them:
    per sequence, n_batch chunks cut into n_ubatch pieces. Yields (sequence, first token's position,
    tokens, output rows): the last ubatch of a sequence outputs its last token's logits."""
    for s in range(max(1, int(seqs))):
        pos = 0
        while pos < new:
            nb = min(batch, new - pos)
            b = pos
            while b < pos + nb:
                nu = min(ubatch, pos + nb - b)
                yield s, b, nu, int(b + nu == new)
                b += nu
            pos += nb


def spread(n, total):
    """n of `total` pages spread evenly over them, as runs: (first pages, run lengths)."""
    if n <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = np.arange(n, dtype=np.int64) * total // n
    starts = np.flatnonzero(np.diff(idx, prepend=-2) != 1)
    return idx[starts], np.diff(np.append(starts, n))


def random_token_ids(rng, n_vocab, n):
    """n token ids drawn uniformly above the 259 byte and special tokens (from 0 in a vocabulary that
    small): a prompt nobody wrote, or a greedy decode whose ids depend on the weights."""
    return rng.integers(259 if n_vocab > 259 else 0, n_vocab, size=n)


class LlamaSession:
    """One llama.cpp process: a model loaded once, a context (KV cache), and requests on it.

    The scenario builder puts several sessions (and apps) on one TraceBuilder: create each session
    with that builder, call load(), then request() as often as wanted, then close()."""

    def __init__(self, model, builder: TraceBuilder, pid=1000, name="llama", ctx=4096, batch=512,
                 ubatch=512, kv_type="f16", load_mode="mmap", prefetch=True, seqs=1, flash_attn=None,
                 repack="auto", moe_routing="uniform", seed=0, time_model=None, kv_max_runs=64,
                 compute_buffer_bytes=None, host: HostSet | None = None, threads=1):
        self.L = layout_of(model)
        self.threads = max(1, int(threads))   # ggml's threads: how get_rows and the matmuls split
        # the compute buffer's size as llama.cpp reports it ("CPU compute buffer size"), when known;
        # the pages a ubatch touches are still estimated (_compute_bytes), capped by it
        self.compute_buffer_bytes = compute_buffer_bytes
        self.host = host
        self._host_hi = 0                  # heap pages [0, _host_hi) have been written by a call
        self._grow_hi = 0                  # host growth pages [0, _grow_hi) written
        self._loaded = 0                   # host heap pages Llama() allocates written in the load
        self._grown = {}                   # growth written per kind (the prompt's counts once)
        self._anon_maps = {}               # the session's anonymous buffers: map -> pages
        self._anon_seen = {}               # with the host's growth: buffer -> pages touched so far
        self.hp = self.L.hparams
        self.b = builder
        self.pid = int(pid)
        self.name = name
        if ctx is None or int(ctx) <= 0:
            raise InputError(f"--ctx must be positive (got {ctx})")
        if int(batch) <= 0 or int(ubatch) <= 0:
            raise InputError("--batch and --ubatch must be positive")
        if int(seqs) <= 0:
            raise InputError("--seqs must be positive")
        if kv_type not in KV_TYPES:
            raise InputError(f"--kv-type {kv_type!r}: choose one of {', '.join(KV_TYPES)}")
        if load_mode not in LOAD_MODES:
            raise InputError(f"--load-mode {load_mode!r}: choose one of {', '.join(LOAD_MODES)}")
        self.seqs = int(seqs)
        # llama_context::llama_context: n_ctx padded to 256; per-stream size n_ctx_seq (kv_unified=false)
        self.n_ctx = _pad(int(ctx), 256)
        self.kv_size = _pad(self.n_ctx // self.seqs, 256) if self.seqs > 1 else self.n_ctx
        self.n_ctx_user = int(ctx)
        # llama.cpp: n_batch = min(n_ctx, n_batch); n_ubatch = min(n_batch, n_ubatch) (llama.py too)
        self.batch = min(int(batch), self.n_ctx_user)
        self.ubatch = min(int(ubatch), self.batch)
        self.kv_type = kv_type
        quant_v = kv_type != "f16"
        # llama_init_from_model: a quantised V cache requires flash attention; llama-cpp-python's Llama()
        # defaults to flash_attn=False -> LLAMA_FLASH_ATTN_TYPE_DISABLED -> V cache transposed.
        if flash_attn is None:
            flash_attn = quant_v
        if quant_v and not flash_attn:
            raise InputError("--kv-type q8_0 needs flash attention (llama.cpp: quantized V cache "
                             "requires flash_attn); drop --no-flash-attn")
        self.flash_attn = bool(flash_attn)
        self.v_trans = not self.flash_attn
        self.load_mode = load_mode
        self.use_mmap = load_mode in ("mmap", "mmap+mlock")
        self.mlock = load_mode in ("mmap+mlock", "mlock")
        self.prefetch = bool(prefetch) and self.use_mmap
        cpu = host_cpu_features() if repack == "auto" else ("none" if repack in (False, "none", "off")
                                                             else ("avx2" if repack is True else repack))
        if cpu not in REPACK_TYPES:
            raise InputError(f"--repack {repack!r}: choose auto, none, or one of {', '.join(REPACK_TYPES)}")
        self.cpu = cpu
        self.tm = time_model or TimeModel()
        self.rng = np.random.default_rng(seed)
        self.kv_max_runs = int(kv_max_runs)
        self.approx_kv_accesses = 0
        self._routing(moe_routing)
        self.order = graph_order(self.L)
        self._buf = []
        self._chunks = []
        self._vt_cache = {}
        self.t = 0
        self.loaded = False
        self.n_requests = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.n_ubatches = 0

    # ---- set-up ------------------------------------------------------------------------------
    def _routing(self, spec):
        X = self.hp.get("n_expert", 0)
        self.routing = spec
        if not X:
            self.route_logp = None
            return
        spec = str(spec)
        if spec == "uniform":
            p = np.full(X, 1.0 / X)
            perms = [np.arange(X)] * self.hp["n_layer"]
        elif spec.startswith("zipf"):
            s = float(spec.split(":", 1)[1]) if ":" in spec else 1.0
            w = 1.0 / np.arange(1, X + 1) ** s
            p = w / w.sum()
            perms = [self.rng.permutation(X) for _ in range(self.hp["n_layer"])]   # hot experts per layer
        else:
            raise InputError(f"--moe-routing {spec!r}: use uniform, zipf or zipf:S")
        lp = np.log(p)
        self.route_logp = np.stack([lp[np.argsort(pm)] for pm in perms])   # [layer, expert]

    def _repacked(self, t: TensorInfo, as_output=False) -> bool:
        """ggml-cpu extra_buffer_type::supports_op + ggml_repack_get_optimal_repack_type."""
        if not (as_output or _is_matmul_weight(t)):
            return False
        return t.type in REPACK_TYPES[self.cpu] and len(t.shape) >= 2 and t.shape[1] % 8 == 0

    def _plan_buffers(self):
        """Which tensor lives where: ('file', byte offset) for mmap'd tensors or (map id, offset) for
        anonymous copies, in llama.cpp's creation order (tok_embd, output_norm, output, layers)."""
        L = self.L
        creation = sorted(L.tensors, key=lambda t: (0 if not t.name.startswith("blk.") and
                                                     not t.name.startswith("output") else
                                                     1 if not t.name.startswith("blk.") else 2))
        tied = L.tensor("output.weight") is None
        self.where = {}               # name -> (kind, offset) ; kind in {"file", "repack", "cpu"}
        self.out_where = None         # where the output matmul reads (tied: repacked duplicate)
        rep, cpu = 0, 0
        self.load_list = []           # (tensor, kind, dst offset) loaded by copy
        for t in creation:
            if self._repacked(t):
                self.where[t.name] = ("repack", rep)
                self.load_list.append((t, "repack", rep))
                rep += _pad(t.n_bytes, TENSOR_ALIGNMENT)
            elif self.use_mmap:
                self.where[t.name] = ("file", t.data_offset)
            else:
                self.where[t.name] = ("cpu", cpu)
                self.load_list.append((t, "cpu", cpu))
                cpu += _pad(t.n_bytes, TENSOR_ALIGNMENT)
            if tied and t.name == "token_embd.weight":
                # create_tensor(TOKEN_EMBD, TENSOR_DUPLICATED): buffer type chosen for the OUTPUT op
                if self._repacked(t, as_output=True):
                    self.out_where = ("repack", rep)
                    self.load_list.append((t, "repack", rep))
                    rep += _pad(t.n_bytes, TENSOR_ALIGNMENT)
                else:
                    self.out_where = self.where[t.name]
        if not tied:
            self.out_where = self.where["output.weight"]
        self.repack_bytes, self.cpu_bytes = rep, cpu

    # ---- helpers -----------------------------------------------------------------------------
    def _map_of(self, kind):
        return {"file": self.m_file, "repack": self.m_repack, "cpu": self.m_cpu}[kind]

    def _acc(self, t, op, m, off, nbytes, arg=0):
        a, n = _page_span(off, nbytes)
        self._buf.append((int(t), self.pid, int(op), int(m), int(a), int(n), int(arg), 0))

    def _ev(self, t, op, m=-1, page=0, npages=0, arg=0, flags=0):
        self._buf.append((int(t), self.pid, int(op), int(m), int(page), int(npages), int(arg), int(flags)))

    def _scalars_to_chunk(self):
        if self._buf:
            a = np.array(self._buf, np.int64)
            self._chunks.append(tuple(a[:, i] for i in range(8)))
            self._buf = []

    def _ranges(self, t, op, m, a, n):
        self._scalars_to_chunk()
        k = len(a)
        full = lambda v: np.full(k, v, np.int64)
        self._chunks.append((full(t), full(self.pid), full(int(op)), full(m), np.asarray(a, np.int64),
                             np.asarray(n, np.int64), full(0), full(0)))

    def _flush(self):
        """Access events are collected as numpy chunks and handed to the builder in one piece per
        step (TraceBuilder.event/ranges per row is slow); flushed before the builder adds anything
        that must sort after them (phase marks, mmaps, exit)."""
        self._scalars_to_chunk()
        if self._chunks:
            if self.host and self.host.growth:        # only the growth asks what is new
                for mm, mask in self._anon_masks().items():
                    seen = self._anon_seen.setdefault(mm, np.zeros(len(mask), bool))
                    seen |= mask
            cols = [np.concatenate([c[i] for c in self._chunks]) for i in range(8)]
            self.b.ranges(*cols)
            self._chunks = []

    def _mmap(self, t, name, npages, **kw):
        self._flush()
        m = self.b.mmap(t, self.pid, name, npages, **kw)
        if kw.get("file", -1) < 0:
            self._anon_maps[m] = npages
        return m

    def _anon_masks(self):
        """Per anonymous buffer of the session, the pages the events collected since the last flush
        (one ubatch's, after a phase mark) access: {map: bool array}."""
        self._scalars_to_chunk()
        if not self._chunks:
            return {}
        op, m, a, n = (np.concatenate([c[i] for c in self._chunks]) for i in (2, 3, 4, 5))
        sel = np.isin(m, list(self._anon_maps)) & ((op == Op.READ) | (op == Op.WRITE))
        out = {}
        for mm in np.unique(m[sel]):
            k = sel & (m == mm)
            size = self._anon_maps[int(mm)]
            d = np.zeros(size + 1, np.int64)
            np.add.at(d, np.minimum(a[k], size), 1)
            np.add.at(d, np.minimum(a[k] + n[k], size), -1)
            out[int(mm)] = np.cumsum(d[:-1]) > 0
        return out

    def _host_touch(self, start, ts, kind):
        """The host program's pages around this llama_decode call (HostSet): its anonymous pages
        beyond those of llama.cpp's buffers this ubatch touched, and its libraries' pages, read at the
        call's end (ts[-1]). Of the anonymous ones, those the call references are written at each
        time in ts (after each graph node, then at the call's end): llama.cpp's graph (the context's
        meta buffer, rebuilt by every llama_decode) and ggml's work buffer serve every node; the
        interpreter's own, before the call, at `start`. The memory the process gains in this call
        beyond the buffers' own new pages (the measured growth: ggml's work buffer, the graph
        reaching further into the compute buffer, the logits rows the interpreter keeps) is part of
        what the call references: new pages of `grow`, in place of as many heap pages."""
        h = self.host
        masks = self._anon_masks()          # the session's buffers' pages this ubatch touched
        own = sum(int(k.sum()) for k in masks.values())
        extra = min(h.heap_pages - h.base, h.anon.get(kind, 0) - own)
        call = max(0, min(extra, h.call_anon.get(kind, h.anon.get(kind, 0)) - own))
        # of those, the pages no earlier event touched: memory the process gains in this ubatch
        fresh = sum(int((k & ~self._anon_seen[mm]).sum()) if mm in self._anon_seen else int(k.sum())
                    for mm, k in masks.items())
        grow = h.growth.get(kind, 0) - fresh - self._grown.get(kind, 0)
        grow = max(0, min(grow, h.grow_pages - self._grow_hi))
        g0, self._grow_hi = self._grow_hi, self._grow_hi + grow
        if kind != "decode":                      # the prompt's growth is the process's once
            self._grown[kind] = self._grown.get(kind, 0) + grow
        heap_call = max(0, call - grow)
        # the interpreter's pages are none of those a call writes (no call runs that code): its
        # objects from before Llama() (the heap's first pages), then past the most any call wrote
        self._host_hi = max(self._host_hi, heap_call)
        py = extra - call
        old = max(0, min(py, h.base))
        new = max(0, min(py - old, h.heap_pages - h.base - self._host_hi))
        if old:
            self._acc(start, Op.WRITE, h.heap, 0, old * P)
        if new:
            self._acc(start, Op.WRITE, h.heap, (h.base + self._host_hi) * P, new * P)
        for t in ts:
            if heap_call > 0:
                self._acc(t, Op.WRITE, h.heap, h.base * P, heap_call * P)
            if grow > 0:
                self._acc(t, Op.WRITE, h.grow, g0 * P, grow * P)
        for m, n in h.files.get(kind, ()):
            self._acc(ts[-1], Op.READ, m, 0, n * P)

    def _phase(self, t, name):
        self._flush()
        self.b.phase(t, self.pid, name)

    def _file_page(self, off):
        return off // P

    # ---- load --------------------------------------------------------------------------------
    def load(self, t0=0, start_process=True):
        """Process start, model load (llama_model_load_from_file) and context creation
        (llama_init_from_model). Returns the time after loading."""
        b, pid, L = self.b, self.pid, self.L
        t = int(t0)
        if start_process:
            b.process(t, pid, self.name)
        self._phase(t, "load")
        if self.host:                            # the loader's code (gguf, vocabulary, hparams)
            for m, n in self.host.files.get("load", ()):
                self._acc(t, Op.READ, m, 0, n * P)
        self._plan_buffers()
        fpages = L.file_pages
        self.fid = b.file(L.path or f"<layout:{L.name}>", fpages)
        self.m_file = self.m_repack = self.m_cpu = -1
        wclass = PageClass.WEIGHTS_F16 if any(x.type in ("F16", "BF16") for x, k, _ in self.load_list
                                              if k == "cpu") else PageClass.WEIGHTS_Q
        # llama_model_loader ctor -> gguf_init_from_file(fname, {no_alloc = true}): the header (KV metadata,
        # tokenizer, tensor infos) is parsed with fread() through stdio's st_blksize (4 KiB) buffer, i.e.
        # one read(2) per page of [0, data_start): readahead ramps up from the sync window, and every header
        # page is marked accessed (filemap_read) before the mapping is populated.
        hdr = -(-L.data_start // P) if L.data_start else 0
        if hdr:
            self._flush()
            hp_ = np.arange(hdr, dtype=np.int64)
            b.ranges(np.full(hdr, t, np.int64), pid, Op.FREAD, -1, hp_, 1, 0, self.fid)
        h = self.host
        if h and h.built:                        # the loader's metadata and vocabulary
            bufs = -(-(self.repack_bytes + (0 if self.use_mmap else self.cpu_bytes)) // P)
            self._loaded = min(h.built, max(0, h.load_growth - bufs))
            if self._loaded:
                self._ev(t, Op.WRITE, h.heap, h.base, self._loaded)
        # gguf_init_from_file() read the header through a FILE of its own and closed it; the loader's
        # llama_file opens the model again, and that struct file (fadvise, mmap, read(2)) starts
        # with a fresh readahead state. Its first mmap fault meets the PG_readahead folio the header
        # read left behind with no window to match, and page_cache_async_ra() starts one there.
        self._ev(t, Op.OPEN, -1, 0, 0, 0, self.fid)
        if self.use_mmap:
            # llama_mmap::impl: posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); mmap(PROT_READ, MAP_SHARED
            # | MAP_POPULATE if prefetch); posix_madvise(WILLNEED) over the prefetch range.
            # llama_model_base::load_tensors calls ml.init_mappings(true, ...): prefetch is always on in
            # llama.cpp itself; prefetch=False models a build/patch without it (e.g. llama.rn on Android).
            self._ev(t, Op.FADVISE, -1, 0, fpages, int(Advice.SEQUENTIAL), self.fid)
            flags = MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS
            if self.prefetch:
                flags |= MapFlag.POPULATE
            self.m_file = self._mmap(t, "weights (mmap)", fpages, file=self.fid, flags=flags)
            if self.prefetch:
                # The MMAP event's POPULATE flag is the populate (mm_populate() inside mmap(2), see
                # c_ext/mmap.c); madvise(WILLNEED) comes after it returns.
                self._ev(t, Op.MADVISE, self.m_file, 0, fpages, int(Advice.WILLNEED))
                t += int(L.file_size * self.tm.ns_per_load_byte)
        else:
            # --load-mode none: llama_file::read_raw (buffered read(2)) into ggml_aligned_malloc buffers.
            # The schema has no read(2) op: a transient private read-only mapping stands for it.
            self.m_read = self._mmap(t, "read(2) of model file", fpages, file=self.fid, flags=MapFlag.READ)
            self.m_cpu = self._mmap(t, "CPU weights (no mmap)", max(1, -(-self.cpu_bytes // P)),
                                flags=MapFlag.READ | MapFlag.WRITE | MapFlag.WEIGHTS, cls=wclass)
        if self.repack_bytes:
            self.m_repack = self._mmap(t, "CPU_REPACK weights", -(-self.repack_bytes // P),
                                   flags=MapFlag.READ | MapFlag.WRITE | MapFlag.WEIGHTS,
                                   cls=PageClass.WEIGHTS_Q)
        # llama_model_loader::load_all_data: tensors of host-ptr (mmap) buffers need no copy; repacked
        # tensors are read from the mapping and repacked (ggml_backend_tensor_set); without mmap every
        # tensor is read(2) into its buffer.
        src_map = self.m_file if self.use_mmap else self.m_read
        for tt, kind, dst in self.load_list:
            a, n = _page_span(tt.data_offset, tt.n_bytes)
            self._ev(t, Op.READ, src_map, a, n)
            t += int(tt.n_bytes * self.tm.ns_per_load_byte)
            self._acc(t, Op.WRITE, self._map_of(kind), dst, tt.n_bytes)
        if not self.use_mmap:
            self._ev(t, Op.MUNMAP, self.m_read, 0, fpages)
        if self.mlock:
            if self.use_mmap:   # llama_mlock::grow_to(offs + n_size) per mmap'd tensor
                end = max((tt.data_offset + tt.n_bytes for tt in L.tensors
                           if self.where[tt.name][0] == "file"), default=0)
                if end:
                    self._ev(t, Op.MLOCK, self.m_file, 0, -(-end // P))
            for m, nb in ((self.m_cpu, self.cpu_bytes),):
                if m >= 0 and self.load_mode == "mlock":
                    self._ev(t, Op.MLOCK, m, 0, -(-nb // P))
        if self.use_mmap:
            # load_all_data end: unmap_fragment(0, mmap_used.first), unmap_fragment(mmap_used.second, size)
            used = [(tt.data_offset, tt.data_offset + tt.n_bytes) for tt in L.tensors
                    if self.where[tt.name][0] == "file"]
            first = min((u[0] for u in used), default=L.file_size)
            last = max((u[1] for u in used), default=0)
            a_end = first // P                     # llama_mmap::align_range: first rounded down here
            if a_end > 0:
                self._ev(t, Op.MUNMAP, self.m_file, 0, a_end)
            a_start, a_stop = -(-last // P), L.file_size // P
            if used and a_start < a_stop:
                self._ev(t, Op.MUNMAP, self.m_file, a_start, a_stop - a_start)
        self._create_context(t)
        self.t = t
        self.loaded = True
        return t

    def _create_context(self, t):
        """llama_kv_cache ctor: one CPU buffer with cache_k_l{il} [n_embd_k_gqa, kv_size, n_stream] and
        cache_v_l{il} for every layer, then ggml_backend_buffer_clear(buf, 0) writes every page."""
        b, pid, hp = self.b, self.pid, self.hp
        bsz, blk, cls = KV_TYPES[self.kv_type]
        self.kv_e = self.kv_embd = hp["head_dim"] * hp["n_head_kv"]
        self.k_row = self.kv_embd // blk * bsz                 # bytes of one cell's K
        self.v_row = self.k_row
        self.v_elt = bsz / blk                                 # bytes per V element (f16: 2)
        k_bytes = self.k_row * self.kv_size * self.seqs
        v_bytes = k_bytes
        self.k_off, self.v_off = [], []
        off = 0
        for _ in range(hp["n_layer"]):
            self.k_off.append(off)
            off += _pad(k_bytes, TENSOR_ALIGNMENT)
            self.v_off.append(off)
            off += _pad(v_bytes, TENSOR_ALIGNMENT)
        self.kv_bytes = off
        kv_pages = -(-off // P)
        self.m_kv = self._mmap(t, f"KV cache ({self.kv_type}, {self.kv_size} cells x {hp['n_layer']} "
                                   f"layers x {self.seqs} seqs)", kv_pages,
                           flags=MapFlag.READ | MapFlag.WRITE, cls=cls)
        self._ev(t, Op.WRITE, self.m_kv, 0, kv_pages, flags=WriteFlag.ZERO)   # buffer_clear(0)
        # llama_context::output_reserve: logits for max(n_seq_max, outputs) rows of n_vocab floats
        self.out_bytes = 4 * hp["n_vocab"] * self.seqs
        self.m_out = self._mmap(t, "output (logits)", -(-self.out_bytes // P),
                            flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.COMPUTE)
        # graph_reserve -> ggml_backend_sched_reserve: compute buffer sized for a full ubatch
        self.compute_bytes = (int(self.compute_buffer_bytes) if self.compute_buffer_bytes
                              else self._compute_bytes(self.ubatch, self.kv_size))
        self.m_compute = self._mmap(t, "compute buffer", -(-self.compute_bytes // P),
                                flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.COMPUTE)
        h = self.host
        if h and h.built > self._loaded:         # the rest of the heap Llama() allocates, written now
            self._ev(t, Op.WRITE, h.heap, h.base + self._loaded, h.built - self._loaded)
        if h and h.context_old:                  # spread: which pages, per-mapping counts do not say
            span = h.base or h.heap_pages
            first, count = spread(min(h.context_old, span), span)
            self._flush()
            self.b.ranges(t, self.pid, Op.WRITE, h.heap, first, count)

    def _compute_bytes(self, n_tokens, n_kv):
        """Rough size of ggml-alloc's compute buffer: the largest f32 intermediates live at once."""
        hp = self.hp
        ff = hp["n_ff_exp"] * hp["n_expert_used"] if hp.get("n_expert") else hp["n_ff"]
        qkv = (hp["n_head"] + 2 * hp["n_head_kv"]) * hp["head_dim"]
        return 4 * (3 * n_tokens * hp["n_embd"] + n_tokens * qkv + n_kv * n_tokens * hp["n_head"]
                    + 2 * n_tokens * ff + hp["n_vocab"]) + P

    # ---- one ubatch --------------------------------------------------------------------------
    def _ubatch(self, t, phase, tokens, pos0, streams, n_out):
        """Emit one llama_decode ubatch: tokens (ids), starting cell pos0 in each of `streams`."""
        b, pid, hp = self.b, self.pid, self.hp
        self._phase(t, phase)
        n_tok = len(tokens) * len(streams)
        n_kv = min(self.kv_size, max(256, _pad(pos0 + len(tokens), 256)))   # llama_kv_cache::get_n_kv
        cur = float(t)
        # inputs: compute buffer written for this ubatch
        cb = min(self.compute_bytes, self._compute_bytes(n_tok, n_kv))
        self._acc(int(cur), Op.WRITE, self.m_compute, 0, cb)
        tm_ = TimeCursor(cur, self.tm)
        node_times = []                   # after each graph node this model of the graph emits
        last = f"blk.{hp['n_layer'] - 1}."
        for kind, name in self.order:
            out_only = _output_rows_only(kind, name, last)
            if n_out == 0 and out_only:
                # no outputs in this ubatch: the last layer's FFN and the output head work on 0 rows,
                # and ggml_compute_forward skips empty tensors (ggml-cpu.c: ggml_is_empty)
                continue
            n_rows = n_out if out_only else n_tok          # the token rows a matmul works on
            if kind == "embd":
                tt = self.L.tensor(name)
                where, base = self.where[name]
                rows = get_rows_order(np.asarray(tokens, np.int64), self.threads)
                rb = tt.row_bytes
                a = (base + rows * rb) // P
                e = -(-(base + (rows + 1) * rb) // P)
                self._ranges(int(tm_.t), Op.READ, self._map_of(where), a, e - a)
                tm_.adv(len(rows) * rb, 0)
            elif kind == "w":
                tt = self.L.tensor(name)
                if name == "token_embd.weight" or name == "output.weight":
                    where, base = self.out_where
                else:
                    where, base = self.where[name]
                mm = where != "repack" and (_is_matmul_weight(tt) or name == "token_embd.weight")
                chunk = mul_mat_chunk_pages(tt, n_rows, self.threads) if mm else 0
                self._acc(int(tm_.t), Op.READ, self._map_of(where), base, tt.n_bytes, chunk)
                tm_.adv(tt.n_bytes, n_rows * _macs_per_row(kind, tt, hp))
            elif kind == "router":
                tt = self.L.tensor(name)
                where, base = self.where[name]
                self._acc(int(tm_.t), Op.READ, self._map_of(where), base, tt.n_bytes)
                tm_.adv(tt.n_bytes, n_rows * _macs_per_row(kind, tt, hp))
                il = int(name.split(".")[1])
                self._experts = self._route(il, n_tok)
            elif kind == "exps":
                tt = self.L.tensor(name)
                where, base = self.where[name]
                X = self.hp["n_expert"]
                sl = tt.n_bytes // X
                ex = self._experts
                a, n = _runs(base + ex * sl, base + (ex + 1) * sl)
                self._ranges(int(tm_.t), Op.READ, self._map_of(where), a, n)
                tm_.adv(len(ex) * sl, n_rows * _macs_per_row(kind, tt, hp))
            elif kind == "kv":
                self._kv(int(tm_.t), name, pos0, len(tokens), n_kv, streams)
            node_times.append(int(tm_.t))
        # logits copied out of the compute buffer, then sampled
        ob = 4 * hp["n_vocab"] * n_out
        self._acc(int(tm_.t), Op.WRITE, self.m_out, 0, ob)
        self._acc(int(tm_.t), Op.READ, self.m_out, 0, ob)
        if self.host:
            self._host_touch(int(cur), node_times + [int(tm_.t)],
                             "decode" if phase.startswith("decode") else "prompt")
        self.n_ubatches += 1
        return int(np.ceil(tm_.t))

    def _route(self, il, n_tok):
        """Experts used by a ubatch in layer il: top-k per token (Gumbel-top-k sampling without
        replacement from the routing distribution), union over the ubatch's tokens."""
        X, k = self.hp["n_expert"], self.hp["n_expert_used"]
        g = self.route_logp[il][None, :] + self.rng.gumbel(size=(n_tok, X))
        top = np.argpartition(-g, k - 1, axis=1)[:, :k]
        return np.unique(top)

    def _kv(self, t, il, pos0, n, n_kv, streams):
        """cpy_k / cpy_v (ggml_set_rows of the new cells), then K*Q over cells [0, n_kv) and V*KQ
        (llama_kv_cache::get_k / get_v views; V^T rows when flash attention is off)."""
        b, pid = self.b, self.pid
        S = self.kv_size
        ko, vo = self.k_off[il], self.v_off[il]
        ks = self.k_row * S                       # bytes of one stream of K
        writes, reads = [], []
        for s in streams:
            writes.append(("k", *_page_span(ko + s * ks + pos0 * self.k_row, n * self.k_row)))
        for s in streams:
            if not self.v_trans:
                writes.append(("v", *_page_span(vo + s * ks + pos0 * self.v_row, n * self.v_row)))
            else:
                start = vo + s * ks
                wa, wn, ra, rn = self._vt_runs(start % P, pos0, n, n_kv)
                shift = start // P
                writes.append(("vt", wa + shift, wn))
                reads.append(("vt", ra + shift, rn))
        for s in streams:
            reads.insert(0, ("k", *_page_span(ko + s * ks, n_kv * self.k_row)))
            if not self.v_trans:
                reads.append(("v", *_page_span(vo + s * ks, n_kv * self.v_row)))
        for ops, lst in ((Op.WRITE, writes), (Op.READ, reads)):
            for _, a, npg in lst:
                if np.ndim(a):
                    self._ranges(t, ops, self.m_kv, a, npg)
                else:
                    self._buf.append((t, pid, int(ops), self.m_kv, int(a), int(npg), 0, 0))


    def _vt_runs(self, rem, pos0, n, n_kv):
        """Page runs of a V^T tensor (row d = one head dimension, kv_size cells long) for writing cells
        [pos0, pos0+n) and reading cells [0, n_kv), relative to the tensor's first page; the pattern
        is the same for every layer whose V tensor starts at the same offset within a page."""
        key = (rem, pos0, n, n_kv)
        r = self._vt_cache.get(key)
        if r is None:
            e = int(self.v_elt)
            base = rem + np.arange(self.kv_embd, dtype=np.int64) * (self.kv_size * e)
            wa, wn = _runs(base + pos0 * e, base + (pos0 + n) * e)
            ra, rn = _runs(base, base + n_kv * e)
            approx = 0
            if len(ra) > self.kv_max_runs:        # strided beyond the cap: one covering range
                approx += 1
                ra, rn = ra[:1], np.array([ra[-1] + rn[-1] - ra[0]])
            if len(wa) > self.kv_max_runs:        # written pages are a subset of this step's read pages
                approx += 1
                wa, wn = ra, rn
            if len(self._vt_cache) > 4096:
                self._vt_cache.clear()
            r = self._vt_cache[key] = (wa, wn, ra, rn, approx)
        self.approx_kv_accesses += r[4]
        return r[:4]

    # ---- requests ----------------------------------------------------------------------------
    @property
    def step_weight_bytes(self):
        if not hasattr(self, "_swb"):
            self._swb = sum(t.n_bytes for t in self.L.tensors if t.name != "token_embd.weight")
            if self.L.tensor("output.weight") is None:
                self._swb += self.L.tensor("token_embd.weight").n_bytes
        return self._swb

    @property
    def step_macs(self) -> tuple[int, int]:
        """Multiply-accumulates of a llama_decode step per token row, and per output row on top (the
        last layer's FFN and the output head, which work on the output rows only): as _ubatch times
        them."""
        if not hasattr(self, "_macs"):
            last = f"blk.{self.hp['n_layer'] - 1}."
            per_tok = per_out = 0
            for kind, name in self.order:
                if kind == "kv":
                    continue
                m = _macs_per_row(kind, self.L.tensor(name), self.hp)
                if _output_rows_only(kind, name, last):
                    per_out += m
                else:
                    per_tok += m
            self._macs = (per_tok, per_out)
        return self._macs

    def request(self, prompt, decode, t0=None, tokens=None):
        """One request: the prompt in batches of n_batch split into ubatches of n_ubatch
        (llama_batch_allocr / split_simple), then `decode` single-token steps (one token per sequence).
        Positions restart at 0 (llama-cpp-python reset); returns the end time."""
        if not self.loaded:
            raise RuntimeError("call load() first")
        prompt, decode = int(prompt), int(decode)
        if prompt < 1:
            raise InputError("--prompt must be at least 1 token")
        if decode < 0:
            raise InputError("--decode must not be negative")
        if prompt > self.n_ctx_user:
            raise InputError(f"prompt of {prompt} tokens is longer than the context (--ctx {self.n_ctx_user})")
        if prompt + decode > self.kv_size:
            raise InputError(f"prompt + decode = {prompt + decode} tokens do not fit the context "
                             f"({self.kv_size} cells per sequence; raise --ctx)")
        t = max(self.t, int(t0) if t0 is not None else self.t)
        if self.n_requests:
            t += int(self.tm.ns_idle_between_requests)
        r = self.n_requests
        self._phase(t, f"request {r}")
        t = self.serve(t, prompt, decode, tokens=tokens)
        self._phase(t, f"request {r} end")
        self.n_requests += 1
        self.t = t
        return t

    def new_context(self, t, **kw):
        """Another llama_context on this loaded model (llama_init_from_model): a session of its own
        with its own KV cache, compute and output buffers, sharing the model's mappings. `kw` are
        LlamaSession's arguments (ctx, batch, seqs, ...)."""
        s = LlamaSession(self.L, self.b, pid=self.pid, **{"time_model": self.tm, **kw})
        s._plan_buffers()
        for a in ("fid", "m_file", "m_repack", "m_cpu", "m_read"):
            setattr(s, a, getattr(self, a, -1))
        s._anon_maps |= self._anon_maps
        s._anon_seen = self._anon_seen            # one record of what is touched: both sessions add to it
        s._create_context(t)
        s.loaded = True
        return s

    def serve(self, t, new, decode, n_past=0, tokens=None):
        """llama_decode of `new` prompt tokens at positions n_past.. in batches of n_batch split into
        ubatches of n_ubatch (llama_batch_allocr / split_simple), then `decode` single-token steps (one
        token per sequence); returns the end time. Sessions that keep their KV cache between requests
        pass n_past."""
        if tokens is None:
            tokens = random_token_ids(self.rng, self.hp["n_vocab"], new + decode)
        tokens = np.asarray(tokens, np.int64)
        if len(tokens) < new + decode:
            raise InputError(f"{len(tokens)} token ids given, need prompt + decode = {new + decode}")
        for k, (s, bpos, nu, n_out) in enumerate(split_prompt(new, self.batch, self.ubatch, self.seqs)):
            t = self._ubatch(t, f"prefill ubatch {k}", tokens[bpos:bpos + nu], n_past + bpos, [s], n_out)
        streams = list(range(self.seqs))
        for j in range(decode):
            t = self._ubatch(t, f"decode token {j}", tokens[new + j:new + j + 1], n_past + new + j,
                             streams, self.seqs)
        self.prefill_tokens += new * self.seqs
        self.decode_tokens += decode * self.seqs
        return t

    def close(self, t=None, exit_process=True):
        """llama_free / process exit: every mapping goes away."""
        t = self.t if t is None else max(self.t, int(t))
        self._flush()
        if exit_process:
            self.b.event(t, self.pid, Op.PROC_EXIT)
        self.t = t
        return t

    def meta(self):
        return {"model": self.L.name, "arch": self.L.arch, "n_ctx": self.n_ctx, "kv_size": self.kv_size,
                "n_batch": self.batch, "n_ubatch": self.ubatch, "kv_type": self.kv_type,
                "flash_attn": self.flash_attn, "v_trans": self.v_trans, "load_mode": self.load_mode,
                "prefetch": self.prefetch, "seqs": self.seqs, "repack_cpu": self.cpu,
                "repack_bytes": self.repack_bytes, "kv_bytes": self.kv_bytes,
                "moe_routing": self.routing if self.hp.get("n_expert") else None,
                "approx_kv_accesses": self.approx_kv_accesses, "pid": self.pid,
                "prefill_tokens": self.prefill_tokens, "decode_tokens": self.decode_tokens,
                "requests": self.n_requests,
                "macs_per_token": self.step_macs[0], "macs_per_output": self.step_macs[1],
                "engine": "llama-cpp-python 0.3.36 (llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f)"}


class TimeCursor:
    """Trace time through a ubatch's graph: each node ends TimeModel.ns after it starts."""
    __slots__ = ("t", "tm")

    def __init__(self, t, tm: TimeModel):
        self.t, self.tm = t, tm

    def adv(self, nbytes, macs):
        self.t += self.tm.ns(nbytes, macs)


def generate(model, prompt, decode, ctx, batch=512, ubatch=512, kv_type="f16", load_mode="mmap",
             prefetch=True, seqs=1, pid=1000, t0=0, builder=None, *, flash_attn=None, repack="auto",
             moe_routing="uniform", seed=0, time_model=None, requests=1, name="llama",
             close=True, kv_max_runs=64) -> Trace | LlamaSession:
    """Trace of one llama.cpp session on `model` (a .gguf path or a ModelLayout): load, `requests`
    requests of `prompt` + `decode` tokens, exit. With `builder`, events go onto that TraceBuilder
    and the LlamaSession is returned (call builder.build() yourself); otherwise a built Trace."""
    own = builder is None
    if own:
        builder = TraceBuilder(source="kmemsim workload llama")
    s = LlamaSession(model, builder, pid=pid, name=name, ctx=ctx, batch=batch, ubatch=ubatch,
                     kv_type=kv_type, load_mode=load_mode, prefetch=prefetch, seqs=seqs,
                     flash_attn=flash_attn, repack=repack, moe_routing=moe_routing, seed=seed,
                     time_model=time_model, kv_max_runs=kv_max_runs)
    # validate request sizes before emitting anything
    if int(prompt) > s.n_ctx_user:
        raise InputError(f"prompt of {prompt} tokens is longer than the context (--ctx {s.n_ctx_user})")
    t = s.load(t0)
    for _ in range(int(requests)):
        t = s.request(prompt, decode, t)
    if close:
        s.close(t)
    builder.meta.setdefault("llama", []).append(s.meta())
    if not own:
        return s
    return builder.build()
