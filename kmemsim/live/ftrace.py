"""A kernel trace captured elsewhere, as a run directory: the text tracefs and Android's atrace write
(`kmemsim trace import ftrace`), or a Perfetto protobuf trace's ftrace bundles (`kmemsim trace import
perfetto`: record_android_trace, the Perfetto UI), parsed by capture.py and written as the recorder's
own tables (rundir.py), so `validate --reuse`, `compare RUNDIR` and `export perfetto` take a phone's
run as live ground truth without Python, BPF or a root shell on the phone.

Events read (the kernel's names; any others are skipped):
  filemap   mm_filemap_add_to_page_cache, mm_filemap_delete_from_page_cache, mm_filemap_fault
  vmscan    mm_vmscan_lru_shrink_inactive, mm_vmscan_lru_shrink_active, mm_vmscan_{direct,memcg}_reclaim_
            {begin,end}, mm_vmscan_write_folio (mm_vmscan_writepage before 6.2), mm_vmscan_kswapd_{wake,sleep}
  memory    rss_stat (each process's RSS by type), page_fault_user
  kills     oom mark_victim, lowmemory_kill (the kernel's old LMK), lmkd's atrace counter kill_one_process
  tasks     sched_process_fork/exec/exit (who descends from the tracked process), tracing_mark_write
            (atrace markers; B|pid|name ... E|pid become the run's phases in the Perfetto export)

Tracked tasks, as the recorder tracks them (bpf/common.h, bpf/tasks.c): --pid PIDs and the tasks
named --comm, and every task forked from a tracked one after it (sched_process_fork); with neither,
every task. What the recorder counts, counted the same way (bpf/filemap.c): a page-cache add by a
tracked task registers its inode; the inode's later adds (by anyone) and deletes (by anyone: kswapd,
another task's reclaim) count; faults count for tracked tasks.

Written (rundir.py's layout): raw/filemap, vmscan, faults, tasks, oom, lmk, markers, rss (.parquet),
and empty raw/readio, swapio (an ftrace capture has neither); samples.parquet (the tracked processes'
RSS from rss_stat, as status_RssFile/RssAnon/RssShmem/VmSwap in bytes); summary.json (the recorder's
totals: files, reclaim, swap-outs from anonymous write_folio, OOM kills, lost events; swap-ins,
major faults and read bios are not in such a capture and say so); kernel.json (the capture's facts);
command.json; events.parquet: the run as a trace (each file under POSIX_FADV_RANDOM, read where the
capture added its folios and faulted, so a replay with room for it adds what the capture added; each
process's anonymous memory as one mapping written as its MM_ANONPAGES grew).

Loss: a ring buffer that overwrote events (entries-written above entries-in-buffer, `[LOST N EVENTS]`,
a Perfetto bundle's lost_events) makes the counts low: refused unless --allow-lost. A capture cut
short (its last line torn, fewer lines than its header's entries-in-buffer, a protobuf that ends
inside a packet) is refused. Timestamps: the capture's trace clock (`mono` lines up with
CLOCK_MONOTONIC marks; tracefs' default `local` is close to it on one machine)."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from ..core import trace as tr
from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.units import PAGE_SIZE
from .capture import MM_KINDS, RECLAIM_WB, Capture, parse_perfetto, parse_text
from .rundir import RunDir

RSS_STATUS = ("status_RssFile", "status_RssAnon", "status_VmSwap", "status_RssShmem")
FILEMAP_KINDS = ("add", "delete", "fault")
VMSCAN_KINDS = ("shrink_inactive", "shrink_active", "direct_reclaim", "memcg_reclaim", "write_folio")
SAMPLE_NS = 10_000_000          # samples.parquet: the RSS at the end of each 10 ms, as the recorder samples


# ------------------------------------------------------------------------------------------------
# the run directory

def tracked_tasks(cap: Capture, pids, comms):
    """The tids (and tgids) the recorder would have tracked: the roots, then every fork from a
    tracked task, in time order. None: every task."""
    if not pids and not comms:
        return None
    tids, tgids = set(int(p) for p in pids), set(int(p) for p in pids)
    if comms:
        for df in cap.kinds.values():
            if "comm" in df and len(df):
                hit = df[df["comm"].isin(comms)]
                tids |= set(hit["tid"].astype(int))
                tgids |= {int(x) for x in hit["tgid"] if int(x) >= 0}
        for tid, name in cap.names.items():
            if name in comms:
                tids.add(int(tid))
        fk = cap.get("fork")
        if len(fk) and "child_comm" in fk:
            hit = fk[fk["child_comm"].isin(comms)]
            tids |= set(hit["child"].astype(int))
    fk = cap.get("fork").sort_values("t", kind="stable") if len(cap.get("fork")) else cap.get("fork")
    for parent, child, tgid in zip(fk.get("parent", []), fk.get("child", []), fk.get("tgid", [])):
        if int(parent) in tids or int(tgid) in tgids:
            tids.add(int(child))
    # a tgid's threads: through the capture's tgid column (record-tgid, atrace) or process tree
    for tid, tg in cap.tgids.items():
        if tg in tgids or tg in tids:
            tids.add(int(tid))
    return tids, tgids | tids


def is_tracked(df, tracked) -> np.ndarray:
    if tracked is None:
        return np.ones(len(df), bool)
    tids, tgids = tracked
    return df["tid"].isin(tids).to_numpy() | df["tgid"].isin(tgids).to_numpy()


def filemap_table(cap: Capture, tracked, t0) -> pd.DataFrame:
    """raw/filemap as bpf/filemap.c writes it: tracked adds register their inode; the inode's later
    adds and deletes (anyone's) and tracked faults are recorded."""
    parts = []
    for kind in FILEMAP_KINDS:
        df = cap.get(kind)
        if len(df):
            d = pd.DataFrame({"t": df["t"].to_numpy(np.int64), "pid": df["tgid"].where(df["tgid"] >= 0, df["tid"]).to_numpy(np.int64),
                              "tid": df["tid"].to_numpy(np.int64), "kind": kind, "ino": df["ino"].astype(np.int64),
                              "dev": df["dev"].astype(np.int64), "index": df["index"].astype(np.int64),
                              "order": (df["order"] if "order" in df else 0), "pfn": (df["pfn"] if "pfn" in df else 0),
                              "tracked": is_tracked(df, tracked).astype(np.int64),
                              "seq": df["line"].to_numpy(np.int64) if "line" in df else np.arange(len(df))})
            parts.append(d)
    if not parts:
        return pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in ("t", "pid", "tid", "ino", "dev", "index",
                                                                        "order", "pfn", "tracked")}).assign(
            kind=pd.Categorical([], categories=FILEMAP_KINDS))
    f = pd.concat(parts, ignore_index=True)
    f["order"] = f["order"].astype(np.int64)
    f["pfn"] = f["pfn"].astype(np.int64)
    f = f.sort_values(["t", "seq"], kind="stable", ignore_index=True)
    f["pos"] = np.arange(len(f))
    first = f[(f["kind"] == "add") & (f["tracked"] == 1)].groupby(["dev", "ino"])["pos"].min().rename("reg")
    f = f.join(first, on=["dev", "ino"])
    registered = f["reg"].notna().to_numpy() & (f["pos"].to_numpy() >= f["reg"].fillna(np.inf).to_numpy())
    keep = np.where(f["kind"] == "delete", registered,
                    np.where(f["kind"] == "add", (f["tracked"] == 1) | registered, f["tracked"] == 1))
    f = f[keep].drop(columns=["seq", "pos", "reg"]).reset_index(drop=True)
    f["t"] = f["t"] - t0
    f["kind"] = pd.Categorical(f["kind"], categories=FILEMAP_KINDS)
    return f[["t", "pid", "tid", "kind", "ino", "dev", "index", "order", "pfn", "tracked"]]


