"""The paper experiments (`kmemsim experiment NAME`) on the sweep's runner.

An experiment is a grid too. Without --scheduler it runs as it always has, in this process
(`serial`). With one (local, or a Dask scheduler's address), its grid is cut along the keys in
SPLITS, keys its loops hold no state across (each cell's rows depend on that cell alone): each cell
is the experiment run with those keys narrowed to one value by `--set`, a task on the cluster; the
cells' rows are put back together in the experiment's own loop order and written by the experiment's
own `write(out, df)`, so DIR holds what the serial run writes, with the same rows. An experiment not in
SPLITS (its tables span its whole grid) runs whole as one task on the cluster; its files come back
and are written into DIR."""
from __future__ import annotations

import itertools
import os
import tempfile
import time

import pandas as pd

from ..core import progress as progress_bars
from ..core.atomic import atomic_write
from ..core.errors import InputError
from .runner import SERIAL, Runner, check_scheduler

# experiment -> the --set keys its grid is cut along, in its loops' order (outermost first)
SPLITS = {
    "mzcache-ttft": ("devices", "models", "contexts"),
    "llms-switch": ("devices", "models", "patterns", "contexts"),
    "llms-capacity": ("budgets",),
    "moe-paging": ("devices",),
}


def values(p, key) -> list:
    """The grid's values of a key, as `--set KEY=VALUE` writes one."""
    v = p[key]
    if isinstance(v, str):
        return [x.strip() for x in v.split(",") if x.strip()]
    return [str(x) for x in v]


def cells(name, p) -> list:
    """The `--set` items of each cell, in the experiment's loop order."""
    keys = SPLITS[name]
    return [tuple(f"{k}={v}" for k, v in zip(keys, combo))
            for combo in itertools.product(*(values(p, k) for k in keys))]


def run_cell(name, quick, overrides):
    """One cell: the experiment narrowed by overrides, run into a scratch directory; its summary."""
    # here: the registry loads every experiment module and what they use; `kmemsim sweep` of plain
    # replays imports this module and needs none of them
    from ..experiment import registry
    mod = registry.get(name)
    with tempfile.TemporaryDirectory(prefix="kmemsim-cell-") as d:
        df = mod.run(d, quick=quick, overrides=list(overrides))
    return df


def run_whole(name, quick, overrides) -> dict:
    """The experiment whole, into a scratch directory: {file name: bytes} of what it wrote."""
    # here: as run_cell
    from ..experiment import registry
    mod = registry.get(name)
    out = {}
    with tempfile.TemporaryDirectory(prefix="kmemsim-exp-") as d:
        df = mod.run(d, quick=quick, overrides=list(overrides))
        for root, _, files in os.walk(d):
            for f in files:
                p = os.path.join(root, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, d)] = fh.read()
    return {"files": out, "rows": len(df), "wall_s": df.attrs.get("wall_s", 0.0)}


def run(mod, out, quick=False, overrides=(), scheduler=None, workers=None, progress=None) -> pd.DataFrame:
    """The experiment `mod` into out: in this process (scheduler None or serial), else on the runner."""
    if scheduler is None or check_scheduler(scheduler) == SERIAL:
        return mod.run(out, quick=quick, progress=progress, overrides=overrides)
    runner = Runner(scheduler, workers)
    p = mod.params(quick, overrides) if hasattr(mod, "params") else None   # bad --set: before anything runs
    t0 = time.time()
    name = mod.NAME
    if name in SPLITS and p is not None and hasattr(mod, "write"):
        cs = cells(name, p)
        with runner:
            if progress:
                progress(f"{len(cs)} cells on {runner.describe()}")
            futs = [runner.submit(run_cell, name, quick, tuple(overrides) + c, key=f"{name}-{i}-{os.urandom(4).hex()}")
                    for i, c in enumerate(cs)]
            order = {f: i for i, f in enumerate(futs)}
            parts = [None] * len(futs)
            for f in progress_bars.bar(runner.as_completed(futs), total=len(futs), unit="cell", desc=name):
                try:
                    parts[order[f]] = f.result()
                except BaseException:
                    runner.cancel(futs)
                    raise
                if progress:
                    progress(f"cell {' '.join(cs[order[f]])}: {len(parts[order[f]])} rows")
        df = pd.concat(parts, ignore_index=True)
        df.attrs["wall_s"] = time.time() - t0
        os.makedirs(out, exist_ok=True)
        mod.write(out, df)
        return df
    with runner:
        if progress:
            progress(f"{name}: one task on {runner.describe()} (its tables span the whole grid)")
        r = runner.submit(run_whole, name, quick, tuple(overrides), key=f"{name}-{os.urandom(4).hex()}").result()
    os.makedirs(out, exist_ok=True)
    for rel, data in sorted(r["files"].items()):
        d = os.path.dirname(os.path.join(out, rel))
        os.makedirs(d, exist_ok=True)
        atomic_write(os.path.join(out, rel), data)
    s = os.path.join(out, "summary.parquet")
    if not os.path.exists(s):
        raise InputError(f"experiment {name} wrote no summary.parquet")
    df = pd.read_parquet(s)
    df.attrs["wall_s"] = time.time() - t0
    return df
