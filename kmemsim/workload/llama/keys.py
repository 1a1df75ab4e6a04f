"""Key (and query) vectors per layer and KV head, for cluster-based KV retrieval (DynaKV, Wang et al.,
"Enabling Accurate and Efficient Long-Sequence LLM Decoding on Smartphones", arXiv 2511.07427).

DynaKV partitions each head's keys with K-Means at prefill, keeps the centroids in DRAM and, per
decoding query, reads the top-k clusters (by query-centroid similarity) from flash (§4.1). Its point
is that the key distribution drifts during long decoding (§2.3, "KVCache distribution shift"): the
prefill clusters stop fitting, appending new keys to the nearest cluster (PQCache) inflates cluster
variance, and re-clustering locally (ClusterKV) fragments clusters into small, IOPS-bound reads.

- synthetic_keys: a drifting Gaussian mixture per head (keys of the prefill and of every decoding
  step) and a query stream near the modes of recent keys. The paper gives no generative model: every
  default below is our assumption, stated as such.
- llama_keys: real post-RoPE keys and queries from llama.cpp (llama-cpp-python 0.3.36, vendored
  llama.cpp 0c1e5709) through its eval callback; real computation, but on a random-weight model the
  vectors say nothing about real text.
- kmeans (scikit-learn's KMeans) and cluster_variance (the "cluster variance" of DynaKV's Table 5).
"""
from __future__ import annotations

import ctypes
import re

import numpy as np

from ...core.errors import InputError
from .attention import load_llama_cpp
from .cb_eval import ggml_tensor, quiet
from .session import random_token_ids


# ----------------------------------------------------------------------------------------- synthetic

def _walk_at(steps, d, rng):
    """A standard Gaussian random walk in R^d (W(0) = 0, N(0, I) per step) evaluated at the given
    non-negative integer steps (any order, repeats allowed): [len(steps), d]. Draws only one
    increment per distinct step (N(0, gap * I) between consecutive ones), so the cost is the number
    of requested steps, not the largest step."""
    u, inv = np.unique(steps, return_inverse=True)
    gaps = np.diff(u, prepend=0).astype(np.float64)
    w = np.cumsum(np.sqrt(gaps)[:, None] * rng.standard_normal((len(u), d)), axis=0)
    return w[inv]


