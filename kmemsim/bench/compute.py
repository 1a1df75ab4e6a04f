"""The compute model against llama.cpp on models it was not fitted on (issue 45).

    python -m kmemsim.bench.compute MODEL.gguf [MODEL.gguf ...] [--device PROFILE ...] [--rounds 5]

Per model: llama.cpp's own `llama_decode` (profile.step_times: a prefill of 1, 32 and 128 tokens from
an empty cache, then decode steps after the 128; medians of the rounds, no memory pressure) beside the
workload generator's clock for the same steps (LlamaSession.serve, the clock every prediction uses)
with each device's TimeModel (several profiles are compared on the same measurements), and with the
first one's pair of rates and no per-layer costs (the model before issue 45). Prints each point's error and, over all, the median |error| and the share within
15% and 10%. `kmemsim profile` fits the device's model on two synthetic shapes of its own; the models
given here are the held-out ones.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ..core.trace import TraceBuilder
from ..engine.time import device as devmod
from ..engine.time.compute import TimeModel
from ..live import profile
from ..workload import llama as lw

PROMPTS = (1, 32, 128)


def generator_seconds(path, tm: TimeModel, prompts=PROMPTS, threads=2) -> dict:
    """The generator's clock for a prefill of each size in prompts (one output row) from an empty cache
    and a decode step after the largest: seconds."""
    n_max = max(prompts)
    s = lw.LlamaSession(path, TraceBuilder(source="bench"), time_model=tm, ctx=n_max + 64, batch=n_max,
                        ubatch=n_max, threads=threads)
    t = s.load()
    out = {}
    for n in prompts:                    # one ubatch each, its last row the output (serve's prompt)
        t1 = s.serve(t, n, 0)
        out[n], t = (t1 - t) * 1e-9, t1
    t1 = s.serve(t, 1, 0, n_past=n_max)  # one token after the largest prompt's cells: a decode step
    out["decode"] = (t1 - t) * 1e-9
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--device", action="append", help="device profile, repeatable (default: this machine's)")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    devs = [devmod.load(d) for d in (a.device or ["this-machine"])]
    models = {(os.path.basename(d.path) if len(devs) > 1 else "now"): d.time_model() for d in devs}
    models["one pair"] = TimeModel(devs[0].weight_gbps, devs[0].matmul_gmac_s)
    errs = {k: [] for k in models}
    for path in a.models:
        st = profile.step_times(path, prompts=PROMPTS, decode=16, rounds=a.rounds)
        if st is None:
            raise SystemExit("kmemsim.bench.compute: needs llama-cpp-python (make setup installs it)")
        live = {**st["prefill_s"], "decode": st["decode_s"]}
        line = [f"{os.path.basename(path)}: llama.cpp " + ", ".join(
            f"{k if k == 'decode' else f'{k} tok'} {v * 1e3:.1f} ms" for k, v in live.items())]
        for name, tm in models.items():
            pred = generator_seconds(path, tm)
            e = [pred[k] / live[k] - 1 for k in live]
            errs[name] += e
            line.append(f"  {name:18s} " + ", ".join(f"{x:+.0%}" for x in e))
        print("\n".join(line), flush=True)
    for name, e in errs.items():
        e = np.abs(e)
        print(f"{name}: median |error| {np.median(e):.0%}, within 15% {np.mean(e <= 0.15):.0%}, "
              f"within 10% {np.mean(e <= 0.10):.0%} of {len(e)} points")


if __name__ == "__main__":
    main()