def _header(df, t0):
    return {"t": df["t"].to_numpy(np.int64) - t0,
            "pid": df["tgid"].where(df["tgid"] >= 0, df["tid"]).to_numpy(np.int64),
            "tid": df["tid"].to_numpy(np.int64)}


def reclaim_calls(cap, begin, end):
    """(end row, duration ns) for each begin ... end pair of one task."""
    b, e = cap.get(begin), cap.get(end)
    if not len(e):
        return e.iloc[:0], np.zeros(0, np.int64)
    both = pd.concat([b.assign(_b=1), e.assign(_b=0)], ignore_index=True).sort_values(["tid", "t"], kind="stable")
    prev_t = both.groupby("tid")["t"].shift(1)
    prev_b = both.groupby("tid")["_b"].shift(1)
    ends = both[(both["_b"] == 0) & (prev_b == 1)]
    dur = (ends["t"] - prev_t[ends.index]).to_numpy(np.int64)
    return ends.drop(columns=["_b"]), dur


def vmscan_table(cap, t0) -> pd.DataFrame:
    parts = []
    for kind in ("shrink_inactive", "shrink_active"):
        df = cap.get(kind)
        if len(df):
            parts.append(pd.DataFrame({**_header(df, t0), "kind": kind,
                                       **{k: df[k].astype(np.int64).to_numpy() if k in df else 0
                                          for k in ("a", "b", "c", "d", "e", "f")},
                                       "priority": df["priority"].astype(np.int64), "flags": df["flags"].astype(np.int64)}))
    for kind, (bg, en) in (("direct_reclaim", ("direct_begin", "direct_end")),
                           ("memcg_reclaim", ("memcg_begin", "memcg_end"))):
        ends, dur = reclaim_calls(cap, bg, en)
        if len(ends):
            parts.append(pd.DataFrame({**_header(ends, t0), "kind": kind, "a": dur, "b": ends["b"].astype(np.int64),
                                       "c": 0, "d": 0, "e": 0, "f": 0, "priority": 0, "flags": 0}))
    df = cap.get("write_folio")
    if len(df):
        parts.append(pd.DataFrame({**_header(df, t0), "kind": "write_folio", "a": df["pfn"].astype(np.int64),
                                   "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "priority": 0,
                                   "flags": df["flags"].astype(np.int64)}))
    cols = ["t", "pid", "tid", "kind", "a", "b", "c", "d", "e", "f", "priority", "flags"]
    if not parts:
        out = pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in cols})
    else:
        out = pd.concat(parts, ignore_index=True).sort_values("t", kind="stable", ignore_index=True)
    out["kind"] = pd.Categorical(out["kind"], categories=VMSCAN_KINDS)
    return out[cols]