def synthetic_keys(n_prefill, n_decode, head_dim, n_heads, rng, *, n_modes=16, spread=0.5, drift=0.02,
                   birth_rate=1 / 512, concentration=1.0, query_window=64, query_noise=0.5, segment=16):
    """Keys whose cluster structure drifts over decoding, and the decoding queries that go with them.

    Returns (keys, queries): float32 [n_heads, n_prefill + n_decode, head_dim] (prefill tokens first,
    then one key per decoding step) and float32 [n_heads, n_decode, head_dim] (one query per step).

    Model, independently per head (lengths are in units of the per-coordinate spread of the centres):
    - Initial mixture: n_modes centres c_m ~ N(0, I), weights g_m ~ Gamma(concentration) (so the
      initial mixing proportions are Dirichlet(concentration)).
    - New modes: born at decoding steps of a Poisson process of rate birth_rate per step, each with a
      fresh centre ~ N(0, I) and weight ~ Gamma(concentration); from its birth on, a token picks among
      the live modes with probability proportional to g (so newcomers dilute the old modes).
    - Drift: mode m born at step b_m (0 for the initial ones) sits at c_m + drift * W_m(s - b_m) at
      decoding step s, W_m an independent standard random walk in R^head_dim (so a centre moves
      drift * sqrt(t * head_dim) in t steps).
    - Keys: the prefill (step 0, one forward pass) is drawn from the initial mixture; the key of
      decoding step s (1..n_decode) from the mixture at step s: centre of its mode + spread * N(0, I).
      Consecutive tokens share a mode in segments: a token starts a new segment (a fresh draw from
      the mixture) with probability 1/segment, else keeps its predecessor's mode, so segments are
      geometric with mean `segment` tokens.
    - Queries: the query of step s is near a mode of the recent keys: pick one of the last
      query_window keys (up to and including step s's own key) uniformly, take its mode's centre at
      step s and add query_noise * N(0, I).

    DynaKV (arXiv 2511.07427) shows the shift (§2.3, Fig. 4) but gives no generative model; all of the
    following defaults are assumptions, not fitted to any model:
    - n_modes=16: modes per head at prefill.
    - spread=0.5: within-mode std per coordinate (0.5 of the centres' scale), so modes are separated:
      two centres lie ~sqrt(2 * head_dim) apart, a key ~0.5 * sqrt(head_dim) from its centre.
    - drift=0.02: per-step, per-coordinate random-walk std; a centre moves by a mode's own radius
      (spread) in (spread/drift)^2 = 625 steps and by the centres' scale in 2,500, i.e. within the
      1K-16K decoding lengths of DynaKV's Table 6. drift=0 freezes the centres.
    - birth_rate=1/512: one new mode per 512 decoded tokens on average (0: none).
    - concentration=1.0: Dirichlet(1) proportions (uniform on the simplex: unequal cluster sizes).
    - query_window=64, query_noise=0.5 (= spread): queries look like recent keys.
    - segment=16: a mode lasts a sentence or so (English sentences run 15-20 words, about as many
      tokens); 1 draws every token's mode afresh (no positional locality at all).
    Not modelled: per-channel offsets and outlier channels of real keys, RoPE's position dependence.

    Deterministic given rng. Vectorised over tokens; loops over heads and modes only."""
    n_prefill, n_decode, d, H = int(n_prefill), int(n_decode), int(head_dim), int(n_heads)
    if n_prefill < 0 or n_decode < 0 or n_prefill + n_decode == 0:
        raise InputError(f"need n_prefill >= 0, n_decode >= 0 and some tokens (got {n_prefill}, {n_decode})")
    if d <= 0 or H <= 0 or int(n_modes) <= 0:
        raise InputError(f"head_dim, n_heads and n_modes must be positive (got {d}, {H}, {n_modes})")
    if min(spread, drift, birth_rate, query_noise) < 0 or concentration <= 0 or int(query_window) < 1 \
            or not segment >= 1:
        raise InputError("synthetic_keys: need spread, drift, birth_rate, query_noise >= 0, "
                         "concentration > 0, query_window >= 1, segment >= 1")
    M0, N = int(n_modes), n_prefill + n_decode
    step = np.maximum(np.arange(N) - n_prefill + 1, 0)              # prefill: 0, decoded: 1..n_decode
    q_step = np.arange(1, n_decode + 1)
    keys = np.empty((H, N, d), np.float32)
    queries = np.empty((H, n_decode, d), np.float32)
    for h in range(H):
        nb = int(rng.poisson(birth_rate * n_decode)) if n_decode else 0
        born = np.concatenate([np.zeros(M0, np.int64), np.sort(rng.integers(1, n_decode + 1, nb))])
        M = M0 + nb
        centres = rng.standard_normal((M, d))
        cw = np.cumsum(rng.gamma(concentration, size=M))
        alive = np.searchsorted(born, step, side="right")           # modes born at or before the step
        mode = np.searchsorted(cw, rng.random(N) * cw[alive - 1], side="right")
        mode = np.minimum(mode, alive - 1)                           # guard the float edge u == cw
        starts = rng.random(N) < 1.0 / segment                       # a token that starts a segment
        starts[0] = True
        mode = mode[np.flatnonzero(starts)[np.cumsum(starts) - 1]]   # the mode its segment started with
        # the query of step s borrows the mode of one of the last query_window keys
        src = n_prefill + q_step - 1 - rng.integers(0, int(query_window), n_decode)
        q_mode = mode[np.maximum(src, 0)]
        pos = np.empty((N, d))                                       # each key's mode centre, at its step
        q_pos = np.empty((n_decode, d))
        for m in range(M):
            k_at, q_at = np.flatnonzero(mode == m), np.flatnonzero(q_mode == m)
            if not len(k_at) and not len(q_at):
                continue
            rel = np.concatenate([step[k_at], q_step[q_at]]) - born[m]
            w = centres[m] + drift * _walk_at(rel, d, rng) if drift else np.broadcast_to(centres[m], (len(rel), d))
            pos[k_at], q_pos[q_at] = w[:len(k_at)], w[len(k_at):]
        keys[h] = pos + spread * rng.standard_normal((N, d))
        queries[h] = q_pos + query_noise * rng.standard_normal((n_decode, d))
    return keys, queries


