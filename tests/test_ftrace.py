"""`kmemsim trace import ftrace|perfetto` (issue 41): a capture's mm events into a run directory, counted
as the recorder counts them (bpf/filemap.c: a tracked task's add registers the inode; its later adds
and deletes by anyone count), the same from tracefs' text and from a Perfetto trace's ftrace bundles;
the directory is live ground truth for `validate --reuse` (its readers) and `compare`; bad captures
are one line, exit 2, nothing written. The tracefs capture beside a live `kmemsim run` is in
test_ftrace_live.py."""
import json
import os

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core import trace as tr

DEV = (254 << 20) | 0               # s_dev of 254:0
MODEL, OTHER = 0xABC, 0xDEF
T0 = 100_000_000                    # us: 100 s of the trace clock


def ev(us, comm, tid, tgid, name, **f):
    return (T0 + us, comm, tid, tgid, name, f)


def scenario():
    """llama (1000) and its thread 1001 read the model; `other` (2000) reads it before and after;
    kswapd deletes; reclaim, swap-out, RSS, faults, an OOM kill and lmkd's kill; atrace phases."""
    return [
        ev(1, "other", 2000, 2000, "mm_filemap_add_to_page_cache", ino=MODEL, index=0, order=0, pfn=0x10),
        ev(2, "kswapd0", 50, 50, "mm_filemap_delete_from_page_cache", ino=MODEL, index=0, order=0, pfn=0x10),
        ev(3, "llama", 1000, 1000, "tracing_mark_write", text="B|1000|load"),
        ev(4, "llama", 1000, 1000, "sched_process_fork", parent_comm="llama", parent=1000, child_comm="llama", child=1001),
        ev(5, "llama", 1001, 1000, "mm_filemap_add_to_page_cache", ino=MODEL, index=0, order=2, pfn=0x20),
        ev(6, "llama", 1001, 1000, "mm_filemap_fault", ino=MODEL, index=1),
        ev(7, "other", 2000, 2000, "mm_filemap_add_to_page_cache", ino=MODEL, index=8, order=0, pfn=0x30),
        ev(8, "other", 2000, 2000, "mm_filemap_add_to_page_cache", ino=OTHER, index=0, order=0, pfn=0x40),
        ev(9, "kswapd0", 50, 50, "mm_filemap_delete_from_page_cache", ino=MODEL, index=0, order=2, pfn=0x20),
        ev(10, "kswapd0", 50, 50, "mm_filemap_delete_from_page_cache", ino=OTHER, index=0, order=0, pfn=0x40),
        ev(11, "kswapd0", 50, 50, "mm_vmscan_lru_shrink_inactive", a=32, b=20, e0=1, e1=2, f0=3, prio=12),
        ev(12, "llama", 1001, 1000, "mm_vmscan_direct_reclaim_begin"),
        ev(62, "llama", 1001, 1000, "mm_vmscan_direct_reclaim_end", b=7),
        ev(63, "kswapd0", 50, 50, "mm_vmscan_write_folio", pfn=0x50, flags="RECLAIM_WB_ANON|RECLAIM_WB_ASYNC"),
        ev(64, "kswapd0", 50, 50, "mm_vmscan_write_folio", pfn=0x51, flags="RECLAIM_WB_ANON|RECLAIM_WB_ASYNC"),
        ev(65, "kswapd0", 50, 50, "mm_vmscan_write_folio", pfn=0x52, flags="RECLAIM_WB_FILE|RECLAIM_WB_ASYNC"),
        ev(70, "llama", 1000, 1000, "rss_stat", mm_id=77, curr=1, member=1, size=40960),
        ev(71, "llama", 1001, 1000, "rss_stat", mm_id=77, curr=1, member=1, size=81920),
        ev(72, "llama", 1001, 1000, "rss_stat", mm_id=77, curr=1, member=0, size=16384),
        ev(73, "other", 2000, 2000, "rss_stat", mm_id=88, curr=1, member=1, size=999424),
        ev(80, "llama", 1001, 1000, "page_fault_user", address=0x7F0000001000, ip=0x555500001234, error_code=6),
        ev(81, "llama", 1001, 1000, "page_fault_user", address=0x7F0000002000, ip=0x555500001234, error_code=4),
        ev(82, "other", 2000, 2000, "page_fault_user", address=0x7F0000003000, ip=0x555500001234, error_code=4),
        ev(90, "other", 2000, 2000, "mark_victim", victim=2000),
        ev(91, "lmkd", 300, 300, "tracing_mark_write", text="C|300|kill_one_process|2000"),
        ev(92, "lmkd", 300, 300, "tracing_mark_write", text="C|300|kill_one_process|0"),
        ev(20_000, "llama", 1000, 1000, "tracing_mark_write", text="E|1000"),
        ev(20_001, "llama", 1001, 1000, "sched_process_exit", exit_comm="llama", pid=1001, group_dead="false"),
        ev(20_002, "llama", 1000, 1000, "sched_process_exit", exit_comm="llama", pid=1000, group_dead="true"),
    ]


