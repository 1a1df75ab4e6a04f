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

import numpy as np

from ...core.errors import InputError
from ...core.limits import (MAX_PID, MAX_REQUESTS, MAX_SEQS, MAX_TOKENS, check_events, check_int)
from ...core.trace import Advice, MapFlag, Op, PageClass, Trace, TraceBuilder
from ...core.units import PAGE_SIZE as P, pad, page_span, pages
from ...engine import managers
from ...engine.time import device
from ...engine.time.compute import MUL_MAT_ID, TimeCursor
from ..gguf_layout import layout_of
from . import buffers
from .buffers import LOAD_MODES, REPACK_TYPES, host_cpu_features
from . import experts
from .events import Events
from .graph import (estimate_events, get_rows_order, graph_order, is_matmul_weight, macs_per_row,
                    mul_mat_chunk_pages, output_rows_only, split_prompt)
from .host import HostSet, HostTouch
from .routing import Router


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
                 compute_buffer_bytes=None, host: HostSet | None = None, threads=1, kv_manager=None,
                 moe_populate=None):
        self.L = layout_of(model)
        self.threads = max(1, int(threads))   # ggml's threads: how get_rows and the matmuls split
        # the compute buffer's size as llama.cpp reports it ("CPU compute buffer size"), when known;
        # the pages a ubatch touches are still estimated (_compute_bytes), capped by it
        self.compute_buffer_bytes = compute_buffer_bytes
        self.host = host
        self.hp = self.L.hparams
        self.b = builder
        self.pid = int(pid)
        self.events = Events(builder, pid)
        self.host_touch = HostTouch(host, self.events) if host else None
        self.name = name
        if ctx is None or int(ctx) <= 0:
            raise InputError(f"--ctx must be positive (got {ctx})")
        if int(batch) <= 0 or int(ubatch) <= 0:
            raise InputError("--batch and --ubatch must be positive")
        if int(seqs) <= 0:
            raise InputError("--seqs must be positive")
        if kv_type not in managers.KV_TYPES:
            raise InputError(f"--kv-type {kv_type!r}: choose one of {', '.join(managers.KV_TYPES)}")
        self.moe_mode = None                 # an MoE load mode: (strategy class, its number)
        if experts.is_moe_mode(load_mode):
            self.moe_mode = experts.parse(load_mode, self.hp)
        elif load_mode not in LOAD_MODES:
            raise InputError(f"--load-mode {load_mode!r}: choose one of {', '.join(LOAD_MODES)}, or for an MoE "
                             f"model {', '.join(experts.MOE_MODES)}")
        self.seqs = int(seqs)
        # llama_context::llama_context: n_ctx padded to 256; per-stream size n_ctx_seq (kv_unified=false)
        self.n_ctx = pad(int(ctx), 256)
        self.kv_size = pad(self.n_ctx // self.seqs, 256) if self.seqs > 1 else self.n_ctx
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
        self.use_mmap = load_mode in ("mmap", "mmap+mlock") or self.moe_mode is not None
        self.mlock = load_mode in ("mmap+mlock", "mlock")
        self.prefetch = bool(prefetch) and self.use_mmap
        cpu = host_cpu_features() if repack == "auto" else ("none" if repack in (False, "none", "off")
                                                             else ("avx2" if repack is True else repack))
        if cpu not in REPACK_TYPES:
            raise InputError(f"--repack {repack!r}: choose auto, none, or one of {', '.join(REPACK_TYPES)}")
        self.cpu = cpu
        self.tm = time_model or device.load().time_model()
        self.rng = np.random.default_rng(seed)
        self.kv_max_runs = int(kv_max_runs)
        self.kv_manager = managers.get(kv_manager or managers.DEFAULT)   # the KV cache's manager (class)
        self.kv = None                                                     # and the context's, once created
        self.router = Router(moe_routing, self.hp, self.rng)
        self.order = graph_order(self.L)
        # how the experts are paged (experts.py); mmap on an MoE model is the page-cache strategy
        if self.moe_mode is None and self.hp.get("n_expert"):
            self.moe_mode = (experts.PageCache, None)
        self.moe = None
        # None: the MoE mode's own load; True: the whole file populated at load whatever the mode, as
        # unmodified llama.cpp 0.3.36 loads under the live check's madvise loader (validate/moe.py)
        self.moe_populate = moe_populate
        self.orders = None     # per-ubatch graph orders (an iterator) that replace `order` in turn (cb_eval's)
        self.t = 0
        self.loaded = False
        self.n_requests = 0
        self.prefill_tokens = 0
        self.decode_tokens = 0
        self.n_ubatches = 0

    # ---- set-up ------------------------------------------------------------------------------
    def _plan_buffers(self):
        """Which tensor lives where (buffers.plan), kept on the session."""
        p = buffers.plan(self.L, self.cpu, self.use_mmap)
        self.where, self.out_where, self.load_list = p.where, p.out_where, p.load_list
        self.repack_bytes, self.cpu_bytes = p.repack_bytes, p.cpu_bytes

    def kv_geometry(self) -> managers.KVGeometry:
        """What this context asks of its KV cache (llama_kv_cache's constructor arguments)."""
        hp = self.hp
        return managers.KVGeometry(n_layer=hp["n_layer"], n_embd_kv=hp["head_dim"] * hp["n_head_kv"],
                                   kv_size=self.kv_size, n_stream=self.seqs, kv_type=self.kv_type,
                                   v_trans=self.v_trans, max_runs=self.kv_max_runs)

    # ---- helpers -----------------------------------------------------------------------------
    def map_of(self, kind):
        """The mapping id of a buffer kind: "file" (the mmap), "repack" or "cpu"."""
        return {"file": self.m_file, "repack": self.m_repack, "cpu": self.m_cpu}[kind]

    def _phase(self, t, name):
        self.events.flush()
        self.b.phase(t, self.pid, name)

    # ---- load --------------------------------------------------------------------------------
    def load(self, t0=0, start_process=True):
        """Process start, model load (llama_model_load_from_file) and context creation
        (llama_init_from_model). Returns the time after loading."""
        b, pid, L = self.b, self.pid, self.L
        t = int(t0)
        if start_process:
            b.process(t, pid, self.name)
        self._phase(t, "load")
        if self.host_touch:                      # the loader's code (gguf, vocabulary, hparams)
            self.host_touch.load_code(t)
        self._plan_buffers()
        if self.moe_mode is not None:
            self.moe = self.moe_mode[0](self, self.moe_mode[1])
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
            self.events.flush()
            hp_ = np.arange(hdr, dtype=np.int64)
            b.ranges(np.full(hdr, t, np.int64), pid, Op.FREAD, -1, hp_, 1, 0, self.fid)
        if self.host_touch:                      # the loader's metadata and vocabulary
            self.host_touch.load_heap(t, pages(self.repack_bytes + (0 if self.use_mmap else self.cpu_bytes)))
        # gguf_init_from_file() read the header through a FILE of its own and closed it; the loader's
        # llama_file opens the model again, and that struct file (fadvise, mmap, read(2)) starts
        # with a fresh readahead state. Its first mmap fault meets the PG_readahead folio the header
        # read left behind with no window to match, and page_cache_async_ra() starts one there.
        self.events.event(t, Op.OPEN, -1, 0, 0, 0, self.fid)
        if self.use_mmap:
            # llama_mmap::impl: posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); mmap(PROT_READ, MAP_SHARED
            # | MAP_POPULATE if prefetch); posix_madvise(WILLNEED) over the prefetch range.
            # llama_model_base::load_tensors calls ml.init_mappings(true, ...): prefetch is always on in
            # llama.cpp itself; prefetch=False models a build/patch without it (e.g. llama.rn on Android).
            self.events.event(t, Op.FADVISE, -1, 0, fpages, int(Advice.SEQUENTIAL), self.fid)
            flags = MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS
            lazy = self.moe is not None and not (self.moe.populate if self.moe_populate is None
                                                 else self.moe_populate)   # a mode that prefetches by itself
            if self.prefetch and not lazy:
                flags |= MapFlag.POPULATE
            self.m_file = self.events.mmap(t, "weights (mmap)", fpages, file=self.fid, flags=flags)
            if self.prefetch and lazy:
                self.moe.load_prefetch(t)
                t += int(L.file_size * self.tm.ns_per_load_byte)
            elif self.prefetch:
                # The MMAP event's POPULATE flag is the populate (mm_populate() inside mmap(2), see
                # c_ext/mmap.c); madvise(WILLNEED) comes after it returns.
                self.events.event(t, Op.MADVISE, self.m_file, 0, fpages, int(Advice.WILLNEED))
                t += int(L.file_size * self.tm.ns_per_load_byte)
        else:
            # --load-mode none: llama_file::read_raw (buffered read(2)) into ggml_aligned_malloc buffers.
            # The schema has no read(2) op: a transient private read-only mapping stands for it.
            self.m_read = self.events.mmap(t, "read(2) of model file", fpages, file=self.fid, flags=MapFlag.READ)
            self.m_cpu = self.events.mmap(t, "CPU weights (no mmap)", max(1, -(-self.cpu_bytes // P)),
                                flags=MapFlag.READ | MapFlag.WRITE | MapFlag.WEIGHTS, cls=wclass)
        if self.repack_bytes:
            self.m_repack = self.events.mmap(t, "CPU_REPACK weights", -(-self.repack_bytes // P),
                                   flags=MapFlag.READ | MapFlag.WRITE | MapFlag.WEIGHTS,
                                   cls=PageClass.WEIGHTS_Q)
        # llama_model_loader::load_all_data: tensors of host-ptr (mmap) buffers need no copy; repacked
        # tensors are read from the mapping and repacked (ggml_backend_tensor_set); without mmap every
        # tensor is read(2) into its buffer.
        src_map = self.m_file if self.use_mmap else self.m_read
        for tt, kind, dst in self.load_list:
            a, n = page_span(tt.data_offset, tt.n_bytes)
            self.events.event(t, Op.READ, src_map, a, n)
            t += int(tt.n_bytes * self.tm.ns_per_load_byte)
            self.events.access(t, Op.WRITE, self.map_of(kind), dst, tt.n_bytes)
        if not self.use_mmap:
            self.events.event(t, Op.MUNMAP, self.m_read, 0, fpages)
        if self.mlock:
            if self.use_mmap:   # llama_mlock::grow_to(offs + n_size) per mmap'd tensor
                end = max((tt.data_offset + tt.n_bytes for tt in L.tensors
                           if self.where[tt.name][0] == "file"), default=0)
                if end:
                    self.events.event(t, Op.MLOCK, self.m_file, 0, -(-end // P))
            for m, nb in ((self.m_cpu, self.cpu_bytes),):
                if m >= 0 and self.load_mode == "mlock":
                    self.events.event(t, Op.MLOCK, m, 0, -(-nb // P))
        if self.use_mmap:
            # load_all_data end: unmap_fragment(0, mmap_used.first), unmap_fragment(mmap_used.second, size)
            used = [(tt.data_offset, tt.data_offset + tt.n_bytes) for tt in L.tensors
                    if self.where[tt.name][0] == "file"]
            first = min((u[0] for u in used), default=L.file_size)
            last = max((u[1] for u in used), default=0)
            a_end = first // P                     # llama_mmap::align_range: first rounded down here
            if a_end > 0:
                self.events.event(t, Op.MUNMAP, self.m_file, 0, a_end)
            a_start, a_stop = -(-last // P), L.file_size // P
            if used and a_start < a_stop:
                self.events.event(t, Op.MUNMAP, self.m_file, a_start, a_stop - a_start)
        if self.moe is not None:
            self.moe.loaded(t)
        self._create_context(t)
        self.t = t
        self.loaded = True
        return t

    def _create_context(self, t):
        """llama_init_from_model: the KV cache (its manager creates it: llama.cpp's own, one buffer
        cleared at once), the output and compute buffers, and the host's heap that Llama() builds."""
        hp = self.hp
        self.kv = self.kv_manager(self.kv_geometry(), self.events)
        self.kv.create(t)
        # llama_context::output_reserve: logits for max(n_seq_max, outputs) rows of n_vocab floats
        self.out_bytes = 4 * hp["n_vocab"] * self.seqs
        self.m_out = self.events.mmap(t, "output (logits)", pages(self.out_bytes),
                                      flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.COMPUTE)
        # graph_reserve -> ggml_backend_sched_reserve: compute buffer sized for a full ubatch
        self.compute_bytes = (int(self.compute_buffer_bytes) if self.compute_buffer_bytes
                              else buffers.compute_bytes(hp, self.ubatch, self.kv_size))
        self.m_compute = self.events.mmap(t, "compute buffer", pages(self.compute_bytes),
                                          flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.COMPUTE)
        if self.host_touch:                      # the rest of the heap Llama() allocates, written now
            self.host_touch.context(t)

    # ---- one ubatch --------------------------------------------------------------------------
    def _ubatch(self, t, phase, tokens, pos0, streams, n_out):
        """Emit one llama_decode ubatch: tokens (ids), starting cell pos0 in each of `streams`."""
        if self.orders is not None:              # the order llama.cpp recorded for this ubatch
            self.order = next(self.orders, self.order)
        b, pid, hp = self.b, self.pid, self.hp
        self._phase(t, phase)
        if self.moe is not None:                 # the model's expert paging, shared by its contexts
            self.moe.bind(self)
        n_tok = len(tokens) * len(streams)
        n_kv = min(self.kv_size, max(256, pad(pos0 + len(tokens), 256)))   # llama_kv_cache::get_n_kv
        cur = float(t)
        # inputs: compute buffer written for this ubatch
        cb = min(self.compute_bytes, buffers.compute_bytes(hp, n_tok, n_kv))
        self.events.access(int(cur), Op.WRITE, self.m_compute, 0, cb)
        tm_ = TimeCursor(cur, self.tm)
        node_times = []                   # after each graph node this model of the graph emits
        last = f"blk.{hp['n_layer'] - 1}."
        layer = None
        for kind, name in self.order:
            if kind != "kv" and name.startswith("blk.") and not name.startswith(layer or "-"):
                layer = name[:name.index(".", 4) + 1]
                tm_.layer(n_tok, hp["n_embd"])
            out_only = output_rows_only(kind, name, last)
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
                self.events.ranges(int(tm_.t), Op.READ, self.map_of(where), a, e - a)
                tm_.adv(len(rows) * rb, 0, tt.type)
            elif kind == "w":
                tt = self.L.tensor(name)
                if name == "token_embd.weight" or name == "output.weight":
                    where, base = self.out_where
                else:
                    where, base = self.where[name]
                mm = where != "repack" and (is_matmul_weight(tt) or name == "token_embd.weight")
                chunk = mul_mat_chunk_pages(tt, n_rows, self.threads) if mm else 0
                self.events.access(int(tm_.t), Op.READ, self.map_of(where), base, tt.n_bytes, chunk)
                tm_.adv(tt.n_bytes, n_rows * macs_per_row(kind, tt, hp), tt.type)
            elif kind == "router":
                tt = self.L.tensor(name)
                where, base = self.where[name]
                self.events.access(int(tm_.t), Op.READ, self.map_of(where), base, tt.n_bytes)
                tm_.adv(tt.n_bytes, n_rows * macs_per_row(kind, tt, hp), tt.type)
                il = int(name.split(".")[1])
                # the tokens routed: the last layer's FFN works on the output rows only (inp_out_ids)
                self._experts = self.router.route(il, n_rows)
                self.moe.routed(int(tm_.t), il, self._experts, self.router.last)
                self._exps_j = 0
            elif kind == "exps":
                tt = self.L.tensor(name)
                ex = self._experts
                self.moe.read(int(tm_.t), int(name.split(".")[1]), self._exps_j, tt, ex)
                self._exps_j += 1
                tm_.adv(len(ex) * (tt.n_bytes // self.hp["n_expert"]), n_rows * macs_per_row(kind, tt, hp),
                        f"{tt.type}{MUL_MAT_ID}")
            elif kind == "kv":
                self.kv.update(int(tm_.t), name, pos0, len(tokens), n_kv, streams)
            node_times.append(int(tm_.t))
        if self.moe is not None:
            self.moe.step_done(int(tm_.t), n_tok)
        # logits copied out of the compute buffer, then sampled
        ob = 4 * hp["n_vocab"] * n_out
        self.events.access(int(tm_.t), Op.WRITE, self.m_out, 0, ob)
        self.events.access(int(tm_.t), Op.READ, self.m_out, 0, ob)
        if self.host_touch:
            self.host_touch.touch(int(cur), node_times + [int(tm_.t)],
                             "decode" if phase.startswith("decode") else "prompt")
        self.n_ubatches += 1
        return int(np.ceil(tm_.t))

    # ---- requests ----------------------------------------------------------------------------
    @property
    def step_weight_bytes(self) -> int:
        """Weight bytes a llama_decode step streams (token_embd only as the tied output head): the sum
        of step_cost's."""
        return sum(b for b, _, _ in self.step_cost.values())

    @property
    def step_macs(self) -> tuple[int, int]:
        """Multiply-accumulates of a llama_decode step per token row, and per output row on top (the
        last layer's FFN and the output head, which work on the output rows only): as _ubatch times
        them; the sums of step_cost's."""
        return (sum(m for _, m, _ in self.step_cost.values()), sum(o for _, _, o in self.step_cost.values()))

    @property
    def step_cost(self) -> dict:
        """A llama_decode step's work by weight type: {ggml type (an MoE's experts: type + MUL_MAT_ID):
        [weight bytes streamed (token_embd only as the tied output head), MACs per token row, MACs
        per output row]} (TimeModel.step_ns; step_weight_bytes and step_macs are its sums)."""
        if not hasattr(self, "_cost"):
            last, cost = f"blk.{self.hp['n_layer'] - 1}.", {}
            tied = self.L.tensor("output.weight") is None
            for t in self.L.tensors:
                if t.name != "token_embd.weight" or tied:
                    cost.setdefault(t.type, [0, 0, 0])[0] += t.n_bytes
            for kind, name in self.order:
                if kind == "kv":
                    continue
                t = self.L.tensor(name)
                m = macs_per_row(kind, t, self.hp)
                if m:
                    key = f"{t.type}{MUL_MAT_ID}" if kind == "exps" else t.type
                    cost.setdefault(key, [0, 0, 0])[2 if output_rows_only(kind, name, last) else 1] += m
            self._cost = cost
        return self._cost

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
        s = LlamaSession(self.L, self.b, pid=self.pid,
                         **{"time_model": self.tm, "kv_manager": self.kv_manager.name, **kw})
        s._plan_buffers()
        for a in ("fid", "m_file", "m_repack", "m_cpu", "m_read", "moe"):
            setattr(s, a, getattr(self, a, -1))
        s.events.anon_maps |= self.events.anon_maps
        s.events.seen = self.events.seen          # one record of what is touched: both sessions add to it
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
        self.events.flush()
        if exit_process:
            self.b.event(t, self.pid, Op.PROC_EXIT)
        self.t = t
        return t

    @property
    def kv_bytes(self) -> int:
        return self.kv.bytes

    def meta(self):
        return {"model": self.L.name, "arch": self.L.arch, "n_ctx": self.n_ctx, "kv_size": self.kv_size,
                "n_batch": self.batch, "n_ubatch": self.ubatch, "kv_type": self.kv_type,
                "flash_attn": self.flash_attn, "v_trans": self.v_trans, "load_mode": self.load_mode,
                "prefetch": self.prefetch, "seqs": self.seqs, "repack_cpu": self.cpu,
                "repack_bytes": self.repack_bytes, **self.kv.meta(),
                "moe_routing": self.router.spec if self.hp.get("n_expert") else None, "pid": self.pid,
                **(self.moe.meta() if self.moe is not None else {}),
                "prefill_tokens": self.prefill_tokens, "decode_tokens": self.decode_tokens,
                "requests": self.n_requests,
                "macs_per_token": self.step_macs[0], "macs_per_output": self.step_macs[1],
                "step_cost": self.step_cost, "n_layer": int(self.hp["n_layer"]),
                "n_embd": int(self.hp["n_embd"]),
                "engine": "llama-cpp-python 0.3.36 (llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f)"}


def check_request(prompt, decode, ctx, batch=512, ubatch=512, seqs=1, requests=1, pid=1000) -> None:
    """A session's numbers within what llama.cpp and a real model take (kmemsim.core.limits), each
    named as its option."""
    for name, v, lo, hi in (("--prompt", prompt, 1, MAX_TOKENS), ("--decode", decode, 0, MAX_TOKENS),
                            ("--ctx", ctx, 1, MAX_TOKENS), ("--batch", batch, 1, MAX_TOKENS),
                            ("--ubatch", ubatch, 1, MAX_TOKENS), ("--seqs", seqs, 1, MAX_SEQS),
                            ("--requests", requests, 1, MAX_REQUESTS), ("--pid", pid, 0, MAX_PID)):
        check_int(v, name, lo, hi)


def generate(model, prompt, decode, ctx, batch=512, ubatch=512, kv_type="f16", load_mode="mmap",
             prefetch=True, seqs=1, pid=1000, t0=0, builder=None, *, flash_attn=None, repack="auto",
             moe_routing="uniform", seed=0, time_model=None, requests=1, name="llama",
             close=True, kv_max_runs=64, kv_manager=None) -> Trace | LlamaSession:
    """Trace of one llama.cpp session on `model` (a .gguf path or a ModelLayout): load, `requests`
    requests of `prompt` + `decode` tokens, exit; the KV cache as kv_manager keeps it (a name in
    kmemsim.engine.managers; None: llama.cpp's own). With `builder`, events go onto that TraceBuilder
    and the LlamaSession is returned (call builder.build() yourself); otherwise a built Trace."""
    check_request(prompt, decode, ctx, batch, ubatch, seqs, requests, pid)
    own = builder is None
    if own:
        builder = TraceBuilder(source="kmemsim workload llama")
    L = layout_of(model)
    check_events(estimate_events(L, prompt, decode, min(int(ubatch), int(batch), int(ctx)), seqs, requests),
                 f"{L.name}: {requests} request(s) of {prompt} + {decode} tokens on {seqs} sequence(s)",
                 "give fewer tokens or requests")
    model = L
    s = LlamaSession(model, builder, pid=pid, name=name, ctx=ctx, batch=batch, ubatch=ubatch,
                     kv_type=kv_type, load_mode=load_mode, prefetch=prefetch, seqs=seqs,
                     flash_attn=flash_attn, repack=repack, moe_routing=moe_routing, seed=seed,
                     time_model=time_model, kv_max_runs=kv_max_runs, kv_manager=kv_manager)
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
