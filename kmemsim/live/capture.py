"""A kernel trace captured elsewhere, read into frames by kind (`Capture`): the text tracefs and
Android's atrace write (parse_text, vectorised with pyarrow: one regex pass over all lines, then one
per event name), or a Perfetto protobuf trace's ftrace bundles (parse_perfetto: FtraceEvent's own
events, the newer ones as generic events, the process tree for tgids and names). Fields come out as
the recorder's BPF programs hold them (bpf/*.c): s_dev, page index, order, packed vmscan counts.
kmemsim.live.ftrace writes a Capture as a run directory."""
from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import InputError
from ..core.units import PAGE_SIZE

LINE = (r"^\s*(?P<comm>.*?)-(?P<tid>\d+)\s+(?:\(\s*(?P<tgid>[-\d]+)\)\s+)?\[(?P<cpu>\d+)\]\s+"
        r"(?:\S{4,6}\s+)?(?P<ts>\d+(?:\.\d+)?):\s+(?P<event>\w+):\s?(?P<body>.*)$")
HEX = r"(?:0x)?[0-9a-fA-F]+"
# event -> (kind, body regex); kinds several kernel names share
BODIES = {
    "mm_filemap_add_to_page_cache": ("add", rf"dev (?P<maj>\d+):(?P<mnr>\d+) ino (?P<ino>{HEX})(?: page=\S+)? "
                                            rf"pfn=(?P<pfn>{HEX}) ofs=(?P<ofs>\d+)(?: order=(?P<order>\d+))?"),
    "mm_filemap_delete_from_page_cache": ("delete", None),
    "mm_filemap_fault": ("fault", rf"dev=(?P<maj>\d+):(?P<mnr>\d+) ino=(?P<ino>{HEX}) ofs=(?P<ofs>\d+)"),
    "mm_vmscan_lru_shrink_inactive": ("shrink_inactive", r"nid=\d+ nr_scanned=(?P<a>\d+) nr_reclaimed=(?P<b>\d+) "
                                      r"nr_dirty=(?P<c>\d+) nr_writeback=(?P<d>\d+) nr_congested=\d+ nr_immediate=\d+ "
                                      r"nr_activate_anon=(?P<e0>\d+) nr_activate_file=(?P<e1>\d+) nr_ref_keep=(?P<f0>\d+) "
                                      r"nr_unmap_fail=(?P<f1>\d+) priority=(?P<priority>\d+) flags=(?P<flags>\S+)"),
    "mm_vmscan_lru_shrink_active": ("shrink_active", r"nid=\d+ nr_taken=(?P<a>\d+) nr_active=(?P<d>\d+) "
                                    r"nr_deactivated=(?P<b>\d+) nr_referenced=(?P<c>\d+) priority=(?P<priority>\d+) "
                                    r"flags=(?P<flags>\S+)"),
    "mm_vmscan_direct_reclaim_begin": ("direct_begin", r"order=(?P<order>\d+)"),
    "mm_vmscan_direct_reclaim_end": ("direct_end", r"nr_reclaimed=(?P<b>\d+)"),
    "mm_vmscan_memcg_reclaim_begin": ("memcg_begin", r"order=(?P<order>\d+)"),
    "mm_vmscan_memcg_reclaim_end": ("memcg_end", r"nr_reclaimed=(?P<b>\d+)"),
    "mm_vmscan_write_folio": ("write_folio", rf"page=\S+ pfn=(?P<pfn>{HEX}) flags=(?P<flags>\S+)"),
    "mm_vmscan_writepage": ("write_folio", None),
    "mm_vmscan_kswapd_wake": ("kswapd_wake", r"nid=(?P<nid>\d+)"),
    "mm_vmscan_kswapd_sleep": ("kswapd_sleep", r"nid=(?P<nid>\d+)"),
    "rss_stat": ("rss", r"mm_id=(?P<mm_id>\d+) curr=(?P<curr>\d+) (?:type=(?P<type>\w+)|member=(?P<member>\d+)) "
                        r"size=(?P<size>-?\d+)B"),
    "page_fault_user": ("page_fault", rf"address=(?P<address>\S+) ip=(?P<ip>\S+) error_code=(?P<error_code>{HEX})"),
    "mark_victim": ("oom", r"pid=(?P<victim>\d+)"),
    "lowmemory_kill": ("lmk", r".*\((?P<victim>\d+)\)"),
    "sched_process_fork": ("fork", r"comm=(?P<parent_comm>.*) pid=(?P<parent>\d+) child_comm=(?P<child_comm>.*) "
                                   r"child_pid=(?P<child>\d+)"),
    "sched_process_exec": ("exec", r"filename=(?P<filename>.*) pid=(?P<pid>\d+) old_pid=(?P<old_pid>\d+)"),
    "sched_process_exit": ("exit", r"comm=(?P<exit_comm>.*) pid=(?P<pid>\d+) prio=\d+(?: group_dead=(?P<group_dead>\w+))?"),
    "tracing_mark_write": ("marker", r"(?P<text>.*)"),
    "print": ("marker", r"(?:tracing_mark_write: )?(?P<text>.*)"),
}
BODIES["mm_filemap_delete_from_page_cache"] = ("delete", BODIES["mm_filemap_add_to_page_cache"][1])
BODIES["mm_vmscan_writepage"] = ("write_folio", BODIES["mm_vmscan_write_folio"][1])
MM_KINDS = {"add", "delete", "fault", "shrink_inactive", "shrink_active", "direct_begin", "direct_end",
            "memcg_begin", "memcg_end", "write_folio", "kswapd_wake", "kswapd_sleep", "rss", "page_fault",
            "oom", "lmk"}
