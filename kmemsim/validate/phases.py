"""Where in the reference run the prediction and the live kernel part: the run's counters per phase.

The phases are the reference run's own (kmemsim.validate's child): start-up (interpreter, imports),
load (Llama(): the loader, the context), prompt (the prompt's llama_decode), decode (every decode
step) and teardown (after the last step: Py_FinalizeEx, llama_free, exit). Live, the child stamps
each phase's start on CLOCK_MONOTONIC (llama_result.json `marks_ns`), the clock the recorder's event
times count from (summary.json `t0_monotonic_ns`). A live run recorded before the stamps existed is
aligned on its first model-file page instead (the loader's first read; `aligned` says which). The
prediction's phases are the trace's phase marks (LlamaSession): load, request/prefill ubatches,
decode tokens, the request's end; the start-up is what comes before the first mark.

Counters (pages, except major faults): page-cache pages added (of them, those added as order-0
folios: read-around, the first rounds of a readahead ramp, and the fallback of page_cache_ra_order()
when a large folio's charge fails or another thread's folio is already there) and deleted (every
file the run touched), major faults, pages swapped out and in, and of those swapped in the KV
cache's (the kernel counts no buffer's swap-ins: live, the faults on the KV buffer's mapping at
pages that had faulted before since it was mapped; kv_swap_faults()), and reclaim's work: the
file and anonymous pages shrink_inactive_list() scanned, and of the file ones those it put back
busy, and its calls (reclaim_scans()), and the time the tasks' own reclaim took (reclaim_calls();
the prediction's is what its reclaim charged the task's clock), and the storage's: the read bios
ended and their time from submit_bio() to the end, summed (read_bios(); the tables show the mean).

Gauges (pages, the median over the phase, outside the score): the memcg's LRU lists, active file,
inactive file and anonymous (both lists), live from the recorder's memory.stat samples and predicted
from the emulator's timeline. Where the counters part, these say in which state: whether the active
file list holds the workingset through decode or is emptied (docs/validation-notes.md, item 7). The
timeline is sampled on the trace's clock, the compute's, so its medians weigh the waits less than
the kernel's samples do, and the load's populate is one step of it: compare prompt and decode."""
import json
import os

import numpy as np
import pandas as pd

from ..core.units import PAGE_SIZE
from .reference import buffers_from_log

PHASES = ("start-up", "load", "prompt", "decode", "teardown")
COUNTERS = {                # name: predicted per-phase column (kmemsim.engine.kernel Result.per_phase)
    "file_pages_added": "file_pages_added",
    "file_pages_added_order0": "file_pages_added_order0",
    "file_pages_deleted": "file_pages_deleted",
    "major_faults": "pgmajfault",
    "swap_out_pages": "pswpout",
    "swap_in_pages": "pswpin",
    "kv_swap_in_pages": "kv_swapin_pages",
    "file_pages_scanned": "pgscan_file",
    "file_pages_scanned_busy": "file_scan_busy",
    "anon_pages_scanned": "pgscan_anon",
    "read_bios": "bio_reads",
    "read_bio_ns": "bio_read_ns",
    "reclaim_lists": "stall_reclaim_lists",
    "reclaim_ns": "stall_reclaim_ns",
}
# name: (the emulator timeline's columns, the memory.stat fields; each side's sum)
GAUGES = {
    "active_file_pages": (("nr_active_file",), ("active_file",)),
    "inactive_file_pages": (("nr_inactive_file",), ("inactive_file",)),
    "anon_lru_pages": (("nr_active_anon", "nr_inactive_anon"), ("active_anon", "inactive_anon")),
}
ROWS = list(COUNTERS) + list(GAUGES)
HEADERS = {"read_bio_ns": "read bio ms (mean)",     # the tables show read_bio_ns per bio
           "reclaim_ns": "reclaim ms",
           **{g: g.replace("_pages", "").replace("_", " ") + " (median)" for g in GAUGES}}


