"""`kmemsim sweep GRID.toml -o DIR`: every point of a grid replayed on the runner (a Dask cluster or
this process), each workload's trace built once and shared by its points.

DIR holds
  grid.toml          the grid file the last run used
  sweep.json         the workload, its fingerprint, the axes, options, metrics, points and how many are done
  points.jsonl       the journal: one line per finished point (its key, settings, compare's row, the
                     seconds its replay took), appended and flushed to disk as each finishes, so a run
                     killed at any instant (kill -9 included) keeps every point it finished; a torn last
                     line is ignored
  timelines/KEY.parquet  the point's timeline (what `kmemsim export perfetto DIR` draws), written
                     whole before its journal line
  results.parquet, results.csv  one row per finished point of the grid in grid order: the axes as
                     columns, compare's metrics (those relative to stock computed among the points
                     that differ only in policy), `replay_s` and `point` (the key); rewritten
                     every few seconds and at the end, whole or not at all
  plots/METRIC.png   a metric against memory (or the first axis that varies), one line per policy,
                     a panel per device and the next axis

A rerun with the same DIR reads the journal and runs only the points not in it; a point's key is a
digest of its settings and the workload file's fingerprint, so a grown grid reuses the points it
shares with the old one and a changed workload file reruns them all."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import time

import numpy as np
import pandas as pd
from tqdm import tqdm

from ..core.atomic import atomic_json, atomic_write
from ..core.errors import InputError
from ..core.units import parse_size
from . import grid as gridmod
from .points import build_workload, replay_point
from .runner import SERIAL, Runner

JOURNAL = "points.jsonl"
MANIFEST = "sweep.json"
RESULTS = "results.parquet"
PLOTTED = ["major_faults", "storage_read_bytes", "swap_out_bytes", "peak_memory_bytes", "ttft_s", "tpot_s"]
VS_STOCK = [("peak_memory_bytes", "peak_memory_vs_stock_pct"), ("mean_memory_bytes", "mean_memory_vs_stock_pct"),
            ("ttft_s", "ttft_vs_stock_pct"), ("tpot_s", "tpot_vs_stock_pct")]
FLUSH_S = 5.0       # results.parquet rewritten at most this often while points finish


def check_out(out):
    """DIR is new, empty, or a sweep's own (it has sweep.json): anything else is someone's directory."""
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise InputError(f"-o {out}: exists and is not a directory")
        if os.listdir(out) and not os.path.exists(os.path.join(out, MANIFEST)):
            raise InputError(f"-o {out}: exists and is not a sweep's output (no {MANIFEST}); choose a new directory")


def read_journal(out) -> dict:
    """key -> the journal's entry for each finished point; a torn or unreadable line is skipped."""
    done = {}
    p = os.path.join(out, JOURNAL)
    if not os.path.exists(p):
        return done
    with open(p, "rb") as f:
        for line in f:
            try:
                e = json.loads(line)
                done[e["point"]] = e
            except (ValueError, KeyError, TypeError):
                continue        # the line a kill cut short: its point runs again
    return done


class Journal:
    def __init__(self, out):
        self.f = open(os.path.join(out, JOURNAL), "ab")

    def add(self, entry):
        self.f.write((json.dumps(entry, default=float) + "\n").encode())
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self):
        self.f.close()


def results(g: gridmod.Grid, done: dict) -> pd.DataFrame:
    """The finished points of the grid, in grid order: axes, metrics, replay_s, point."""
    rows = []
    for p in g.points:
        k = g.key(p)
        e = done.get(k)
        if e is not None:
            rows.append({**p, **e["row"], "replay_s": e.get("replay_s"), "point": k})
    cols = list(g.axes) + gridmod.METRICS + ["replay_s", "point"]
    df = pd.DataFrame(rows, columns=cols)
    for a in g.axes:                   # an axis mixing kinds (2G and 2147483648) is kept as text
        if len({type(v) for v in g.axes[a]}) > 1:
            df[a] = df[a].astype(str)
    vs_stock(df, g)
    keep = list(g.axes) + [m for m in gridmod.METRICS if m in g.metrics] + ["replay_s", "point"]
    return df[keep]