RECLAIM_WB = {"RECLAIM_WB_ANON": 0x1, "RECLAIM_WB_FILE": 0x2, "RECLAIM_WB_SYNC": 0x4, "RECLAIM_WB_ASYNC": 0x8,
              "RECLAIM_WB_MIXED": 0x10}
RSS_MEMBERS = ("MM_FILEPAGES", "MM_ANONPAGES", "MM_SWAPENTS", "MM_SHMEMPAGES")


class Capture:
    """A capture's events, by kind: frames with t (ns, the capture's clock), tid, tgid (-1 when the
    capture does not say), comm ("" likewise) and the kind's fields."""

    def __init__(self, source, fmt):
        self.source, self.fmt = source, fmt
        self.kinds = {}
        self.lost = 0               # events the ring buffer dropped or overwrote
        self.clock = None
        self.names = {}             # tid -> comm (Perfetto's process tree)
        self.tgids = {}             # tid -> tgid (likewise)

    def get(self, kind) -> pd.DataFrame:
        return self.kinds.get(kind, pd.DataFrame({"t": pd.Series([], dtype=np.int64)}))


# ------------------------------------------------------------------------------------------------
# numbers, vectorised

def hex_ints(arr) -> np.ndarray:
    """Hex strings (with or without 0x) as uint64, without a Python loop: padded to 16 digits, each
    byte mapped to its nibble. A string that is not hex gives 0."""
    a = pc.utf8_lower(pc.cast(arr, pa.string()))
    a = pc.replace_substring_regex(a, r"^0x", "")
    ok = pc.match_substring_regex(a, r"^[0-9a-f]{1,16}$")
    a = pc.if_else(ok, a, pa.scalar("0"))
    a = pc.utf8_lpad(a, width=16, padding="0")
    b = np.frombuffer(np.asarray(a.to_numpy(zero_copy_only=False), dtype="S16").tobytes(), np.uint8).reshape(-1, 16)
    lut = np.zeros(256, np.uint64)
    lut[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10, dtype=np.uint64)
    lut[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16, dtype=np.uint64)
    nib = lut[b]
    shifts = np.arange(60, -4, -4, dtype=np.uint64)
    return np.bitwise_or.reduce(nib << shifts, axis=1) if len(b) else np.zeros(0, np.uint64)


def dec_ints(arr, default=0) -> np.ndarray:
    """Decimal strings as int64; a missing one (null, or "" from an optional group) is `default`."""
    a = pc.fill_null(pc.cast(arr, pa.string()), str(default))
    a = pc.if_else(pc.equal(a, ""), pa.scalar(str(default)), a)
    return pc.cast(a, pa.int64()).to_numpy(zero_copy_only=False)