def _predicted_phase(name):
    """The reference phase of one of LlamaSession's phase marks ('#3 decode token 0' -> 'decode')."""
    name = name.split(" ", 1)[1] if name.startswith("#") else name
    if name.startswith("load") or (name.startswith("request") and not name.endswith("end")):
        return "load"
    if name.startswith("prefill"):
        return "prompt"
    if name.startswith("decode"):
        return "decode"
    return "teardown"


def _medians(phase_of, values) -> np.ndarray:
    """The median of `values` in each phase (phase_of: each value's index in PHASES); -1 where a
    phase has none."""
    df = pd.DataFrame({"p": phase_of, "v": values}).dropna()
    med = df.groupby("p").v.median()
    return np.array([int(med[i]) if i in med.index else -1 for i in range(len(PHASES))], np.int64)


def predicted(result) -> pd.DataFrame:
    """Per reference phase (rows) and counter or gauge (columns), from an emulator Result."""
    pp = result.per_phase
    out = pd.DataFrame(0, index=list(PHASES), columns=ROWS, dtype=np.int64)
    for name, row in pp.iterrows():
        for c, col in COUNTERS.items():
            out.loc[_predicted_phase(str(name)), c] += int(row.get(col, 0))
    for c, col in COUNTERS.items():        # what the trace did before its first phase mark
        out.loc["start-up", c] = int(result.summary.get(col, 0)) - int(out[c].sum())
    tl = result.timeline
    ph = _timeline_phases(tl)
    for g, (cols, _) in GAUGES.items():
        out[g] = _medians(ph, tl[list(cols)].sum(axis=1))
    return out


def boundaries(run_dir, llama_result, model):
    """The live phases' start times in ns after the recorder's start, and how they were aligned."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        t0 = json.load(f).get("t0_monotonic_ns")
    marks = llama_result.get("marks_ns")
    if marks and t0:
        starts = [marks.get(k) for k in ("load", "prompt", "decode", "teardown")]
        if all(v is not None for v in starts):
            return [v - t0 for v in starts], "marks"
    # an older run: anchored on the model file's first page added, then the child's durations
    fm = pd.read_parquet(os.path.join(run_dir, "raw", "filemap.parquet"), columns=["t", "kind", "ino"])
    first = fm[(fm.kind == "add") & (fm.ino == os.stat(model).st_ino)].t
    if first.empty:
        return None, "none"
    load = int(first.min())
    prompt = load + int(llama_result["load_s"] * 1e9)
    decode = prompt + int(llama_result["ttft_s"] * 1e9)
    return [load, prompt, decode, decode + int(sum(llama_result.get("decode_steps_s", [])) * 1e9)], \
        "first model page"


def axis(t, starts, end):
    """Times t on the phase axis: phase i spans [i, i + 1) (start-up is 0), each phase's own time
    stretched to one unit, so a live run and its prediction line up phase by phase."""
    edges = np.array([min(0, starts[0])] + list(starts) + [max(end, starts[-1] + 1)], float)
    t = np.asarray(t, float)
    i = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(PHASES) - 1)
    return i + np.clip((t - edges[i]) / np.maximum(edges[i + 1] - edges[i], 1), 0, 1)


def _timeline_phases(timeline) -> np.ndarray:
    """Each emulator timeline row's reference phase, as its index in PHASES (the `phase` column
    names the trace's mark; none before the first: start-up)."""
    return np.array([PHASES.index(_predicted_phase(str(n))) if n else 0 for n in timeline["phase"]], int)


def predicted_axis(timeline) -> np.ndarray:
    """An emulator timeline's rows on the phase axis."""
    ph = _timeline_phases(timeline)
    t = timeline["t"].to_numpy(float)
    out = np.empty(len(t))
    for i in range(len(PHASES)):
        k = ph == i
        if k.any():
            lo, hi = t[k].min(), t[k].max()
            out[k] = i + (t[k] - lo) / max(hi - lo, 1) * 0.999
    return out


def memcg_stat(samples, field):
    """The samples' column of a memory.stat field: v1's total_<field> (the cgroup and its children),
    else <field> (v2 has only those); None where it was not sampled."""
    return next((c for c in (f"memcg_total_{field}", f"memcg_{field}") if c in samples), None)


