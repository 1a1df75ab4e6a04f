"""Chunk information density (LLMS, arXiv 2403.11805, Eq. 1): kmemsim.workload.llama.attention."""
import math

import numpy as np
import pytest

from kmemsim.core.errors import InputError
from kmemsim.workload import synth
from kmemsim.workload.llama import attention as at
from skips import needs_llama_cpp

SMALL = dict(n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_vocab=512)


def _eq1_loop(A, chunk):
    """LLMS Eq. 1 written out term by term (the slow reference): A [L, H, R, R]."""
    L, H, R, _ = A.shape
    col = []
    for c in range(R):
        per_lh = 0.0
        for l in range(L):
            per_h = 0.0
            for h in range(H):
                per_h += sum(A[l, h, r, c] for r in range(c, R)) / (R - c)
            per_lh += per_h / H
        col.append(per_lh / L)
    return [sum(col[p:p + chunk]) / len(col[p:p + chunk]) for p in range(0, R, chunk)]


def _causal_softmax(rng, shape):
    """softmax(mask(X)) with a causal mask, rows = queries (what llama.cpp's kq_soft_max holds)."""
    R = shape[-1]
    x = rng.normal(0, 2, shape)
    x = np.where(np.tril(np.ones((R, R), bool)), x, -np.inf)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_uniform_causal_by_hand():
    # uniform causal attention: row r gives 1/(r+1) to each column <= r. R = 4, Eq. 1 column terms:
    #   col 0: (1 + 1/2 + 1/3 + 1/4) / 4 = 25/48      col 1: (1/2 + 1/3 + 1/4) / 3 = 13/36
    #   col 2: (1/3 + 1/4) / 2 = 7/24                 col 3: (1/4) / 1 = 1/4
    # chunk = 2: D_0 = (25/48 + 13/36) / 2 = 127/288, D_1 = (7/24 + 1/4) / 2 = 13/48
    R = 4
    A = np.tril(np.ones((R, R))) / np.arange(1, R + 1)[:, None]
    A = np.broadcast_to(A, (3, 2, R, R))               # identical layers/heads: averaging changes nothing
    assert np.allclose(at.chunk_density(A, 2), [127 / 288, 13 / 48])
    # a short last chunk is averaged over its own columns (R = 4, chunk = 3: cols 0-2, then col 3 alone)
    assert np.allclose(at.chunk_density(A, 3), [(25 / 48 + 13 / 36 + 7 / 24) / 3, 1 / 4])


def test_matches_direct_loop_of_eq1():
    # the vectorised form against Eq. 1's sums written out, on random causal softmax attention
    rng = np.random.default_rng(7)
    A = _causal_softmax(rng, (3, 2, 11, 11))
    for chunk in (1, 4, 16):
        assert np.allclose(at.chunk_density(A, chunk), _eq1_loop(A, chunk))
    # layers are averaged after heads: with equal H per layer that is the mean over all (l, h)
    assert np.allclose(at.chunk_density(A, 4), at.chunk_density(A.reshape(6, 11, 11), 4))


def test_bad_input():
    with pytest.raises(InputError):
        at.chunk_density(np.zeros((2, 3, 4)), 2)       # not square
    with pytest.raises(InputError):
        at.chunk_density(np.zeros((4, 4)), 0)


def _synthetic_matrix(R, rng, sink=0.5, recency=1.0, noise=1.0, n_sink=4, tau=32.0):
    """synthetic_density's model written out as the dense R x R matrix of its docstring."""
    w = np.exp(noise * rng.standard_normal(R))
    r, c = np.meshgrid(np.arange(R), np.arange(R), indexing="ij")
    content = np.where(c <= r, w[c] * (1 + recency * np.exp(-(r - c) / tau)), 0.0)
    content /= content.sum(axis=1, keepdims=True)
    sinks = np.where((c < n_sink) & (c <= r), sink / np.minimum(n_sink, r + 1), 0.0)
    return sinks + (1 - sink) * content


def test_synthetic_density():
    rng = lambda: np.random.default_rng(3)
    d = at.synthetic_density(1000, 16, rng())
    assert len(d) == math.ceil(1000 / 16)
    # densities are averages of attention probabilities: positive
    assert (d > 0).all()
    # StreamingLLM's attention sinks sit in the first chunk, which gets the highest density
    assert d.argmax() == 0 and d[0] > 2 * d[1:].max()
    # deterministic given the Generator's seed (and the seed matters)
    assert np.array_equal(d, at.synthetic_density(1000, 16, rng()))
    assert not np.array_equal(d, at.synthetic_density(1000, 16, np.random.default_rng(4)))
    # the O(R * tau) closed form equals Eq. 1 over the dense matrix its docstring defines (rows sum
    # to 1); short tau and several settings so the truncated recency kernel and the sinks are exercised
    for kw in (dict(), dict(tau=3.0, recency=5.0), dict(sink=0.0, noise=0.0), dict(n_sink=1, sink=0.9)):
        M = _synthetic_matrix(50, rng(), **kw)
        assert np.allclose(M.sum(axis=1), 1)
        assert np.allclose(at.synthetic_density(50, 16, rng(), **kw), at.chunk_density(M, 16))
    with pytest.raises(InputError):
        at.synthetic_density(10, 4, rng(), sink=1.5)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    needs_llama_cpp()
    return synth.write_model(tmp_path_factory.mktemp("m") / "m.gguf", type="q8_0", progress=False, **SMALL)


@pytest.mark.llama
def test_llama_density(model):
    n, chunk = 70, 16
    A = at.llama_scores(model, n)
    # one [H, R, R] matrix per layer (SMALL: 2 layers, 4 query heads; GQA's 2 KV heads are broadcast)
    assert A.shape == (2, 4, n, n)
    # kq_soft_max is softmax over each query row: rows sum to 1 (f32 rounding) ...
    assert np.allclose(A.sum(axis=-1), 1, atol=1e-5)
    # ... and the causal mask zeroes every key after the query (llm_graph_input_attn_kv's kq_mask)
    assert (np.triu(A, 1) == 0).all() and (A >= 0).all()
    d = at.llama_density(model, n, chunk)
    assert len(d) == math.ceil(n / chunk)
    assert np.isfinite(d).all() and (d > 0).all()
    # llama_density reduces layer by layer; the same as Eq. 1 over the captured stack
    assert np.allclose(d, at.chunk_density(A, chunk))


def test_llama_missing_is_input_error(monkeypatch):
    # without llama-cpp-python: the one-line InputError the CLI prints (not an ImportError traceback)
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)
    with pytest.raises(InputError, match="llama-cpp-python is not installed") as e:
        at.llama_density("m.gguf", 8, 4)
    assert "\n" not in str(e.value)