def num_ints(arr) -> np.ndarray:
    """0x.. hex or decimal, per value."""
    a = pc.fill_null(pc.cast(arr, pa.string()), "0")
    hexy = pc.starts_with(a, "0x").to_numpy(zero_copy_only=False)
    out = np.zeros(len(a), np.int64)
    if hexy.any():
        out[hexy] = hex_ints(pc.filter(a, pa.array(hexy))).astype(np.int64)
    if (~hexy).any():
        out[~hexy] = dec_ints(pc.filter(a, pa.array(~hexy)))
    return out


def seconds_to_ns(arr) -> np.ndarray:
    """'12620.606939' -> ns (exact: the seconds and the fraction's digits apart); a count without a
    point (x86-tsc, counter clocks) is kept as it is."""
    m = pc.extract_regex(pc.cast(arr, pa.string()), r"^(?P<sec>\d+)(?:\.(?P<frac>\d+))?$")
    sec = dec_ints(pc.struct_field(m, "sec"))
    frac = pc.fill_null(pc.struct_field(m, "frac"), "")
    has = pc.greater(pc.utf8_length(frac), 0).to_numpy(zero_copy_only=False)
    frac9 = pc.utf8_slice_codeunits(pc.utf8_rpad(frac, width=9, padding="0"), 0, 9)
    return np.where(has, sec * 1_000_000_000 + dec_ints(frac9), sec)


def reclaim_flags(arr) -> np.ndarray:
    a = pc.fill_null(pc.cast(arr, pa.string()), "")
    out = np.zeros(len(a), np.int64)
    for name, bit in RECLAIM_WB.items():
        out |= np.where(pc.match_substring(a, name).to_numpy(zero_copy_only=False), bit, 0)
    return out


# ------------------------------------------------------------------------------------------------
# text (tracefs, atrace)

