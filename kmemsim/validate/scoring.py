"""How a prediction is scored against the live runs: the relative error, the bounds of issue 5, the
median of repeated runs, and the cells within each bound."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .reference import METRICS

# the bounds of issue 5 (relative error); swap only where swapping happened; minor faults, swap-ins,
# kernel memory and times are reported without a bound
BOUNDS = {"storage_read_bytes": 0.10, "file_evicted_bytes": 0.10, "peak_resident_bytes": 0.10,
          "major_faults": 0.20, "swap_out_bytes": 0.20}


def rel_error(pred, meas):
    if pred is None or meas is None:
        return None
    if meas == 0:
        return 0.0 if pred == 0 else float("inf")
    return (pred - meas) / meas


def within(metric, pred, meas):
    b = BOUNDS.get(metric)
    if b is None or pred is None or meas is None:
        return None
    if metric == "swap_out_bytes" and meas < 1 << 20 and pred < 1 << 20:
        return True                      # no swapping on either side (< 1 MiB)
    if metric == "file_evicted_bytes" and max(pred, meas) < 4 << 20:
        return True                      # nothing (< 4 MiB) evicted on either side
    e = rel_error(pred, meas)
    return e is not None and abs(e) <= b


def combine(runs: list) -> dict:
    """The live figures of repeated runs of one limit: per metric the median (the one compared) and
    the lowest and highest run. The kernel moves between runs of the same configuration (and is
    bistable at some limits, docs/validation.md), so one run alone can mislead either way."""
    out = {}
    for m in METRICS:
        v = [r.get(m) for r in runs if r.get(m) is not None]
        out[m] = (float(np.median(v)), min(v), max(v), v) if v else (None, None, None, [])
    return out



def score(df: pd.DataFrame) -> pd.DataFrame:
    """Cells within the issue's bounds, per model and bounded metric: `within` (against the median of
    the runs), `some_run` (within the bound of at least one run) and `cells` (limits predicted)."""
    d = df[df["metric"].isin(list(BOUNDS))]
    g = d.groupby(["model", "metric"], sort=False)
    true = lambda s: int(s.eq(True).sum())
    out = pd.DataFrame({"within": g["within"].apply(true), "some_run": g["within_some_run"].apply(true),
                        "cells": g["within"].apply(lambda s: int(s.notna().sum()))})
    return out.reset_index()