def body(name, f):
    """An event's fields as this kernel's TP_printk writes them (/sys/kernel/tracing/events/*/*/format)."""
    if name in ("mm_filemap_add_to_page_cache", "mm_filemap_delete_from_page_cache"):
        return f"dev 254:0 ino {f['ino']:x} pfn=0x{f['pfn']:x} ofs={f['index'] * 4096} order={f['order']}"
    if name == "mm_filemap_fault":
        return f"dev=254:0 ino={f['ino']:x} ofs={f['index'] * 4096}"
    if name == "mm_vmscan_lru_shrink_inactive":
        return (f"nid=0 nr_scanned={f['a']} nr_reclaimed={f['b']} nr_dirty=0 nr_writeback=0 nr_congested=0 "
                f"nr_immediate=0 nr_activate_anon={f['e0']} nr_activate_file={f['e1']} nr_ref_keep={f['f0']} "
                f"nr_unmap_fail=0 priority={f['prio']} flags=RECLAIM_WB_FILE|RECLAIM_WB_ASYNC")
    if name in ("mm_vmscan_direct_reclaim_begin",):
        return "order=0 gfp_flags=GFP_HIGHUSER_MOVABLE|__GFP_COMP"
    if name == "mm_vmscan_direct_reclaim_end":
        return f"nr_reclaimed={f['b']}"
    if name == "mm_vmscan_write_folio":
        return f"page=00000000a1b2c3d4 pfn=0x{f['pfn']:x} flags={f['flags']}"
    if name == "rss_stat":
        kinds = ("MM_FILEPAGES", "MM_ANONPAGES", "MM_SWAPENTS", "MM_SHMEMPAGES")
        return f"mm_id={f['mm_id']} curr={f['curr']} type={kinds[f['member']]} size={f['size']}B"
    if name == "page_fault_user":
        return f"address=0x{f['address']:x} ip=0x{f['ip']:x} error_code=0x{f['error_code']:x}"
    if name == "mark_victim":
        return (f"pid={f['victim']} comm=other total-vm=100kB anon-rss=10kB file-rss:0kB shmem-rss:0kB uid=0 "
                "pgtables=4kB oom_score_adj=0")
    if name == "sched_process_fork":
        return f"comm={f['parent_comm']} pid={f['parent']} child_comm={f['child_comm']} child_pid={f['child']}"
    if name == "sched_process_exit":
        return f"comm={f['exit_comm']} pid={f['pid']} prio=120 group_dead={f['group_dead']}"
    if name == "tracing_mark_write":
        return f["text"]
    raise AssertionError(name)


def text_capture(events, tgid=True, header=True, lost=0):
    lines = []
    if header:
        lines += ["# tracer: nop", "#", f"# entries-in-buffer/entries-written: {len(events)}/{len(events) + lost}   #P:2",
                  "#", "#           TASK-PID     TGID     CPU#  |||||  TIMESTAMP  FUNCTION",
                  "#              | |         |        |   |||||     |         |"]
    for us, comm, tid, tg, name, f in events:
        tgs = f"({tg:>7}) " if tgid else ""
        lines.append(f"{comm:>16}-{tid:<7} {tgs}[001] ..... {us // 1_000_000}.{us % 1_000_000:06d}: {name}: {body(name, f)}")
    return "\n".join(lines) + "\n"


