"""Attention-based information density of KV-cache chunks (LLMS, Yin et al., "LLM as a System Service
on Mobile Devices", arXiv 2403.11805, Eq. 1). LLMS compresses each chunk of a context's KV cache by its
density; chunk i over tokens p..q:

    D_i = mean_{col in chunk} mean_l mean_h ( 1/(R-col) * sum_{row=col..R-1} A^{l,h}[row, col] )

A = softmax(mask(Q K^T / sqrt(d))) is the causal attention of R prompt tokens: each column is averaged
over the rows that can see it, then over heads and layers, then over the chunk's columns (Eq. 1 writes
the last step as 1/(q-p) * sum_{col=p..q}; we divide by the number of columns, so a short last chunk
is not penalised). Ranking the chunks (and compressing by rank) is left to the caller.

Three sources of A:
- chunk_density: any given matrices (numpy, [..., R, R]).
- llama_density / llama_scores: real llama.cpp (llama-cpp-python 0.3.36, vendored llama.cpp 0c1e5709),
  the `kq_soft_max-<il>` node of llm_graph_context::build_attn_mha copied out through cb_eval. Real
  computation, but on a random-weight model the numbers say nothing about real text.
- synthetic_density: a made-up distribution (attention sinks + recency + log-normal noise) for
  random-weight models; see its docstring for what is assumed.
"""
from __future__ import annotations

import ctypes
import math
import re
from functools import lru_cache

import numpy as np

from ...core.errors import InputError
from .cb_eval import ggml_tensor, quiet
from .session import random_token_ids

_SOFTMAX = re.compile(r"^kq_soft_max(?:_ext)?-(\d+)$")   # llm_graph_context::cb names nodes "<name>-<il>"


def _chunk_means(col, chunk):
    """Mean of a per-column vector over consecutive chunks of `chunk` columns (the last may be short)."""
    if chunk <= 0:
        raise InputError(f"chunk must be positive (got {chunk})")
    starts = np.arange(0, len(col), chunk)
    return np.add.reduceat(col, starts) / np.diff(np.append(starts, len(col)))


