"""The pipeline time model (kmemsim.engine.time.pipeline): overlapped streams on the flash, pools of
cores and other resources; a request's time is its critical path. And the flash model it times reads
with (kmemsim.engine.time.device.Device.flash_throughput)."""
import math
import random
import time

import numpy as np
import pytest

from kmemsim.core.errors import InputError
from kmemsim.engine.time import device
from kmemsim.engine.time.pipeline import Pipeline, serial
from kmemsim.report import compare
from kmemsim.workload import llama as lw, synth

# A profile with round numbers (as tests/test_timing.py's): a 64 KiB read at queue depth 1 takes
# 100 us + 65536 B / 4.096 GB/s = 116 us, so 65536 / 116e-6 = 0.565 GB/s alone.
RAW = {
    "name": "hand", "memory": {"ram": "4G", "available": "2G"}, "kernel": {"zram": "lz4:1G"},
    "storage": {"io_kb": [4, 64], "latency_us": [100, 100], "bandwidth_gbps": [0.4096, 4.096],
                "max_gbps": 2.0, "queue_depth": 32},
    "zram": {"compress_gbps": {"lz4": 0.4096}, "decompress_gbps": {"lz4": 4.096}, "zero_page_us": 2.0},
    "reclaim": {"scan_us_per_page": 0.5},
    "compute": {"weight_gbps": 10.0, "matmul_gmac_s": 100.0},
}
KB64 = 64 << 10
QD1_64K = 116e-6


def hand(**storage):
    return device.parse({**RAW, "storage": {**RAW["storage"], **storage}}, "hand.toml")


def one_line_error(fn, match):
    with pytest.raises(InputError, match=match) as e:
        fn()
    assert "\n" not in str(e.value)
    return str(e.value)


# ------------------------------------------------------------------------------------------------
# Scheduling: streams, dependencies, pools

def test_hand_computed_dag_makespan_and_critical_path():
    p = Pipeline()
    cpu = p.cores("cpu", 2)
    gpu = p.resource("gpu", 1)
    c1, c2, c3 = (p.stream(n, cpu) for n in ("c1", "c2", "c3"))
    g = p.stream("g", gpu)
    A = c1.work("A", 1.0)
    B = c2.work("B", 2.0)
    C = c3.work("C", 2.0)            # three ready at 0 on two cores: C waits for A's core
    A2 = c1.work("A2", 0.5)          # ready at 1 (after A), behind C, which was ready first
    G1 = g.work("G1", 0.5, after=[B])
    G2 = g.work("G2", 1.0, after=[C])
    s = p.run()
    # By hand: A 0-1, B 0-2; C gets A's core at 1, 1-3; A2 gets B's core at 2, 2-2.5;
    # G1 after B: 2-2.5; G2 after G1 (2.5) and C (3): 3-4.
    want = {A: (0, 1), B: (0, 2), C: (1, 3), A2: (2, 2.5), G1: (2, 2.5), G2: (3, 4)}
    assert {t: (s.start(t), s.end(t)) for t in want} == want
    assert s.ready(C) == 0 and s.ready(A2) == 1          # both waited for a core
    assert s.makespan == 4
    # G2's last constraint was C (dependency, 3 > G1's 2.5); C waited for the core A freed at 1
    assert s.critical_path == [A, C, G2]
    assert s.busy("c1") == 1.5 and s.busy(g) == 1.5 and s.busy("c3") == 2.0
    # overlapped: below the sum of the tasks (7 s), the serial model's time
    assert s.makespan < sum(t.seconds for t in s.tasks) == 7.0


def test_a_stream_runs_in_order_and_a_gpu_with_one_slot_serves_one_stream_at_a_time():
    p = Pipeline()
    gpu = p.resource("gpu", 1)
    a, b = p.stream("a", gpu), p.stream("b", gpu)
    a1, a2 = a.work("a1", 1.0), a.work("a2", 1.0)
    b1 = b.work("b1", 0.25)
    s = p.run()
    # a1 and b1 ready at 0, a1 created first; a2 ready at 1 with b1 waiting since 0: b1 first
    assert [(s.start(t), s.end(t)) for t in (a1, b1, a2)] == [(0, 1), (1, 1.25), (1.25, 2.25)]
    assert s.critical_path == [a1, b1, a2]


