"""Record which weight tensors real llama.cpp reads, in graph order, through its eval callback.

llama_context_params.cb_eval (ggml_backend_sched_eval_callback) is called by
ggml_backend_sched_compute_splits for every graph node with ask=true before it is computed
(seed-systems.md §4.4). We answer false (no node's data is needed), so the graph still runs in one
piece, and record each node's sources: weights by name (following view_src), KV cache tensors
(cache_k_l*/cache_v_l*) as the layer's attention. The recorded order per ubatch then drives the same
trace generator as `kmemsim workload llama`, so both traces share one schema.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np

from ...core.errors import InputError
from ..gguf_layout import read_layout
from ...core.trace import TraceBuilder
from .graph import graph_order
from . import experts
from .routing import Router
from .session import LlamaSession, random_token_ids

GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_OP_PARAMS, GGML_MAX_NAME = 4, 10, 64, 64


class ggml_tensor(ctypes.Structure):
    pass


# struct ggml_tensor, ggml/include/ggml.h of the vendored llama.cpp (0c1e5709)
ggml_tensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
    ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(ggml_tensor) * GGML_MAX_SRC),
    ("view_src", ctypes.POINTER(ggml_tensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * GGML_MAX_NAME),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]

_KV = re.compile(r"^cache_[kv]_l(\d+)")


def _root(p):
    """Follow view_src to the tensor that owns the memory."""
    seen = 0
    while p and p.contents.view_src and seen < 16:
        p = p.contents.view_src
        seen += 1
    return p


def _llama():
    try:
        import llama_cpp                 # the optional dependency (make setup installs it)
    except ImportError as e:
        raise InputError(f"llama-cpp-python is not installed ({e}); `pip install llama-cpp-python==0.3.36` "
                         "or `make setup`")
    return llama_cpp


def record(model_path, prompt=8, decode=4, ctx=512, batch=512, ubatch=512, kv_type="f16",
           load_mode="mmap", flash_attn=None, repack=True, seed=0, threads=2, routing=False):
    """Run llama.cpp on model_path: a random prompt of `prompt` token ids, then `decode` greedy tokens.
    Returns {"ubatches": [[item, ...], ...] (graph-order weight/KV items per ubatch),
    "tokens": [...], "generated": [...], "n_outputs": [...]}; items are tensor names or "kv<il>".
    With routing, also "routing": [(layer, int32 [tokens, k])] in the order computed: each MoE layer's
    `ffn_moe_topk-<il>` node (llm_graph_context::build_moe_ffn: the router's top-k expert ids, a view
    [n_expert_used, n_tokens] of the argsort), read after it is computed (the callback asks for it)."""
    llama_cpp = _llama()
    L = read_layout(model_path)
    names = {t.name for t in L.tensors}
    if ctx <= 0:
        raise InputError(f"--ctx must be positive (got {ctx})")
    if prompt + decode > ctx:
        raise InputError(f"prompt + decode = {prompt + decode} tokens do not fit --ctx {ctx}")
    quant_v = kv_type != "f16"
    if flash_attn is None:
        flash_attn = quant_v
    llama_cpp.llama_backend_init()
    quiet(llama_cpp)
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.load_mode = {"mmap": llama_cpp.LLAMA_LOAD_MODE_MMAP, "none": llama_cpp.LLAMA_LOAD_MODE_NONE,
                    "mmap+mlock": llama_cpp.LLAMA_LOAD_MODE_MMAP_MLOCK,
                    "mlock": llama_cpp.LLAMA_LOAD_MODE_MLOCK}[load_mode]
    mp.use_extra_bufts = bool(repack)
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mp)
    if not model:
        raise InputError(f"{model_path}: llama.cpp could not load the model")
    ubatches, cur, done, routed = [], [], [], []

    def cb(t, ask, user):
        if not t:
            return False
        node = ctypes.cast(t, ctypes.POINTER(ggml_tensor)).contents
        topk = routing and node.name.startswith(b"ffn_moe_topk-")
        if not ask:
            if topk:                              # computed: its ids, row by row (nb[1] apart)
                k, n = int(node.ne[0]), int(node.ne[1])
                base = ctypes.cast(node.data, ctypes.c_void_p).value
                rows = [np.ctypeslib.as_array((ctypes.c_int32 * k).from_address(base + i * int(node.nb[1])))
                        for i in range(n)]
                routed.append((int(node.name.split(b"-")[1]), np.array(rows, np.int32)))
            return True
        srcs = [node.src[i] for i in range(GGML_MAX_SRC) if node.src[i]]
        if cur and any(s.contents.name == b"inp_tokens" for s in srcs):
            # get_rows(tok_embd, inp_tokens) (llm_graph_context::build_inp_embd) opens every ubatch
            done.append(list(cur))
            cur.clear()
        for s in srcs:
            r = _root(s)
            nm = r.contents.name.decode(errors="replace")
            m = _KV.match(nm)
            item = f"kv{m.group(1)}" if m else (nm if nm in names else None)
            if item and (not cur or cur[-1] != item):
                cur.append(item)
        return topk

    cb_c = llama_cpp.ggml_backend_sched_eval_callback(cb)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = ctx, min(batch, ctx), min(ubatch, batch, ctx)
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                          else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    gtype = {"f16": 1, "q8_0": 8}[kv_type]
    cp.type_k = cp.type_v = gtype
    cp.cb_eval = cb_c
    cp.cb_eval_user_data = None
    lctx = llama_cpp.llama_init_from_model(model, cp)
    if not lctx:
        llama_cpp.llama_model_free(model)
        raise InputError(f"{model_path}: llama.cpp could not create a context")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        rng = np.random.default_rng(seed)
        toks = [int(x) for x in random_token_ids(rng, n_vocab, prompt)]
        n_out = []
        # one llama_decode call per n_batch tokens (the caller's batching); llama.cpp splits ubatches
        for i in range(0, prompt, cp.n_batch):
            chunk = toks[i:i + cp.n_batch]
            arr = (llama_cpp.llama_token * len(chunk))(*chunk)
            before = len(ubatches)
            cur.clear()
            done.clear()
            rc = llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, len(chunk)))
            if rc != 0:
                raise InputError(f"llama_decode failed with {rc}")
            ubatches.extend(done + [list(cur)])
            n_out.append(len(ubatches) - before)
        gen = []
        for _ in range(decode):
            logits = llama_cpp.llama_get_logits_ith(lctx, -1)
            row = np.ctypeslib.as_array(logits, shape=(n_vocab,))
            if not np.isfinite(row).all():
                raise InputError("llama.cpp produced non-finite logits")
            nxt = int(np.argmax(row))
            gen.append(nxt)
            arr = (llama_cpp.llama_token * 1)(nxt)
            cur.clear()
            done.clear()
            rc = llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, 1))
            if rc != 0:
                raise InputError(f"llama_decode failed with {rc}")
            ubatches.extend(done + [list(cur)])
        return {"ubatches": ubatches, "tokens": toks, "generated": gen, "n_vocab": n_vocab, "routing": routed,
                "n_expert": L.hparams.get("n_expert", 0)}
    finally:
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(model)


_log_cb = None


def quiet(llama_cpp):
    """Silence llama.cpp's log (it prints every tensor at load)."""
    global _log_cb
    if _log_cb is None:
        _log_cb = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_log_cb, ctypes.c_void_p(0))