def rss_samples(cap, tracked, t0):
    """The tracked processes' RSS by type (bytes), summed over their mms, at the end of each 10 ms;
    and the rss rows of their mms. An mm is a tracked process's when a tracked task reported it as
    its own (curr=1)."""
    r = cap.get("rss")
    if not len(r):
        return pd.DataFrame({"t": pd.Series([], dtype=np.int64)}), r
    own = r[(r["curr"] == 1) & is_tracked(r, tracked)]
    mms = set(own["mm_id"].astype(np.int64))
    r = r[r["mm_id"].isin(mms) & (r["member"] >= 0)].sort_values("t", kind="stable").reset_index(drop=True)
    if not len(r):
        return pd.DataFrame({"t": pd.Series([], dtype=np.int64)}), r
    delta = r["size"] - r.groupby(["mm_id", "member"])["size"].shift(1).fillna(0)
    wide = pd.DataFrame({"t": r["t"].to_numpy(np.int64) - t0})
    for i, col in enumerate(RSS_STATUS):
        wide[col] = np.cumsum(np.where(r["member"] == i, delta, 0)).astype(np.int64)
    wide["bucket"] = wide["t"] // SAMPLE_NS
    s = wide.groupby("bucket", sort=True).last().reset_index(drop=True)
    s["t"] = (wide.groupby("bucket", sort=True)["t"].last()).to_numpy()
    return s, r


