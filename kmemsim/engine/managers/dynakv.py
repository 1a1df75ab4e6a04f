"""DynaKV (Wang, Huang, Li, Chen, Zhang, Ren; arXiv 2511.07427; ../shared/reference/seed-systems.md §3):
a long context's KV on flash, retrieved per decoding step by clusters of keys, against PQCache,
ClusterKV and token-level retrieval.

One attention head's KV entries (K and V of one token, FP8: 2 x head_dim bytes) live on flash; the
keys are clustered by K-Means at prefill and each cluster's centroid kept in DRAM. Each decoding step
appends the new token's entry and retrieves, for the step's query, the k clusters whose centroids
score highest (q . centroid), reading their entries that are not in the DRAM cache. What the systems
differ in, and what this module models of each:
- `no-cluster`: the k x cluster_size tokens with the highest q . k, exactly (as many as k clusters
  hold at prefill); entries in sequence order on flash (the upper bound on accuracy; reads scatter).
- `pqcache`: static update (§2.3): a new entry joins its nearest cluster, which never splits (its
  variance grows); new entries are written at the end of flash in decoding order.
- `clusterkv`: local update: a cluster whose variance passes the threshold is split in two where it
  lies (its entries stay in place, interleaved: the sub-clusters fragment); new entries at the end.
- `dynakv`: migration-free adaptation (§4, Algorithm 1): a new entry joins its nearest cluster if
  the variance stays within the head's threshold; otherwise the cluster is split at once if it was
  just retrieved (it is in DRAM), else the entry waits in the cluster's buffer (delayed split, up to
  `buffer` entries in all; full, the cluster with the most buffered is loaded and split). Continuity-
  centric layout (§5): each cluster contiguous in a pool with room to grow (dual-head pools: twice the
  largest cluster for a pair), pools ordered by co-retrieval (Eq. 8, from the prefill's queries), new
  entries collected in page-aligned write buffers; a split writes both halves whole into fresh pools.
  Cluster-aligned cache (§6): small clusters kept before large ones, recently updated ones kept.
A read is a run of entries contiguous on flash, issued as whole 4 KiB pages (O_DIRECT); its time is
the device's flash model at that size and the step's queue depth (Device.flash_throughput).
Accuracy is not modelled.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...core.errors import InputError
from ...core.units import PAGE_SIZE

SYSTEMS = ("dynakv", "no-cluster", "pqcache", "clusterkv")
QUEUE_DEPTH = 32               # io_uring reads in flight (UFS 4.0's command queue, §2.2)


@dataclass
class Params:
    budget: float = 0.2        # tokens retrieved per step, a fraction of the context [assumption: the
                               # paper gives none; PQCache (Zhang et al., SIGMOD 2025) retrieves 1/5]
    k: int = 8                 # clusters retrieved per step when budget is 0 [assumption]
    cluster_size: int = 32     # prefill entries per K-Means cluster [assumption]
    cache_entries: int = 512   # DRAM cache per head, entries [assumption]
    buffer: int = 16           # delayed-split buffer, entries (§8.3: up to 16)
    tau: float = 1.5           # variance threshold: tau x the prefill clusters' mean variance [assumption]
    entry_bytes: int = 256     # K + V of one token for one KV head: 2 x head_dim (128) x FP8

    def check(self, n_clusters):
        if not 0 <= self.budget <= 1:
            raise InputError(f"budget={self.budget}: a fraction of the context, 0..1 (0: a fixed k clusters)")
        if not self.budget and (self.k < 1 or self.k > n_clusters):
            raise InputError(f"k={self.k}: retrieve between 1 and the {n_clusters} clusters the prefill makes "
                             f"(prefill tokens / cluster_size {self.cluster_size})")
        if self.buffer < 1:
            raise InputError(f"buffer={self.buffer}: the delayed-split buffer holds at least 1 entry (DynaKV: 16)")
        if self.cluster_size < 2 or self.cache_entries < 0 or self.tau <= 0:
            raise InputError("cluster_size >= 2, cache_entries >= 0 and tau > 0")


@dataclass
class Step:
    """One decoding step of one head: the reads (runs of contiguous entries) and the data moved."""
    runs: np.ndarray            # entries per read
    retrieved: int              # entries the step needed
    written: int                # entries written to flash (appends, splits, relocations)
    hits: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))   # entries served from DRAM
    joined: int = -1            # the cluster the step's new entry joined
    forced: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # runs read only to split
    clusters: int = 0           # clusters after the step (their centroids: the representatives)
    chosen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the clusters retrieved


def runs_of(addresses) -> np.ndarray:
    """Lengths of the runs of consecutive addresses in a set of flash addresses (entry units)."""
    a = np.sort(np.asarray(addresses, np.int64))
    if len(a) == 0:
        return np.zeros(0, np.int64)
    a = a[np.r_[True, np.diff(a) != 0]]     # the same address twice is one entry
    cut = np.flatnonzero(np.diff(a) != 1) + 1
    return np.diff(np.r_[0, cut, len(a)])


def io_seconds(dev, runs, entry_bytes, in_flight=None) -> float:
    """The reads of one step on the device's flash: each run issued as whole pages, up to QUEUE_DEPTH
    in flight together; a read of S bytes among q in flight takes S / flash_throughput(S, q) of the
    flash's time (flash_throughput is the rate of q such reads together). in_flight: the reads issued
    together, when `runs` are a sample of them (a layer's KV heads all read at once through io_uring,
    §7); default len(runs)."""
    if len(runs) == 0:
        return 0.0
    size = np.ceil(np.asarray(runs) * entry_bytes / PAGE_SIZE) * PAGE_SIZE
    q = min(QUEUE_DEPTH, max(1, in_flight if in_flight is not None else len(runs)))
    return float(np.sum(size / dev.flash_throughput(size, q)))


def step_seconds(dev, layer_compute, kv_io_s, rep_io_s, n_layer) -> float:
    """One decoding step's time on the pipeline time model (engine/time/pipeline.py), DynaKV's
    two pipelines (§6): per layer, on the CPU: Q projection, KV projection, attention (after the
    layer's retrieved KV has arrived) with the output projection, FFN; on the loader thread's flash
    stream: the layer's representatives (centroids, on flash) read from the previous layer's FFN on
    (prefetched, so they are there for the Q projection), then the retrieved KV once the query is
    known (after Q projection and the representatives), overlapped with KV projection.
    layer_compute: seconds of (q_proj, kv_proj, attention, ffn); kv_io_s, rep_io_s: the layer's flash
    time alone.

    The layers are alike, and from the second on each starts as the one before it did, at its
    predecessor's attention and FFN: the schedule is periodic after the first layer. So three layers
    are run and the rest added at the third's period (tests/test_dynakv.py checks it against the
    whole pipeline)."""
    if n_layer <= 3:
        return layer_pipeline(dev, layer_compute, kv_io_s, rep_io_s, n_layer)
    t2, t3 = (layer_pipeline(dev, layer_compute, kv_io_s, rep_io_s, n) for n in (2, 3))
    return t3 + (n_layer - 3) * (t3 - t2)


def layer_pipeline(dev, layer_compute, kv_io_s, rep_io_s, n_layer) -> float:
    """step_seconds' pipeline, every layer built and run."""
    # here: the pipeline model is only needed when a step is timed, not to simulate heads
    from ..time.pipeline import Pipeline
    p = Pipeline(dev)
    cpu = p.stream("cpu", p.cores("cpu", 1))
    io = p.stream("loader", p.flash())
    q_s, kv_s, att_s, ffn_s = layer_compute
    prev = None
    for layer in range(n_layer):
        rep = io.work(f"rep{layer}", rep_io_s, after=[prev] if prev else [])
        q = cpu.work(f"q{layer}", q_s)
        kv = io.work(f"kv{layer}", kv_io_s, after=[q, rep])
        cpu.work(f"kvproj{layer}", kv_s)
        att = cpu.work(f"att{layer}", att_s, after=[kv])
        prev = att
        cpu.work(f"ffn{layer}", ffn_s)
    return p.run().makespan