def tracked(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of a raw probe table the recorded tasks caused (its `tracked` column, where it has one)."""
    return df[df["tracked"] == 1] if "tracked" in df else df


def measured(run_dir, llama_result, model):
    """Per reference phase and counter from the live run's records, and the alignment used."""
    starts, aligned = boundaries(run_dir, llama_result, model)
    if starts is None:
        return None, aligned
    edges = np.array([-np.inf] + list(starts) + [np.inf])
    out = pd.DataFrame(0, index=list(PHASES), columns=ROWS, dtype=np.int64)

    def add(counter, t, weights):
        # np.histogram's sums, by a search of the few edges: its weighted form argsorts the events,
        # and numpy's AVX2 argsort dies of SIGSEGV under qemu's TCG (a 6.1 guest: kmemsim vm)
        t = np.asarray(t, float)
        w = np.asarray(weights, float)
        keep = ~np.isnan(t)
        i = np.minimum(np.searchsorted(edges, t[keep], side="right") - 1, len(edges) - 2)
        out[counter] += np.bincount(i, weights=w[keep], minlength=len(edges) - 1).astype(np.int64)

    def per_event(events, counters):
        """{counter: the column of `events` it sums, None to count them}; -1 where the run lacks the
        records (events None)."""
        for c, col in counters.items():
            if events is None:
                out[c] = -1
            else:
                add(c, events.t, np.ones(len(events), np.int64) if col is None else events[col].to_numpy())

    fm = tracked(pd.read_parquet(os.path.join(run_dir, "raw", "filemap.parquet")))
    for kind, c in (("add", "file_pages_added"), ("delete", "file_pages_deleted")):
        x = fm[fm.kind == kind]
        add(c, x.t, np.left_shift(1, x.order.to_numpy().astype(np.int64)))
    small = fm[(fm.kind == "add") & (fm.order == 0)]
    add("file_pages_added_order0", small.t, np.ones(len(small), np.int64))
    sw = tracked(pd.read_parquet(os.path.join(run_dir, "raw", "swapio.parquet")))
    for w, c in ((1, "swap_out_pages"), (0, "swap_in_pages")):
        x = sw[sw.write == w]
        add(c, x.t, x.nr_sector.to_numpy() // 8)
    # the process's majflt (/proc/PID/stat), sampled at the recorder's interval: the counter at each
    # phase's start; runs recorded before it was sampled: the memcg's pgmajfault (v1 memory.stat
    # total_pgmajfault, v2 pgmajfault); -1 where the run has no such samples
    samples = pd.read_parquet(os.path.join(run_dir, "samples.parquet"))
    col = "stat_majflt" if "stat_majflt" in samples else memcg_stat(samples, "pgmajfault")
    s = samples[["t", col]].dropna() if col else samples.iloc[:0]
    if len(s):
        t, v = s.t.to_numpy(float), s[col].to_numpy(np.int64)
        at = v[np.clip(np.searchsorted(t, edges[1:-1], side="right") - 1, 0, len(v) - 1)]
        out["major_faults"] = np.diff(np.concatenate([[v[0]], at, [v[-1]]]))
    else:
        out["major_faults"] = -1
    # the LRU gauges from the memcg's memory.stat samples, bytes; -1 in a phase without them
    # (--memcg-interval 0 samples the ends)
    for g, (_, fields) in GAUGES.items():
        cols = [memcg_stat(samples, f) for f in fields]
        if None in cols:
            out[g] = -1
            continue
        x = samples[["t"] + cols].dropna()
        at = np.clip(np.searchsorted(edges, x.t.to_numpy(float), side="right") - 1, 0, len(PHASES) - 1)
        out[g] = _medians(at, x[cols].sum(axis=1).to_numpy() // PAGE_SIZE)

    per_event(reclaim_scans(run_dir), {"reclaim_lists": None, **{c: c for c in (
        "file_pages_scanned", "file_pages_scanned_busy", "anon_pages_scanned")}})
    per_event(reclaim_calls(run_dir), {"reclaim_ns": "ns"})
    per_event(read_bios(run_dir), {"read_bios": None, "read_bio_ns": "ns"})
    kv = kv_swap_faults(run_dir, llama_result, starts[0])
    per_event(None if kv is None else pd.DataFrame({"t": kv}), {"kv_swap_in_pages": None})
    return out, aligned


def _vmscan(run_dir, kinds, columns):
    """The live run's vmscan records of the given kinds (columns as named), or None without them."""
    p = os.path.join(run_dir, "raw", "vmscan.parquet")
    if not os.path.exists(p):
        return None
    v = pd.read_parquet(p, columns=columns)
    return v[v["kind"].isin(kinds)]


def reclaim_scans(run_dir):
    """The live run's shrink_inactive_list() calls (mm_vmscan_lru_shrink_inactive): time, file and
    anonymous pages scanned, and file pages put back busy, i.e. the rest of what was scanned after
    reclaimed, activated and kept by reference (locked under read, or held by another reference; a
    read-only mapping has no dirty or writeback pages; shrink_folio_list() activates what it failed
    to unmap, so nr_unmap_fail is within nr_activate). None without vmscan records."""
    v = _vmscan(run_dir, ("shrink_inactive",), ["t", "kind", "a", "b", "e", "f", "flags"])
    if v is None:
        return None
    a, b, e, f = (v[c].to_numpy().astype(np.int64) for c in "abef")
    low, high = lambda x: x & 0xFFFFFFFF, lambda x: x >> 32         # the probe packs two counts a field
    file = (v["flags"].to_numpy().astype(np.int64) & 2) != 0        # RECLAIM_WB_FILE
    busy = a - b - low(e) - high(e) - low(f)
    return pd.DataFrame({"t": v["t"].to_numpy(), "file_pages_scanned": np.where(file, a, 0),
                         "file_pages_scanned_busy": np.where(file, busy, 0),
                         "anon_pages_scanned": np.where(file, 0, a)})


def reclaim_calls(run_dir):
    """The live run's memcg and direct reclaim calls (mm_vmscan_memcg_reclaim_begin/end,
    mm_vmscan_direct_reclaim_begin/end, one record per call at its end): time, and its duration,
    the reclaiming task's own time. None without vmscan records."""
    v = _vmscan(run_dir, ("memcg_reclaim", "direct_reclaim"), ["t", "kind", "a"])
    if v is None:
        return None
    return pd.DataFrame({"t": v["t"].to_numpy(), "ns": v["a"].to_numpy().astype(np.int64)})


def read_bios(run_dir):
    """The live run's read bios (readio records, one a request that ended part of one): when each
    ended (its last part), its time since submit_bio(), its pages. None without readio records."""
    p = os.path.join(run_dir, "raw", "readio.parquet")
    if not os.path.exists(p):
        return None
    r = pd.read_parquet(p).groupby(["tid", "queued", "sector"], sort=False)
    b = r.agg(t=("t", "max"), pages=("nr_sector", "sum")).reset_index()
    return pd.DataFrame({"t": b.t.to_numpy(), "ns": (b.t - b.queued).to_numpy().astype(np.int64),
                         "pages": b.pages.to_numpy().astype(np.int64) // 8})


def kv_swap_faults(run_dir, llama_result, t_load):
    """The times of the live run's faults on the KV cache's pages after each page's first: with
    llama.cpp's KV buffer cleared (written) as it is created, a later fault there is a swap-in
    (do_swap_page(); nothing else unmaps a page of it before llama_free). The buffer's mapping is
    the anonymous mmap of its logged size (llama.cpp's load log, +-5 KiB; glibc adds a page) made
    after the load starts, up to its munmap. None where there is not exactly one such mapping, or
    the run has no mmap or fault records."""
    size = buffers_from_log(llama_result.get("log", "")).get("CPU KV")
    paths = [os.path.join(run_dir, "raw", f"{n}.parquet") for n in ("mmap", "faults")]
    if not size or not all(os.path.exists(p) for p in paths):
        return None
    mm = pd.read_parquet(paths[0])
    anon = mm[(mm.kind == "mmap") & (mm.fd == 0xFFFFFFFF) & (mm.t >= t_load) &
              (mm.len >= size - (8 << 10)) & (mm.len <= size + (16 << 10))]
    if len(anon) != 1:
        return None
    m = anon.iloc[0]
    gone = mm[(mm.kind == "munmap") & (mm.addr == m.ret) & (mm.t > m.t)].t
    end = gone.min() if len(gone) else np.inf
    f = pd.read_parquet(paths[1], columns=["t", "address"])
    f = f[(f.address >= m.ret) & (f.address < m.ret + m.len) & (f.t >= m.t) & (f.t < end)].sort_values("t")
    again = f[(f.address // PAGE_SIZE).duplicated()]
    return again.t.to_numpy()


def table(runs, model) -> pd.DataFrame:
    """Long table: limit, phase, counter, predicted, measured, aligned; runs as kmemsim.validate
    collects them ({label: (dir, emulator Result, measured)})."""
    rows = []
    for label, (d, res, _meas) in runs.items():
        p = os.path.join(d, "llama_result.json")
        if not os.path.exists(p):
            continue
        with open(p) as f:
            lr = json.load(f)
        live, aligned = measured(os.path.join(d, "run"), lr, model)
        if live is None:
            continue
        pred = predicted(res)
        for ph in PHASES:
            for c in ROWS:
                rows.append({"limit": label, "phase": ph, "counter": c, "predicted": int(pred.loc[ph, c]),
                             "measured": int(live.loc[ph, c]), "aligned": aligned})
    return pd.DataFrame(rows, columns=["limit", "phase", "counter", "predicted", "measured", "aligned"])


# The per-phase error: over the prompt and decode of every limit, the mean |log((p + 100) / (m + 100))|
# of pages added, swapped out and in and major faults, where predicted or measured reaches 200 (the
# +100 keeps a count of a few from weighing like a factor). docs/validation.md reports it.
SCORED = ("file_pages_added", "swap_out_pages", "swap_in_pages", "major_faults")
SCORE_FLOOR, SCORE_DAMP = 200, 100


def score(df: pd.DataFrame) -> tuple:
    """(mean |log error| of the scored cells, their number); (nan, 0) without any."""
    x = df[df.phase.isin(("prompt", "decode")) & df.counter.isin(SCORED) & (df.measured >= 0)]
    x = x[np.maximum(x.predicted, x.measured) >= SCORE_FLOOR]
    if x.empty:
        return float("nan"), 0
    e = np.abs(np.log((x.predicted + SCORE_DAMP) / (x.measured + SCORE_DAMP)))
    return float(e.mean()), len(x)


def markdown(df: pd.DataFrame) -> str:
    """One table per limit: phases by counters, 'predicted / measured'; the per-phase error first."""
    if df.empty:
        return ""
    out = ["", "## Per phase (predicted / measured; pages, major faults as counted)", ""]
    err, n = score(df)
    if n:
        out += [f"Per-phase error (prompt and decode; pages added, swapped out and in, major faults; "
                f"mean |log((predicted + {SCORE_DAMP}) / (measured + {SCORE_DAMP}))| over the {n} cells "
                f"where either reaches {SCORE_FLOOR}): **{err:.3f}**", ""]
    def cell(r, c, side):
        v = r.loc[c, side] if c in r.index else -1         # a table from before the gauges
        if v < 0:
            return "n/a"
        if c == "reclaim_ns":
            return f"{v / 1e6:,.0f}"
        if c != "read_bio_ns":
            return f"{v:,}"
        n = r.loc["read_bios", side]
        return f"{v / n / 1e6:.2f}" if n > 0 else "-"

    for label, g in df.groupby("limit", sort=False):
        out += [f"### {label} (aligned on {g.aligned.iloc[0]})", "",
                "| phase | " + " | ".join(HEADERS.get(c, c.replace("_", " ")) for c in ROWS) + " |",
                "|---|" + "---:|" * len(ROWS)]
        for ph in PHASES:
            r = g[g.phase == ph].set_index("counter")
            out.append(f"| {ph} | " + " | ".join(f"{cell(r, c, 'predicted')} / {cell(r, c, 'measured')}"
                                                 for c in ROWS) + " |")
        out.append("")
    return "\n".join(out)