# ----------------------------------------------------------------------------------------- clusters

def kmeans(points, k, rng):
    """K-Means of points [n, d] into k clusters: (labels int [n], centroids [k, d]).

    scikit-learn's KMeans (Lloyd, k-means++ seeding) with n_init=1 and a random_state drawn from rng,
    so the result is deterministic given rng. One run rather than the best of several: DynaKV
    clusters at prefill under a latency budget (its implementation runs a multithreaded K-Means
    inside llama.cpp, §7); callers wanting restarts can call it again."""
    x = np.asarray(points)
    if x.ndim != 2 or not len(x):
        raise InputError(f"kmeans: points must be a non-empty [n, d] array (got shape {x.shape})")
    k = int(k)
    if k < 1 or k > len(x):
        raise InputError(f"kmeans: k = {k} clusters for {len(x)} points; need 1 <= k <= the number of points")
    from sklearn.cluster import KMeans                  # here: 0.5 s to import, only when clustering
    from threadpoolctl import threadpool_limits         # here: scikit-learn's own dependency, with it
    # one thread: a head's clusters are small, and setting up the thread pools costs more than the
    # fit (a 2-way split of 60 keys: 2.4 ms so, 17 ms with the pools)
    with threadpool_limits(limits=1):
        km = KMeans(n_clusters=k, n_init=1, random_state=int(rng.integers(2**31 - 1))).fit(x)
    return km.labels_.astype(np.int64), km.cluster_centers_


def cluster_variance(points, labels, weighted=False):
    """Mean within-cluster variance of points [n, d] under integer labels [n].

    A cluster's variance is the mean squared Euclidean distance of its points to its mean,
    sigma_j^2 = 1/n_j * sum_{i in j} ||x_i - mu_j||^2 (summed over dimensions, not averaged: the
    per-entry quantity DynaKV's Algorithm 1 updates incrementally from n_j, the representative r_j,
    sigma_j^2 and the new key); the result is the mean of sigma_j^2 over non-empty clusters. The
    paper's Table 5 reports "cluster variance" without spelling out the averaging; unweighted is our
    reading (weighted=True weighs clusters by size instead, which is K-Means' inertia / n)."""
    x = np.asarray(points, dtype=np.float64)
    lab = np.asarray(labels)
    if x.ndim != 2 or lab.shape != (len(x),) or not len(x):
        raise InputError(f"cluster_variance: need points [n, d] and labels [n] (got {x.shape}, {lab.shape})")
    _, inv, n = np.unique(lab, return_inverse=True, return_counts=True)
    mu = np.zeros((len(n), x.shape[1]))
    np.add.at(mu, inv, x)
    mu /= n[:, None]
    sq = np.bincount(inv, weights=((x - mu[inv]) ** 2).sum(axis=1), minlength=len(n))
    return float(sq.sum() / len(x)) if weighted else float(np.mean(sq / n))


# ----------------------------------------------------------------------------------------- llama.cpp

_ROPED = re.compile(r"^([KQ])cur-(\d+)$")   # llm_graph_context::cb names nodes "<name>-<il>"
_GGML_OP_ROPE = 48                          # enum ggml_op in the vendored ggml.h; checked at run time


def _check_rope_op():
    """Make sure the loaded ggml numbers GGML_OP_ROPE as we do (ggml_op_name(48) == "ROPE")."""
    from llama_cpp import _ggml                         # llama-cpp-python's handle on libggml
    name = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int)(("ggml_op_name", _ggml.libggml))
    got = name(_GGML_OP_ROPE)
    if got != b"ROPE":
        raise InputError(f"this ggml calls op {_GGML_OP_ROPE} {got!r}, not ROPE; kmemsim expects the "
                         "llama.cpp of llama-cpp-python 0.3.36")