def test_tasks_waiting_for_a_slot_get_it_first_ready_first_served():
    # gates on a 3-core pool make c1, b1, d1 ready at 0.2, 0.5, 0.7 while a1 holds the one GPU slot
    p = Pipeline()
    gpu, cpu = p.resource("gpu", 1), p.cores("cpu", 3)
    a, b, c, d = (p.stream(n, gpu) for n in "abcd")
    a1 = a.work("a1", 1.0)
    gb, gc, gd = (p.stream(f"gate {n}", cpu).work(n, x) for n, x in (("b", 0.5), ("c", 0.2), ("d", 0.7)))
    b1 = b.work("b1", 0.25, after=[gb])
    c1 = c.work("c1", 0.25, after=[gc])
    d1 = d.work("d1", 0.25, after=[gd])
    s = p.run()
    assert [(s.ready(t), s.start(t)) for t in (c1, b1, d1)] == [(0.2, 1.0), (0.5, 1.25), (0.7, 1.5)]
    assert s.makespan == 1.75
    # each waited for the slot its predecessor freed, after its own gate had ended
    assert s.critical_path == [a1, c1, b1, d1]


def test_random_dags_keep_every_constraint_and_a_gapless_critical_path():
    # By construction: no task starts before its stream predecessor and dependencies end, no more
    # tasks run on a pool than it has slots, every task starts when its last constraint ends (so a
    # task is never idle with a free slot), and the critical path's durations add up to the makespan.
    rng = random.Random(7)
    for _ in range(20):
        p = Pipeline()
        pools = [p.cores("cpu", rng.randint(1, 3)), p.resource("gpu", 1)]
        streams = [p.stream(f"s{k}", rng.choice(pools)) for k in range(rng.randint(2, 6))]
        tasks = []
        for k in range(rng.randint(5, 60)):
            deps = rng.sample(tasks, min(len(tasks), rng.randint(0, 2)))
            tasks.append(rng.choice(streams).work(f"t{k}", rng.choice([0.0, 0.5, 1.0, rng.random()]), after=deps))
        s = p.run()
        for st in streams:
            for x, y in zip(st.tasks, st.tasks[1:]):
                assert s.start(y) >= s.end(x)
        for t in tasks:
            assert all(s.start(t) >= s.end(d) for d in t.after)
            assert s.end(t) == pytest.approx(s.start(t) + t.seconds)
            assert s.start(t) >= s.ready(t)
        for r in pools:
            on = [t for t in tasks if t.stream.resource is r and t.seconds > 0]
            for t in on:
                x = s.start(t)
                assert sum(s.start(u) <= x < s.end(u) for u in on) <= r.slots
        path = s.critical_path
        assert s.start(path[0]) == 0
        for x, y in zip(path, path[1:]):
            assert s.end(x) == pytest.approx(s.start(y))
        assert sum(t.seconds for t in path) == pytest.approx(s.makespan)
        assert s.end(path[-1]) == s.makespan == max(s.end(t) for t in tasks)


def test_an_empty_pipeline_takes_no_time():
    s = Pipeline().run()
    assert s.makespan == 0 and s.critical_path == []


def test_a_hundred_thousand_tasks_run_in_well_under_a_second():
    # the brief: ~100,000 tasks, well under a second (0.3 s measured here; 2 s leaves room on a
    # shared machine, and fails an event loop that rescans every task at every event)
    d = device.load("galaxy-s25plus")
    t0 = time.perf_counter()
    p = Pipeline(d)
    r, dec, g = p.stream("read", p.flash()), p.cores("decomp", 2), p.stream("gpu", p.resource("gpu", 1))
    ds = [p.stream(f"d{k}", dec) for k in range(2)]
    for k in range(25_000):
        a = r.read(f"c{k}", nbytes=1 << 20, io_bytes=512 << 10, queue_depth=4)
        b = ds[k % 2].work(f"c{k}", seconds=0.0003, after=[a])
        g.work(f"l{k}", seconds=0.0002, after=[b])
        ds[(k + 1) % 2].work(f"x{k}", seconds=0.0001)
    s = p.run()
    assert time.perf_counter() - t0 < 2.0
    assert len(s.tasks) == 100_000
    assert sum(t.seconds for t in s.critical_path) == pytest.approx(s.makespan)