def vs_stock(df, g):
    """compare's columns relative to stock: each point against the stock point that differs from it
    only in policy (NaN where the grid has none)."""
    if not len(df):
        return
    pol = df["policy"] if "policy" in df else pd.Series(g.options.get("policy", "stock"), index=df.index)
    others = [a for a in g.axes if a != "policy"]
    base = df[pol == "stock"]
    for col, out in VS_STOCK:
        if others:
            b = base.drop_duplicates(others).set_index(others)[col]
            ref = b.reindex(pd.MultiIndex.from_frame(df[others]) if len(others) > 1 else df[others[0]]).to_numpy(float)
        else:
            ref = np.full(len(df), float(base[col].iloc[0]) if len(base) else np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            df[out] = np.where(ref > 0, (df[col].to_numpy(float) / ref - 1.0) * 100.0, np.nan)


def write_results(out, df):
    atomic_write(os.path.join(out, RESULTS), lambda tmp: df.to_parquet(tmp, index=False))
    atomic_write(os.path.join(out, "results.csv"), lambda tmp: df.to_csv(tmp, index=False))


def manifest(g, done_n, **more) -> dict:
    return {"workload": g.workload, "kind": g.kind, "fingerprint": g.fingerprint, "axes": g.axes,
            "options": g.options, "metrics": g.metrics, "points": len(g.points), "done": done_n, **more}


# ------------------------------------------------------------------------------------------------
# plots

def plot_layout(g, df):
    """x, line and the two facet columns, chosen from the axes unless [plot] says."""
    varying = [a for a in g.axes if len(g.axes[a]) > 1]
    x = g.plot.get("x")
    if x is None:
        x = next((a for a in ("mem", "memcg_limit") if a in varying), None)
        x = x or next((a for a in varying if all(isinstance(v, (int, float)) for v in g.axes[a])), None)
        x = x or (varying[0] if varying else list(g.axes)[0])
    line = g.plot.get("line") or ("policy" if "policy" in g.axes and x != "policy" else None)
    facet = list(g.plot.get("facet", []))
    if not facet:
        used = {x, line}
        if "device" in varying and "device" not in used:
            facet.append("device")
        facet += [a for a in varying if a not in used and a not in facet][:2 - len(facet)]
    return x, line, facet[:2]


def plots(out, g, df):
    """DIR/plots/METRIC.png for the grid's metrics (all of compare's: a readable few)."""
    from ..report import plots as plotmod    # here: matplotlib takes 0.3 s, and only the figures need it
    if not len(df):
        return []
    x, line, facet = plot_layout(g, df)
    d = df.copy()
    xcol = x
    if x in ("mem", "memcg_limit"):
        xcol = f"{x} (GiB)"
        d[xcol] = [parse_size(v) / 2**30 for v in d[x]]
    elif not pd.api.types.is_numeric_dtype(d[x]):
        d[x] = d[x].astype(str)
    if line is None:
        line = "points"
        d[line] = "all"
    real = len(facet)
    for i in range(2 - len(facet)):
        facet.append(" " * (i + 1))          # a facet of one panel: no title of its own
        d[facet[-1]] = ""
    if real:                                 # the row panels named by their axis, in the axis's order
        w = max(len(str(v)) for v in d[facet[0]])
        d[facet[0]] = [f"{facet[0]} {v:>{w}}" if isinstance(v, (int, float)) else f"{facet[0]} {v}"
                       for v in d[facet[0]]]
    for f in facet[1:]:
        if not pd.api.types.is_numeric_dtype(d[f]):
            d[f] = d[f].astype(str)
    d[line] = d[line].astype(str)
    rest = [a for a in g.axes if len(g.axes[a]) > 1 and a not in (x, line, *facet)]
    chosen = [m for m in g.metrics if m in PLOTTED] if set(g.metrics) != set(gridmod.METRICS) or \
        not any(m in PLOTTED for m in g.metrics) else PLOTTED
    chosen = chosen or [m for m in g.metrics if not m.endswith("_pct")][:6]
    os.makedirs(os.path.join(out, "plots"), exist_ok=True)
    names = []
    for m in chosen:
        if m not in d or not pd.api.types.is_numeric_dtype(d[m]) or d[m].isna().all():
            continue
        title = f"{m} against {x}" + (f" (mean over {', '.join(rest)})" if rest else "")
        png = plotmod.experiment_lines(d, x=xcol, y=m, line=line, facet=tuple(facet), title=title,
                                       xlabel=xcol, ylabel=m)
        atomic_write(os.path.join(out, "plots", f"{m}.png"), png)
        names.append(f"plots/{m}.png")
    return names


# ------------------------------------------------------------------------------------------------
# the run

def estimate(g, todo, runner_workers, scheduler):
    """Seconds the todo points should take: five of them, drawn at random (a fixed seed; evenly spaced
    ones would fall on one corner of a product grid), replayed here with their workloads built, the
    means scaled by the distinct workloads and the points, spread over the workers."""
    pick = np.random.default_rng(0).choice(len(todo), size=min(5, len(todo)), replace=False)
    sample = [todo[i] for i in sorted(pick)]
    built, builds, replays = {}, [], []
    for p in sample:
        spec = g.workload_spec(p)
        if spec not in built:
            t0 = time.perf_counter()
            built[spec] = build_workload(g.workload, g.kind, spec)
            builds.append(time.perf_counter() - t0)
        replays.append(replay_point(built[spec], g.settings(p))["replay_s"])
    build_s, replay_s = float(np.mean(builds)), float(np.mean(replays))
    specs = {g.workload_spec(p) for p in todo}
    par = 1 if scheduler == SERIAL else max(1, runner_workers)
    total = (len(specs) * build_s + len(todo) * replay_s) / par + (0 if scheduler == SERIAL else 5.0)
    return total, build_s, replay_s, len(specs), len(sample)


def fmt_s(s) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _run_points(g, out, runner, todo, done, journal, n_done, quiet) -> int:
    """Submit the todo points (each workload's trace a task of its own, its points depending on it)
    and record each as it finishes: its timeline, then its journal line. Returns how many ran."""
    if not todo:
        return 0
    wfut, pfut = {}, {}
    for p in todo:
        spec = g.workload_spec(p)
        if spec not in wfut:
            wfut[spec] = runner.submit(build_workload, g.workload, g.kind, spec,
                                       key=f"workload-{len(wfut)}-{os.urandom(4).hex()}")
        k = g.key(p)
        pfut[runner.submit(replay_point, wfut[spec], g.settings(p), key=f"point-{k}-{os.urandom(4).hex()}")] = (k, p)
    left = {spec: sum(1 for p in todo if g.workload_spec(p) == spec) for spec in wfut}
    ran, last_flush = 0, time.time()
    progress = tqdm(total=len(g.points), initial=n_done, unit="point", desc="sweep",
                    disable=True if quiet else None, smoothing=0.1)
    try:
        for f in runner.as_completed(list(pfut)):
            k, p = pfut.pop(f)
            try:
                r = f.result()
            except BaseException:
                runner.cancel(list(pfut) + list(wfut.values()))
                raise
            tl = r["timeline"]
            atomic_write(os.path.join(out, "timelines", f"{k}.parquet"), lambda tmp, tl=tl: tl.to_parquet(tmp, index=False))
            entry = {"point": k, "settings": g.settings(p), "row": r["row"], "replay_s": r["replay_s"]}
            journal.add(entry)
            done[k] = entry
            ran += 1
            progress.update(1)
            spec = g.workload_spec(p)
            left[spec] -= 1
            if not left[spec]:
                wfut.pop(spec, None)          # its trace can go from the workers
            if time.time() - last_flush > FLUSH_S:
                write_results(out, results(g, done))
                last_flush = time.time()
    finally:
        progress.close()
    return ran


def sweep(grid_path, out, scheduler="local", workers=None, dry_run=False, echo=print, quiet=False) -> dict:
    """Run (or with dry_run only count and time) the grid's points not yet in DIR. Returns a summary:
    points, done before, run now, wall seconds, the results frame."""
    g = gridmod.load(grid_path)
    runner = Runner(scheduler, workers)        # checks --scheduler and --workers before anything runs
    check_out(out)
    done = read_journal(out)
    keys = [g.key(p) for p in g.points]
    todo = [p for p, k in zip(g.points, keys) if k not in done]
    n_done = len(g.points) - len(todo)
    if dry_run:
        msg = f"{len(g.points)} points ({n_done} done in {out}, {len(todo)} to run)"
        if todo:
            total, b, r, nw, ns = estimate(g, todo, runner.n, runner.scheduler)
            where = "serially" if runner.serial else f"on {runner.n} workers (and the cluster's start)"
            msg += (f", {nw} distinct workloads; measured here on {ns} of the points: a workload built in "
                    f"{b:.2f} s, a replay in {r:.2f} s; estimated {fmt_s(total)} {where}")
        echo(msg)
        return {"points": len(g.points), "done_before": n_done, "todo": len(todo), "run": 0}

    t_start = time.time()
    with contextlib.ExitStack() as stack:
        if todo:
            stack.enter_context(runner)        # a cluster that cannot be had fails before DIR is touched
            echo(f"{len(todo)} of {len(g.points)} points to run on {runner.describe()}")
        os.makedirs(os.path.join(out, "timelines"), exist_ok=True)
        atomic_write(os.path.join(out, "grid.toml"), lambda tmp: shutil.copyfile(g.path, tmp))
        atomic_json(os.path.join(out, MANIFEST), manifest(g, n_done, status="running"))
        ran, status = 0, "interrupted"
        journal = Journal(out)
        try:
            ran = _run_points(g, out, runner, todo, done, journal, n_done, quiet)
            status = "complete"
        finally:
            journal.close()
            df = results(g, done)
            write_results(out, df)
            wall = time.time() - t_start
            if status == "complete" and len(df) < len(g.points):
                status = "incomplete"
            atomic_json(os.path.join(out, MANIFEST), manifest(g, len(df), status=status, wall_s=wall, ran=ran,
                                                              scheduler=runner.describe()))
    pngs = plots(out, g, df)
    return {"points": len(g.points), "done_before": n_done, "run": ran, "wall_s": wall, "results": df,
            "plots": pngs, "scheduler": runner.describe()}
