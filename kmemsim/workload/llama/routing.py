"""Which experts an MoE layer routes a ubatch's tokens to (mul_mat_id reads only their slices).

A routing spec (`--moe-routing`) is one of
  uniform | zipf | zipf:S            every token drawn independently (S: skew, expert popularity 1/rank^S)
  ...,stick=P,corr=C                 with temporal locality and correlation between layers (below)
  recorded:PATH                      the routing real llama.cpp chose (`kmemsim trace llama --routing-out`)

What real routers do, and the defaults the MoE experiment uses (ROUTING_DEFAULTS):
- skew: Mixtral's experts are used evenly over a whole corpus but unevenly within a domain (Jiang et
  al., "Mixtral of Experts", arXiv:2401.04088, §5 Fig 7); per-request activation is long-tailed
  (MoE-Infinity, Xue et al. 2024, §3). The experiment sweeps S.
- stick: consecutive tokens are assigned the same expert more often than chance: Mixtral's layer 15
  repeats its first choice for 27.9% of consecutive tokens on ArXiv text against 12.5% at random
  (arXiv:2401.04088, Table 5). A row reused with probability P gives P + (1 - P)/8 repeats;
  P = 0.15 gives Mixtral's 0.26.
- corr: a token's experts in one layer predict its experts in the next (speculative prefetch from the
  previous layer's hidden state works: Eliseev & Mazur, arXiv:2312.17238, §3.2; expert paths cluster
  across layers: arXiv:2604.17837 §4). No paper gives one number for it; C = 0.3 is our choice, and
  replaying a recorded routing is the way to use a model's own.
"""
from __future__ import annotations

import numpy as np

from ...core.errors import InputError
from ...core.limits import MAX_ZIPF_S

ROUTING_DEFAULTS = {"stick": 0.15, "corr": 0.3}


def parse(spec) -> dict:
    """{"s": None | S, "stick": P, "corr": C} or {"recorded": PATH}; InputError for anything else."""
    spec = str(spec)
    if spec.startswith("recorded:"):
        return {"recorded": spec.split(":", 1)[1]}
    head, *mods = spec.split(",")
    out = {"s": zipf_exponent(head), "stick": 0.0, "corr": 0.0}
    for m in mods:
        k, eq, v = m.partition("=")
        k = k.strip()
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        if not eq or k not in ("stick", "corr") or not 0.0 <= x <= 1.0:
            raise InputError(f"--moe-routing {spec[:60]!r}: {m[:30]!r} is not stick=P or corr=C with P, C in 0..1")
        out[k] = x
    return out


def zipf_exponent(spec) -> float | None:
    """None for "uniform", S for "zipf" (1) or "zipf:S" (a finite S in (0, MAX_ZIPF_S]); InputError
    otherwise."""
    spec = str(spec)
    if spec == "uniform":
        return None
    if spec == "zipf":
        return 1.0
    if spec.startswith("zipf:"):
        try:
            s = float(spec.split(":", 1)[1])
        except ValueError:
            s = float("nan")
        if 0 < s <= MAX_ZIPF_S:
            return s
    raise InputError(f"--moe-routing {spec[:40]!r}: use uniform, zipf or zipf:S with 0 < S <= {MAX_ZIPF_S:g} "
                     "(then ,stick=P ,corr=C), or recorded:PATH")


def spec_of(skew: float, stick=ROUTING_DEFAULTS["stick"], corr=ROUTING_DEFAULTS["corr"]) -> str:
    """The spec of a skew (0: uniform) with the given locality."""
    if not 0.0 <= float(skew) <= MAX_ZIPF_S:
        raise InputError(f"skew {skew}: outside 0..{MAX_ZIPF_S:g} (the Zipf exponent of expert popularity)")
    head = "uniform" if float(skew) == 0 else f"zipf:{float(skew):g}"
    return f"{head},stick={stick:g},corr={corr:g}"


def load_recording(path) -> dict:
    """A routing written by save_recording: {"experts": [layer] -> int32 [tokens, k], "n_expert": X}."""
    try:
        z = np.load(path)
        layer, experts, X = z["layer"], z["experts"], int(z["n_expert"])
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"--moe-routing recorded:{path}: not a routing recording ({e}); "
                         "write one with `kmemsim trace llama --routing-out`") from None
    if experts.ndim != 2 or len(layer) != len(experts) or (experts.size and not 0 <= experts.min() <= experts.max() < X):
        raise InputError(f"--moe-routing recorded:{path}: expert ids outside 0..{X - 1} or ragged rows")
    return {"n_expert": X, "experts": {int(il): experts[layer == il] for il in np.unique(layer)}}


def save_recording(path, rows, n_expert):
    """rows: (layer, [tokens, k] expert ids) in the order llama.cpp computed them."""
    layer = np.concatenate([np.full(len(e), il, np.int32) for il, e in rows]) if rows else np.zeros(0, np.int32)
    ex = np.concatenate([np.asarray(e, np.int32) for _, e in rows]) if rows else np.zeros((0, 1), np.int32)
    with open(path, "wb") as f:
        np.savez(f, layer=layer, experts=ex, n_expert=np.int32(n_expert))