def parse_text(data: bytes, source) -> Capture:
    cap = Capture(source, "ftrace")
    text = data.decode("utf-8", errors="replace")
    head = text[:4096]
    m = re.search(r"entries-in-buffer/entries-written:\s*(\d+)/(\d+)", head)
    in_buffer = written = None
    if m:
        in_buffer, written = int(m.group(1)), int(m.group(2))
    m = re.search(r"trace_clock:\s*(\S+)", head)
    cap.clock = m.group(1) if m else None
    torn = bool(text) and not text.endswith("\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    arr = pa.array(lines, pa.string())
    body_lines = pc.invert(pc.or_(pc.starts_with(arr, "#"), pc.equal(pc.utf8_trim_whitespace(arr), "")))
    lost = pc.extract_regex(arr, r"\[LOST (?P<n>\d+) EVENTS\]")
    lost_n = pc.struct_field(lost, "n")
    cap.lost += int(dec_ints(pc.drop_null(lost_n)).sum()) if pc.sum(pc.is_valid(lost_n)).as_py() else 0
    if written is not None and in_buffer is not None and written > in_buffer:
        cap.lost += written - in_buffer
    ev = pc.extract_regex(pc.if_else(body_lines, arr, pa.scalar("")), LINE)
    valid = pc.and_(body_lines, pc.is_valid(ev)).to_numpy(zero_copy_only=False)
    if torn and len(lines) and body_lines[-1].as_py():  # the kernel ends every line: a cut one may still parse
        raise InputError(f"{source}: the capture ends inside a line (line {len(lines)}): it was cut short; "
                         "copy it again whole")
    n_events = int(valid.sum())
    if in_buffer is not None and n_events < in_buffer:
        raise InputError(f"{source}: {n_events} event lines but its header says entries-in-buffer {in_buffer}: "
                         "the capture was cut short; copy it again whole")
    if not n_events:
        raise InputError(f"{source}: no ftrace event lines (TASK-PID [CPU] ... TIMESTAMP: EVENT: ...); "
                         "is it the text of tracefs' trace or trace_pipe, or atrace's output?")
    idx = np.flatnonzero(valid)
    ev = pc.take(ev, pa.array(idx))
    f = {k: pc.struct_field(ev, k) for k in ("comm", "tid", "tgid", "cpu", "ts", "event", "body")}
    tgid = pc.fill_null(f["tgid"], "-1")
    tgid = pc.if_else(pc.match_substring_regex(tgid, r"^\d+$"), tgid, pa.scalar("-1"))
    common = pd.DataFrame({"t": seconds_to_ns(f["ts"]), "tid": dec_ints(f["tid"]), "tgid": dec_ints(tgid),
                           "comm": f["comm"].to_numpy(zero_copy_only=False), "line": idx + 1})
    events = f["event"]
    for name, (kind, regex) in BODIES.items():
        sel = pc.equal(events, name)
        if not pc.any(sel).as_py():
            continue
        selnp = sel.to_numpy(zero_copy_only=False)
        body = pc.filter(f["body"], sel)
        got = pc.extract_regex(body, regex)
        bad = pc.is_null(got).to_numpy(zero_copy_only=False)
        if bad.any():
            line = int(common["line"].to_numpy()[selnp][np.argmax(bad)])
            if torn and line == len(lines):
                raise InputError(f"{source}: the capture ends inside a line (line {line}): it was cut short")
            raise InputError(f"{source}: line {line}: cannot read {name}'s fields: {lines[line - 1].strip()[:120]}")
        df = common[selnp].reset_index(drop=True)
        for k in [x.name for x in got.type]:
            df[k] = convert(k, pc.struct_field(got, k))
        cap.kinds[kind] = pd.concat([cap.kinds[kind], df], ignore_index=True) if kind in cap.kinds else df
    _normalise(cap)
    return cap


DEC = {"order", "a", "b", "c", "d", "e0", "e1", "f0", "f1", "priority", "victim", "parent", "child", "pid",
       "old_pid", "mm_id", "curr", "size", "nid", "maj", "mnr", "ofs"}
HEXF = {"ino", "address", "ip", "error_code"}


def convert(name, arr):
    """A text field as the recorder's tables hold it: numbers (ftrace prints ino, addresses and error
    codes in hex, pfn in hex or decimal), reclaim flags as bits, the rest text."""
    if name in DEC:
        return dec_ints(arr)
    if name in HEXF:
        return hex_ints(arr).astype(np.int64)
    if name == "pfn":
        return num_ints(arr)
    if name == "flags":
        return reclaim_flags(arr)
    if name == "member":
        return dec_ints(arr, -1)
    return np.asarray(pc.fill_null(pc.cast(arr, pa.string()), "").to_numpy(zero_copy_only=False), object)


def _normalise(cap: Capture):
    """Fields derived as the recorder has them: the device as the kernel's s_dev, the page index from
    the byte offset, activate and keep counts packed as bpf/vmscan.c packs them, rss types as member
    numbers, lmkd's kills from its atrace counter."""
    for kind in ("add", "delete", "fault"):
        df = cap.kinds.get(kind)
        if df is not None and "maj" in df:
            df["dev"] = (df.pop("maj").to_numpy(np.int64) << 20) | df.pop("mnr").to_numpy(np.int64)
            df["index"] = df.pop("ofs").astype(np.int64) // PAGE_SIZE
    df = cap.kinds.get("shrink_inactive")
    if df is not None and "e0" in df:
        df["e"] = df.pop("e0").to_numpy(np.int64) | (df.pop("e1").to_numpy(np.int64) << 32)
        df["f"] = df.pop("f0").to_numpy(np.int64) | (df.pop("f1").to_numpy(np.int64) << 32)
    df = cap.kinds.get("rss")
    if df is not None and "type" in df:
        named = pd.Series(df.pop("type")).map({n: i for i, n in enumerate(RSS_MEMBERS)}).fillna(-1).to_numpy(np.int64)
        df["member"] = np.where(df["member"].to_numpy(np.int64) >= 0, df["member"].to_numpy(np.int64), named)
    df = cap.kinds.get("exit")
    if df is not None and "group_dead" in df and not pd.api.types.is_integer_dtype(df["group_dead"]):
        gd = df["group_dead"].astype(str)
        df["group_dead"] = np.where(gd == "", df["pid"] == df["tid"], gd == "true").astype(np.int64)
    lmk_from_markers(cap)


def lmk_from_markers(cap: Capture):
    """lmkd's kills: ATRACE_INT("kill_one_process", victim), i.e. C|lmkd's pid|kill_one_process|victim."""
    df = cap.kinds.get("marker")
    if df is None or not len(df):
        return
    df["text"] = df["text"].astype(str).str.rstrip("\n")
    k = df["text"].str.extract(r"^C\|\d+\|kill_one_process\|(\d+)")[0]
    hit = (k.notna() & (k != "0")).to_numpy()
    if hit.any():
        add = df[hit].assign(victim=k[hit].astype(np.int64).to_numpy()).drop(columns=["text"])
        cap.kinds["lmk"] = pd.concat([cap.kinds["lmk"], add], ignore_index=True) if "lmk" in cap.kinds else add


# ------------------------------------------------------------------------------------------------
# Perfetto protobuf

PB_KINDS = {  # FtraceEvent field -> (kind, {our field: its field})
    "mm_filemap_add_to_page_cache": ("add", {"ino": "i_ino", "dev": "s_dev", "index": "index", "pfn": "pfn"}),
    "mm_filemap_delete_from_page_cache": ("delete", {"ino": "i_ino", "dev": "s_dev", "index": "index", "pfn": "pfn"}),
    "mm_vmscan_direct_reclaim_begin": ("direct_begin", {"order": "order"}),
    "mm_vmscan_direct_reclaim_end": ("direct_end", {"b": "nr_reclaimed"}),
    "mm_vmscan_memcg_reclaim_begin": ("memcg_begin", {"order": "order"}),
    "mm_vmscan_memcg_reclaim_end": ("memcg_end", {"b": "nr_reclaimed"}),
    "mm_vmscan_kswapd_wake": ("kswapd_wake", {"nid": "nid"}),
    "mm_vmscan_kswapd_sleep": ("kswapd_sleep", {"nid": "nid"}),
    "rss_stat": ("rss", {"mm_id": "mm_id", "curr": "curr", "member": "member", "size": "size"}),
    "mark_victim": ("oom", {"victim": "pid"}),
    "lowmemory_kill": ("lmk", {"victim": "pid"}),
    "sched_process_fork": ("fork", {"parent": "parent_pid", "child": "child_pid", "child_comm": "child_comm",
                                    "parent_comm": "parent_comm"}),
    "sched_process_exec": ("exec", {"pid": "pid", "old_pid": "old_pid", "filename": "filename"}),
    "sched_process_exit": ("exit", {"pid": "pid", "exit_comm": "comm"}),
    "print": ("marker", {"text": "buf"}),
}
# events Perfetto's protos lack, recorded as generic events (their fields by the kernel's names)
GENERIC = {"mm_filemap_fault": ("fault", {"ino": "i_ino", "dev": "s_dev", "index": "index"}),
           "mm_filemap_add_to_page_cache": ("add", {"ino": "i_ino", "dev": "s_dev", "index": "index", "pfn": "pfn",
                                                    "order": "order"}),
           "mm_filemap_delete_from_page_cache": ("delete", {"ino": "i_ino", "dev": "s_dev", "index": "index",
                                                            "pfn": "pfn", "order": "order"}),
           "mm_vmscan_lru_shrink_inactive": ("shrink_inactive", {"a": "nr_scanned", "b": "nr_reclaimed", "c": "nr_dirty",
                                                                 "d": "nr_writeback", "e0": "nr_activate0",
                                                                 "e1": "nr_activate1", "f0": "nr_ref_keep",
                                                                 "f1": "nr_unmap_fail", "priority": "priority",
                                                                 "flags": "reclaim_flags"}),
           "mm_vmscan_lru_shrink_active": ("shrink_active", {"a": "nr_taken", "d": "nr_active", "b": "nr_deactivated",
                                                             "c": "nr_referenced", "priority": "priority",
                                                             "flags": "reclaim_flags"}),
           "mm_vmscan_write_folio": ("write_folio", {"pfn": "pfn", "flags": "reclaim_flags"}),
           "page_fault_user": ("page_fault", {"address": "address", "ip": "ip", "error_code": "error_code"})}


def parse_perfetto(data: bytes, source) -> Capture:
    """The ftrace bundles of a Perfetto trace (and its process tree, for tgids and names). One
    Python step per event: protobuf's messages are objects."""
    # here: protobuf and the perfetto package load only for this format
    from google.protobuf.message import DecodeError
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    cap = Capture(source, "perfetto")
    t = pb.Trace()
    try:
        t.ParseFromString(data)
    except DecodeError as e:
        raise InputError(f"{source}: not a whole Perfetto trace ({e}): cut short, or not a trace") from None
    if not len(t.packet):
        raise InputError(f"{source}: no packets: not a Perfetto trace")
    rows = {}
    overrun = {}                    # FtraceStats phase -> events the ring buffers overwrote so far
    for p in t.packet:
        if p.HasField("process_tree"):
            for proc in p.process_tree.processes:
                if proc.cmdline:
                    cap.names[proc.pid] = os.path.basename(proc.cmdline[0])
                cap.tgids[proc.pid] = proc.pid
            for th in p.process_tree.threads:
                cap.tgids[th.tid] = th.tgid
                if th.name:
                    cap.names[th.tid] = th.name
        if p.HasField("ftrace_stats"):
            overrun[p.ftrace_stats.phase] = sum(int(c.overrun) for c in p.ftrace_stats.cpu_stats)
        if not p.HasField("ftrace_events"):
            continue
        b = p.ftrace_events
        if b.lost_events:
            cap.lost += 1
        if b.HasField("ftrace_clock"):
            cap.clock = pb.FtraceClock.Name(b.ftrace_clock)
        for ev in b.event:
            which = ev.WhichOneof("event")
            if which == "generic":
                g = ev.generic
                spec = GENERIC.get(g.event_name)
                if spec is None:
                    continue
                vals = {}
                for fld in g.field:
                    kind_ = fld.WhichOneof("value")
                    vals[fld.name] = getattr(fld, kind_) if kind_ else 0
                kind, names = spec
                row = {ours: vals.get(theirs, 0) for ours, theirs in names.items()}
            elif which in PB_KINDS:
                kind, names = PB_KINDS[which]
                msg = getattr(ev, which)
                row = {ours: getattr(msg, theirs) for ours, theirs in names.items()}
            else:
                continue
            row.update(t=int(ev.timestamp), tid=int(ev.pid), tgid=-1, comm="")
            rows.setdefault(kind, []).append(row)
    if pb.FtraceStats.END_OF_TRACE in overrun:
        cap.lost += max(0, overrun[pb.FtraceStats.END_OF_TRACE] - overrun.get(pb.FtraceStats.START_OF_TRACE, 0))
    for kind, rs in rows.items():
        df = pd.DataFrame(rs)
        if "tid" in df:
            df["tgid"] = df["tid"].map(cap.tgids).fillna(-1).astype(np.int64)
            df["comm"] = df["tid"].map(cap.names).fillna("")
        cap.kinds[kind] = df
    for kind in ("add", "delete"):
        if kind in cap.kinds:                      # Perfetto's proto has no order: order-0 folios
            df = cap.kinds[kind]
            df["order"] = df["order"].fillna(0).astype(np.int64) if "order" in df else 0
    for kind in ("shrink_inactive",):
        df = cap.kinds.get(kind)
        if df is not None and "e0" in df:
            df["e"] = df.pop("e0").to_numpy(np.int64) | (df.pop("e1").to_numpy(np.int64) << 32)
            df["f"] = df.pop("f0").to_numpy(np.int64) | (df.pop("f1").to_numpy(np.int64) << 32)
    lmk_from_markers(cap)
    df = cap.kinds.get("exit")
    if df is not None and "group_dead" not in df:
        tg = df["tgid"].to_numpy(np.int64)
        df["group_dead"] = ((tg < 0) | (tg == df["pid"].to_numpy(np.int64))).astype(np.int64)
    return cap
