"""A sweep's tasks, as Dask runs them on a worker (or the runner in this process): a workload's trace
built once, and one point's replay, each exactly as `kmemsim compare` makes them
(kmemsim.report.compare: load_workload, base_config, run, summarize)."""
from __future__ import annotations

import ctypes
import os
import time

from ..core.data import DEFAULT_DEVICE
from ..engine.time import device as devmod
from ..report import compare as cmpmod
from ..report.perfetto import TIMELINE_COLUMNS
from .grid import METRICS, model_kwargs, replay_config, scenario_overrides


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3       # glibc's mallopt() parameters
_malloc_set = False


def malloc_as_a_process():
    """A worker that Dask's nanny started has MALLOC_TRIM_THRESHOLD_ in its environment, which turns
    off glibc's dynamic mmap threshold: each of a replay's large arrays is then mmapped and faulted in
    afresh, and a replay runs 2-5x slower than in a plain process. Set the thresholds where the
    dynamic ones settle (32 MiB, the dynamic maximum), once per process."""
    global _malloc_set
    if _malloc_set or "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        return
    _malloc_set = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 64 << 20)
    except (OSError, AttributeError):
        pass                    # not glibc: nothing to undo


def build_workload(path, kind, spec):
    """The trace (and what compare's timing needs) of one distinct workload: spec is the
    (key, value) pairs of Grid.workload_spec."""
    malloc_as_a_process()
    s = dict(spec)
    if kind == "scenario":
        return cmpmod.load_workload(path, scenario_overrides(s), s.get("kv_manager"))
    return cmpmod.load_workload(path, (), s.get("kv_manager"), **model_kwargs(s))


def replay_point(wl, settings) -> dict:
    """One point: its policy on the workload's trace under its device and memory, compare's row
    (every column but the ones relative to stock, which need the other policies: kmemsim.sweep.run),
    the seconds it took, and its timeline's columns a Perfetto export draws."""
    malloc_as_a_process()
    dev = devmod.load(settings.get("device", DEFAULT_DEVICE))
    cfg = replay_config(dev, settings)
    t0 = time.perf_counter()
    cmp = cmpmod.run(wl, [settings.get("policy", "stock")], dev, cfg, progress=False)
    row = {k: cmp.table.iloc[0][k] for k in METRICS}
    row = {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
    tl = cmp.runs[0].timeline
    return {"row": row, "replay_s": time.perf_counter() - t0,
            "timeline": tl[[c for c in TIMELINE_COLUMNS if c in tl]].reset_index(drop=True)}
