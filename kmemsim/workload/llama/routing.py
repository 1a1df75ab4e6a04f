"""Which experts an MoE layer routes a ubatch's tokens to (mul_mat_id reads only their slices)."""
from __future__ import annotations

import numpy as np

from ...core.errors import InputError


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
        if not X:
            return
        spec = str(spec)
        if spec == "uniform":
            p = np.full(X, 1.0 / X)
            perms = [np.arange(X)] * hp["n_layer"]
        elif spec.startswith("zipf"):
            s = float(spec.split(":", 1)[1]) if ":" in spec else 1.0
            w = 1.0 / np.arange(1, X + 1) ** s
            p = w / w.sum()
            perms = [rng.permutation(X) for _ in range(hp["n_layer"])]   # hot experts per layer
        else:
            raise InputError(f"--moe-routing {spec!r}: use uniform, zipf or zipf:S")
        lp = np.log(p)
        self.logp = np.stack([lp[np.argsort(pm)] for pm in perms])   # [layer, expert]

    def route(self, il, n_tok):
        """The experts layer il uses for a ubatch of n_tok tokens (sorted)."""
        X, k = self.hp["n_expert"], self.hp["n_expert_used"]
        g = self.logp[il][None, :] + self.rng.gumbel(size=(n_tok, X))
        top = np.argpartition(-g, k - 1, axis=1)[:, :k]
        return np.unique(top)