# ------------------------------------------------------------------------------------------------
# Processor sharing on the flash

def test_two_equal_reads_started_together_take_twice_as_long_and_end_together():
    # c_ext/bio.c: the bios in flight share the device, each an equal part (processor sharing);
    # "two windows submitted back to back complete together"
    d = hand()
    p = Pipeline(d)
    f = p.flash()
    alone = p.stream("alone", f).read("x", nbytes=16 * KB64, io_bytes=KB64, queue_depth=4)
    T = Pipeline(d).read_seconds(16 * KB64, KB64, 4)
    assert p.run().end(alone) == pytest.approx(T)

    p = Pipeline(d)
    f = p.flash()
    a = p.stream("a", f).read("a", nbytes=16 * KB64, io_bytes=KB64, queue_depth=4)
    b = p.stream("b", f).read("b", nbytes=16 * KB64, io_bytes=KB64, queue_depth=4)
    s = p.run()
    assert s.end(a) == s.end(b) == pytest.approx(2 * T)
    assert s.busy("a") == pytest.approx(2 * T)


def test_a_read_that_starts_while_another_runs_gets_its_share_from_then_on():
    # X alone for T/2 (half done), then X and Y each at half rate: X's other half takes T, so X ends
    # at 1.5 T; Y has had T/2 of service by then and finishes its other half alone: 2 T.
    d = hand()
    p = Pipeline(d)
    f, cpu = p.flash(), p.cores("cpu", 1)
    x = p.stream("x", f).read("x", nbytes=8 * KB64, io_bytes=KB64, queue_depth=1)
    T = x.seconds
    assert T == pytest.approx(8 * QD1_64K)
    gate = p.stream("cpu", cpu).work("gate", T / 2)
    y = p.stream("y", f).read("y", nbytes=8 * KB64, io_bytes=KB64, queue_depth=1, after=[gate])
    s = p.run()
    assert s.start(y) == pytest.approx(T / 2)
    assert s.end(x) == pytest.approx(1.5 * T)
    assert s.end(y) == pytest.approx(2 * T)
    assert s.critical_path == [gate, y]


def test_a_work_task_on_the_flash_shares_it_like_a_read():
    d = hand()
    p = Pipeline(d)
    f = p.flash()
    a = p.stream("a", f).work("a", 1.0)
    b = p.stream("b", f).work("b", 3.0)
    s = p.run()
    # both at half rate until a has had its 1 s (at 2 s; b has had 1 s too), then b alone for its
    # other 2 s: 4 s
    assert s.end(a) == pytest.approx(2.0) and s.end(b) == pytest.approx(4.0)


# ------------------------------------------------------------------------------------------------
# The flash model

def test_at_queue_depth_1_a_read_takes_its_qd1_time_from_the_profile():
    # the profile's own definition ([storage] comment in kmemsim/data/devices/galaxy-s25plus.toml):
    # one synchronous read of S bytes takes latency(S) + S / bandwidth(S)
    d = hand()
    assert KB64 / d.flash_throughput(KB64, 1) == pytest.approx(QD1_64K)
    p = Pipeline(d)
    r = p.stream("r", p.flash())
    one = r.read("one", nbytes=KB64, io_bytes=KB64, queue_depth=1)
    eight = r.read("eight", nbytes=8 * KB64, io_bytes=KB64, queue_depth=1)
    s = p.run()
    assert s.end(one) - s.start(one) == pytest.approx(QD1_64K)
    assert s.end(eight) - s.start(eight) == pytest.approx(8 * QD1_64K)
    for dev in (device.load("galaxy-s25plus"), device.load("oneplus-12")):
        for S in (4096, 24 << 10, 512 << 10, 2 << 20):
            qd1 = float(dev.read_latency_s(S)) + S / float(dev.read_bandwidth(S))
            assert S / dev.flash_throughput(S, 1) == pytest.approx(qd1)


