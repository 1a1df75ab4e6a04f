"""Key/query vectors for cluster-based KV retrieval (DynaKV, arXiv 2511.07427):
kmemsim.workload.llama.keys."""
import numpy as np
import pytest

from kmemsim.core.errors import InputError
from kmemsim.workload import synth
from kmemsim.workload.llama import keys as K
from skips import needs_llama_cpp

SMALL = dict(n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_vocab=512)   # head_dim 64


def _msd(x, centroids):
    """Mean squared Euclidean distance of each row of x to its nearest centroid (K-Means' own cost)."""
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ centroids.T + (centroids ** 2).sum(1)[None]
    return float(np.maximum(d2.min(axis=1), 0).mean())


def test_synthetic_shapes_and_seed():
    # the layout DynaKV clusters (per head: tokens x head_dim), float32 like llama.cpp's f32 K/Q, and
    # reproducible from the Generator's seed (a simulation must be repeatable), while the seed matters
    k, q = K.synthetic_keys(100, 50, 32, 3, np.random.default_rng(5))
    assert k.shape == (3, 150, 32) and q.shape == (3, 50, 32)
    assert k.dtype == np.float32 and q.dtype == np.float32
    assert np.isfinite(k).all() and np.isfinite(q).all()
    k2, q2 = K.synthetic_keys(100, 50, 32, 3, np.random.default_rng(5))
    assert np.array_equal(k, k2) and np.array_equal(q, q2)
    k3, _ = K.synthetic_keys(100, 50, 32, 3, np.random.default_rng(6))
    assert not np.array_equal(k, k3)
    # heads are independent draws, not copies
    assert not np.allclose(k[0], k[1])
    # prefill only: no queries (one per decoding step)
    k, q = K.synthetic_keys(10, 0, 8, 1, np.random.default_rng(0))
    assert k.shape == (1, 10, 8) and q.shape == (1, 0, 8)
    with pytest.raises(InputError):
        K.synthetic_keys(10, 10, 8, 1, np.random.default_rng(0), drift=-1)


P, D, HD, k_clusters = 2048, 8192, 64, 16


def _shift(rng_seed, **kw):
    """K-Means (k=16) on each head's prefill keys; the mean squared distance to the nearest prefill
    centroid for the prefill keys, the first 1024 decoded keys and the last 1024, averaged over 2 heads."""
    keys, _ = K.synthetic_keys(P, D, HD, 2, np.random.default_rng(rng_seed), **kw)
    out = []
    for h in range(2):
        _, c = K.kmeans(keys[h, :P], k_clusters, np.random.default_rng(0))
        out.append([_msd(keys[h, a:b], c) for a, b in ((0, P), (P, P + 1024), (P + D - 1024, P + D))])
    return np.mean(out, axis=0)


def test_drift_shifts_the_key_distribution():
    # DynaKV §2.3: clusters formed at prefill stop fitting the keys of a long decode. Measured the way
    # a cluster index feels it: the K-Means fit of the prefill explains late decoded keys worse.
    # Within a mode the expected cost is spread^2 * head_dim = 0.25 * 64 = 16.
    pre, early, late = _shift(1)                                    # defaults: drift 0.02, births 1/512
    assert 14 < pre < 20
    assert early > 1.3 * pre and late > 5 * pre and late > 2 * early
    # new modes alone (frozen centres) also make the prefill fit worse, less so
    pre_b, _, late_b = _shift(1, drift=0.0)
    assert late_b > 1.5 * pre_b and late_b < late
    # neither drift nor new modes: decoded keys come from the prefill's own mixture, and the fit holds
    # (within noise: the prefill cost is in-sample, hence a little optimistic; 10% allows for that).
    # Tokens drawn one by one (segment=1): in 16-token segments a window of 1024 holds only ~64 draws
    # of the mode, and its mix of modes differs from the prefill's by more than that noise.
    pre0, early0, late0 = _shift(1, drift=0.0, birth_rate=0.0, segment=1)
    assert late0 < 1.1 * pre0 and early0 < 1.1 * pre0 and abs(late0 - early0) < 0.05 * pre0


def test_queries_follow_recent_keys():
    # queries are drawn near the modes of recent keys (the top-k clusters a query selects are the
    # ones the decode is currently writing): under drift, late queries sit much closer to a K-Means
    # fit of the last 1024 keys than to the prefill's, and as close as those keys themselves are
    keys, q = K.synthetic_keys(P, D, HD, 1, np.random.default_rng(2))
    _, c_pre = K.kmeans(keys[0, :P], k_clusters, np.random.default_rng(0))
    _, c_rec = K.kmeans(keys[0, -1024:], k_clusters, np.random.default_rng(0))
    late_q = q[0, -256:]
    assert _msd(late_q, c_rec) < 0.5 * _msd(late_q, c_pre)
    assert _msd(late_q, c_rec) < 1.5 * _msd(keys[0, -256:], c_rec)