def generated_items(layout):
    """The generator's graph order (workload.llama.graph_order) in the recorder's vocabulary."""
    out = []
    for kind, name in graph_order(layout):
        it = f"kv{name}" if kind == "kv" else name
        if not out or out[-1] != it:
            out.append(it)
    return out


def _order_from_items(items):
    """Recorded items -> generator order items (kind, name)."""
    out, seen_embd = [], False
    for it in items:
        if it.startswith("kv") and it[2:].isdigit():
            out.append(("kv", int(it[2:])))
        elif it == "token_embd.weight" and not seen_embd:
            out.append(("embd", it))
            seen_embd = True
        elif "ffn_gate_inp" in it:
            out.append(("router", it))
        elif it.endswith("_exps.weight"):
            out.append(("exps", it))
        else:
            out.append(("w", it))
    return out


def trace(model_path, prompt, decode, ctx, batch=512, ubatch=512, kv_type="f16", load_mode="mmap",
          prefetch=True, flash_attn=None, repack=True, seed=0, pid=1000, moe_routing="uniform", routing=False):
    """A trace whose per-ubatch weight order is the one llama.cpp recorded (the rest - mappings,
    load, KV, buffers - comes from the same model as the generator). An MoE load mode (page-cache,
    willneed, ...) runs llama.cpp with plain mmap and pages the trace's experts that way; with
    routing, the trace's experts are the ones llama.cpp routed to."""
    real_mode = "mmap" if experts.is_moe_mode(load_mode) else load_mode
    rec = record(model_path, prompt, decode, ctx, batch, ubatch, kv_type, real_mode, flash_attn,
                 repack, seed, routing=routing)
    b = TraceBuilder(source="kmemsim trace llama (cb_eval)")
    s = LlamaSession(model_path, b, pid=pid, ctx=ctx, batch=batch, ubatch=ubatch, kv_type=kv_type,
                     load_mode=load_mode, prefetch=prefetch, flash_attn=flash_attn,
                     repack="auto" if repack else "none", moe_routing=moe_routing, seed=seed)
    s.orders = iter([_order_from_items(u) for u in rec["ubatches"]])
    if routing and rec["routing"]:
        s.router = Router.replaying(rec["routing"], s.hp)
    t = s.load(0)
    t = s.request(prompt, decode, t, tokens=np.array(rec["tokens"] + rec["generated"] + [0], np.int64))
    s.close(t)
    m = s.meta()
    m["recorded"] = True
    m["generated_tokens"] = rec["generated"]
    b.meta.setdefault("llama", []).append(m)
    return b.build(), rec
