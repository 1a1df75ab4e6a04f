"""Which experts an MoE layer routes a ubatch's tokens to (mul_mat_id reads only their slices)."""
from __future__ import annotations

import numpy as np

from ...core.errors import InputError
from ...core.limits import MAX_ZIPF_S


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
    raise InputError(f"--moe-routing {spec[:40]!r}: use uniform, zipf or zipf:S with 0 < S <= {MAX_ZIPF_S:g}")


class Router:
    """Per layer a routing distribution over the n_expert experts: "uniform", or "zipf[:S]" (expert
    popularity 1/rank^S, the hot experts a random permutation per layer, drawn from rng). A ubatch's
    experts: top-k per token (Gumbel-top-k sampling without replacement from the distribution), the
    union over its tokens."""

    def __init__(self, spec, hp: dict, rng):
        self.spec = spec
        self.hp = hp
        self.rng = rng
        X = hp.get("n_expert", 0)
        self.logp = None
        s = zipf_exponent(spec)
        if not X:
            return
        if s is None:
            p = np.full(X, 1.0 / X)
            perms = [np.arange(X)] * hp["n_layer"]
        else:
            w = 1.0 / np.arange(1, X + 1) ** s
            p = w / w.sum()
            perms = [rng.permutation(X) for _ in range(hp["n_layer"])]   # hot experts per layer
        lp = np.log(p)
        self.logp = np.stack([lp[np.argsort(pm)] for pm in perms])   # [layer, expert]

    def route(self, il, n_tok):
        """The experts layer il uses for a ubatch of n_tok tokens (sorted)."""
        X, k = self.hp["n_expert"], self.hp["n_expert_used"]
        g = self.logp[il][None, :] + self.rng.gumbel(size=(n_tok, X))
        top = np.argpartition(-g, k - 1, axis=1)[:, :k]
        return np.unique(top)