def test_throughput_grows_with_queue_depth_until_max_gbps_caps_it():
    d = hand()                               # max_gbps 2.0
    qd1 = KB64 / QD1_64K                     # 0.565 GB/s
    got = [d.flash_throughput(KB64, q) for q in (1, 2, 3, 4, 8, 32)]
    assert got == pytest.approx([qd1, 2 * qd1, 3 * qd1, 2e9, 2e9, 2e9])
    # the host's queue depth bounds q: a profile with queue_depth 2 gets no more from 8 in flight
    assert hand(queue_depth=2).flash_throughput(KB64, 8) == pytest.approx(2 * qd1)
    # without the keys: the table's largest bandwidth (4.096 GB/s) and a queue depth of 32
    raw = {**RAW, "storage": {k: RAW["storage"][k] for k in ("io_kb", "latency_us", "bandwidth_gbps")}}
    d0 = device.parse(raw, "plain.toml")
    assert (d0.max_gbps, d0.queue_depth) == (None, 32)
    assert d0.flash_throughput(KB64, 32) == pytest.approx(4.096e9)
    assert d0.flash_throughput(KB64, 7) == pytest.approx(7 * qd1)
    assert d0.as_dict()["storage"]["max_gbps"] == 4.096 and d0.as_dict()["storage"]["queue_depth"] == 32
    # a pipeline read at queue depth 4: 1 MiB at the 2.0 GB/s cap
    p = Pipeline(d)
    r = p.stream("r", p.flash()).read("r", nbytes=16 * KB64, io_bytes=KB64, queue_depth=4)
    assert p.run().end(r) == pytest.approx(16 * KB64 / 2e9)
    # a read cannot keep more I/Os in flight than it has: 2 I/Os at queue depth 4 take one QD1 time
    assert Pipeline(d).read_seconds(2 * KB64, KB64, 4) == pytest.approx(QD1_64K)


def test_the_bundled_ufs4_profiles_cap_at_their_large_read_bandwidth_with_a_32_deep_queue():
    # galaxy-s25plus: mzCache's weight_read_gbps 3.82981 on that phone; UFS 4.0: JEDEC command
    # queue depth 32
    s25 = device.load("galaxy-s25plus")
    assert s25.max_gbps == 3.83 and s25.queue_depth == 32
    assert s25.max_gbps == pytest.approx(s25.extra["reference"]["mzcache_weight_read_gbps"], abs=0.005)
    assert s25.flash_throughput(512 << 10, 32) == pytest.approx(3.83e9)
    op = device.load("oneplus-12")
    assert op.max_gbps == 3.45 and op.queue_depth == 32
    assert s25.as_dict()["storage"]["max_gbps"] == 3.83


def test_bad_flash_keys_are_one_line_errors_naming_the_key():
    one_line_error(lambda: hand(max_gbps=0), "max_gbps")
    one_line_error(lambda: hand(max_gbps="fast"), "max_gbps")
    one_line_error(lambda: hand(queue_depth=0), "queue_depth")
    one_line_error(lambda: hand(queue_depth=2.5), "queue_depth")
    one_line_error(lambda: hand().flash_throughput(KB64, 0), "queue_depth")


# ------------------------------------------------------------------------------------------------
# mzCache's equal-finish split