def perfetto_capture(events):
    """The same events as a Perfetto trace: FtraceEventBundle packets with the protos' own events, the
    kernel's newer ones as generic events, and a process tree for the tgids."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    t = pb.Trace()
    p = t.packet.add()
    p.trusted_packet_sequence_id = 1
    for pid, name in ((1000, "llama"), (2000, "other"), (50, "kswapd0"), (300, "lmkd")):
        pr = p.process_tree.processes.add()
        pr.pid, pr.ppid = pid, 1
        pr.cmdline.append(name)
    th = p.process_tree.threads.add()
    th.tid, th.tgid = 1001, 1000
    b = t.packet.add()
    b.trusted_packet_sequence_id = 1
    bundle = b.ftrace_events
    bundle.cpu = 1
    for us, comm, tid, tg, name, f in events:
        e = bundle.event.add()
        e.timestamp, e.pid = us * 1000, tid
        if name in ("mm_filemap_add_to_page_cache", "mm_filemap_delete_from_page_cache"):
            m = getattr(e, name)
            m.i_ino, m.s_dev, m.index, m.pfn = f["ino"], DEV, f["index"], f["pfn"]
            if f["order"]:         # the proto has no order: a large folio comes as a generic event
                e.ClearField(name)
                g = e.generic
                g.event_name = name
                for k, v in (("i_ino", f["ino"]), ("s_dev", DEV), ("index", f["index"]), ("pfn", f["pfn"]),
                             ("order", f["order"])):
                    x = g.field.add()
                    x.name, x.uint_value = k, v
        elif name in ("mm_filemap_fault", "mm_vmscan_lru_shrink_inactive", "mm_vmscan_write_folio", "page_fault_user"):
            g = e.generic
            g.event_name = name
            vals = {"mm_filemap_fault": {"i_ino": f.get("ino"), "s_dev": DEV, "index": f.get("index")},
                    "mm_vmscan_lru_shrink_inactive": {"nr_scanned": f.get("a"), "nr_reclaimed": f.get("b"),
                                                      "nr_activate0": f.get("e0"), "nr_activate1": f.get("e1"),
                                                      "nr_ref_keep": f.get("f0"), "priority": f.get("prio"),
                                                      "reclaim_flags": 0x2 | 0x8},
                    "mm_vmscan_write_folio": {"pfn": f.get("pfn"),
                                              "reclaim_flags": (0x1 if "ANON" in str(f.get("flags")) else 0x2) | 0x8},
                    "page_fault_user": {"address": f.get("address"), "ip": f.get("ip"),
                                        "error_code": f.get("error_code")}}[name]
            for k, v in vals.items():
                x = g.field.add()
                x.name, x.uint_value = k, int(v or 0)
        elif name == "mm_vmscan_direct_reclaim_begin":
            e.mm_vmscan_direct_reclaim_begin.order = 0
        elif name == "mm_vmscan_direct_reclaim_end":
            e.mm_vmscan_direct_reclaim_end.nr_reclaimed = f["b"]
        elif name == "rss_stat":
            m = e.rss_stat
            m.mm_id, m.curr, m.member, m.size = f["mm_id"], f["curr"], f["member"], f["size"]
        elif name == "mark_victim":
            e.mark_victim.pid = f["victim"]
        elif name == "sched_process_fork":
            m = e.sched_process_fork
            m.parent_comm, m.parent_pid, m.child_comm, m.child_pid = f["parent_comm"], f["parent"], f["child_comm"], f["child"]
        elif name == "sched_process_exit":
            m = e.sched_process_exit
            m.comm, m.pid, m.tgid = f["exit_comm"], f["pid"], tg
        elif name == "tracing_mark_write":
            e.print.buf = f["text"] + "\n"
        else:
            raise AssertionError(name)
    return t.SerializeToString()


def imported(tmp_path, fmt="ftrace", data=None, args=(), name="run"):
    src = tmp_path / (f"{name}.txt" if fmt == "ftrace" else f"{name}.pftrace")
    if data is None:
        data = text_capture(scenario()) if fmt == "ftrace" else perfetto_capture(scenario())
    (src.write_text if isinstance(data, str) else src.write_bytes)(data)
    out = tmp_path / f"{name}-dir"
    r = CliRunner().invoke(main, ["trace", "import", fmt, str(src), "-o", str(out), *args])
    return r, out


def files(out):
    s = json.loads((out / "summary.json").read_text())
    return {(f["ino"]): (f["pages_added"], f["pages_deleted"], f["filemap_faults"])
            for f in list(s["files"].values()) + s["other_files"]}, s


@pytest.mark.parametrize("fmt", ["ftrace", "perfetto"])
def test_counts_as_the_recorder_counts(tmp_path, fmt):
    r, out = imported(tmp_path, fmt, args=["--pid", "1000"])
    assert r.exit_code == 0, r.output
    got, s = files(out)
    # the model: 1001's order-2 add registers it (4 pages), `other`'s later add of page 8 counts (1),
    # kswapd's later delete counts (4); other's add and kswapd's delete before it do not; OTHER's
    # inode is never registered
    assert got == {MODEL: (5, 4, 1)}
    fm = pd.read_parquet(out / "raw" / "filemap.parquet")
    assert list(fm["kind"].astype(str)) == ["add", "fault", "add", "delete"]
    assert list(fm["tracked"]) == [1, 1, 0, 0] and list(fm["pid"]) == [1000, 1000, 2000, 50]
    assert fm["t"].iloc[0] == 4_000 and fm["dev"].eq(DEV).all()
    assert s["reclaim"]["scanned"] == 32 and s["reclaim"]["reclaimed"] == 20
    assert s["reclaim"]["direct_reclaims"] == 1 and s["reclaim"]["direct_reclaim_ns"] == 50_000
    assert s["swap_out_pages"] == 2 and s["reclaim"]["file_folios_written"] == 1
    assert s["oom_kills"] == 1 and s["lmk_kills"] == 1
    assert s["user_faults"] == 2 and s["peak_resident_bytes"] == 81920 + 16384
    assert s["t0_monotonic_ns"] == T0 * 1000 + 1000 and s["complete"] and s["lost_events"] == 0
    vm = pd.read_parquet(out / "raw" / "vmscan.parquet")
    si = vm[vm["kind"] == "shrink_inactive"].iloc[0]
    assert (si["a"], si["b"], si["e"], si["f"], si["priority"]) == (32, 20, 1 | (2 << 32), 3, 12)
    samples = pd.read_parquet(out / "samples.parquet")
    assert samples["status_RssAnon"].iloc[-1] == 81920 and samples["status_RssFile"].iloc[-1] == 16384
    tasks = pd.read_parquet(out / "raw" / "tasks.parquet")
    assert list(tasks["kind"].astype(str)) == ["fork", "exit", "exit"] and list(tasks["other"]) == [1001, 0, 1]
    assert list(pd.read_parquet(out / "raw" / "lmk.parquet")["victim"]) == [2000]
    mk = pd.read_parquet(out / "raw" / "markers.parquet")
    assert list(mk["text"]) == ["B|1000|load", "E|1000"]
    # the trace: the model under FADV_RANDOM, read where 1001 added and faulted; llama's anon memory
    t = tr.load(str(out / "events.parquet"))
    c = t.cols
    fr = c["op"] == tr.Op.FREAD
    assert list(zip(c["page"][fr], c["npages"][fr])) == [(0, 4), (1, 1)]
    assert (c["op"] == tr.Op.FADVISE).sum() == 1 and t.meta["files"][0]["pages"] == 4
    w = c["op"] == tr.Op.WRITE
    assert c["npages"][w].sum() == 20 and [p["pid"] for p in t.meta["processes"]] == [1000]


def test_text_and_perfetto_give_the_same_run_directory(tmp_path):
    ra, a = imported(tmp_path, "ftrace", name="a")
    rb, b = imported(tmp_path, "perfetto", name="b")
    assert ra.exit_code == 0 and rb.exit_code == 0, ra.output + rb.output
    # every task tracked: other's first add registers the model, so its early delete counts too
    assert files(a)[0] == files(b)[0] == {MODEL: (6, 5, 1), OTHER: (1, 1, 0)}
    for t in ("filemap", "vmscan", "rss", "lmk", "oom"):
        x, y = (pd.read_parquet(d / "raw" / f"{t}.parquet") for d in (a, b))
        pd.testing.assert_frame_equal(x, y, check_dtype=False, check_categorical=False)


def test_tracking_by_comm_follows_forks_without_tgids(tmp_path):
    # tracefs without record-tgid: the thread is tracked because llama forked it
    r, out = imported(tmp_path, data=text_capture(scenario(), tgid=False), args=["--comm", "llama"])
    assert r.exit_code == 0, r.output
    assert files(out)[0] == {MODEL: (5, 4, 1)}


def test_a_run_directory_validate_reads(tmp_path):
    """validate --reuse reads DIR/<limit>/run/ and llama_result.json beside it: the imported capture
    there, the model named by --file, the phases from the reference run's marks."""
    from kmemsim.validate import phases, reference
    model = tmp_path / "model.gguf"
    model.write_bytes(b"\0" * (64 << 10))
    lim = tmp_path / "40pct"
    lim.mkdir()
    src = tmp_path / "c.txt"
    src.write_text(text_capture(scenario()))
    r = CliRunner().invoke(main, ["trace", "import", "ftrace", str(src), "-o", str(lim / "run"), "--pid", "1000",
                                  "--file", f"{MODEL:x}={model}"])
    assert r.exit_code == 0, r.output
    t0 = T0 * 1000 + 1000
    res = {"marks_ns": {"load": t0 + 3_000, "prompt": t0 + 8_000, "decode": t0 + 10_000, "teardown": t0 + 20_000},
           "load_s": 0.0, "ttft_s": 0.0, "decode_steps_s": []}
    (lim / "llama_result.json").write_text(json.dumps(res))
    m = reference.measured(str(lim), str(model))
    assert m["storage_read_bytes"] == 5 * 4096 and m["file_evicted_bytes"] == 4 * 4096
    assert m["swap_out_bytes"] == 2 * 4096 and m["peak_resident_bytes"] == 81920 + 16384
    per, aligned = phases.measured(str(lim / "run"), res, str(model))
    assert aligned == "marks"
    # the tracked tasks' records by phase, as validate reads a recorded run's: 1001's 4 pages at 5 us
    # (load); other's add and kswapd's delete are not the tracked tasks' own
    assert per.loc["load", "file_pages_added"] == 4 and per["file_pages_added"].sum() == 4
    assert per["file_pages_deleted"].sum() == 0


