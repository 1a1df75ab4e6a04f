"""The tables of validation.md and summary.md: the predictions beside the live runs, the score, the
models-by-limits grid and the unrecorded twins."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .reference import UNRECORDED
from .scoring import BOUNDS, rel_error, score

def score_markdown(df: pd.DataFrame) -> str:
    """'k / n' within the bounds per model and bounded metric, and in all when there are several
    models; with repeated runs, within the bound of some run beside it."""
    s = score(df)
    if s.empty:
        return ""
    many = int(df["live_runs"].max()) > 1 if "live_runs" in df else False
    models = list(dict.fromkeys(s["model"]))
    rows = [(m, s[s["model"] == m]) for m in models]
    if len(models) > 1:
        rows.append(("all", s.groupby("metric", sort=False)[["within", "some_run", "cells"]].sum().reset_index()))
    cols = [m for m in BOUNDS if m in set(s["metric"])]
    lines = ["Limits within the bound (" + ", ".join(f"{m} {BOUNDS[m] * 100:.0f}%" for m in cols) + ")"
             + (": against the median of the runs (in brackets: of at least one run)" if many else "") + "\n",
             "| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, t in rows:
        t = t.set_index("metric")
        cell = lambda m: ("-" if m not in t.index else f"{t.loc[m, 'within']} / {t.loc[m, 'cells']}"
                          + (f" ({t.loc[m, 'some_run']})" if many else ""))
        lines.append(f"| {name} | " + " | ".join(cell(m) for m in cols) + " |")
    return "\n".join(lines) + "\n\n"


GRID_METRICS = ("storage_read_bytes", "file_evicted_bytes", "major_faults", "swap_out_bytes",
                "peak_resident_bytes", "ttft_s", "tpot_s")


GRID_NOTE = ("predicted / measured (error), measured the median run [lowest .. highest run] where there were "
             "several; **✗** outside the bound, *~* outside the median's bound but within one run's.\n")


def grid_markdown(df: pd.DataFrame) -> str:
    """Models by limits, one column per metric: 'predicted / measured [lowest .. highest run] (error)',
    a miss marked (GRID_NOTE)."""
    lines = ["| model | limit | " + " | ".join(GRID_METRICS) + " |", "|---|---|" + "---:|" * len(GRID_METRICS)]
    known = lambda v: v is not None and not pd.isna(v)
    for (model, limit), g in df.groupby(["model", "limit"], sort=False):
        g = g.set_index("metric")
        cells = []
        for m in GRID_METRICS:
            if m not in g.index:
                cells.append("-")
                continue
            r = g.loc[m]
            span = (f" [{fmt(m, r.measured_lo)} .. {fmt(m, r.measured_hi)}]"
                    if r.get("live_runs", 1) > 1 and known(r.get("measured_lo")) else "")
            e = f" ({r.rel_error * 100:+.0f}%)" if known(r.rel_error) and not np.isinf(r.rel_error) else ""
            some = r.get("within_some_run")
            miss = "" if not known(r.within) or r.within else (" *~*" if known(some) and some else " **✗**")
            cells.append(f"{fmt(m, r.predicted)} / {fmt(m, r.measured)}{span}{e}{miss}")
        lines.append(f"| {model} | {limit} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmt(metric, v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if metric.endswith("_bytes"):
        return f"{v / 2**20:.1f}M"
    if metric.endswith("_s"):
        return f"{v:.3f}s"
    return f"{int(v)}"


def markdown(df: pd.DataFrame) -> str:
    """The table of validation.md: one row per limit and metric. With repeated runs, measured is their
    median, beside the lowest and highest run and whether the prediction is within the bound of at
    least one of them."""
    runs = int(df["live_runs"].max()) if "live_runs" in df and len(df) else 1
    many = runs > 1
    hdr = "| model | limit | metric | predicted | measured | error | bound | predicted, engine heap ±1% |"
    sep = "|---|---|---|---:|---:|---:|---|---:|"
    if many:
        hdr += " measured, lowest .. highest run (runs) | within the bound of a run |"
        sep += "---:|---|"
    lines = [hdr, sep]
    nan = lambda v: v is None or (isinstance(v, float) and np.isnan(v))
    for r in df.itertuples():
        e = "-" if nan(r.rel_error) else ("inf" if np.isinf(r.rel_error) else f"{r.rel_error * 100:+.1f}%")
        ok = "" if nan(r.within) else ("ok" if r.within else "**MISS**")
        b = "" if nan(r.bound) else f"{r.bound * 100:.0f}% {ok}"
        lo, hi = getattr(r, "predicted_lo", None), getattr(r, "predicted_hi", None)
        band = f"{fmt(r.metric, lo)} .. {fmt(r.metric, hi)}" if fmt(r.metric, lo) != "-" else "-"
        line = (f"| {r.model} | {r.limit} ({r.limit_bytes / 2**20:.0f}M) | {r.metric} | "
                f"{fmt(r.metric, r.predicted)} | {fmt(r.metric, r.measured)} | {e} | {b} | {band} |")
        if many:
            some = "" if nan(r.within_some_run) else ("yes" if r.within_some_run else "no")
            line += (f" {fmt(r.metric, r.measured_lo)} .. {fmt(r.metric, r.measured_hi)} ({r.live_runs}) |"
                     f" {some} |")
        lines.append(line)
    return "\n".join(lines) + "\n"


TIMES_NOTE = ("\nttft_s and tpot_s are measured in the same run made again unrecorded (each limit's "
              f"`{UNRECORDED}/`; runs recorded without one: the recorded run's own), as the device runs "
              "unobserved: the recorder's probes cost time, and its reads of the cgroup's memory.stat change "
              "what reclaim does (docs/recorder.md).\n")


UNRECORDED_METRICS = ("major_faults", "minor_faults", "swap_out_bytes", "swap_in_bytes", "peak_resident_bytes")


def markdown_unrecorded(df: pd.DataFrame) -> str:
    """The unrecorded twins beside the prediction of the device unobserved (no bound): what needs no
    probe (wait4() faults, the machine's pswpout/pswpin, the memcg's peak)."""
    if "predicted_unrecorded" not in df:
        return ""
    d = df[df["metric"].isin(UNRECORDED_METRICS) & df["measured_unrecorded"].notna()]
    if not len(d):
        return ""
    lines = ["\nThe same runs made again unrecorded, beside the prediction of the device unobserved (reclaim "
             "at its unobserved cost, the memcg statistics as old as the kernel alone leaves them; no bound):\n",
             "| model | limit | metric | predicted, unobserved | measured, unrecorded | error "
             "| predicted over the kernel's flush phase |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in d.itertuples():
        e = rel_error(r.predicted_unrecorded, r.measured_unrecorded)
        e = "-" if e is None or np.isnan(e) else ("inf" if np.isinf(e) else f"{e * 100:+.1f}%")
        lo, hi = getattr(r, "predicted_unrecorded_lo", None), getattr(r, "predicted_unrecorded_hi", None)
        rng = "-" if lo is None or pd.isna(lo) else f"{fmt(r.metric, lo)} .. {fmt(r.metric, hi)}"
        lines.append(f"| {r.model} | {r.limit} | {r.metric} | {fmt(r.metric, r.predicted_unrecorded)} | "
                     f"{fmt(r.metric, r.measured_unrecorded)} | {e} | {rng} |")
    return "\n".join(lines) + "\n"