class Router:
    """Per layer a routing distribution over the n_expert experts: "uniform", or "zipf[:S]" (expert
    popularity 1/rank^S, the hot experts a random permutation per layer, drawn from rng). A token's
    experts: top-k (Gumbel-top-k sampling without replacement from the distribution); with corr, the
    row is instead the previous layer's row carried rank for rank (its hottest expert to this layer's
    hottest), with stick the previous token's row in this layer. A ubatch's experts: the union over
    its tokens (`route`); the rows themselves: `rows`."""

    def __init__(self, spec, hp: dict, rng):
        self.spec = spec
        self.hp = hp
        self.rng = rng
        X = hp.get("n_expert", 0)
        self.logp = None
        self.recorded = None
        p_ = parse(spec)
        if not X:
            return
        L = hp["n_layer"]
        self.prev_tok = [None] * L             # per layer: the last token's row
        self.prev_layer = (None, None)          # (layer, rows) of the ubatch's last routed layer
        self.last = None                        # rows of the last route() call
        if "recorded" in p_:
            rec = load_recording(p_["recorded"])
            if rec["n_expert"] != X or set(rec["experts"]) != set(range(L)):
                raise InputError(f"--moe-routing {spec}: recorded for {rec['n_expert']} experts and "
                                 f"{len(rec['experts'])} layers, the model has {X} and {L}")
            self._replay(rec["experts"])
            return
        self.stick, self.corr = p_["stick"], p_["corr"]
        s = p_["s"]
        if s is None:
            p = np.full(X, 1.0 / X)
            perms = [np.arange(X)] * L
        else:
            w = 1.0 / np.arange(1, X + 1) ** s
            p = w / w.sum()
            perms = [rng.permutation(X) for _ in range(L)]   # hot experts per layer
        lp = np.log(p)
        self.logp = np.stack([lp[np.argsort(pm)] for pm in perms])   # [layer, expert]
        self.popularity = np.exp(self.logp)
        self.by_rank = np.stack(perms)                                   # [layer, rank] -> expert
        self.rank = np.argsort(self.by_rank, axis=1)                     # [layer, expert] -> rank

    def _replay(self, experts: dict):
        self.recorded = experts
        self.cursor = [0] * self.hp["n_layer"]

    @classmethod
    def replaying(cls, rows, hp: dict) -> "Router":
        """A router that replays rows recorded in this process ((layer, [tokens, k]) as
        cb_eval.record gives them)."""
        r = cls("uniform", hp, None)
        by = {}
        for il, e in rows:
            by.setdefault(int(il), []).append(np.asarray(e, np.int32))
        if set(by) != set(range(hp["n_layer"])):
            raise InputError(f"recorded routing covers layers {sorted(by)[:8]}..., the model has {hp['n_layer']}")
        r.spec = "recorded (this run)"
        r._replay({il: np.concatenate(v) for il, v in by.items()})
        return r

    def rows(self, il, n_tok) -> np.ndarray:
        """The n_tok tokens' experts in layer il, [n_tok, k]."""
        X, k = self.hp["n_expert"], self.hp["n_expert_used"]
        if self.recorded is not None:                    # the recording's next rows, from its start again at its end
            r = self.recorded[il]
            idx = (self.cursor[il] + np.arange(n_tok)) % len(r)
            self.cursor[il] = int((self.cursor[il] + n_tok) % len(r))
            out = r[idx]
        else:
            g = self.logp[il][None, :] + self.rng.gumbel(size=(n_tok, X))
            out = np.argpartition(-g, k - 1, axis=1)[:, :k]
            pl, prows = self.prev_layer
            if self.corr and pl == il - 1 and prows is not None and len(prows) == n_tok:
                carried = self.by_rank[il][self.rank[il - 1][prows]]
                use = self.rng.random(n_tok) < self.corr
                out = np.where(use[:, None], carried, out)
            if self.stick:
                prev = self.prev_tok[il]
                keep = self.rng.random(n_tok) < self.stick
                if prev is None:
                    keep[0] = False
                # a kept row is the row before it: the last fresh row at or before it (or the last
                # ubatch's last row, index 0 of `both`)
                both = np.concatenate([prev[None, :] if prev is not None else out[:1], out])
                src = np.where(np.concatenate([[True], ~keep]), np.arange(n_tok + 1), 0)
                out = both[np.maximum.accumulate(src)[1:]]
        self.prev_tok[il] = out[-1].copy()
        self.prev_layer = (il, out)
        self.last = out
        return out

    def route(self, il, n_tok):
        """The experts layer il uses for a ubatch of n_tok tokens (sorted)."""
        return np.unique(self.rows(il, n_tok))
