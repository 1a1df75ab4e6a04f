"""LLMS's capacity (arXiv 2403.11805, Fig 10): how many active contexts a memory budget of 1, 2 or 3 GB
holds while the average switching latency stays under 10 ms or 25 ms, on the Jetson Orin NX with
Llama2-7B, for LLMS and each baseline (kmemsim.engine.managers.llms).

The average latency of N contexts is the mean over the three switching patterns' traces (Random,
Markov, Gaussian; `hours` of calls each, one per 5 minutes on average). It grows with N; the
capacity is where it crosses the bound, interpolated linearly between the whole numbers of contexts
on either side (the paper reports fractions, e.g. 4.32), found by bisection over N."""
from __future__ import annotations

import os
import time
from functools import lru_cache

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import parse_size
from ..engine.managers import llms
from ..engine.time import device as devmod
from ..report.tables import markdown
from . import llms_workload as W, output

NAME = "llms-capacity"
TITLE = "LLMS Fig 10: active contexts within a switching-latency bound, per memory budget"
PAPER = "LLMS (Yin, Xu, Li, Liu; arXiv 2403.11805), Fig 10; ../shared/reference/seed-systems.md §2.8"
SYSTEMS = ("llms", "lmk", "swap", "vllm-s", "vllm-sq")
# Fig 10 (Orin NX, Llama2-7B): max active contexts, and LLMS's gain over the baselines
PAPER_CAPACITY = {(1, 0.010): 4.32, (2, 0.010): 10.72, (3, 0.010): 16.32,
                  (1, 0.025): 9.28, (2, 0.025): 19.34, (3, 0.025): 27.38}
PAPER_GAIN = {(1, 0.010): 1.99, (2, 0.010): 2.48, (3, 0.010): 2.85,
              (1, 0.025): 4.16, (2, 0.025): 3.62, (3, 0.025): 3.57}
MAX_CONTEXTS = 64


def params(quick=False, overrides=()) -> dict:
    p = dict(device="jetson-orin-nx", model="Llama-2-7B", budgets="1G,2G,3G", bounds_ms="10,25",
             hours=(6.0 if quick else 24.0))
    if quick:
        p["budgets"] = "1G"
        p["bounds_ms"] = "10"
    p.update(output.overrides(p, overrides))
    p["budget_bytes"] = [parse_size(b.strip(), "budgets") for b in str(p["budgets"]).split(",") if b.strip()]
    try:
        p["bounds_s"] = [float(b) / 1e3 for b in str(p["bounds_ms"]).split(",") if b.strip()]
        p["hours"] = float(p["hours"])
    except ValueError:
        raise InputError("bounds_ms and hours are numbers (e.g. --set bounds_ms=10,25)") from None
    if not p["budget_bytes"] or not p["bounds_s"] or min(p["bounds_s"]) <= 0:
        raise InputError("budgets and bounds_ms: at least one each, bounds > 0")
    W.shape(p["model"])
    llms.costs_of(devmod.load(p["device"]), W.shape(p["model"]))
    return p


def capacity(latency_of, bound) -> float:
    """The largest N (fractional) whose latency stays within bound: bisection for the last whole N
    within it, then linear interpolation towards N + 1."""
    if latency_of(1) > bound:
        return 0.0
    lo, hi = 1, 2
    while hi <= MAX_CONTEXTS and latency_of(hi) <= bound:
        lo, hi = hi, hi * 2
    if hi > MAX_CONTEXTS:
        hi = MAX_CONTEXTS + 1
        if latency_of(MAX_CONTEXTS) <= bound:
            return float(MAX_CONTEXTS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if latency_of(mid) <= bound else (lo, mid)
    a, b = latency_of(lo), latency_of(hi)
    return lo + ((bound - a) / (b - a) if b > a else 0.0)


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    dev = devmod.load(p["device"])
    rows = []
    for budget in p["budget_bytes"]:
        for system in SYSTEMS:
            @lru_cache(maxsize=None)
            def latency(n, system=system, budget=budget):
                per = [W.replay(system, budget, p["model"], dev, W.calls(n, pat, p["hours"], p["model"]))
                       for pat in W.PATTERNS]
                lat = np.concatenate(per)
                return float(lat.mean())          # inf if a context alone exceeds the budget
            for bound in p["bounds_s"]:
                cap = capacity(latency, bound)
                rows.append(dict(device=p["device"], model=p["model"], budget_bytes=budget, bound_s=bound,
                                 system=system, max_contexts=cap))
                if progress:
                    progress(f"{budget / 2**30:.0f} GiB, {bound * 1e3:.0f} ms: {system} {cap:.2f} contexts")
    df = pd.DataFrame(rows)
    df.attrs["wall_s"] = time.time() - t0
    write(out, df)
    return df


def paper_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (budget, bound), g in df.groupby(["budget_bytes", "bound_s"]):
        gb = int(round(budget / 2**30))
        caps = g.set_index("system")["max_contexts"]
        best = caps.drop("llms").max()
        rows.append(dict(budget_gb=gb, bound_ms=round(bound * 1e3), metric="llms max active contexts",
                         paper=PAPER_CAPACITY.get((gb, round(bound, 3))), ours=round(float(caps["llms"]), 2)))
        rows.append(dict(budget_gb=gb, bound_ms=round(bound * 1e3), metric="llms / best baseline",
                         paper=PAPER_GAIN.get((gb, round(bound, 3))),
                         ours=round(float(caps["llms"] / best), 2) if best > 0 else float("inf")))
    return pd.DataFrame(rows)


def write(out, df: pd.DataFrame):
    paper = paper_table(df)
    output.write_tables(out, df, paper)
    md = [f"# {TITLE}", "", f"Source: {PAPER}.", "", "## Our figures beside the paper's", "", markdown(paper), "",
          "## Per budget, bound and system", "", markdown(df), "",
          f"{len(df)} rows; {df.attrs.get('wall_s', 0):.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