def llama_keys(model_path, n_tokens, seed=0, *, tokens=None, threads=2):
    """Real llama.cpp key and query vectors after RoPE, for a random prompt of n_tokens ids (or the
    given `tokens`): (keys float32 [n_layer, n_head_kv, n_tokens, head_dim],
    queries float32 [n_layer, n_head, n_tokens, head_dim]).

    The model graph (e.g. llama: ggml_rope_ext on Qcur and Kcur, then cb(Kcur, "Kcur", il)) names
    three nodes "Kcur-<il>" per layer: the wk matmul, its 3-D reshape and the RoPE; we copy the one
    whose op is GGML_OP_ROPE (likewise "Qcur-<il>") through cb_eval, before build_attn writes K into
    the cache (as f16). One ubatch, flash attention off, CPU only. For models that normalise K after
    RoPE (Llama 4's use_kq_norm: "Kcur_normed") these are the keys before that norm."""
    llama_cpp = load_llama_cpp()
    if tokens is not None:
        tokens = [int(t) for t in tokens]
        if len(tokens) != int(n_tokens):
            raise InputError(f"llama_keys: {len(tokens)} tokens given for n_tokens = {n_tokens}")
    R = int(n_tokens)
    if R <= 0:
        raise InputError(f"n_tokens must be positive (got {n_tokens})")
    _check_rope_op()
    llama_cpp.llama_backend_init()
    quiet(llama_cpp)
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mp)
    if not model:
        raise InputError(f"{model_path}: llama.cpp could not load the model")
    got = {"K": {}, "Q": {}}
    errors = []

    def cb(t, ask, user):
        try:
            node = ctypes.cast(t, ctypes.POINTER(ggml_tensor)).contents
            m = _ROPED.match(node.name.decode(errors="replace"))
            if not m or node.op != _GGML_OP_ROPE:
                return not ask                          # ask: we need no other node; else carry on
            if ask:
                return True
            # ggml ne order [head_dim, n_head(_kv), n_tokens, 1]: numpy [heads, tokens, head_dim]
            if node.type != 0:                          # GGML_TYPE_F32
                raise InputError(f"{node.name.decode()}: expected f32, got ggml type {node.type}")
            ne, nb = list(node.ne), list(node.nb)
            if ne[2] != R or ne[3] != 1:
                raise InputError(f"{node.name.decode()}: unexpected shape ne={ne} for {R} tokens")
            size = sum((n - 1) * b for n, b in zip(ne, nb)) + 4
            buf = (ctypes.c_char * size).from_address(node.data)
            a = np.lib.stride_tricks.as_strided(np.frombuffer(buf, np.float32), (ne[1], ne[2], ne[0]),
                                                (nb[1], nb[2], nb[0]))
            got[m.group(1)][int(m.group(2))] = np.array(a)
            return True
        except Exception as e:                          # never raise through ctypes: stop the graph
            errors.append(e)
            return False

    cb_c = llama_cpp.ggml_backend_sched_eval_callback(cb)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = max(256, -(-R // 256) * 256)
    cp.n_batch = cp.n_ubatch = R                        # one ubatch: every token in one graph
    cp.n_seq_max = 1
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.cb_eval = cb_c
    cp.cb_eval_user_data = None
    lctx = llama_cpp.llama_init_from_model(model, cp)
    if not lctx:
        llama_cpp.llama_model_free(model)
        raise InputError(f"{model_path}: llama.cpp could not create a context for {R} tokens")
    try:
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        n_layer = llama_cpp.llama_model_n_layer(model)
        if tokens is None:
            tokens = [int(x) for x in random_token_ids(np.random.default_rng(seed), n_vocab, R)]
        elif not all(0 <= t < n_vocab for t in tokens):
            raise InputError(f"llama_keys: token ids must lie in [0, {n_vocab})")
        arr = (llama_cpp.llama_token * R)(*tokens)
        rc = llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, R))
        if errors:
            raise errors[0]
        if rc != 0:
            raise InputError(f"llama_decode failed with {rc}")
    finally:
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(model)
    for kind in ("K", "Q"):
        if sorted(got[kind]) != list(range(n_layer)):
            raise InputError(f"{model_path}: llama.cpp produced roped {kind}cur for layers {sorted(got[kind])} "
                             f"of {n_layer} (an architecture without RoPE, or other node names?)")
    return (np.stack([got["K"][il] for il in range(n_layer)]),
            np.stack([got["Q"][il] for il in range(n_layer)]))
