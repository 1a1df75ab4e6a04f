"""`kmemsim export perfetto DIR [DIR ...] -o trace.pftrace`: emulated results and live runs as one
Perfetto trace (protobuf, built with the `perfetto` package's TraceProtoBuilder and its bundled
protos), so a prediction and its live run open side by side in ui.perfetto.dev.

Each source is a process in the trace (a compare policy, a sweep point, a live run), with
  counter tracks  resident file, resident anon, zram pool, free memory, watermark min/low/high (bytes),
  slices          phases (emulated: the trace's phase marks; live: the reference run's marks, atrace
                  B/E markers of an imported capture) and reclaim (live: direct and memcg reclaim calls),
  instants        major faults and refaults, one per sampling interval in which they happened, the
                  count in its `count` argument (the emulator and the recorder both sample every
                  10 ms: the events themselves are per page), and kills (OOM, lmkd).

Sources: a `kmemsim compare` output (summary.csv, timeline.parquet), a `kmemsim sweep` output
(sweep.json, timelines/), a run directory (`kmemsim run`, or `kmemsim trace import`: summary.json,
samples.parquet, raw/), or a validate limit's directory (run/ inside it, llama_result.json beside)."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE

# the timeline columns the export draws (a sweep keeps these of each point's timeline)
TIMELINE_COLUMNS = ["t", "phase", "nr_file_pages", "nr_anon_pages", "zram_mem_used_total", "nr_free_pages",
                    "wmark_min", "wmark_low", "wmark_high", "pgmajfault", "workingset_refault_file",
                    "workingset_refault_anon", "oom_kill", "lmk_kill"]
# counter tracks: name, and the emulator timeline's column (pages, but the zram pool's bytes)
COUNTERS = [("resident file", "nr_file_pages"), ("resident anon", "nr_anon_pages"),
            ("zram pool", "zram_mem_used_total"), ("free memory", "nr_free_pages"),
            ("watermark min", "wmark_min"), ("watermark low", "wmark_low"), ("watermark high", "wmark_high")]
SEQ = 1                         # trusted_packet_sequence_id of every packet this writer makes


class Writer:
    """Tracks and events onto a TraceProtoBuilder: processes, counter tracks, slice tracks."""

    def __init__(self):
        # here: the perfetto package (protobuf) loads only when a trace is written or read
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder
        self.pb = pb
        self.b = TraceProtoBuilder()
        self.next_uuid = 1
        self.first = True

    def _packet(self, t=None):
        p = self.b.add_packet()
        p.trusted_packet_sequence_id = SEQ
        if self.first:
            p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        if t is not None:
            p.timestamp = int(t)
        return p

    def _uuid(self):
        self.next_uuid += 1
        return self.next_uuid

    def process(self, pid, name) -> int:
        u = self._uuid()
        d = self._packet().track_descriptor
        d.uuid = u
        d.process.pid = int(pid)
        d.process.process_name = name
        return u

    def track(self, parent, name, unit=None, description=None) -> int:
        """A child track of `parent`: a counter track when unit is given ("bytes", "count")."""
        u = self._uuid()
        d = self._packet().track_descriptor
        d.uuid = u
        d.parent_uuid = parent
        d.name = name
        if description:
            d.description = description
        if unit is not None:
            d.counter.unit = {"bytes": self.pb.CounterDescriptor.UNIT_SIZE_BYTES,
                              "count": self.pb.CounterDescriptor.UNIT_COUNT}[unit]
        return u

    def counter(self, track, t, values):
        """One counter value per time (a sample each: Python loops per sample, never per page)."""
        for ti, v in zip(np.asarray(t, np.int64).tolist(), np.asarray(values, np.int64).tolist()):
            e = self._packet(ti).track_event
            e.type = self.pb.TrackEvent.TYPE_COUNTER
            e.track_uuid = track
            e.counter_value = v

    def _args(self, e, args):
        for k, v in (args or {}).items():
            a = e.debug_annotations.add()
            a.name = k
            if isinstance(v, str):
                a.string_value = v
            else:
                a.int_value = int(v)

    def slice(self, track, t0, t1, name, args=None):
        e = self._packet(t0).track_event
        e.type = self.pb.TrackEvent.TYPE_SLICE_BEGIN
        e.track_uuid = track
        e.name = name
        self._args(e, args)
        e = self._packet(max(int(t1), int(t0))).track_event
        e.type = self.pb.TrackEvent.TYPE_SLICE_END
        e.track_uuid = track

    def instant(self, track, t, name, args=None):
        e = self._packet(t).track_event
        e.type = self.pb.TrackEvent.TYPE_INSTANT
        e.track_uuid = track
        e.name = name
        self._args(e, args)

    def serialize(self) -> bytes:
        return self.b.serialize()


def _instants(w, track, t, cumulative, name, extra=None):
    """An instant at each sample whose cumulative counter rose, its rise as `count`."""
    c = np.asarray(cumulative, np.int64)
    if not len(c):
        return
    d = np.diff(np.concatenate([[0], c]))
    more = {k: np.diff(np.concatenate([[0], np.asarray(col, np.int64)])) for k, col in (extra or {}).items()}
    t = np.asarray(t, np.int64)
    for i in np.flatnonzero(d > 0):
        w.instant(track, int(t[i]), name, {"count": int(d[i]), **{k: int(v[i]) for k, v in more.items()}})


def _phase_slices(w, track, t, names, end):
    """Slices for runs of one phase name (an empty name: before the first mark, none drawn)."""
    names = np.asarray(names, object)
    t = np.asarray(t, np.int64)
    if not len(t):
        return
    starts = np.flatnonzero(np.concatenate([[True], names[1:] != names[:-1]]))
    ends = list(t[starts[1:]]) + [end]
    for s, e in zip(starts, ends):
        if names[s]:
            w.slice(track, int(t[s]), int(e), str(names[s]))


def emulated(w, pid, name, tl: pd.DataFrame):
    """One emulated run (a compare policy, a sweep point) from its timeline."""
    p = w.process(pid, name)
    t = tl["t"].to_numpy(np.int64)
    for track, col in COUNTERS:
        if col in tl:
            v = tl[col].to_numpy(np.int64) * (1 if col == "zram_mem_used_total" else PAGE_SIZE)
            w.counter(w.track(p, track, "bytes"), t, v)
    end = int(t[-1]) if len(t) else 0
    if "phase" in tl:
        _phase_slices(w, w.track(p, "phases"), t, tl["phase"].fillna("").to_numpy(object), end)
    _instants(w, w.track(p, "major faults"), t, tl["pgmajfault"], "major faults")
    ref = tl["workingset_refault_file"].to_numpy(np.int64) + tl["workingset_refault_anon"].to_numpy(np.int64)
    _instants(w, w.track(p, "refaults"), t, ref, "refaults",
              {"file": tl["workingset_refault_file"], "anon": tl["workingset_refault_anon"]})
    kills = w.track(p, "kills")
    for col, what in (("oom_kill", "oom kill"), ("lmk_kill", "lmkd kill")):
        if col in tl:
            _instants(w, kills, t, tl[col], what)


# ------------------------------------------------------------------------------------------------
# live run directories

def _first(samples, *cols):
    return next((c for c in cols if c in samples and samples[c].notna().any()), None)


def watermarks(kernel: dict):
    """min, low, high (pages) as __setup_per_zone_wmarks() sets them for one zone holding all the
    memory: min_free_kbytes / 4 pages, then steps of max(min / 4, managed * watermark_scale_factor /
    10000). None without those facts in kernel.json."""
    try:
        mn = int(kernel["min_free_kbytes"]) // 4
        managed = int(kernel["mem_total_kb"]) // 4
        wsf = int(kernel.get("watermark_scale_factor") or 10)
    except (KeyError, TypeError, ValueError):
        return None
    step = max(mn // 4, managed * wsf // 10000)
    return mn, mn + step, mn + 2 * step


def _read_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def live(w, run_dir, name, pid, marks=None):
    """One live run directory: the recorder's samples and records, or an imported capture's."""
    summ = _read_json(os.path.join(run_dir, "summary.json"), {})
    kernel = _read_json(os.path.join(run_dir, "kernel.json"), {})
    s = read_parquet(os.path.join(run_dir, "samples.parquet"))
    p = w.process(pid, name)
    t = s["t"].to_numpy(np.int64) if "t" in s else np.zeros(0, np.int64)
    end = int(t.max()) if len(t) else 0
    tracks = [("resident file", ("memcg_file", "memcg_total_cache", "status_RssFile"), 1),
              ("resident anon", ("memcg_anon", "memcg_total_rss", "status_RssAnon"), 1),
              ("zram pool", ("zram_mem_used_total",), 1), ("free memory", ("vmstat_nr_free_pages",), PAGE_SIZE)]
    for track, cols, scale in tracks:
        c = _first(s, *cols)
        if c is not None:
            x = s[["t", c]].dropna()
            w.counter(w.track(p, track, "bytes", f"{c} (samples.parquet)"), x["t"], x[c].to_numpy(np.int64) * scale)
    wm = watermarks(kernel)
    if wm is not None and len(t):
        for track, v in zip(("watermark min", "watermark low", "watermark high"), wm):
            u = w.track(p, track, "bytes", "from min_free_kbytes, watermark_scale_factor and MemTotal (one zone)")
            w.counter(u, [int(t.min()), end], [v * PAGE_SIZE] * 2)
    ph = w.track(p, "phases")
    for name_, t0, t1 in marks or []:
        w.slice(ph, t0, t1, name_)
    mk = os.path.join(run_dir, "raw", "markers.parquet")
    if os.path.exists(mk):
        for name_, t0, t1 in atrace_slices(read_parquet(mk), end):
            w.slice(ph, t0, t1, name_)
    c = _first(s, "stat_majflt", "memcg_total_pgmajfault", "memcg_pgmajfault", "vmstat_pgmajfault")
    if c is not None:
        x = s[["t", c]].dropna()
        v = x[c].to_numpy(np.int64)
        _instants(w, w.track(p, "major faults", description=c), x["t"].to_numpy(np.int64), v - v[0], "major faults")
    rf = [_first(s, f"memcg_workingset_refault_{k}", f"memcg_total_workingset_refault_{k}",
                 f"vmstat_workingset_refault_{k}") for k in ("file", "anon")]
    if rf[0] and rf[1]:
        x = s[["t"] + rf].dropna()
        f, a = (x[col].to_numpy(np.int64) - x[col].to_numpy(np.int64)[0] for col in rf)
        _instants(w, w.track(p, "refaults", description=f"{rf[0]}, {rf[1]}"), x["t"].to_numpy(np.int64), f + a,
                  "refaults", {"file": f, "anon": a})
    vm = os.path.join(run_dir, "raw", "vmscan.parquet")
    if os.path.exists(vm):
        v = read_parquet(vm)
        v = v[v["kind"].isin(["direct_reclaim", "memcg_reclaim"])]
        if len(v):
            rt = w.track(p, "reclaim")
            for kind, te, dur, rec in zip(v["kind"].astype(str), v["t"].astype(np.int64), v["a"].astype(np.int64),
                                          v["b"].astype(np.int64)):
                w.slice(rt, int(te) - int(dur), int(te), kind.replace("_", " "), {"reclaimed": int(rec)})
    oom = os.path.join(run_dir, "raw", "oom.parquet")
    kills = w.track(p, "kills")
    if os.path.exists(oom):
        o = read_parquet(oom)
        for te, victim in zip(o["t"].astype(np.int64), o["victim"].astype(np.int64)):
            w.instant(kills, int(te), "oom kill", {"pid": int(victim)})
    lk = os.path.join(run_dir, "raw", "lmk.parquet")
    if os.path.exists(lk):
        o = read_parquet(lk)
        for te, victim in zip(o["t"].astype(np.int64), o["victim"].astype(np.int64)):
            w.instant(kills, int(te), "lmkd kill", {"pid": int(victim)})


def atrace_slices(markers: pd.DataFrame, end):
    """(name, t0, t1) of atrace's B|pid|name ... E|pid markers (nested per pid, as atrace writes them)."""
    stacks, out = {}, []
    for t, pid, text in zip(markers["t"].astype(np.int64), markers["pid"].astype(np.int64), markers["text"]):
        parts = str(text).split("|")
        if parts[0] == "B" and len(parts) >= 3:
            stacks.setdefault(int(pid), []).append((parts[2], int(t)))
        elif parts[0] == "E" and stacks.get(int(pid)):
            name, t0 = stacks[int(pid)].pop()
            out.append((name, t0, int(t)))
    for st in stacks.values():
        out += [(name, t0, end) for name, t0 in st]
    return out