def test_compare_replays_a_run_directory_beside_its_measures(tmp_path):
    # a clean read: the tracked task adds 3 folios of one file, nothing is deleted
    evs = [ev(1, "reader", 700, 700, "mm_filemap_add_to_page_cache", ino=0x77, index=i * 16, order=o, pfn=0x100 + i)
           for i, o in enumerate((0, 2, 4))]
    evs.append(ev(5, "reader", 700, 700, "rss_stat", mm_id=5, curr=1, member=1, size=1 << 20))
    r, out = imported(tmp_path, data=text_capture(evs), args=["--pid", "700"])
    assert r.exit_code == 0, r.output
    c = tmp_path / "cmp"
    r = CliRunner().invoke(main, ["compare", str(out), "--policy", "stock,lru", "--mem", "2G", "-o", str(c)])
    assert r.exit_code == 0, r.output
    live = pd.read_csv(c / "live.csv")
    got = pd.read_csv(c / "summary.csv").set_index("policy")
    assert live["storage_read_bytes"].iloc[0] == (1 + 4 + 16) * 4096
    # with room for it, the replay reads what the capture added, no more (FADV_RANDOM: no readahead)
    assert got.loc["stock", "storage_read_bytes"] == live["storage_read_bytes"].iloc[0]
    assert got.loc["stock", "peak_memory_bytes"] >= (21 + 256) * 4096
    assert "Measured in the run" in (c / "summary.md").read_text()
    r = CliRunner().invoke(main, ["compare", str(tmp_path), "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "not a run directory" in r.output


def _one_line(r, msg):
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("kmemsim: ") and msg in lines[0], r.output


@pytest.mark.parametrize("what,msg", [
    ("no-mm", "no memory-management events"),
    ("torn", "cut short"),
    ("short", "cut short"),
    ("lost", "lost 5 events"),
    ("lost-line", "lost 7 events"),
    ("garbage", "no ftrace event lines"),
    ("bad-field", "cannot read mm_filemap_add_to_page_cache"),
])
def test_bad_captures_are_one_line_exit_2_nothing_written(tmp_path, what, msg):
    text = text_capture(scenario())
    if what == "no-mm":
        text = text_capture([e for e in scenario() if e[4] in ("sched_process_fork", "sched_process_exit")
                             or e[1] == "llama" and e[4] == "tracing_mark_write"])
    elif what == "torn":
        text = text[:-25]
    elif what == "short":
        lines = text.splitlines()
        text = "\n".join(lines[:-3]) + "\n"
    elif what == "lost":
        text = text_capture(scenario(), lost=5)
    elif what == "lost-line":
        lines = text.splitlines()
        text = "\n".join(lines[:10] + ["CPU:1 [LOST 7 EVENTS]"] + lines[10:]) + "\n"
        text = text.replace(f"{len(scenario())}/{len(scenario())}", f"{len(scenario())}/{len(scenario())}")
    elif what == "garbage":
        text = "hello\nworld\n"
    elif what == "bad-field":
        text = text.replace("ino abc pfn=0x20", "ino abc pfn=?", 1)
    r, out = imported(tmp_path, data=text)
    _one_line(r, msg)
    assert not out.exists()
    if what in ("lost", "lost-line"):
        r, out = imported(tmp_path, data=text, args=["--allow-lost"], name="again")
        assert r.exit_code == 0, r.output
        assert json.loads((out / "summary.json").read_text())["lost_events"] in (5, 7)


def test_bad_perfetto_traces_and_options(tmp_path):
    data = perfetto_capture(scenario())
    r, out = imported(tmp_path, "perfetto", data=data[:-7])
    _one_line(r, "not a whole Perfetto trace")
    assert not out.exists()
    r, out = imported(tmp_path, "perfetto", data=b"", name="empty")
    _one_line(r, "no packets")
    r, out = imported(tmp_path, args=["--file", "nothex=/x"], name="f")
    _one_line(r, "--file")
    r, out = imported(tmp_path, args=["--pid", "4242"], name="p")
    _one_line(r, "no event of the tracked tasks")
    assert not out.exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    src = tmp_path / "s.txt"
    src.write_text(text_capture(scenario()))
    r = CliRunner().invoke(main, ["trace", "import", "ftrace", str(src), "-o", str(busy)])
    _one_line(r, "not empty")
    r = CliRunner().invoke(main, ["trace", "import", "ftrace", str(tmp_path / "none.txt"), "-o", str(tmp_path / "n")])
    _one_line(r, "no such file")


def test_hex_numbers_parse_without_a_python_loop():
    import pyarrow as pa
    from kmemsim.live.capture import hex_ints, seconds_to_ns
    vals = ["0x0", "ff", "0x7fffffffffff", "abcdef0123456789", "", "zz"]
    assert hex_ints(pa.array(vals)).tolist() == [0, 255, 0x7FFFFFFFFFFF, 0xABCDEF0123456789, 0, 0]
    assert seconds_to_ns(pa.array(["12620.606939", "1.5", "42"])).tolist() == [12620606939000, 1500000000, 42]
    assert np.array_equal(seconds_to_ns(pa.array(["0.000000001"])), [1])
