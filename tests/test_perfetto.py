"""`kmemsim export perfetto` (issue 41): compare and sweep outputs and run directories as one Perfetto
trace. trace_processor_shell is fetched from the network at first use, which these machines cannot
do, so the trace is read back here with Perfetto's own protos (the `perfetto` package's
perfetto_trace_pb2) the way trace_processor reads TrackEvent: descriptors by uuid, counters and slices
on their tracks, and its values checked against the emulator's counts."""
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "workloads" / "scenarios" / "kv-prealloc-small.toml"
COUNTERS = ["resident file", "resident anon", "zram pool", "free memory", "watermark min", "watermark low",
            "watermark high"]


def read(path):
    """{process name: {track name: {"unit": ..., "events": [(ts, type, name, value, args)]}}}, and the
    packets, from the trace's bytes with Perfetto's protos."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    t = pb.Trace()
    t.ParseFromString(Path(path).read_bytes())
    desc, events = {}, defaultdict(list)
    for p in t.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            desc[d.uuid] = d
        if p.HasField("track_event"):
            e = p.track_event
            args = {a.name: (a.int_value if a.HasField("int_value") else a.string_value) for a in e.debug_annotations}
            events[e.track_uuid].append((p.timestamp, pb.TrackEvent.Type.Name(e.type), e.name, e.counter_value, args))
    out = {}
    for u, d in desc.items():
        if d.HasField("process"):
            out[d.process.process_name] = {"_pid": d.process.pid}
    for u, d in desc.items():
        if d.parent_uuid:
            proc = desc[d.parent_uuid].process.process_name
            unit = pb.CounterDescriptor.Unit.Name(d.counter.unit) if d.HasField("counter") else None
            out[proc][d.name] = {"unit": unit, "events": events.get(u, [])}
    return out, t


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    d = tmp_path_factory.mktemp("pf")
    out = d / "cmp"
    r = CliRunner().invoke(main, ["compare", str(SMALL), "--policy", "stock,is", "--mem", "1G", "--zram",
                                  "zstd:1G", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return d, out


def test_a_compare_exports_its_policies_tracks_and_counts(compared):
    d, out = compared
    r = CliRunner().invoke(main, ["export", "perfetto", str(out), "-o", str(d / "t.pftrace")])
    assert r.exit_code == 0, r.output
    procs, t = read(d / "t.pftrace")
    assert set(procs) == {"cmp: stock", "cmp: is"}
    assert len({p["_pid"] for p in procs.values()}) == 2
    # one packet sequence, its state cleared at its start (what trace_processor needs of TrackEvent)
    assert {p.trusted_packet_sequence_id for p in t.packet} == {1}
    assert t.packet[0].sequence_flags & 1
    tl = pd.read_parquet(out / "timeline.parquet")
    summ = pd.read_csv(out / "summary.csv").set_index("policy")
    for pol in ("stock", "is"):
        tracks = procs[f"cmp: {pol}"]
        g = tl[tl["policy"] == pol]
        for name in COUNTERS:
            assert tracks[name]["unit"] == "UNIT_SIZE_BYTES", name
            assert all(e[1] == "TYPE_COUNTER" for e in tracks[name]["events"])
        ev = tracks["resident file"]["events"]
        assert [e[0] for e in ev] == g["t"].tolist()
        assert [e[3] for e in ev] == (g["nr_file_pages"] * 4096).tolist()
        assert [e[3] for e in tracks["zram pool"]["events"]] == g["zram_mem_used_total"].tolist()
        assert [e[3] for e in tracks["watermark high"]["events"]] == (g["wmark_high"] * 4096).tolist()
        # the emulator's major faults and refaults: every one in some instant's count
        mf = tracks["major faults"]["events"]
        assert all(e[1] == "TYPE_INSTANT" and e[2] == "major faults" for e in mf)
        assert sum(e[4]["count"] for e in mf) == summ.loc[pol, "major_faults"] > 0
        rf = tracks["refaults"]["events"]
        assert sum(e[4]["count"] for e in rf) == g["workingset_refault_file"].iloc[-1] + g["workingset_refault_anon"].iloc[-1]
        assert all(e[4]["count"] == e[4]["file"] + e[4]["anon"] for e in rf)
        # phases: a slice per run of the timeline's phase marks, begins and ends in pairs
        ph = tracks["phases"]["events"]
        begins = [e for e in ph if e[1] == "TYPE_SLICE_BEGIN"]
        assert len(begins) == len([e for e in ph if e[1] == "TYPE_SLICE_END"]) > 3
        names = [n for n in g["phase"] if n]
        assert [e[2] for e in begins] == list(dict.fromkeys(names)) or set(e[2] for e in begins) == set(names)
    # IS swaps the cleared KV pages out: less anonymous memory resident than stock
    peak = lambda pol, tr: max(e[3] for e in procs[f"cmp: {pol}"][tr]["events"])
    assert peak("is", "resident anon") < peak("stock", "resident anon")


def test_a_prediction_and_a_live_run_side_by_side(compared, tmp_path):
    d, out = compared
    # a live run directory: here an imported capture (the recorder's runs are read the same way)
    from test_ftrace import scenario, text_capture
    cap = tmp_path / "c.txt"
    cap.write_text(text_capture(scenario()))
    r = CliRunner().invoke(main, ["trace", "import", "ftrace", str(cap), "-o", str(tmp_path / "phone"), "--pid", "1000"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["export", "perfetto", str(out), str(tmp_path / "phone"), "-o", str(tmp_path / "both.pftrace")])
    assert r.exit_code == 0, r.output
    procs, _ = read(tmp_path / "both.pftrace")
    assert set(procs) == {"cmp: stock", "cmp: is", "phone: live"}
    live = procs["phone: live"]
    samples = pd.read_parquet(tmp_path / "phone" / "samples.parquet")
    assert [e[3] for e in live["resident anon"]["events"]] == samples["status_RssAnon"].tolist()
    assert live["resident anon"]["unit"] == "UNIT_SIZE_BYTES"
    # the capture's atrace phase, its direct reclaim and its kills
    assert [(e[1], e[2]) for e in live["phases"]["events"]] == [("TYPE_SLICE_BEGIN", "load"), ("TYPE_SLICE_END", "")]
    rec = live["reclaim"]["events"]
    assert rec[0][2] == "direct reclaim" and rec[1][0] - rec[0][0] == 50_000 and rec[0][4]["reclaimed"] == 7
    assert sorted(e[2] for e in live["kills"]["events"]) == ["lmkd kill", "oom kill"]


def test_a_sweep_exports_a_process_per_point(tmp_path):
    g = tmp_path / "g.toml"
    g.write_text(f'workload = "{SMALL}"\n[options]\nzram = "zstd:1G"\n[axes]\npolicy = ["stock", "is"]\nmem = ["1G", "2G"]\n')
    r = CliRunner().invoke(main, ["sweep", str(g), "-o", str(tmp_path / "sw"), "--scheduler", "serial"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["export", "perfetto", str(tmp_path / "sw"), "-o", str(tmp_path / "s.pftrace")])
    assert r.exit_code == 0, r.output
    procs, _ = read(tmp_path / "s.pftrace")
    assert set(procs) == {f"sw: policy={p} mem={m}" for p in ("stock", "is") for m in ("1G", "2G")}
    res = pd.read_parquet(tmp_path / "sw" / "results.parquet")
    for _, row in res.iterrows():
        mf = procs[f"sw: policy={row.policy} mem={row.mem}"]["major faults"]["events"]
        assert sum(e[4]["count"] for e in mf) == row.major_faults


def test_bad_inputs_are_one_line_exit_2_nothing_written(compared, tmp_path):
    d, out = compared
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.csv").write_text((out / "summary.csv").read_text())
    for dirs, msg in (([str(tmp_path / "none")], "no such directory"),
                      ([str(old)], "without timeline.parquet"),
                      ([str(out), str(tmp_path)], "not a compare, sweep or run directory")):
        r = CliRunner().invoke(main, ["export", "perfetto", *dirs, "-o", str(tmp_path / "x.pftrace")])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("kmemsim: ") and msg in lines[0], r.output
        assert not (tmp_path / "x.pftrace").exists()