def column_means(scores):
    """Per column, Eq. 1's inner terms: the mean over rows col..R-1 of A[row, col], averaged over all
    leading axes (heads, layers). scores: [..., R, R], rows = queries, columns = keys."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim < 2 or s.shape[-1] != s.shape[-2]:
        raise InputError(f"attention scores must be [..., R, R] (got shape {s.shape})")
    R = s.shape[-1]
    sums = np.tril(s).sum(axis=-2)                      # rows >= col only (Eq. 1's row range)
    return (sums / (R - np.arange(R))).reshape(-1, R).mean(axis=0)


def chunk_density(scores, chunk):
    """LLMS Eq. 1: D per chunk of `chunk` tokens from causal attention [L, H, R, R] (any leading axes)."""
    return _chunk_means(column_means(scores), chunk)


def synthetic_density(n_tokens, chunk, rng, sink=0.5, recency=1.0, noise=1.0, n_sink=4, tau=32.0):
    """D per chunk (Eq. 1) of a synthetic causal attention matrix, for random-weight models whose real
    attention means nothing. Row r (query) over columns c <= r:

        A[r, c] = sink * [c < n_sink] / min(n_sink, r+1)  +  (1 - sink) * w_c * g(r-c) / Z_r
        w_c = exp(noise * N(0, 1)),   g(d) = 1 + recency * exp(-d / tau),   Z_r = sum_{c<=r} w_c g(r-c)

    so every row sums to 1. Defaults and where they come from:
    - n_sink=4: StreamingLLM (Xiao et al., arXiv 2309.17453) keeps 4 initial tokens as attention sinks
      and reports that these initial tokens take a large share of attention in most layers and heads.
    - sink=0.5 (the share of every row going to the sinks): an assumption standing for StreamingLLM's
      "large share"; the paper gives no single number to copy.
    - recency=1.0, tau=32: assumption: a key at distance d weighs 1 + e^(-d/32), so recent tokens get up
      to twice the weight of old ones (LLMS/StreamingLLM both keep recent tokens; the shape is ours).
    - noise=1.0: assumption: log-normal key salience with sigma 1 so some chunks stand out ("heavy
      hitters", H2O, arXiv 2306.14048, qualitatively); not fitted to any model.
    Deterministic given rng (one draw of n_tokens normals). O(n_tokens * tau), no R x R matrix."""
    R = int(n_tokens)
    if R <= 0:
        raise InputError(f"n_tokens must be positive (got {n_tokens})")
    if not 0 <= sink <= 1 or recency < 0 or noise < 0 or n_sink < 0 or tau <= 0 or (sink and not n_sink):
        raise InputError("synthetic_density: need 0 <= sink <= 1 (0 if n_sink is 0), recency >= 0, "
                         "noise >= 0, n_sink >= 0, tau > 0")
    w = np.exp(noise * rng.standard_normal(R))
    k = recency * np.exp(-np.arange(min(R, math.ceil(40 * tau))) / tau)   # e^-40: the rest is negligible
    Z = np.cumsum(w) + np.convolve(w, k)[:R]            # sum_{c<=r} w_c (1 + k[r-c])
    u = 1.0 / Z
    # per column: w_c * sum_{r>=c} (1 + k[r-c]) / Z_r
    content = w * (np.cumsum(u[::-1])[::-1] + np.convolve(u[::-1], k)[:R][::-1])
    rows_sink = sink / np.minimum(max(n_sink, 1), np.arange(R) + 1)   # what row r gives each sink column
    sinks = np.where(np.arange(R) < n_sink, np.cumsum(rows_sink[::-1])[::-1], 0.0)
    col = (sinks + (1 - sink) * content) / (R - np.arange(R))
    return _chunk_means(col, chunk)


@lru_cache(maxsize=4096)
def context_density(ctx, n_tokens: int, n_chunks: int, chunk: int = 16) -> np.ndarray:
    """synthetic_density for one context of a service (LLMS), as its chunks stand: its tokens'
    salience is drawn once per context (seeded by `ctx`: the same prefix at every length), so the
    ranks move only as the context grows; the last n_chunks chunks (a window past the oldest)."""
    d = synthetic_density(n_tokens, chunk, np.random.default_rng(int(ctx)))
    return d[-n_chunks:] if len(d) >= n_chunks else np.pad(d, (n_chunks - len(d), 0), constant_values=d.min())


def load_llama_cpp():
    try:
        import llama_cpp                    # here: optional (the [llama] extra), and 0.2 s to load
    except ImportError as e:
        raise InputError(f"llama-cpp-python is not installed ({e}); `make setup` installs it")
    return llama_cpp


def _capture(model_path, n_tokens, seed, threads, on_layer):
    """Decode a random prompt of n_tokens ids in one ubatch; call on_layer(il, A) with each layer's
    softmaxed attention A [n_head, n_tokens, n_tokens] (float32 copy; rows = queries)."""
    llama_cpp = load_llama_cpp()
    R = int(n_tokens)
    if R <= 0:
        raise InputError(f"n_tokens must be positive (got {n_tokens})")
    llama_cpp.llama_backend_init()
    quiet(llama_cpp)
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mp)
    if not model:
        raise InputError(f"{model_path}: llama.cpp could not load the model")
    errors = []

    def cb(t, ask, user):
        try:
            node = ctypes.cast(t, ctypes.POINTER(ggml_tensor)).contents
            m = _SOFTMAX.match(node.name.decode(errors="replace"))
            if ask:
                return bool(m)                          # compute (and show us) only the softmax nodes
            if m:
                # ggml ne order [n_kv, n_tokens, n_head, n_stream] (kq = mul_mat(k, q), q permuted
                # to [d, n_tokens, n_head]): numpy [n_stream, n_head, n_tokens, n_kv] through nb
                if node.type != 0:                      # GGML_TYPE_F32
                    raise InputError(f"{node.name.decode()}: expected f32, got ggml type {node.type}")
                ne, nb = list(node.ne), list(node.nb)
                if ne[3] != 1 or ne[1] != R or ne[0] < R:
                    raise InputError(f"{node.name.decode()}: unexpected shape ne={ne} for {R} tokens")
                size = sum((n - 1) * b for n, b in zip(ne, nb)) + 4
                buf = (ctypes.c_char * size).from_address(node.data)
                a = np.lib.stride_tricks.as_strided(np.frombuffer(buf, np.float32), (ne[2], ne[1], ne[0]),
                                                    (nb[2], nb[1], nb[0]))
                if not np.allclose(a[:, :, R:], 0):
                    raise InputError(f"{node.name.decode()}: attention beyond the prompt's {R} KV cells")
                on_layer(int(m.group(1)), np.array(a[:, :, :R]))
            return True
        except Exception as e:                          # never raise through ctypes: stop the graph
            errors.append(e)
            return False

    cb_c = llama_cpp.ggml_backend_sched_eval_callback(cb)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = max(256, -(-R // 256) * 256)
    cp.n_batch = cp.n_ubatch = R                        # one ubatch: every row in one matrix
    cp.n_seq_max = 1
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED   # flash attention has no kq_soft_max
    cp.cb_eval = cb_c
    cp.cb_eval_user_data = None
    lctx = llama_cpp.llama_init_from_model(model, cp)
    if not lctx:
        llama_cpp.llama_model_free(model)
        raise InputError(f"{model_path}: llama.cpp could not create a context for {R} tokens")
    try:
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        toks = [int(x) for x in random_token_ids(np.random.default_rng(seed), n_vocab, R)]
        arr = (llama_cpp.llama_token * R)(*toks)
        rc = llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, R))
        if errors:
            raise errors[0]
        if rc != 0:
            raise InputError(f"llama_decode failed with {rc}")
    finally:
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(model)


def llama_scores(model_path, n_tokens, seed=0, threads=2):
    """Real llama.cpp attention of a random n_tokens prompt: float32 [L, H, R, R], rows = queries.
    Holds L*H*R*R floats: for long prompts use llama_density, which keeps one layer at a time."""
    got = {}
    _capture(model_path, n_tokens, seed, threads, lambda il, a: got.__setitem__(il, a))
    if not got:
        raise InputError(f"{model_path}: llama.cpp produced no kq_soft_max node (flash attention on?)")
    return np.stack([got[il] for il in sorted(got)])


def llama_density(model_path, n_tokens, chunk, seed=0, threads=2):
    """LLMS Eq. 1 over real llama.cpp attention (see llama_scores) of a random prompt of n_tokens ids."""
    cols = {}
    _capture(model_path, n_tokens, seed, threads, lambda il, a: cols.__setitem__(il, column_means(a)))
    if not cols:
        raise InputError(f"{model_path}: llama.cpp produced no kq_soft_max node (flash attention on?)")
    return _chunk_means(np.mean([cols[il] for il in sorted(cols)], axis=0), chunk)