class Head:
    """One head's entries, clusters, flash layout and cache as one system keeps them."""
    name = ""

    def __init__(self, keys, queries, n_prefill, p: Params, kmeans, rng):
        self.K, self.Q, self.p, self.rng = np.asarray(keys, np.float32), np.asarray(queries, np.float32), p, rng
        self.n = int(n_prefill)
        n_cl = max(1, self.n // p.cluster_size)
        p.check(n_cl)
        self.kmeans = kmeans
        T = len(self.K)
        self.label = np.full(T, -1, np.int64)
        lab, cen = kmeans(self.K[:self.n], n_cl, rng)
        self.label[:self.n] = lab
        self.cen = np.asarray(cen, np.float64)
        self.count = np.bincount(lab, minlength=n_cl).astype(np.int64)
        self.sum = np.zeros_like(self.cen)
        np.add.at(self.sum, lab, self.K[:self.n])
        self.sq = np.bincount(lab, weights=(self.K[:self.n].astype(np.float64) ** 2).sum(1), minlength=n_cl)
        var = self.variance()
        self.tau = p.tau * float(var[self.count > 1].mean()) if (self.count > 1).any() else np.inf
        self.addr = np.full(T, -1, np.int64)   # flash address of each entry (entry units)
        self.tail = 0
        self.cache = {}                         # cluster -> last use step (entries of those clusters in DRAM)
        self.updated = {}                       # cluster -> step it last grew
        self.layout()

    # cluster statistics ------------------------------------------------------------------------
    def variance(self):
        c = np.maximum(self.count, 1)
        return self.sq / c - (self.sum ** 2).sum(1) / (c * c)

    def _add(self, j, t):
        x = self.K[t].astype(np.float64)
        self.count[j] += 1
        self.sum[j] += x
        self.sq[j] += float(x @ x)
        self.cen[j] = self.sum[j] / self.count[j]
        self.label[t] = j

    def _var_with(self, j, t):
        x = self.K[t].astype(np.float64)
        c = self.count[j] + 1
        s = self.sum[j] + x
        return (self.sq[j] + float(x @ x)) / c - float(s @ s) / (c * c)

    def _new_cluster(self, members):
        j = len(self.count)
        self.cen = np.vstack([self.cen, self.K[members].mean(0)])
        self.sum = np.vstack([self.sum, self.K[members].astype(np.float64).sum(0)])
        self.sq = np.r_[self.sq, (self.K[members].astype(np.float64) ** 2).sum()]
        self.count = np.r_[self.count, len(members)]
        self.label[members] = j
        return j

    def _recount(self, j):
        m = np.flatnonzero(self.label == j)
        self.count[j] = len(m)
        self.sum[j] = self.K[m].astype(np.float64).sum(0)
        self.sq[j] = float((self.K[m].astype(np.float64) ** 2).sum())
        self.cen[j] = self.sum[j] / max(1, len(m))

    def split(self, j):
        """K-Means in two over cluster j's entries: j keeps one half, a new cluster takes the other.
        Returns the new cluster's id (None if j cannot split)."""
        m = np.flatnonzero(self.label == j)
        if len(m) < 4:
            return None
        lab, _ = self.kmeans(self.K[m], 2, self.rng)
        if lab.min() == lab.max():
            return None
        b = self._new_cluster(m[lab == 1])
        self._recount(j)
        return b

    # what differs between systems ---------------------------------------------------------------
    def layout(self):
        """Flash addresses of the prefill's entries: clusters contiguous, in cluster order."""
        order = np.argsort(self.label[:self.n], kind="stable")
        self.addr[order] = np.arange(self.n)
        self.tail = self.n

    def append(self, t) -> int:
        """Step t's new entry joins the clusters (returns entries written to flash)."""
        j = self.joined = int(np.argmin(((self.cen - self.K[t]) ** 2).sum(1)))
        self._add(j, t)
        self.addr[t] = self.tail
        self.tail += 1
        return 1

    def tokens(self, t) -> int:
        """Tokens step t retrieves: the budget's share of the t + 1 in the context."""
        return int(np.ceil(self.p.budget * (t + 1))) if self.p.budget else self.p.k * self.p.cluster_size

    def select(self, t) -> np.ndarray:
        """The entries step t retrieves: clusters in order of q . centroid until they hold the budget's
        tokens (ClusterKV's and PQCache's selection; with budget 0, the k best clusters)."""
        order = np.argsort(-(self.cen @ self.Q[t - self.n]))
        if self.p.budget:
            top = order[:int(np.searchsorted(np.cumsum(self.count[order]), self.tokens(t))) + 1]
        else:
            top = order[:self.p.k]
        self.chosen = top
        return np.flatnonzero(self.of_clusters(top)[self.label[:t + 1]])

    def of_clusters(self, clusters) -> np.ndarray:
        """A mask over cluster ids: True for `clusters`."""
        m = np.zeros(len(self.count), bool)
        m[np.asarray(clusters, np.int64)] = True
        return m

    def cached(self, entries) -> np.ndarray:
        """Which of the entries are in DRAM."""
        if not self.cache:
            return np.zeros(len(entries), bool)
        return self.of_clusters(list(self.cache))[self.label[entries]]

    def admit(self, t):
        """After step t's reads: its clusters enter the cache; the cache is cut back to its size,
        least recently used clusters first."""
        for j in self.chosen:
            self.cache[int(j)] = t
        self.trim(t)

    def trim(self, t):
        size = {j: int(self.count[j]) for j in self.cache}
        total = sum(size.values())
        while self.cache and total > self.p.cache_entries:
            j = min(self.cache, key=lambda c: self.cache[c])
            total -= size.pop(j)
            del self.cache[j]

    def step(self, t) -> Step:
        written = self.append(t)
        need = self.select(t)
        hit = self.cached(need)
        miss = need[~hit]
        runs = runs_of(self.addr[miss])
        self.admit(t)
        return Step(runs, len(need), written, need[hit], self.joined, chosen=np.array(self.chosen),
                    clusters=len(self.count))


class NoCluster(Head):
    """Token-level top-k: the same number of entries as k clusters hold on average, chosen exactly."""
    name = "no-cluster"

    def layout(self):
        self.addr[:self.n] = np.arange(self.n)
        self.tail = self.n

    def select(self, t):
        budget = self.tokens(t)                 # as many tokens as the clusters would bring
        score = self.K[:t + 1] @ self.Q[t - self.n]
        sel = np.argpartition(-score, min(budget, t) )[:budget] if budget < t + 1 else np.arange(t + 1)
        self.chosen = np.zeros(0, np.int64)
        self.sel = sel
        return np.sort(sel)

    def cached(self, entries):
        return np.isin(entries, self.cache_tokens) if hasattr(self, "cache_tokens") else np.zeros(len(entries), bool)

    def admit(self, t):
        cache = np.r_[getattr(self, "cache_tokens", np.zeros(0, np.int64)), self.sel]
        self.cache_tokens = np.unique(cache)[-self.p.cache_entries:] if self.p.cache_entries else np.zeros(0, np.int64)


class PQCache(Head):
    name = "pqcache"


class ClusterKV(Head):
    """Local update: split in place when the variance passes the threshold."""
    name = "clusterkv"

    def append(self, t):
        j = self.joined = int(np.argmin(((self.cen - self.K[t]) ** 2).sum(1)))
        over = self._var_with(j, t) > self.tau
        self._add(j, t)
        self.addr[t] = self.tail
        self.tail += 1
        if over:
            self.split(j)                       # entries stay where they are: the halves interleave
        return 1


class DynaKV(Head):
    name = "dynakv"
    inter = True               # pools ordered by co-retrieval (else by cluster number)

    def layout(self):
        """Pools in co-retrieval order (Eq. 8): the prefill's own queries' top-k sets give how often two
        clusters are retrieved together; a greedy chain places the most co-retrieved next to each
        other. Each cluster gets a pool twice its size (dual-head: two clusters share a pool of twice
        the larger, growing inward; here each keeps its own half)."""
        n_cl = len(self.count)
        if not self.inter:                          # intra-cluster placement alone (Fig 12's middle bar)
            return self._pools(list(range(n_cl)))
        sets = np.argsort(-(self.K[:self.n] @ self.cen.T), axis=1)[:, :self.p.k]   # the prefill's queries ~ its keys
        f = np.zeros((n_cl, n_cl))
        for s in sets.T:
            for r in sets.T:
                np.add.at(f, (s, r), 1)
        np.fill_diagonal(f, 0)
        order, left = [int(np.argmax(self.count))], set(range(n_cl)) - {int(np.argmax(self.count))}
        while left:
            nxt = max(left, key=lambda c: (f[order[-1], c], -c))
            order.append(nxt)
            left.discard(nxt)
        self._pools(order)

    def _pools(self, order):
        n_cl = len(self.count)
        self.pool_base, self.pool_cap = np.zeros(n_cl, np.int64), np.zeros(n_cl, np.int64)
        base = 0
        for j in order:
            m = np.flatnonzero(self.label[:self.n] == j)
            self.pool_base[j], self.pool_cap[j] = base, 2 * max(len(m), 1)
            self.addr[m] = base + np.arange(len(m))
            base += self.pool_cap[j]
        self.used = np.bincount(self.label[:self.n], minlength=n_cl).astype(np.int64)
        self.tail = base
        self.buf = {}                               # cluster -> entries waiting (delayed split)
        self.crossings = [0, 0]                     # threshold crossings: cluster not in DRAM, in DRAM
        self.wbuf = {}                              # cluster -> entries in its page-aligned write buffer

    def _place(self, j, entries) -> int:
        """Write entries into cluster j's pool (a new pool twice the cluster if full: the cluster moves
        whole). Returns entries written."""
        entries = np.asarray(entries, np.int64)
        if len(self.pool_base) <= j:
            grow = j + 1 - len(self.pool_base)
            self.pool_base = np.r_[self.pool_base, np.zeros(grow, np.int64)]
            self.pool_cap = np.r_[self.pool_cap, np.zeros(grow, np.int64)]
            self.used = np.r_[self.used, np.zeros(grow, np.int64)]
        written = len(entries)
        if self.used[j] + len(entries) > self.pool_cap[j]:
            members = np.flatnonzero((self.label == j) & (self.addr >= 0))
            members = members[~np.isin(members, entries)]
            self.pool_base[j], self.pool_cap[j] = self.tail, 2 * (len(members) + len(entries))
            self.tail += self.pool_cap[j]
            self.addr[members] = self.pool_base[j] + np.arange(len(members))
            self.used[j] = len(members)
            written += len(members)
        self.addr[entries] = self.pool_base[j] + self.used[j] + np.arange(len(entries))
        self.used[j] += len(entries)
        return written

    def _split_now(self, j) -> int:
        """Split cluster j (it is in DRAM) and write both halves whole into fresh pools."""
        b = self.split(j)
        if b is None:
            return 0
        written = 0
        for c in (j, b):
            m = np.flatnonzero((self.label == c) & (self.addr >= 0))
            if len(self.pool_base) <= c:
                self._place(c, np.zeros(0, np.int64))
            self.pool_base[c], self.pool_cap[c], self.used[c] = self.tail, 2 * max(len(m), 1), 0
            self.tail += self.pool_cap[c]
            self.addr[m] = -1
            written += self._place(c, m)
        return written

    def append(self, t):
        j = self.joined = int(np.argmin(((self.cen - self.K[t]) ** 2).sum(1)))
        over = self._var_with(j, t) > self.tau
        self._add(j, t)
        self.updated[j] = t
        written = 0
        # page-aligned write buffer: the entry waits in DRAM until its cluster's page fills
        w = self.wbuf.setdefault(j, [])
        w.append(t)
        per_page = max(1, PAGE_SIZE // self.p.entry_bytes)
        if len(w) >= per_page:
            written += self._place(j, w)
            self.wbuf[j] = []
        if over:
            self.crossings[j in self.cache] += 1
            if j in self.cache:                  # loaded: split now, in DRAM
                written += self._flush(j) + self._split_now(j)
            else:                                # delayed split: buffer until it is next retrieved
                self.buf.setdefault(j, []).append(t)
                if sum(len(v) for v in self.buf.values()) >= self.p.buffer:
                    big = max(self.buf, key=lambda c: len(self.buf[c]))
                    self.forced = np.flatnonzero((self.label == big) & (self.addr >= 0))
                    written += self._flush(big) + self._split_now(big)
                    self.buf.pop(big, None)
        return written

    def _flush(self, j) -> int:
        w = self.wbuf.pop(j, [])
        return self._place(j, w) if w else 0

    def cached(self, entries):
        waiting = np.zeros(len(self.K), bool)     # in a write buffer
        waiting[[e for v in self.wbuf.values() for e in v]] = True
        waiting = waiting[entries]
        pending = self.addr[entries] < 0
        return super().cached(entries) | waiting | pending

    def step(self, t):
        self.forced = np.zeros(0, np.int64)
        written = self.append(t)
        need = self.select(t)
        hit = self.cached(need)
        miss = need[~hit]
        runs = runs_of(np.r_[self.addr[miss], self.addr[self.forced]])
        forced = runs_of(self.addr[self.forced[~np.isin(self.forced, need, assume_unique=True)]])
        for j in self.chosen:                    # retrieved clusters split now if they were waiting
            if int(j) in self.buf:
                written += self._flush(int(j)) + self._split_now(int(j))
                self.buf.pop(int(j), None)
        self.admit(t)
        return Step(runs, len(need), written, need[hit], self.joined, forced=forced,
                    chosen=np.array(self.chosen), clusters=len(self.count))

    def trim(self, t):
        """Cluster-aligned replacement (§6): recently updated clusters kept (Principle 2), then the
        largest clusters go first, small ones stay (Principle 1: large ones read sequentially)."""
        size = {j: int(self.count[j]) for j in self.cache}
        recent = {j for j in self.cache if t - self.updated.get(j, -10**9) <= 4}
        total = sum(size.values())
        while self.cache and total > self.p.cache_entries:
            cand = [j for j in self.cache if j not in recent] or list(self.cache)
            j = max(cand, key=lambda c: (size[c], -self.cache[c]))
            total -= size.pop(j)
            del self.cache[j]


class DynaKVIntra(DynaKV):
    """DynaKV with intra-cluster placement alone: pools in cluster order, not by co-retrieval."""
    name = "dynakv-intra"
    inter = False


class DynaKVSequence(DynaKV):
    """DynaKV's clusters read from entries in sequence order (Fig 12's first bar): no pools, each
    entry where its token falls; splits and appends move nothing."""
    name = "dynakv-seq"

    def layout(self):
        NoCluster.layout(self)
        self.buf, self.wbuf, self.crossings = {}, {}, [0, 0]

    def _place(self, j, entries) -> int:
        return len(entries)                     # already at their token's address

    def _split_now(self, j) -> int:
        self.split(j)
        return 0

    def append(self, t):
        self.addr[t] = t
        self.tail = t + 1
        return super().append(t)


HEADS = {c.name: c for c in (DynaKV, NoCluster, PQCache, ClusterKV, DynaKVIntra, DynaKVSequence)}


def retrieved_within(steps, horizons=(1, 2, 4, 8, 16)) -> dict:
    """Table 2's statistic: the probability that the cluster a step's entry joined is retrieved within
    t steps after (cluster ids as they stand; a split's new half counts as another cluster)."""
    out = {}
    for h in horizons:
        hit = [any(steps[s].joined in steps[u].chosen for u in range(s + 1, s + 1 + h))
               for s in range(len(steps) - h)]
        out[h] = float(np.mean(hit)) if hit else float("nan")
    return out


def simulate(system, keys, queries, n_prefill, p: Params, kmeans, rng, heads=None) -> list[Step]:
    """Every decoding step of one head under one system (the Head is appended to `heads`, a list,
    for its end state: clusters, crossings)."""
    if system not in HEADS:
        raise InputError(f"unknown system {system!r}; known: {', '.join(HEADS)}")
    h = HEADS[system](keys, queries, n_prefill, p, kmeans, rng)
    if heads is not None:
        heads.append(h)
    return [h.step(t) for t in range(n_prefill, len(keys))]