def build_events(cap, tracked, t0, fm, rss_rows, names, files_named) -> tr.Trace:
    """The capture as a trace (see the module's doc): per file a FADV_RANDOM, then a read where each
    folio was added or faulted; per process its anonymous memory written as its MM_ANONPAGES grew."""
    b = tr.TraceBuilder(source=f"kmemsim trace import {cap.fmt} {os.path.basename(str(cap.source))}")
    mine = fm[fm["tracked"] == 1]
    mine = mine[mine["kind"].isin(["add", "fault"])]
    pids = sorted(set(mine["pid"].astype(int)) | set(names))
    first_seen = mine.groupby("pid")["t"].min().to_dict()
    for pid in pids:
        b.process(max(0, int(first_seen.get(pid, 0))), pid, names.get(pid, str(pid)))
    fid = {}
    if len(mine):
        pages = (mine["index"] + np.left_shift(1, mine["order"].to_numpy(np.int64))).groupby(
            [mine["dev"], mine["ino"]]).max()
        for (dev, ino), n in pages.items():
            fid[(dev, ino)] = b.file(files_named.get(int(ino), f"dev {dev >> 20}:{dev & 0xFFFFF} ino {ino:x}"), int(n))
        key = list(zip(mine["dev"], mine["ino"]))
        ids = np.array([fid[k] for k in key], np.int64)
        first = mine.assign(fid=ids).groupby(["pid", "fid"])["t"].min().reset_index()
        b.ranges(first["t"].to_numpy(np.int64), first["pid"].to_numpy(np.int32), tr.Op.FADVISE, -1, 0,
                 [b.meta["files"][i]["pages"] for i in first["fid"]], int(tr.Advice.RANDOM), first["fid"].to_numpy())
        n = np.where(mine["kind"] == "add", np.left_shift(1, mine["order"].to_numpy(np.int64)), 1)
        b.ranges(mine["t"].to_numpy(np.int64), mine["pid"].to_numpy(np.int32), tr.Op.FREAD, -1,
                 mine["index"].to_numpy(np.int64), n, 0, ids)
    anon = rss_rows[rss_rows["member"] == 1] if len(rss_rows) else rss_rows
    if len(anon):
        owner = cap.get("rss")
        owner = owner[owner["curr"] == 1]
        mm_pid = dict(zip(owner["mm_id"], owner["tgid"].where(owner["tgid"] >= 0, owner["tid"])))
        for mm, g in anon.groupby("mm_id"):
            pid = int(mm_pid.get(mm, -1))
            if pid < 0:
                continue
            if pid not in pids:
                b.process(max(0, int(g["t"].min()) - t0), pid, names.get(pid, str(pid)))
                pids.append(pid)
            pg = (g["size"].to_numpy(np.int64) // PAGE_SIZE)
            hi = np.maximum.accumulate(pg)
            prev = np.concatenate([[0], hi[:-1]])
            grow = hi > prev
            if not grow.any():
                continue
            t = g["t"].to_numpy(np.int64) - t0
            m = b.mmap(max(0, int(t[grow][0])), pid, "anon (rss_stat MM_ANONPAGES)", int(hi[-1]),
                       flags=int(tr.MapFlag.READ | tr.MapFlag.WRITE))
            b.ranges(np.maximum(t[grow], 0), pid, tr.Op.WRITE, m, prev[grow], (hi - prev)[grow])
    ex = cap.get("exit")
    if len(ex):
        ex = ex[(ex["group_dead"] == 1) & ex["pid"].isin(pids)]
        for t, pid in zip(ex["t"].astype(np.int64) - t0, ex["pid"].astype(int)):
            b.event(max(0, int(t)), pid, tr.Op.PROC_EXIT)
    return b.build()


def import_capture(path, out, fmt, pids=(), comms=(), files=(), allow_lost=False) -> dict:
    """Read the capture at path (fmt "ftrace" or "perfetto") and write the run directory out.
    Everything is read and checked first: bad input leaves nothing behind. Returns summary.json."""
    named = {}
    for spec in files:
        ino, eq, p = str(spec).partition("=")
        try:
            named[int(ino, 16) if not ino.startswith("0x") else int(ino, 0)] = p
        except ValueError:
            named = None
        if not eq or not p or named is None:
            raise InputError(f"--file {spec!r}: expected INO=PATH with INO the inode in hex as ftrace prints it")
    if not out:
        raise InputError("give -o RUNDIR for the run directory to write")
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise InputError(f"{path}: not a regular file (a FIFO or a device cannot be read whole)")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"run directory {out} exists and is not empty; choose a new one or remove it")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    cap = parse_text(data, path) if fmt == "ftrace" else parse_perfetto(data, path)
    if not any(len(cap.get(k)) for k in MM_KINDS):
        raise InputError(f"{path}: no memory-management events (mm_filemap_*, mm_vmscan_*, rss_stat, "
                         "page_fault_user, mark_victim, lmk): enable the filemap, vmscan and kmem/rss_stat "
                         "events when capturing (docs/sweep.md, 'Capturing on a phone')")
    if cap.lost and not allow_lost:
        raise InputError(f"{path}: the capture lost {cap.lost} events (a full ring buffer): its counts would be "
                         "low; capture again with a larger buffer_size_kb, or pass --allow-lost")
    tracked = tracked_tasks(cap, pids, comms)
    every = [cap.get(k) for k in cap.kinds]
    t0 = int(min(int(df["t"].min()) for df in every if len(df)))
    t_end = int(max(int(df["t"].max()) for df in every if len(df)))
    fm = filemap_table(cap, tracked, t0)
    if tracked is not None and not any(is_tracked(df, tracked).any() for df in every if len(df) and "tid" in df):
        raise InputError(f"{path}: no event of the tracked tasks (--pid {list(pids)} --comm {list(comms)})")
    vm = vmscan_table(cap, t0)
    samples, rss_rows = rss_samples(cap, tracked, t0)
    names = {}
    for df in every:
        if "comm" in df and len(df):
            sel = df[is_tracked(df, tracked) & (df["comm"] != "")]
            pid = sel["tgid"].where(sel["tgid"] >= 0, sel["tid"])
            names.update(dict(zip(pid.astype(int), sel["comm"])))
    names.update({int(k): v for k, v in cap.names.items() if tracked is None or k in tracked[1]})
    events = build_events(cap, tracked, t0, fm, rss_rows, names, named)

    pf = cap.get("page_fault")
    pf = pf[is_tracked(pf, tracked)] if len(pf) else pf
    faults = pd.DataFrame({**_header(pf, t0), **{k: pf[k].astype(np.int64).to_numpy() for k in ("address", "ip", "error_code")}}) \
        if len(pf) else pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in ("t", "pid", "tid", "address", "ip", "error_code")})
    tasks = []
    for kind, code, other in (("fork", 0, "child"), ("exec", 1, "old_pid"), ("exit", 2, "group_dead")):
        df = cap.get(kind)
        if len(df):
            df = df[is_tracked(df, tracked)]
            tasks.append(pd.DataFrame({**_header(df, t0), "kind": kind, "other": df[other].astype(np.int64).to_numpy()}))
    tasks = pd.concat(tasks, ignore_index=True).sort_values("t", kind="stable", ignore_index=True) if tasks else \
        pd.DataFrame({"t": pd.Series([], dtype=np.int64), "pid": pd.Series([], dtype=np.int64),
                      "tid": pd.Series([], dtype=np.int64), "kind": pd.Series([], dtype=str),
                      "other": pd.Series([], dtype=np.int64)})
    tasks["kind"] = pd.Categorical(tasks["kind"], categories=("fork", "exec", "exit"))
    kills = {}
    for kind in ("oom", "lmk"):
        df = cap.get(kind)
        kills[kind] = pd.DataFrame({**_header(df, t0), "victim": df["victim"].astype(np.int64).to_numpy()}) if len(df) \
            else pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in ("t", "pid", "tid", "victim")})
    mk = cap.get("marker")
    mk = mk[is_tracked(mk, tracked)] if len(mk) else mk      # the tracked tasks' own marks (lmkd's are kills)
    markers = pd.DataFrame({**_header(mk, t0), "text": mk["text"].astype(str).to_numpy()}) if len(mk) else \
        pd.DataFrame({"t": pd.Series([], dtype=np.int64), "pid": pd.Series([], dtype=np.int64),
                      "tid": pd.Series([], dtype=np.int64), "text": pd.Series([], dtype=str)})
    rss_raw = pd.DataFrame({**_header(rss_rows, t0), **{k: rss_rows[k].astype(np.int64).to_numpy()
                                                        for k in ("mm_id", "curr", "member", "size")}}) if len(rss_rows) \
        else pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in ("t", "pid", "tid", "mm_id", "curr", "member", "size")})

    summ = summary(cap, fm, vm, samples, kills, faults, named, pids, comms, t0, t_end, events)
    # everything is read: now the directory, summary.json last (a reader that finds it finds the rest)
    rd = RunDir.create(out)
    rd.write_frame("raw/filemap.parquet", fm)
    rd.write_frame("raw/vmscan.parquet", vm)
    rd.write_frame("raw/faults.parquet", faults)
    rd.write_frame("raw/tasks.parquet", tasks)
    rd.write_frame("raw/oom.parquet", kills["oom"])
    rd.write_frame("raw/lmk.parquet", kills["lmk"])
    rd.write_frame("raw/markers.parquet", markers)
    rd.write_frame("raw/rss.parquet", rss_raw)
    rd.write_frame("raw/readio.parquet", pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in (
        "t", "pid", "tid", "queued", "sector", "nr_sector", "error")}))
    rd.write_frame("raw/swapio.parquet", pd.DataFrame({c: pd.Series([], dtype=np.int64) for c in (
        "t", "pid", "tid", "write", "sector", "nr_sector", "dev", "tracked")}))
    rd.write_frame("samples.parquet", samples)
    atomic_write(rd.p("events.parquet"), lambda tmp: tr.save(events, tmp))
    rd.write_json("command.json", {"mode": f"import {cap.fmt}", "capture": os.path.abspath(str(path)),
                                   "pid": int(pids[0]) if pids else None, "pids": [int(p) for p in pids],
                                   "comms": list(comms), "memcg_interval": 0})
    rd.write_json("kernel.json", {"source": f"an imported {cap.fmt} capture", "trace_clock": cap.clock})
    rd.write_json("summary.json", summ)
    return summ


