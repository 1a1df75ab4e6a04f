"""`kmemsim validate`: for each limit, live reference runs beside their prediction; the long table, the
score, validation.md, the per-phase table and the plots."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..core.atomic import atomic_json, atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE
from ..live.recorder import require_root
from ..live.samplers import INTERVAL_S
from ..report import plots as plotmod
from . import phases
from . import predict as P
from .markdown import GRID_NOTE, TIMES_NOTE, grid_markdown, markdown, markdown_unrecorded, score_markdown
from .measure import BASELINE, device_profile, engine_baseline, engine_warm_set, llama_probe, warm_steps
from .reference import (METRICS, UNRECORDED, check_args, live_run, measured, model_size, recorded_memcg_interval,
                        run_kernel)
from .scoring import BOUNDS, combine, rel_error, within

SENSITIVITY = (0.99, 1.01)     # engine heap factors of the sensitivity band (validation.csv, .md)


def _has_run(d) -> bool:
    """A live run was recorded in d (its run directory's summary)."""
    return os.path.exists(os.path.join(d, "run", "summary.json"))


def run_dirs(d, repeat=1, reuse=False) -> list:
    """The directories of a limit's live runs: the first is d itself, repetition i (2, 3, ...) is
    d/repeat-<i>. With reuse, every run already there counts too."""
    n = max(1, int(repeat))
    if reuse:
        while _has_run(os.path.join(d, f"repeat-{n + 1}")):
            n += 1
    return [d] + [os.path.join(d, f"repeat-{i}") for i in range(2, n + 1)]


def validate(model, prompt, decode, ctx, limits, out, batch=512, ubatch=512, threads=2, zram="lz4:4G",
             swappiness=60, reuse=False, progress=None, repeat=1, memcg_interval=INTERVAL_S,
             device=None) -> pd.DataFrame:
    """For each limit: `repeat` live reference runs (with reuse, those already in out/<label>/ and its
    repeat-<i>/), the prediction, and the comparison against the runs' median. Writes
    out/validation.csv, validation.md, plots/ and per-limit predicted.json / measured.json (each
    run's; each run's unrecorded twin, whose times are reported, in its unrecorded/),
    engine-baseline.json (the engine measured just before each run; the prediction uses the first
    run's, also when reused) and device-profile.toml (device_profile); the phase table and plots
    are the first run's. memcg_interval: how often the recorder reads the cgroup's memory.stat
    (kmemsim run --memcg-interval; 0: at the start and end only, the kernel as it runs unobserved);
    a reused run is predicted with the period it was recorded with. device: a device profile file to
    predict with rather than this machine's (measured once per boot). Returns the long table."""
    lims = check_args(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness)
    if int(repeat) < 1:
        raise InputError(f"--repeat must be at least 1 (got {repeat})")
    dirs = {label: run_dirs(os.path.join(out, label.replace("%", "pct")), repeat, reuse) for label, _ in lims}
    reused = {rd: reuse and _has_run(rd) for ds in dirs.values() for rd in ds}
    if not all(reused.values()):
        require_root()                   # before anything runs: a live run is still to be made
    os.makedirs(out, exist_ok=True)
    engine = None                        # the cached baseline, for runs recorded without their own
    probe = llama_probe(model, ctx, batch, ubatch, threads)
    warm = engine_warm_set(model, prompt, ctx, batch, ubatch, threads, warm_steps(decode))
    prof = device_profile(out, progress, device)
    rows = []
    runs = {}
    for label, limit in lims:
        d = dirs[label][0]
        live = []
        n, k = len(dirs[label]), sum(reused[rd] for rd in dirs[label])
        if progress and k:
            progress(f"{label} ({limit / 2**20:.0f} MiB): reusing {k} of {n} live runs")
        for i, rd in enumerate(dirs[label], 1):
            if progress and not reused[rd]:
                progress(f"{label} ({limit / 2**20:.0f} MiB): live run" + (f" {i} of {n}" if n > 1 else ""))
            if reused[rd]:
                meas = measured(rd, model)
            else:
                # the engine's start-up measured just before its run, as this process is then: the
                # pages it keeps mapped (the interpreter, the modules imported so far) the child
                # neither reads nor is charged for (engine_baseline)
                os.makedirs(rd, exist_ok=True)
                atomic_json(os.path.join(rd, BASELINE), engine_baseline(refresh=True))
                meas = live_run(model, prompt, decode, ctx, limit, rd, batch, ubatch, threads, zram, swappiness,
                                memcg_interval)
            atomic_json(os.path.join(rd, "measured.json"), meas)
            live.append(meas)
        if os.path.exists(os.path.join(d, BASELINE)):
            with open(os.path.join(d, BASELINE)) as f:
                eng = json.load(f)
        else:
            eng = engine = engine or engine_baseline()
        # the reference run as it ran, under the recorder (reclaim at the cost it paid there, the
        # memcg statistics as fresh as its reads of them keep them), for what it measured
        age = P.stats_age_ms(recorded_memcg_interval(d))
        args = (model, prompt, decode, ctx, limit, batch, ubatch, threads, zram, swappiness)
        kw = dict(engine=eng, probe=probe, warm=warm, device=prof, kernel=run_kernel(d, model))
        pred = P.predict(*args, **kw, keep_result=True, recorded=True, stats_flush_ms=age)
        res = pred.pop("_result")
        pred.pop("_trace")
        # and as its unrecorded twin ran, the device unobserved: reclaim at its unobserved cost, the
        # statistics as old as the kernel alone leaves them; its times are the ones reported
        quiet = P.predict(*args, **kw, stats_flush_ms=P.FLUSH_TIME_MS)
        # where the kernel's own flush sets the statistics' age, its timer's phase is the run's chance:
        # the same predictions at the other phases (P.FLUSH_PHASES) give the range it spans
        def over_phase(flush_ms, **k):
            return [P.predict(*args, **kw, **k, stats_flush_ms=flush_ms, stats_flush_phase_ms=f * flush_ms)
                    for f in P.FLUSH_PHASES[1:]]
        phased = over_phase(age, recorded=True) if age >= P.FLUSH_TIME_MS else []
        quiet_phased = over_phase(P.FLUSH_TIME_MS)
        pred.update({"ttft_recorded_s": pred["ttft_s"], "tpot_recorded_s": pred["tpot_s"],
                     "ttft_s": quiet["ttft_s"], "tpot_s": quiet["tpot_s"],
                     UNRECORDED: dict({m: quiet.get(m) for m in METRICS},
                                      stats_flush_ms=quiet["config"]["stats_flush_ms"],
                                      reclaim_costs=quiet["config"]["reclaim_costs"],
                                      over_flush_phase={m: [q.get(m) for q in [quiet] + quiet_phased]
                                                        for m in METRICS})})
        if phased:
            pred["over_flush_phase"] = {m: [q.get(m) for q in [pred] + phased] for m in METRICS}
        # Sensitivity, not an error bar: the same prediction with the engine's measured heap 1%
        # smaller and larger. Near a tipping point (reclaim turning to anon or not, a cyclic scan
        # just fitting) a few hundred KiB move the outcome as much as the bound allows.
        band = [P.predict(*args, **dict(kw, probe=dict(probe, anon_bytes=int(probe["anon_bytes"] * f))),
                          recorded=True, stats_flush_ms=age)
                for f in SENSITIVITY]
        atomic_json(os.path.join(d, "predicted.json"), pred)
        runs[label] = (d, res, live[0])
        med = combine(live)
        for m in METRICS:
            p = pred.get(m)
            q, lo, hi, each = med[m]
            # the band is of the recorded run's reclaim costs: no band for the unobserved times
            alt = [v for v in [p] + ([] if m in ("ttft_s", "tpot_s") else [b.get(m) for b in band + phased])
                   if v is not None]
            qs = [v for v in pred[UNRECORDED]["over_flush_phase"][m] if v is not None]
            rows.append({"model": os.path.basename(model), "model_bytes": model_size(model), "limit": label,
                         "limit_bytes": limit, "metric": m, "predicted": p, "measured": q,
                         "measured_lo": lo, "measured_hi": hi, "live_runs": len(each),
                         "predicted_lo": min(alt) if alt else None, "predicted_hi": max(alt) if alt else None,
                         "rel_error": rel_error(p, q), "bound": BOUNDS.get(m), "within": within(m, p, q),
                         # within the bound of at least one run: the prediction is one the kernel made
                         "within_some_run": (any(within(m, p, v) for v in each)
                                             if BOUNDS.get(m) is not None and p is not None and each else None),
                         "live_complete": all(r.get("complete") for r in live),
                         "oom_kills": sum(r.get("oom_kills") or 0 for r in live),
                         # the first run made again unrecorded, what it shows without probes (the
                         # recorder moves the kernel too: docs/validation.md, "The reference run"),
                         # beside the prediction of the device unobserved
                         "measured_unrecorded": (live[0].get(UNRECORDED) or {}).get(m),
                         "predicted_unrecorded": pred[UNRECORDED].get(m),
                         "predicted_unrecorded_lo": min(qs) if qs else None,
                         "predicted_unrecorded_hi": max(qs) if qs else None})
    df = pd.DataFrame(rows)
    write_outputs(df, out, runs, model)
    return df


def write_summary(out, df: pd.DataFrame):
    """DIR/validation.csv and DIR/summary.md over several models validated into DIR/<model>/."""
    atomic_write(os.path.join(out, "validation.csv"), lambda tmp: df.to_csv(tmp, index=False))
    md = ("# kmemsim validate: summary\n\n" + score_markdown(df) + grid_markdown(df) + "\n" + GRID_NOTE
          + "Each model's full table, its unrecorded twins and its per-phase tables are in its own "
          "validation.md.\n")
    atomic_write(os.path.join(out, "summary.md"), lambda tmp: open(tmp, "w").write(md))
    _drawn(out, times_plot, out, df)


def _drawn(out, draw, *args):
    """draw(*args), a failure written to DIR/plots-error.txt: plots are a convenience, the tables are
    the result."""
    try:
        draw(*args)
    except Exception as e:            # noqa: BLE001 - whatever a plot raises, the tables stand
        with open(os.path.join(out, "plots-error.txt"), "w") as f:
            f.write(f"{type(e).__name__}: {e}\n")


def times_plot(out, df):
    """DIR/plots/times.{png,svg,pdf}: predicted against live TTFT and TPOT (report.plots.times_scatter)."""
    figs = plotmod.times_scatter(df)
    os.makedirs(os.path.join(out, "plots"), exist_ok=True)
    for fmt, data in figs.items():
        atomic_write(os.path.join(out, "plots", f"times.{fmt}"), data)


def write_outputs(df, out, runs, model):
    atomic_write(os.path.join(out, "validation.csv"), lambda tmp: df.to_csv(tmp, index=False))
    ph = phases.table(runs, model)
    atomic_write(os.path.join(out, "validation-phases.csv"), lambda tmp: ph.to_csv(tmp, index=False))
    md = score_markdown(df) + markdown(df) + TIMES_NOTE + markdown_unrecorded(df) + phases.markdown(ph)
    atomic_write(os.path.join(out, "validation.md"), lambda tmp: open(tmp, "w").write(md))
    _drawn(out, times_plot, out, df)
    _drawn(out, plots, out, runs, model)


def plots(out, runs, model):
    """Per limit: resident file and anon memory, cumulative page-cache adds, and the memcg's file
    LRU lists (where the recorder sampled memory.stat through the run), predicted beside measured,
    on the phase axis (kmemsim.validate.phases.axis: start-up, load, prompt, decode, teardown, each
    stretched to one unit; the emulator's clock is the generator's placeholder, not seconds); drawn
    by kmemsim.report.plots.phase_panels into DIR/plots/LIMIT.png."""
    pdir = os.path.join(out, "plots")
    os.makedirs(pdir, exist_ok=True)
    ino = os.stat(model).st_ino
    mib = lambda pages: pages * PAGE_SIZE / 2**20
    for label, (d, res, meas) in runs.items():
        s = pd.read_parquet(os.path.join(d, "run", "samples.parquet"))
        with open(os.path.join(d, "llama_result.json")) as f:
            starts, _ = phases.boundaries(os.path.join(d, "run"), json.load(f), model)
        ax = lambda t: phases.axis(t, starts, s["t"].max())
        tl = res.timeline
        xp = phases.predicted_axis(tl)
        # measured from the records and /proc/PID/status, not memory.stat: the recorder may read that
        # only at the start and end (--memcg-interval 0), as each read changes reclaim
        f = pd.read_parquet(os.path.join(d, "run", "raw", "filemap.parquet"))
        ch = pd.concat([phases.tracked(f[f["kind"] == "add"]), f[f["kind"] == "delete"]]).sort_values("t")
        pages = np.left_shift(1, ch["order"].to_numpy().astype(np.int64)) * np.where(ch["kind"] == "add", 1, -1)
        resident = plotmod.Panel(f"resident memory, limit {label}", "MiB", [
            (ax(ch["t"]), mib(np.cumsum(pages)), "-", "file (measured, page cache added less deleted)", None),
            (ax(s["t"]), s["status_RssAnon"] / 2**20, "-", "anon (measured, RssAnon)", None),
            (xp, mib(tl["nr_file_pages"]), "--", "file (predicted)", None),
            (xp, mib(tl["nr_anon_pages"]), "--", "anon (predicted)", None)])
        reads = plotmod.Panel("cumulative storage reads", "MiB read into the page cache", [
            (ax(g["t"]), mib(np.cumsum(np.left_shift(1, g["order"].to_numpy().astype(np.int64)))), "-",
             f"{what} (measured)", None)
            for g, what in ((phases.tracked(f[f["kind"] == "add"]), "all files"),     # as validation-phases.csv
                            (f[(f["kind"] == "add") & (f["ino"] == ino)], "model"))]
            + [(xp, mib(tl["file_pages_added"]), "--", "all files (predicted)", None)],
            hlines=[(os.path.getsize(model) / 2**20, "model size")])
        # the file LRU lists: whether the active list holds the workingset (docs/validation-notes.md, item 7)
        lru = plotmod.Panel("file LRU lists (memcg)", "MiB", [])
        for lst, color in (("active", "C0"), ("inactive", "C1")):
            col = phases.memcg_stat(s, f"{lst}_file")
            m = s[["t", col]].dropna() if col else s.iloc[:0]
            if len(m) > 10:
                lru.lines.append((ax(m["t"]), m[col] / 2**20, "-", f"{lst} file (measured)", color))
            lru.lines.append((xp, mib(tl[f"nr_{lst}_file"]), "--", f"{lst} file (predicted)", color))
        png = plotmod.phase_panels([resident, reads, lru], phases.PHASES)
        atomic_write(os.path.join(pdir, f"{label.replace('%', 'pct')}.png"), png)