def test_cluster_variance_by_hand():
    # labels 7: (0,0), (2,0): mean (1,0), squared distances 1, 1 -> sigma^2 = 1
    # labels 2: (0,0), (0,3), (0,6): mean (0,3), squared distances 9, 0, 9 -> sigma^2 = 6
    # label 5: a single point -> sigma^2 = 0
    # mean over clusters (Table 5's "cluster variance"): (1 + 6 + 0) / 3; size-weighted: (2 + 18 + 0) / 6
    pts = np.array([[0, 0], [0, 0], [2, 0], [0, 3], [0, 6], [9, 9]], float)
    lab = np.array([7, 2, 7, 2, 2, 5])
    assert K.cluster_variance(pts, lab) == pytest.approx(7 / 3)
    assert K.cluster_variance(pts, lab, weighted=True) == pytest.approx(20 / 6)
    # squared distances are summed over dimensions (the ||k - r||^2 of DynaKV's variance update):
    # the same points in 3-D with a constant third coordinate change nothing
    assert K.cluster_variance(np.c_[pts, np.full(6, 4.0)], lab) == pytest.approx(7 / 3)
    with pytest.raises(InputError):
        K.cluster_variance(pts, lab[:3])


def test_kmeans():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 0.1, (50, 4)), rng.normal(5, 0.1, (50, 4))])
    lab, c = K.kmeans(x, 3, np.random.default_rng(0))
    # one label per point, each a row of the centroid table
    assert lab.shape == (100,) and c.shape == (3, 4)
    assert lab.min() >= 0 and lab.max() < 3
    # deterministic given rng (random_state drawn from it)
    lab2, c2 = K.kmeans(x, 3, np.random.default_rng(0))
    assert np.array_equal(lab, lab2) and np.array_equal(c, c2)
    # two well-separated blobs with k = 2 are found exactly
    lab, _ = K.kmeans(x, 2, np.random.default_rng(0))
    assert len(set(lab[:50])) == 1 and len(set(lab[50:])) == 1 and lab[0] != lab[50]
    # more clusters than points is bad input: a one-line InputError, not scikit-learn's ValueError
    with pytest.raises(InputError, match="k = 101 clusters for 100 points") as e:
        K.kmeans(x, 101, np.random.default_rng(0))
    assert "\n" not in str(e.value)
    with pytest.raises(InputError):
        K.kmeans(x, 0, np.random.default_rng(0))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    needs_llama_cpp()
    return synth.write_model(tmp_path_factory.mktemp("m") / "m.gguf", type="q8_0", progress=False, **SMALL)


def _rope(x0, positions, base):
    """llama's RoPE (LLAMA_ROPE_TYPE_NORM: adjacent pairs (2i, 2i+1) rotated by p * base^(-2i/d)) of
    the unrotated vectors x0 [..., d] at each position: [..., len(positions), d]."""
    d = x0.shape[-1]
    ang = np.asarray(positions)[:, None] * base ** (-np.arange(0, d, 2) / d)
    x, y = x0[..., None, 0::2], x0[..., None, 1::2]
    out = np.empty(x0.shape[:-1] + (len(positions), d))
    out[..., 0::2] = x * np.cos(ang) - y * np.sin(ang)
    out[..., 1::2] = x * np.sin(ang) + y * np.cos(ang)
    return out


@pytest.mark.llama
def test_llama_keys(model):
    from gguf import GGUFReader
    n = 48
    k, q = K.llama_keys(model, n)
    # keys per KV head (GQA: 2), queries per query head (4); head_dim = 256 / 4
    assert k.shape == (2, 2, n, 64) and q.shape == (2, 4, n, 64)
    assert k.dtype == np.float32 and np.isfinite(k).all() and np.isfinite(q).all()
    assert np.abs(k).max() > 0
    # RoPE applied, and exactly what we captured: with one token repeated at every position, layer 0's
    # pre-RoPE K and Q (wk / wq times the normed embedding) are the same vector at every position, so
    # the roped ones are the position-0 vector (angle 0: unrotated) rotated by p * theta_i. A capture
    # of the matmul or reshape node (also named Kcur-0) would be constant over positions instead.
    k, q = K.llama_keys(model, n, tokens=[300] * n)
    base = float(GGUFReader(model).fields["llama.rope.freq_base"].contents())
    for x in (k[0], q[0]):
        assert not np.allclose(x[:, 1], x[:, 0])                        # positions differ
        assert np.allclose(x, _rope(x[:, 0], np.arange(n), base), atol=1e-4)
    # same seed, same prompt, same vectors
    assert np.array_equal(K.llama_keys(model, n)[0], K.llama_keys(model, n)[0])
    with pytest.raises(InputError):
        K.llama_keys(model, 4, tokens=[1, 2, 3])


def test_llama_missing_is_input_error(monkeypatch):
    # without llama-cpp-python: the one-line InputError the CLI prints (not an ImportError traceback)
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)
    with pytest.raises(InputError, match="llama-cpp-python is not installed") as e:
        K.llama_keys("m.gguf", 8)
    assert "\n" not in str(e.value)