def summary(cap, fm, vm, samples, kills, faults, named, pids, comms, t0, t_end, events) -> dict:
    """The recorder's summary.json, from what the capture holds."""
    pages = np.left_shift(1, fm["order"].to_numpy(np.int64))
    files, other = {}, []
    if len(fm):
        g = pd.DataFrame({"dev": fm["dev"], "ino": fm["ino"],
                          "added": np.where(fm["kind"] == "add", pages, 0),
                          "deleted": np.where(fm["kind"] == "delete", pages, 0),
                          "faults": (fm["kind"] == "fault").astype(np.int64)}).groupby(["dev", "ino"]).sum()
        for (dev, ino), r in g.iterrows():
            row = {"pages_added": int(r["added"]), "pages_deleted": int(r["deleted"]), "filemap_faults": int(r["faults"]),
                   "dev": f"{int(dev) >> 20}:{int(dev) & 0xFFFFF}", "ino": int(ino)}
            if int(ino) in named:
                files[named[int(ino)]] = row
            else:
                other.append(row)
    si = vm[vm["kind"] == "shrink_inactive"]
    wf = vm[vm["kind"] == "write_folio"]
    anon_out = int((wf["flags"] & RECLAIM_WB["RECLAIM_WB_ANON"] > 0).sum())
    dr, mr = vm[vm["kind"] == "direct_reclaim"], vm[vm["kind"] == "memcg_reclaim"]
    rss_total = samples[[c for c in RSS_STATUS if c != "status_VmSwap"]].sum(axis=1) if len(samples) else None
    return {
        "complete": not cap.lost, "source": f"kmemsim trace import {cap.fmt}", "capture": os.path.abspath(str(cap.source)),
        "tracked": {"pids": [int(p) for p in pids], "comms": list(comms)} if (pids or comms) else "every task",
        "files": files, "other_files": other,
        "swap_out_pages": anon_out, "swap_out_folios": anon_out,
        "swap_in_pages": 0,
        "swap_source": "swap-outs: anonymous mm_vmscan_write_folio (order-0 folios); swap-ins are not in an "
                       "ftrace capture (no swap-in tracepoint): 0",
        "swap_device_pages": {"written_all_tasks": None, "read_all_tasks": None},
        "read_bios": {"submitted": None, "pages": None, "parts_completed": None},
        "reclaim": {"file_folios_written": int((wf["flags"] & RECLAIM_WB["RECLAIM_WB_FILE"] > 0).sum()),
                    "scanned": int(si["a"].sum()), "reclaimed": int(si["b"].sum()),
                    "direct_reclaim_ns": int(dr["a"].sum()), "memcg_reclaim_ns": int(mr["a"].sum()),
                    "direct_reclaims": int(len(dr)), "memcg_reclaims": int(len(mr))},
        "oom_kills": int(len(kills["oom"])), "lmk_kills": int(len(kills["lmk"])),
        "lost_events": int(cap.lost), "lost_by_probe": {}, "bpf_recursion_misses": {},
        "duration_s": (t_end - t0) / 1e9,
        "fault_events": int(len(faults)), "faults_resolved": 0, "mappings": int(len(events.meta["maps"])),
        "major_faults": None, "minor_faults": None,
        "user_faults": int(len(faults)),
        "faults_source": "page_fault_user records (every user fault, major or minor): user_faults",
        "peak_resident_bytes": int(rss_total.max()) if rss_total is not None and len(rss_total) else None,
        "peak_source": "rss_stat (file + anon + shmem of the tracked processes)",
        "t0_monotonic_ns": int(t0), "trace_clock": cap.clock,
    }


def describe(s, out) -> str:
    added = sum(f["pages_added"] for f in list(s["files"].values()) + s["other_files"])
    deleted = sum(f["pages_deleted"] for f in list(s["files"].values()) + s["other_files"])
    return (f"wrote {out}/: {len(s['files']) + len(s['other_files'])} files, {added} pages added to the page cache "
            f"and {deleted} deleted, {s['reclaim']['scanned']} scanned and {s['reclaim']['reclaimed']} reclaimed, "
            f"{s['oom_kills']} OOM and {s['lmk_kills']} lmkd kills, {s['duration_s']:.3f} s"
            + (f"; {s['lost_events']} events lost" if s["lost_events"] else ""))