def validate_marks(limit_dir, run_dir):
    """The reference run's phases (validate's llama_result.json marks_ns) as (name, t0, t1) on the
    recorder's clock; [] where there are none."""
    res = _read_json(os.path.join(limit_dir, "llama_result.json"), {})
    t0 = _read_json(os.path.join(run_dir, "summary.json"), {}).get("t0_monotonic_ns")
    marks = res.get("marks_ns") or {}
    names = [k for k in ("load", "prompt", "decode", "teardown") if marks.get(k) is not None]
    if not t0 or not names:
        return []
    ts = [marks[k] - t0 for k in names]
    ends = ts[1:] + [ts[-1] + int(float(res.get("teardown_s", 0)) * 1e9)]
    return [(k, a, max(a, b)) for k, a, b in zip(names, ts, ends)]


# ------------------------------------------------------------------------------------------------
# what DIR is

def read_parquet(path) -> pd.DataFrame:
    """A table of DIR, or one line saying which cannot be read."""
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise InputError(f"{path}: missing (a sweep that finished no point, or a directory cut short)") from None
    except (OSError, ValueError) as e:      # pyarrow's ArrowInvalid is a ValueError
        raise InputError(f"{path}: cannot read it as Parquet ({str(e).splitlines()[0][:160]})") from None


