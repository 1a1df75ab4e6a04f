"""What the LLMS experiments share (llms_switch.py, llms_capacity.py): the paper's models, its call
traces from the bundled scenario, the chunks' densities, and one trace replayed by one system.

Models (LLMS §4): Llama2-7B (max context 4K) and OPT-6.7B (max 2K), 4-bit GPTQ weights. Llama2-7B is
the bundled preset's shape (q4_0 for the 4-bit weights' bytes); OPT-6.7B, whose architecture llama.cpp
does not run, is its published shape (Zhang et al., "OPT: Open Pre-trained Transformer Language
Models", Table 1: 32 layers, 32 heads, d_model 4096; FFN 4 x d_model, two matrices; vocabulary 50,272)
with 4-bit weights at 4.5 bits per parameter, as GPTQ's group-128 scales and zeros add.
Densities: the models are not run, so each context's chunk densities (Eq. 1) come from
`workload.llama.attention.context_density` (synthetic: attention sinks, recency, noise; per context).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..core.data import SCENARIOS
from ..core.errors import InputError
from ..engine.managers import llms
from ..workload import scenario as sc
from ..workload.llama.attention import context_density
from ..workload.synth import layout_from_preset

DEVICES = ("jetson-orin-nx", "jetson-tx2", "xiaomi-14")
MODELS = ("Llama-2-7B", "OPT-6.7B")
PATTERNS = ("random", "markov", "gaussian")
SCENARIO = SCENARIOS / "llms-switch.toml"


@lru_cache(maxsize=None)
def shape(model: str) -> llms.LlmShape:
    if model == "Llama-2-7B":
        lay = layout_from_preset("Llama-2-7B", type="q4_0")
        return llms.shape_of(model, lay.hparams, lay.file_size, 4096)
    if model == "OPT-6.7B":
        L, d, ff, vocab = 32, 4096, 16384, 50272
        macs = L * (4 * d * d + 2 * d * ff) + d * vocab
        params = L * (4 * d * d + 2 * d * ff) + 2 * d * vocab
        return llms.LlmShape(model, L, 2 * d, float(macs), params * 4.5 / 8, 2048, d)
    raise InputError(f"unknown model {model!r}; known: {', '.join(MODELS)}")


def calls(contexts: int, pattern: str, hours: float, model: str) -> list:
    """The call trace: (context, tokens added) per call, from the bundled scenario (Poisson arrivals,
    the pattern's choice of context, Table 3 deltas plus the call's output)."""
    scn = sc.load(str(SCENARIO), [f"llm.sessions={int(contexts)}", f'llm.requests.pattern="{pattern}"',
                                  f"duration={float(hours) * 3600}", f"llm.ctx={shape(model).max_ctx}"])
    return [(q.session, q.delta + q.decode) for q in sc.plan(scn).requests]


def replay(system: str, budget: float, model: str, dev, trace, chunk=llms.CHUNK_TOKENS,
           ratio=llms.GLOBAL_RATIO) -> np.ndarray:
    """Switching latency of every call of the trace (inf where a context alone exceeds the budget)."""
    svc = llms.service(system, budget, shape(model), dev, lambda k, t, n: context_density(k, t, n, chunk),
                       chunk, ratio)
    return np.array([svc.call(k, n) for k, n in trace])
