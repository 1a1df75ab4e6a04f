"""LLMS's switching latency (arXiv 2403.11805, Fig 9 and the Fig 13 ablation): one LLM service holding
2-16 contexts in a memory budget, 72 hours of calls (one per 5 minutes on average) switching among
them by the Random, Markov or Gaussian pattern, on the Jetson Orin NX, the Jetson TX2 and the Xiaomi
14, with Llama2-7B and OPT-6.7B; LLMS against LMK, whole-context swapping, vLLM-S and vLLM-SQ, and
LLMS without each of its techniques (kmemsim.engine.managers.llms). The switching latency of a call
is the time to make its context resident, before its prompt runs.

The paper's memory budget for Fig 9 is not in our references; the default here is 3 GiB (the largest
of Fig 10's budgets: a whole 4K-token fp16 Llama2-7B context, 2 GiB, fits with room).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import parse_size
from ..engine.managers import llms
from ..engine.time import device as devmod
from ..report.tables import markdown
from . import llms_workload as W, output

NAME = "llms-switch"
TITLE = "LLMS Fig 9: context switching latency against N active contexts"
PAPER = "LLMS (Yin, Xu, Li, Liu; arXiv 2403.11805), Fig 9, Fig 13; ../shared/reference/seed-systems.md §2"
CONTEXTS = (2, 4, 6, 8, 12, 16)
BASELINES = ("lmk", "swap", "vllm-s", "vllm-sq")
ABLATIONS = ("llms-no-lifecycle", "llms-no-compression", "llms-no-pipeline")
QUICK = dict(devices=("jetson-orin-nx",), models=("Llama-2-7B",), patterns=("markov",), contexts=(2, 8), hours=12.0)
# Fig 13 (Orin NX, Llama2-7B, 8 contexts, Markov): switching latency in seconds
ABLATION_PAPER = {"llms": 0.27, "llms-no-lifecycle": 0.62, "llms-no-compression": 0.42, "llms-no-pipeline": 1.62}


def params(quick=False, overrides=()) -> dict:
    p = dict(devices=W.DEVICES, models=W.MODELS, patterns=W.PATTERNS, contexts=CONTEXTS, budget="3G", hours=72.0,
             chunk=llms.CHUNK_TOKENS, ratio=llms.GLOBAL_RATIO)
    if quick:
        p.update(QUICK)
    for key, val in output.overrides(p, overrides).items():
        items = [v.strip() for v in val.split(",") if v.strip()]
        if key in ("devices", "models", "patterns"):
            p[key] = tuple(items)
        elif key == "contexts":
            try:
                p[key] = tuple(int(v) for v in items)
            except ValueError:
                raise InputError(f"--set contexts={val}: contexts are whole numbers") from None
        elif key in ("hours", "ratio", "chunk"):
            try:
                p[key] = float(val)
            except ValueError:
                raise InputError(f"--set {key}={val}: {key} is a number") from None
        else:
            p[key] = val
    for m in p["models"]:
        W.shape(m)
    for pat in p["patterns"]:
        if pat not in W.PATTERNS:
            raise InputError(f"unknown pattern {pat!r}; known: {', '.join(W.PATTERNS)}")
    if not p["contexts"] or min(p["contexts"]) < 1:
        raise InputError("contexts: at least one, each >= 1")
    if not 0 < p["hours"] <= 24 * 30:
        raise InputError(f"hours={p['hours']}: expected a trace length in (0, 720] hours")
    p["budget_bytes"] = parse_size(p["budget"], "budget")
    for d in p["devices"]:                # each device has an accelerator; chunk and ratio are sane
        llms.service("llms", p["budget_bytes"], W.shape(p["models"][0]), devmod.load(d), lambda *a: None,
                     p["chunk"], p["ratio"])
    p["chunk"] = int(p["chunk"])
    return p


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    rows = []
    for dname in p["devices"]:
        dev = devmod.load(dname)
        for model in p["models"]:
            for pattern in p["patterns"]:
                for n in p["contexts"]:
                    trace = W.calls(n, pattern, p["hours"], model)
                    for system in llms.SYSTEMS:
                        lat = W.replay(system, p["budget_bytes"], model, dev, trace, p["chunk"], p["ratio"])
                        ok = np.isfinite(lat)
                        rows.append(dict(device=dname, model=model, pattern=pattern, contexts=n,
                                         budget_bytes=p["budget_bytes"], chunk=p["chunk"], system=system,
                                         switch_latency_s=float(lat[ok].mean()) if ok.any() else float("nan"),
                                         p90_s=float(np.quantile(lat[ok], 0.9)) if ok.any() else float("nan"),
                                         calls=len(lat), unserved=int((~ok).sum())))
                    if progress:
                        r = {x["system"]: x["switch_latency_s"] for x in rows[-len(llms.SYSTEMS):]}
                        progress(f"{dname} {model} {pattern} {n} contexts: llms {r['llms']:.3f} s, vllm-s "
                                 f"{r['vllm-s']:.3f} s, lmk {r['lmk']:.2f} s")
    df = pd.DataFrame(rows)
    df.attrs["wall_s"] = time.time() - t0
    write(out, df)
    return df


def paper_table(df: pd.DataFrame) -> pd.DataFrame:
    piv = df.pivot_table(index=["device", "model", "pattern", "contexts"], columns="system", values="switch_latency_s")
    rows = []

    def ratio(base, paper, stat):
        r = (piv[base] / piv["llms"]).replace([np.inf, -np.inf], np.nan).dropna()
        if len(r):
            rows.append(dict(figure="Fig 9", metric=f"{base} / llms switching latency", paper=paper,
                             ours=f"mean {r.mean():.1f}x, max {r.max():.1f}x"))
    for b in ("vllm-s", "vllm-sq"):
        ratio(b, "average 9.7x, up to 20x (vLLM-S/SQ)", "mean")
    ratio("lmk", "up to 2 orders of magnitude", "max")
    ratio("swap", "1-2 orders of magnitude", "max")
    best = piv[list(BASELINES)].min(axis=1)
    paying = best > 0                          # points where some baseline pays to switch at all
    rows.append(dict(figure="Fig 9", metric="llms at or below every baseline", paper="every point",
                     ours=f"{(piv['llms'] <= best).mean() * 100:.0f}% of points"))
    rows.append(dict(figure="Fig 9", metric="llms below every baseline where one pays", paper="every point",
                     ours=f"{(piv['llms'] < best)[paying].mean() * 100:.0f}% of {int(paying.sum())} points"))
    key = ("jetson-orin-nx", "Llama-2-7B", "markov", 8)
    if key in piv.index:
        for s, v in ABLATION_PAPER.items():
            rows.append(dict(figure="Fig 13 (Orin NX, Llama2-7B, 8 contexts, Markov)", metric=f"{s} switching latency (s)",
                             paper=f"{v}", ours=f"{piv.loc[key, s]:.3f}"))
        order = " < ".join(sorted(ABLATION_PAPER, key=lambda s: piv.loc[key, s]))
        rows.append(dict(figure="Fig 13", metric="order", paper=" < ".join(sorted(ABLATION_PAPER, key=ABLATION_PAPER.get)),
                         ours=order))
    return pd.DataFrame(rows)


def write(out, df: pd.DataFrame):
    paper = paper_table(df)
    output.write_tables(out, df, paper)
    from ..report import plots          # here: matplotlib takes 0.3 s, and the tables come first
    for model in df["model"].unique():
        sub = df[df["model"] == model]
        atomic_write(os.path.join(out, f"latency-{model}.png"), plots.experiment_lines(
            sub, x="contexts", y="switch_latency_s", line="system", facet=("device", "pattern"), logy=True,
            title=f"{TITLE} ({model})", xlabel="active contexts", ylabel="switching latency (s)"))
    md = [f"# {TITLE}", "", f"Source: {PAPER}.", "", "## Our figures beside the paper's", "", markdown(paper), "",
          "## Per point", "", markdown(df.drop(columns=["budget_bytes", "chunk"])), "",
          f"Budget {int(df['budget_bytes'].iloc[0]):,} bytes, chunks of {int(df['chunk'].iloc[0])} tokens. {len(df)} rows; {df.attrs.get('wall_s', 0):.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