def test_mzcache_equal_finish_split_finishes_both_streams_together_and_any_other_split_later():
    # mzcache-project/mzcache, mzcache/src/mzcache_profile.cpp, derive_decomp_load_ratio():
    # "equal-finish split between the decompress and store-read swap-in streams":
    # decomp_load_ratio = D / (D + R_kv). N bytes, a share ratio decompressed at D and the rest read
    # from flash at R, end together at N / (D + R); any other split leaves one stream longer.
    dev = device.load("galaxy-s25plus")
    io, qd = 512 << 10, 4
    R = dev.flash_throughput(io, qd)
    D = 5.92561e9          # [codecs] flexgen8_decomp_gbps of the galaxy-s25plus profile (mzCache's)
    assert D == dev.engine_costs()["flexgen8_decomp_gbps"] * 1e9
    N = 256 << 20

    def run(ratio):
        p = Pipeline(dev)
        dec = p.stream("decomp", p.cores("decomp", 1)).work("decompress", N * ratio / D)
        rd = p.stream("read", p.flash()).read("read", nbytes=N * (1 - ratio), io_bytes=io, queue_depth=qd)
        s = p.run()
        return s, dec, rd

    ratio = D / (D + R)
    s, dec, rd = run(ratio)
    assert s.end(dec) == pytest.approx(s.end(rd), rel=1e-9)
    assert s.makespan == pytest.approx(N / (D + R), rel=1e-9)
    for other in (0.0, 0.3, ratio - 0.01, ratio + 0.01, 0.8, 1.0):
        assert run(other)[0].makespan > s.makespan * (1 + 1e-6)


# ------------------------------------------------------------------------------------------------
# The serial model as the one-stream case

def test_serial_is_the_one_stream_pipeline_of_the_phase_times():
    dev = device.load("galaxy-s25plus")
    tr = lw.generate(synth.layout_from_preset("Qwen3-0.6B", type="q4_0", layers=2), prompt=64, decode=4, ctx=512)
    # a memcg limit below the model's pages: read and reclaim stalls beside the compute
    cfg = compare.base_config(dev, memcg_limit="64M")
    wl = compare.Workload(tr, "qwen3", "test", {"request 0": 64})
    pt = compare.run(wl, ["stock"], dev, cfg, progress=False).runs[0].phases   # split, replayed, timed
    assert pt["stall_s"].sum() > 0 and pt["compute_s"].sum() > 0
    s = serial(pt)
    assert s.makespan == pytest.approx(pt["time_s"].sum(), rel=1e-12)
    assert [s.start(t) for t in s.tasks] == pytest.approx(np.concatenate([[0], np.cumsum(pt["time_s"])[:-1]]))
    assert s.busy("serial") == pytest.approx(s.makespan)
    assert len(s.critical_path) == len(pt)


# ------------------------------------------------------------------------------------------------
# Bad input

def test_bad_input_is_a_one_line_input_error():
    d = hand()
    p = Pipeline(d)
    f = p.flash()
    assert p.flash() is f
    r = p.stream("r", f)
    c = p.stream("c", p.cores("cpu", 2))
    one_line_error(lambda: c.work("neg", -1.0), "seconds must be >= 0")
    one_line_error(lambda: c.work("nan", math.nan), "seconds must be finite")
    one_line_error(lambda: r.read("neg", nbytes=-1, io_bytes=KB64), "nbytes must be >= 0")
    one_line_error(lambda: r.read("io", nbytes=KB64, io_bytes=0), "io_bytes must be > 0")
    one_line_error(lambda: r.read("qd", nbytes=KB64, io_bytes=KB64, queue_depth=0), "queue_depth must be >= 1")
    one_line_error(lambda: c.read("cpu", nbytes=KB64, io_bytes=KB64), "needs a stream on the flash")
    other = Pipeline()
    t = other.stream("o", other.resource("gpu")).work("o", 1.0)
    one_line_error(lambda: c.work("x", 1.0, after=[t]), "another pipeline")
    one_line_error(lambda: c.work("x", 1.0, after=["not a task"]), "takes tasks")
    one_line_error(lambda: p.stream("x", other.resource("gpu2")), "not a resource of this pipeline")
    one_line_error(lambda: p.stream("r", f), "exists already")
    one_line_error(lambda: p.cores("none", 0), "at least 1 slot")
    one_line_error(lambda: Pipeline().flash(), "no device")
    s = p.run()
    one_line_error(p.run, "has run already")
    one_line_error(lambda: c.work("late", 1.0), "has run")
    one_line_error(lambda: s.busy("nope"), "no stream 'nope'")
    one_line_error(lambda: s.start(t), "not a task of this schedule")