def kind(d) -> str:
    if os.path.exists(os.path.join(d, "sweep.json")):
        return "sweep"
    if os.path.exists(os.path.join(d, "summary.csv")) and os.path.exists(os.path.join(d, "timeline.parquet")):
        return "compare"
    if os.path.exists(os.path.join(d, "summary.json")) and os.path.exists(os.path.join(d, "samples.parquet")):
        return "run"
    if os.path.exists(os.path.join(d, "run", "summary.json")):
        return "validate"
    if os.path.exists(os.path.join(d, "summary.csv")):
        raise InputError(f"{d}: a compare output without timeline.parquet (written by compare since the "
                         "Perfetto export); run compare again")
    raise InputError(f"{d}: not a compare, sweep or run directory (no timeline.parquet, sweep.json or "
                     "summary.json with samples.parquet)")


def export(dirs, out_path) -> dict:
    """Every source in dirs into one Perfetto trace at out_path (written whole). Returns what was
    drawn: source -> list of process names."""
    if not out_path:
        raise InputError("give -o FILE for the Perfetto trace")
    if os.path.isdir(out_path):
        raise InputError(f"-o {out_path}: is a directory; name the trace file (e.g. {os.path.join(out_path, 'trace.pftrace')})")
    for d in dirs:
        if not os.path.isdir(d):
            raise InputError(f"{d}: no such directory")
    kinds = [kind(d) for d in dirs]          # every source checked before anything is built
    w = Writer()
    drawn = {}
    pid = 1000
    for d, k in zip(dirs, kinds):
        names = []
        label = os.path.basename(os.path.normpath(d))
        if k == "compare":
            tl = read_parquet(os.path.join(d, "timeline.parquet"))
            for pol, g in tl.groupby("policy", sort=False):
                names.append(f"{label}: {pol}")
                emulated(w, pid, names[-1], g)
                pid += 1
        elif k == "sweep":
            man = _read_json(os.path.join(d, "sweep.json"), {})
            res = read_parquet(os.path.join(d, "results.parquet"))
            axes = list(man.get("axes", {}))
            for _, row in res.iterrows():
                f = os.path.join(d, "timelines", f"{row['point']}.parquet")
                if not os.path.exists(f):
                    continue
                names.append(f"{label}: " + " ".join(f"{a}={row[a]}" for a in axes))
                emulated(w, pid, names[-1], read_parquet(f))
                pid += 1
        elif k == "run":
            names.append(f"{label}: live")
            live(w, d, names[-1], pid)
            pid += 1
        else:
            rd = os.path.join(d, "run")
            names.append(f"{label}: live")
            live(w, rd, names[-1], pid, marks=validate_marks(d, rd))
            pid += 1
        drawn[d] = names
    atomic_write(out_path, w.serialize())
    return drawn
