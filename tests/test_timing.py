"""The time model (kmemsim.engine.time.serial) and device profiles (kmemsim.engine.time.device): seconds = counts x profile."""
import tomllib

import numpy as np
import pandas as pd
import pytest

from kmemsim.engine.time import device, serial as timing
from kmemsim.live import profile
from kmemsim.workload.llama import step_rows
from kmemsim.engine.kernel import Config, Emulator, ffi
from kmemsim.core.errors import InputError
from kmemsim.core.trace import Op, TraceBuilder
from skips import needs_llama_cpp

# A profile with round numbers, so the expected seconds can be worked out by hand.
RAW = {
    "name": "hand", "memory": {"ram": "4G", "available": "2G"}, "kernel": {"zram": "lz4:1G", "read_ahead_kb": 128},
    "storage": {"io_kb": [4, 64], "latency_us": [100, 100], "bandwidth_gbps": [0.4096, 4.096]},
    "zram": {"compress_gbps": {"lz4": 0.4096}, "decompress_gbps": {"lz4": 4.096}, "zero_page_us": 2.0},
    "reclaim": {"scan_us_per_page": 0.5},
    "compute": {"weight_gbps": 10.0, "matmul_gmac_s": 100.0},
}


def hand():
    return device.parse(RAW, "hand.toml")


def test_stall_seconds_from_hand_made_counts():
    d = hand()
    counts = pd.DataFrame([
        # 10 reads of 4 KiB: 10 x 100 us + 10 x 4096 B / 0.4096 GB/s = 1 ms + 0.1 ms
        dict(stall_read_ios=10, stall_read_pages=10),
        # 2 reads of 64 KiB (32 pages): 2 x 100 us + 32 x 4096 / 4.096e9 = 200 us + 32 us
        dict(stall_read_ios=2, stall_read_pages=32),
        # 1000 swap-ins from zram, 300 same-filled, and 100 from the swap zeromap:
        # 700 x 4096 / 4.096e9 = 700 us; 400 x 2 us = 800 us
        dict(stall_swapin_pages=1000, zram_same_reads=300, swpin_zero=100),
        # direct reclaim: 100 compressed (100 x 4096 / 0.4096e9 = 1 ms) and 2000 scanned (x 0.5 us = 1 ms)
        dict(stall_reclaim_swapout=100, stall_reclaim_scanned=2000),
        {},
    ]).fillna(0)
    s = timing.stall_seconds(counts, d, "lz4")
    assert s["read_s"].tolist() == pytest.approx([1.1e-3, 232e-6, 0, 0, 0], abs=1e-12)
    assert s["swapin_s"].tolist() == pytest.approx([0, 0, 1.5e-3, 0, 0], abs=1e-12)
    assert s["reclaim_s"].tolist() == pytest.approx([0, 0, 0, 2e-3, 0], abs=1e-12)
    assert s["stall_s"].tolist() == pytest.approx([1.1e-3, 232e-6, 1.5e-3, 2e-3, 0], abs=1e-12)


def test_kswapd_work_and_its_overlap_with_the_task():
    d = hand()
    # kswapd stole 300 pages: 100 swapped out (pswpout less the task's own 20), 200 dropped from the
    # page cache (file_folio_us: the profile's default), and scanned 1000: on its own core
    counts = pd.DataFrame([dict(pswpout=120, stall_reclaim_swapout=20, pgsteal_kswapd=300, pgscan_kswapd=1000)])
    us = d.task_costs("lz4")
    want = (100 * 4096 / 0.4096e9) + 200 * us["file_folio_us"] * 1e-6 + 1000 * 0.5e-6
    assert timing.kswapd_seconds(counts, d, "lz4")[0] == pytest.approx(want)
    # kswapd ahead of the task costs it nothing; behind, the task waits, and below the min watermark
    # reclaims beside it (__alloc_pages_slowpath -> direct reclaim): the reclaim shared on two cores
    assert timing.kswapd_overlap(2.0, 1.0) == 2.0
    assert timing.kswapd_overlap(1.0, 3.0) == 2.0
    assert timing.kswapd_overlap(1.0, 0.0) == 1.0


def test_a_replay_that_timed_its_reads_is_charged_its_own_waits():
    # kmemsim.validate.predict replays with the profile's read latency and bandwidth (c_ext/bio.c): a task
    # then waits for its folio's bio, queued behind the bios submitted before it, or for a folio
    # still under async readahead; io_wait_ns is what its clock waited. That is the read stall, not
    # the formula's one latency and transfer per synchronous read, which cannot see either wait.
    d = hand()
    counts = pd.DataFrame([dict(stall_read_ios=10, stall_read_pages=10, io_wait_ns=7_000_000),
                           dict(stall_read_ios=0, stall_read_pages=0, io_wait_ns=2_500_000)])
    assert timing.stall_seconds(counts, d, "lz4")["read_s"].tolist() == pytest.approx([1.1e-3, 0.0])
    own = timing.stall_seconds(counts, d, "lz4", read_waits=True)
    assert own["read_s"].tolist() == pytest.approx([7e-3, 2.5e-3])


def test_measured_reclaim_costs_per_folio_and_per_swapped_page():
    # A profile with kmemsim profile's reclaim measurement charges the reclaimer per file folio it
    # drops and per page it swaps out (compression included) instead of the compress speed alone.
    raw = dict(RAW, reclaim={"scan_us_per_page": 0.0, "file_folio_us": 30.0, "swap_page_us": 50.0})
    d = device.parse(raw, "measured.toml")
    counts = pd.DataFrame([dict(stall_reclaim_file_folios=1000, stall_reclaim_swapout=100,
                                stall_reclaim_scanned=5000)])
    # 1000 x 30 us + 100 x 50 us = 35 ms
    assert timing.stall_seconds(counts, d, "lz4")["reclaim_s"].tolist() == pytest.approx([35e-3], abs=1e-12)
    with pytest.raises(InputError):
        device.parse(dict(RAW, reclaim={"scan_us_per_page": 0.0, "file_folio_us": -1}), "bad.toml")


def test_reclaim_cost_model_per_list_folio_and_page():
    # kmemsim profile's reclaim cost model (issue 45): per inactive list shrunk, per file folio
    # dropped and per page of it, per page swapped out; the serial model charges the core's counts so
    # 200 lists x 10 us + 1000 folios x 1 us + 4000 pages x 0.2 us + 100 swapped x 50 us = 8.8 ms
    raw = dict(RAW, reclaim={"scan_us_per_page": 0.0, "file_folio_us": 1.0, "file_page_us": 0.2, "list_us": 10.0,
                             "swap_page_us": 50.0, "recorded": {"list_us": 20.0, "file_page_us": 0.4}})
    d = device.parse(raw, "model.toml")
    counts = pd.DataFrame([dict(stall_reclaim_lists=200, stall_reclaim_file_folios=1000, stall_reclaim_file_pages=4000,
                                stall_reclaim_swapout=100)])
    assert timing.stall_seconds(counts, d, "lz4")["reclaim_s"].tolist() == pytest.approx([8.8e-3], abs=1e-12)
    rec = d.task_costs("lz4:1G", recorded=True)
    assert (rec["list_us"], rec["file_page_us"], rec["file_folio_us"]) == (20.0, 0.4, 1.0)
    cfg = Config(**{k: v for k, v in d.task_costs("lz4:1G").items()})
    assert (cfg.list_us, cfg.file_page_us) == (10.0, 0.2)


def test_the_reclaim_fit_recovers_known_costs():
    # profile.fit_reclaim: non-negative least squares of each call's duration on its lists, folios,
    # their pages and pages swapped; calls made from known costs give them back
    rng = np.random.default_rng(1)
    calls = pd.DataFrame({"lists": rng.integers(1, 12, 500), "folios": rng.integers(0, 40, 500),
                          "anon_pages": rng.integers(0, 32, 500)}).astype(float)
    calls["folio_pages"] = calls["folios"] * rng.choice([1, 2, 4, 16], 500)
    calls["ns"] = 10e3 * calls["lists"] + 1.3e3 * calls["folios"] + 150 * calls["folio_pages"] + 7e3 * calls["anon_pages"]
    f = profile.fit_reclaim(calls)
    assert (f["list_us"], f["file_folio_us"], f["file_page_us"], f["swap_page_us"]) == \
        pytest.approx((10.0, 1.3, 0.15, 7.0), rel=1e-6)
    assert f["explained"] == pytest.approx(1.0)


def test_a_profile_keeps_reclaim_as_a_recorded_run_pays_it():
    # kmemsim profile times reclaim unrecorded (PSI) and keeps, beside it, what the recorded run paid
    # (the recorder's probes fire inside reclaim: 2 us against 14 us per file folio on this machine,
    # docs/validation.md): validate predicts its recorded runs with those, predict the device
    # unobserved. A profile without them charges the one cost either way.
    rc = {"scan_us_per_page": 0.0, "file_folio_us": 2.0, "swap_page_us": 14.0,
          "recorded": {"file_folio_us": 13.8, "swap_page_us": 35.3}}
    d = device.parse(dict(RAW, reclaim=rc), "measured.toml")
    quiet, rec = d.task_costs("lz4:1G"), d.task_costs("lz4:1G", recorded=True)
    assert (quiet["file_folio_us"], quiet["swapout_us"]) == (2.0, 14.0)
    assert (rec["file_folio_us"], rec["swapout_us"]) == (13.8, 35.3)
    old = device.parse(dict(RAW, reclaim={k: rc[k] for k in ("scan_us_per_page", "file_folio_us", "swap_page_us")}),
                       "old.toml")
    assert old.task_costs("lz4:1G", recorded=True) == old.task_costs("lz4:1G")


def test_io_size_interpolates_between_table_points():
    d = hand()
    # log-linear between 4 KiB and 64 KiB: 16 KiB is halfway in log2 -> bandwidth halfway
    assert d.read_bandwidth(16 * 1024) == pytest.approx((0.4096 + 4.096) / 2 * 1e9)
    assert d.read_bandwidth(1 << 30) == pytest.approx(4.096e9)      # clamped past the table
    assert d.read_latency_s(4096) == pytest.approx(100e-6)



def flash_table(**storage):
    """hand() with a measured flash table: its qd 1 column is the QD1 table's rate (4 KiB: 100 us +
    4096 B / 0.4096 GB/s = 110 us; 64 KiB: 116 us), as kmemsim profile writes them from one fio sweep."""
    qd1 = [4096 / 110e-6 / 1e9, 65536 / 116e-6 / 1e9]
    st = {**RAW["storage"], "throughput_io_kb": [4, 64], "qd": [1, 4, 16],
          "throughput_gbps": [[qd1[0], 0.1, 0.12], [qd1[1], 1.6, 1.5]], **storage}
    return device.parse({**RAW, "storage": st}, "table.toml"), qd1


def test_a_measured_flash_table_interpolates_in_log_size_and_log_queue_depth():
    d, qd1 = flash_table()
    # a table point gives its value (a 64 KiB row that falls past queue depth 4, as this machine's
    # 1 MiB reads do, which the QD1-rate-times-depth form cannot)
    for kb, row in zip([4, 64], d.throughput_gbps):
        for q, v in zip([1, 4, 16], row):
            assert d.flash_throughput(kb << 10, q) == pytest.approx(v * 1e9, rel=1e-12)
    # queue depth 1 is the QD1 table's synchronous read
    assert 65536 / d.flash_throughput(65536, 1) == pytest.approx(116e-6)
    # halfway in log size (16 KiB) and log queue depth (8): the mean of the four corners, between them
    mid = d.flash_throughput(16 << 10, 8)
    assert mid == pytest.approx((0.1 + 0.12 + 1.6 + 1.5) / 4 * 1e9)
    assert 0.1e9 < mid < 1.6e9
    # between two depths of one size: between the two, linear in log queue depth
    assert d.flash_throughput(65536, 2) == pytest.approx((qd1[1] + 1.6) / 2 * 1e9)
    assert d.flash_throughput(65536, 8) == pytest.approx((1.6 + 1.5) / 2 * 1e9)
    for S in (4096, 9000, 16 << 10, 40000, 65536):
        for q in (1, 2, 3, 5, 11, 16):
            got = d.flash_throughput(S, q)
            lo, hi = (min(d.flash_throughput(S2, q2) for S2 in (4096, 65536) for q2 in (1, 4, 16)),
                      max(d.flash_throughput(S2, q2) for S2 in (4096, 65536) for q2 in (1, 4, 16)))
            assert lo <= got <= hi
    # arrays in, arrays out
    got = d.flash_throughput(np.array([4096, 65536]), np.array([4, 16]))
    assert got == pytest.approx([0.1e9, 1.5e9])
    # deeper than the table: its deepest column; the host's queue depth still bounds q
    assert d.flash_throughput(65536, 64) == pytest.approx(1.5e9)
    assert flash_table(queue_depth=4)[0].flash_throughput(65536, 16) == pytest.approx(1.6e9)
    # max_gbps defaults to the table's largest value and caps
    assert d.as_dict()["storage"]["max_gbps"] == 1.6 and d.as_dict()["storage"]["qd"] == [1, 4, 16]
    # past the table's sizes: the edge size's throughput, scaled as the QD1 rate goes on (256 KiB:
    # 100 us + 64 us at 4.096 GB/s, against 116 us at 64 KiB; 1 KiB: 100 us + 2.5 us against 110 us)
    big = flash_table(max_gbps=8.0)[0]
    qd1_256k = (256 << 10) / (100e-6 + (256 << 10) / 4.096e9)
    assert big.flash_throughput(256 << 10, 4) == pytest.approx(1.6e9 * qd1_256k / (qd1[1] * 1e9))
    assert big.flash_throughput(1024, 4) == pytest.approx(0.1e9 * (1024 / 102.5e-6) / (qd1[0] * 1e9))
    assert big.flash_throughput(256 << 10, 1) == pytest.approx(qd1_256k)
    # a bad table is an input error naming the key
    for bad, match in (({"qd": [2, 4, 16]}, "qd must be increasing integer queue depths from 1"),
                       ({"throughput_gbps": [[1, 2, 3]]}, "a row of 3 positive GB/s"),
                       ({"throughput_gbps": [[1, 2], [3, 4]]}, "a row of 3 positive GB/s")):
        with pytest.raises(InputError, match=match):
            flash_table(**bad)
    with pytest.raises(InputError, match="qd without throughput_gbps"):
        device.parse({**RAW, "storage": {**RAW["storage"], "qd": [1, 2]}}, "x.toml")


def test_profile_writes_fios_table_which_loads_back_as_the_flash_curve(tmp_path):
    # kmemsim profile's [storage]: the QD1 table from pread's median times per size, and a fio sweep's
    # table (no fio here: a sweep's result by hand, as this machine measured it). The QD1 table
    # reproduces the pread times; flash_throughput gives the sweep's medians at every point
    qds = profile.FIO_QD
    gbps = [[0.099, 0.19, 0.37, 0.46, 0.47, 0.48], [0.42, 0.69, 1.16, 1.78, 2.38, 2.13],
            [1.42, 2.32, 3.66, 4.6, 5.62, 6.63], [3.63, 5.32, 7.13, 7.16, 8.24, 6.93],
            [4.92, 7.96, 7.85, 5.99, 5.88, 5.85]]
    sweep = {"io_kb": list(profile.FIO_KB), "qd": list(qds), "gbps": gbps, "samples": [[[x] for x in r] for r in gbps],
             "engine": "io_uring", "version": "fio-3.33", "seconds": 0.25, "rounds": 1, "elapsed_s": 10.0}
    times = [44.55e-6, 61.28e-6, 99.82e-6, 174.68e-6, 578.24e-6, 1716.25e-6]   # this machine's pread
    st = profile.storage_table(times, sweep=sweep, queue_depth=128)
    st |= {"method": "O_DIRECT pread, queue depth 1", "dir": str(tmp_path), "readahead": None, "fio_error": None}
    m = {"storage": st, "zram": {"lz4": profile.zram_python("lz4", profile.sample_pages(64))}, "compute": None}
    d = device.parse(tomllib.loads(profile.to_toml(m)), "this-machine.toml")
    assert (d.max_gbps, d.queue_depth) == (8.24, 128)
    for kb, t in zip(profile.IO_KB, times):
        S = kb << 10
        assert float(d.read_latency_s(S)) + S / float(d.read_bandwidth(S)) == pytest.approx(t, rel=1e-3)
    for kb, row in zip(profile.FIO_KB, gbps):
        for q, v in zip(qds, row):
            assert d.flash_throughput(kb << 10, q) == pytest.approx(v * 1e9, rel=1e-3)


def test_compute_streams_the_weights_then_does_the_matmuls():
    # kmemsim.workload.llama.TimeModel: W / weight_gbps + (tokens x MACs per token + outputs x MACs
    # per output) / matmul_gmac_s; a phase that is no llama_decode step (0 tokens) costs nothing
    d = hand()
    w = 1e9                                   # 1 GB of weights per step: 0.1 s at 10 GB/s
    # decode: 1 token, 1 output: 0.1 + (1e9 + 2e8) / 100e9 = 0.112 s
    # prefill of 50 tokens, the last with its output: 0.1 + (50e9 + 2e8) / 100e9 = 0.602 s
    # a prefill ubatch before the last (no output row): 0.1 + 50e9 / 100e9 = 0.6 s
    got = timing.compute_seconds([w, w, w, w], [1, 50, 50, 0], [1, 1, 0, 0], 1e9, 2e8, d)
    assert got.tolist() == pytest.approx([0.112, 0.602, 0.6, 0.0])


def test_each_weight_type_at_its_rates_and_each_layer_its_nodes_without_weights():
    # llama.cpp's CPU kernels differ per weight type (f16 rows converted, q4_0 repacked for AVX2), so
    # a device may give each type its pair ([compute.TYPE]); and a layer's ~25 graph nodes without
    # weights (norms, RoPE, softmax, the activations' conversion) cost per layer (the barrier after each
    # node, ggml_graph_compute_thread) and per token row x n_embd (layer_us, activation_ps)
    raw = {**RAW, "compute": {"weight_gbps": 10.0, "matmul_gmac_s": 100.0, "layer_us": 20.0,
                              "activation_ps": 1000.0, "Q4_0": {"weight_gbps": 20.0, "matmul_gmac_s": 400.0}}}
    d = device.parse(raw, "types.toml")
    tm = d.time_model()
    assert tm.ns(1e9, 4e9, "Q4_0") == pytest.approx(1e9 / 20 + 4e9 / 400)       # 60 ms
    assert tm.ns(1e9, 4e9, "F16") == pytest.approx(1e9 / 10 + 4e9 / 100)        # not measured: the pair
    # a step of a model half q4_0, half q8_0 by bytes (2 GB in all), 16 layers of 2048, 8 tokens, 1 output:
    cost = {"Q4_0": (1e9, 1e8, 5e8), "Q8_0": (1e9, 1e8, 0)}
    want = (1e9 / 20 + (8 * 1e8 + 5e8) / 400) + (1e9 / 10 + 8 * 1e8 / 100) + 16 * (20e3 + 1.0 * 8 * 2048)
    assert tm.step_ns(cost, 2e9, 8, 1, 16, 2048) == pytest.approx(want)
    # the serial model charges the same, with the session's layers
    got = timing.compute_seconds([2e9], [8], [1], 2e8, 5e8, d, [cost], [16], [2048])
    assert got[0] == pytest.approx(want * 1e-9)
    assert d.as_dict()["compute"]["layer_us"] == 20.0
    for bad in ({"layer_us": -1.0}, {"activation_ps": "fast"}):
        with pytest.raises(InputError, match="compute"):
            device.parse({**raw, "compute": {**raw["compute"], **bad}}, "bad.toml")


def test_the_generators_clock_and_the_serial_model_charge_a_step_alike(tmp_path):
    # One home for a step's cost: LlamaSession clocks each graph node at its weight's type and each
    # layer's nodes without weights as it starts; TimeModel.step_ns on the session's step_cost must
    # give the same ubatch (the generator also reads the prompt's token_embd rows: < 1% here).
    from kmemsim.workload import synth, llama as lw
    from kmemsim.engine.time.compute import TimeModel
    path = synth.write_model(str(tmp_path / "m.gguf"), "Qwen3-0.6B", "q4_0", layers=3, progress=False)
    tm = TimeModel(10.0, 100.0, by_type={"Q4_0": (40.0, 300.0)}, ns_per_layer=20e3, ns_per_activation=1.0)
    s = lw.LlamaSession(path, TraceBuilder(), time_model=tm, ctx=256, batch=64, ubatch=64)
    t0 = s.load()
    for n, pos in ((64, 0), (1, 64)):
        t1 = s._ubatch(t0, "step", list(range(300, 300 + n)), pos, [0], 1)
        want = tm.step_ns(s.step_cost, s.step_weight_bytes, n, 1, s.hp["n_layer"], s.hp["n_embd"])
        assert t1 - t0 == pytest.approx(want, rel=0.01), n
        # and the layers' share is what the per-layer terms say
        assert tm.layers_ns(3, n, s.hp["n_embd"]) == pytest.approx(3 * (20e3 + n * s.hp["n_embd"]))
        t0 = t1


def test_an_moes_experts_run_at_their_own_rate(tmp_path):
    # ggml computes an MoE's experts (mul_mat_id) row by row per expert, without llamafile_sgemm: kmemsim
    # profile gives them their own MAC rate (by_type["Q4_0 mul_mat_id"]); without it they take their
    # type's pair, and a type not measured the device's
    from kmemsim.engine.time.compute import MUL_MAT_ID, TimeModel
    from kmemsim.workload import synth, llama as lw
    tm = TimeModel(10.0, 100.0, by_type={"Q4_0": (40.0, 300.0), "Q4_0" + MUL_MAT_ID: (40.0, 100.0)})
    assert tm.rates("Q4_0" + MUL_MAT_ID) == (40.0, 100.0)
    assert TimeModel(10.0, 100.0, by_type={"Q4_0": (40.0, 300.0)}).rates("Q4_0" + MUL_MAT_ID) == (40.0, 300.0)
    assert tm.rates("F16" + MUL_MAT_ID) == (10.0, 100.0)
    path = synth.write_model(str(tmp_path / "moe.gguf"), type="q4_0", progress=False, arch="qwen3moe", n_layer=2,
                             n_embd=256, n_ff=128, n_head=4, n_head_kv=2, head_dim=64, n_expert=8,
                             n_expert_used=2, n_vocab=4000)

    def prefill(by):
        s = lw.LlamaSession(path, TraceBuilder(), time_model=TimeModel(10.0, 100.0, by_type=by), ctx=128,
                            batch=64, ubatch=64)
        t0 = s.load()
        return s.serve(t0, 64, 0) - t0, s.step_cost
    fast, cost = prefill({"Q4_0": (40.0, 300.0)})
    slow, _ = prefill({"Q4_0": (40.0, 300.0), "Q4_0" + MUL_MAT_ID: (40.0, 100.0)})
    # the session's step cost keeps the experts' MACs apart; 64 rows through them at a third the rate
    m_id = cost["Q4_0" + MUL_MAT_ID][1]
    assert m_id > 0 and slow - fast == pytest.approx(64 * m_id * (1 / 100 - 1 / 300), rel=0.02)


def test_the_compute_fit_recovers_known_costs():
    # profile.fit_compute: least squares in relative error, costs >= 0. Points made from known costs
    # (two types, two shapes, decode and two prefills) give those costs back.
    true = np.array([1 / 50e9, 1 / 150e9, 1 / 60e9, 1 / 340e9, 0, 0, 20e-6, 10e-12])
    X = []
    for (qi, b, mt, mo, L, d) in ((0, 5e8, 2e8, 3e8, 4, 2048), (1, 3e8, 2e8, 3e8, 4, 2048),
                                  (0, 4e7, 2e7, 2e7, 8, 512), (1, 2e7, 2e7, 2e7, 8, 512)):
        for n in (1, 32, 128):
            row = np.zeros(8)
            row[2 * qi], row[2 * qi + 1] = b, n * mt + mo
            row[6], row[7] = L, L * n * d
            X.append(row)
    X = np.array(X)
    y = X @ true
    p = profile.fit_compute(X, y)
    assert np.allclose(X @ p, y, rtol=1e-4)
    used = [0, 1, 2, 3, 6, 7]
    assert p[used] == pytest.approx(true[used], rel=1e-3)


def test_step_rows_give_the_last_ubatch_of_each_sequence_its_output():
    # llama_batch_allocr / split_simple: n_batch chunks cut into n_ubatch pieces, per sequence; the
    # prompt's last token of each sequence asks for logits (llama-cpp-python eval: logits[-1])
    from kmemsim.workload.llama import split_prompt
    rows = lambda *a: [(n, o) for _, _, n, o in split_prompt(*a)]
    assert rows(300, 256, 128, 1) == [(128, 0), (128, 0), (44, 1)]
    assert rows(100, 512, 512, 2) == [(100, 1), (100, 1)]


def test_phase_times_and_metrics_on_a_hand_made_request():
    d = hand()
    occ = pd.DataFrame({
        "t": [0, 1, 2, 3, 4, 5, 6],
        "pid": [1, 1, 1, 1, 1, 2, 1],
        "name": ["request 0", "prefill ubatch 0", "decode token 0", "decode token 1", "decode token 2",
                 "switch to app", "request 0 end"],
        "kind": ["request", "prefill", "decode", "decode", "decode", "switch", "end"],
        "request": ["request 0"] * 5 + ["", ""],
        "ubatch": [-1, 0, -1, -1, -1, -1, -1],
        "weight_bytes": [0, 1e9, 1e9, 1e9, 1e9, 0, 0],
        "macs_per_token": [1e9] * 5 + [0, 1e9],
        "macs_per_output": [2e8] * 5 + [0, 2e8],
    })
    per_phase = pd.DataFrame({k: [0] * 7 for k in timing.STALL_COUNTERS})
    per_phase.loc[1, ["stall_read_ios", "stall_read_pages"]] = [10, 10]      # 1.1 ms in the prompt
    per_phase.loc[3, ["stall_swapin_pages"]] = [1000]                        # 1 ms in token 1
    per_phase.loc[5, ["stall_read_ios", "stall_read_pages"]] = [2, 32]       # 232 us in the switch
    tok, outs = step_rows(occ, {"request 0": 50}, batch=512, ubatch=512, seqs=1)
    assert tok.tolist() == [0, 50, 1, 1, 1, 0, 0]
    assert outs.tolist() == [0, 1, 1, 1, 1, 0, 0]
    pt = timing.phase_times(per_phase, occ, d, "lz4", tok, outs)
    m = timing.metrics(pt)
    # compute: prefill 0.1 + (50e9 + 2e8) / 100e9 = 0.602 s, decode 0.1 + 1.2e9 / 100e9 = 0.112 s
    assert m["ttft_s"] == pytest.approx(0.602 + 1.1e-3)
    assert m["tpot_s"] == pytest.approx(0.112)                   # median of 0.112, 0.113, 0.112
    assert m["request_latency_s"] == pytest.approx(0.602 + 1.1e-3 + 3 * 0.112 + 1e-3)
    assert m["switch_latency_s"] == pytest.approx(232e-6)


def _interleaved_trace():
    b = TraceBuilder()
    b.process(0, 1, "llm")
    b.process(0, 2, "app")
    m1 = b.mmap(0, 1, "a", 64)
    m2 = b.mmap(0, 2, "b", 64)
    b.phase(10, 1, "decode token 0")
    b.event(11, 1, Op.WRITE, m1, 0, 8)
    b.phase(12, 2, "switch to app")
    b.event(12, 2, Op.WRITE, m2, 0, 16)        # the switch burst
    b.event(13, 2, Op.SET_OOM_ADJ, arg=900)    # not a phase: the app goes to the background
    b.event(14, 1, Op.WRITE, m1, 8, 4)         # the LLM again, while the app is foreground
    b.event(15, 2, Op.WRITE, m2, 16, 2)        # the app's later churn
    b.phase(20, 1, "decode token 0")           # same name, second occurrence
    b.event(21, 1, Op.WRITE, m1, 12, 1)
    return b.build()


def test_split_phases_charges_each_event_to_its_own_process_phase():
    tr = _interleaved_trace()
    tr2, occ = timing.split_phases(tr)
    assert occ["name"].tolist() == ["decode token 0", "switch to app", "foreground app", "decode token 0"]
    assert occ["pid"].tolist() == [1, 2, 2, 1]
    res = Emulator(Config(mem="64M")).replay(tr2)
    faults = res.per_phase["pgfault"].tolist()
    # occurrence 0: 8 + 4 pages of the LLM; switch: 16 pages; foreground: 2; second decode: 1
    assert faults == [12, 16, 2, 1]
    assert res.summary["pgfault"] == Emulator(Config(mem="64M")).replay(tr).summary["pgfault"]


def test_bundled_device_profiles_load_and_map_onto_config():
    names = device.names()
    for n in ("galaxy-s25plus", "oneplus-12", "xiaomi-14", "this-machine"):
        assert n in names
    for n in names:
        d = device.load(n)
        kw = d.config_kwargs()
        Config(mem=d.available, **kw).to_c(ffi)            # every kernel key is a valid Config field
        assert d.zram_algo(kw.get("zram"))
        assert (np.diff(d.io_kb) > 0).all()
    s25 = device.load("galaxy-s25plus")
    assert s25.kernel["prefault_young"] is False                # arm64
    assert s25.read_bandwidth(2 << 20) == pytest.approx(3.83e9)  # mzCache weight read on the S25+


def test_bad_profiles_are_input_errors():
    with pytest.raises(InputError, match="unknown device"):
        device.load("no-such-phone")
    bad = {**RAW, "kernel": {"read_ahead": 128}}
    with pytest.raises(InputError, match="not an emulator setting"):
        device.parse(bad, "x.toml")
    bad = {**RAW, "storage": {"io_kb": [64, 4], "latency_us": [1, 1], "bandwidth_gbps": [1, 1]}}
    with pytest.raises(InputError, match="io_kb must increase"):
        device.parse(bad, "x.toml")
    old = {**RAW, "compute": {"decode_weight_gbps": 10.0, "prefill_weight_gbps": 100.0}}
    with pytest.raises(InputError, match="old time model"):         # a profile from before session 9
        device.parse(old, "x.toml")


@pytest.mark.llama
def test_profile_fits_llama_cpp_speed_on_the_counts_the_generator_uses(tmp_path):
    # kmemsim profile's compute: real llama.cpp on a synthetic model, timed, and the two rates fitted
    # on the weight bytes and MACs kmemsim.workload.llama counts for that model (step_cost); what it
    # writes loads back as a profile whose TimeModel has those rates.
    needs_llama_cpp()
    from kmemsim.workload import synth
    from kmemsim.engine.time.compute import TimeModel
    from kmemsim.workload import llama as lw
    path = synth.write_model(str(tmp_path / "m.gguf"), "Qwen3-0.6B", "q8_0", layers=2, progress=False)
    cp = profile.compute(prompts=(8, 32), decode=4, rounds=2, path=path)
    assert cp is not None and cp["weight_gbps"] > 0 and cp["matmul_gmac_s"] > 0
    s = lw.LlamaSession(path, TraceBuilder(), time_model=TimeModel(1.0, 1.0))
    assert (cp["weight_bytes_per_step"], cp["macs_per_token"], cp["macs_per_output"]) == \
        (s.step_weight_bytes, *s.step_macs)
    text = f"[compute]\n{profile.compute_toml(cp)}\n"
    raw = {**RAW, "compute": tomllib.loads(text)["compute"]}
    tm = device.parse(raw, "m.toml").time_model()
    assert tm.weight_gbps == pytest.approx(cp["weight_gbps"], rel=1e-3)
    assert tm.matmul_gmac_s == pytest.approx(cp["matmul_gmac_s"], rel=1e-3)


@pytest.mark.llama
def test_profile_fits_types_and_layers_over_two_shapes(tmp_path):
    # kmemsim profile's compute_model: real llama.cpp on synthetic models of two shapes x two types,
    # one fit of each type's rates and the shared per-layer costs; its TOML loads back as a device
    # whose TimeModel has them, and the fit holds its own points (a narrow and a wide shape together,
    # which one pair of rates could not: docs/validation.md, "Compute")
    needs_llama_cpp()
    shapes = (("wide", dict(arch="llama", n_layer=2, n_embd=1024, n_ff=2816, n_head=8, n_head_kv=4, n_vocab=8000)),
              ("narrow", dict(arch="llama", n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2, n_vocab=8000)))
    cp = profile.compute_model(prompts=(8, 32), decode=4, rounds=2, shapes=shapes, types=("q8_0", "f16"))
    assert cp is not None and set(cp["by_type"]) == {"Q8_0", "F16"} and len(cp["models"]) == 4
    assert cp["fit_error_median"] < 0.25, cp
    tm = device.parse({**RAW, "compute": tomllib.loads(f"[compute]\n{profile.compute_toml(cp)}\n")["compute"]},
                      "m.toml").time_model()
    assert tm.rates("F16") == pytest.approx((cp["by_type"]["F16"]["weight_gbps"], cp["by_type"]["F16"]["matmul_gmac_s"]), rel=1e-3)
    assert tm.ns_per_layer == pytest.approx(cp["layer_us"] * 1e3, rel=1e-3, abs=1.0)


def test_profile_measures_storage_and_compression_quickly(tmp_path):
    st = profile.storage(str(tmp_path), file_mb=8, seconds_per_size=0.02)
    assert len(st["bandwidth_gbps"]) == len(st["io_kb"]) and min(st["bandwidth_gbps"]) > 0
    # the table ends with the requests readahead issues (max_sectors_kb, a cold file's MAP_POPULATE),
    # and the emulator reads at that size's bandwidth (read_pages() submits readahead's bios)
    max_kb = profile._read_ahead_kb(str(tmp_path))[1]
    if st["readahead"]:                  # the point, where the device takes requests over 2 MiB
        assert st["io_kb"][-1] == max_kb and st["bandwidth_gbps"][-1] == round(st["readahead"]["gbps"], 4)
        d = device.parse({**RAW, "storage": {k: st[k] for k in ("io_kb", "latency_us", "bandwidth_gbps")},
                          "kernel": {"max_sectors_kb": max_kb}}, "m.toml")
        assert d.task_costs("lz4:1G")["io_read_gbps"] == pytest.approx(st["readahead"]["gbps"], rel=1e-3)
    else:
        assert st["io_kb"] == profile.IO_KB
    z = profile.zram_python("lz4", profile.sample_pages(64))
    assert z["compress_gbps"] > 0 and z["decompress_gbps"] > 0 and z["ratio"] > 1.0
    m = {"storage": st, "zram": {"lz4": z}, "compute": None}
    d = device.parse(tomllib.loads(profile.to_toml(m)), "this-machine.toml")
    assert d.compress_gbps["lz4"] == pytest.approx(z["compress_gbps"], rel=1e-2)


@pytest.mark.live
def test_profile_measures_what_reclaim_costs(tmp_path):
    # The reclaim benchmark of kmemsim profile, on the live kernel: a mapped file four times its
    # cgroup scanned twice (no swap), then an anonymous buffer three times the cgroup written twice
    # (lz4 zram). Each pass over the buffer must push at least twice the cgroup out to swap.
    import os
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    r = profile.reclaim(str(tmp_path))
    assert r["file_folios"] > 0 and r["file_folio_us"] > 0
    # each cost the median of three runs (one run's moved 2.1-13.8 us per folio on this machine),
    # the counts the median run's
    assert r["rounds"] == 3
    if "model" not in r:                # without llama-cpp-python: the per-run costs, their median
        assert r["file_folio_us"] == pytest.approx(sorted(r["file_folio_us_rounds"])[1], abs=0.01)
    # two passes over a file four times the cgroup: reclaim drops at least all but a cgroup's worth
    # of each pass (the pages of mm_filemap_delete_from_page_cache records), in folios of 1 << order
    # pages (an mm_filemap_fault record is no folio dropped)
    assert r["file_pages"] >= 2 * 3 * r["limit"] // 4096
    assert r["file_folios"] <= r["file_pages"]
    assert r["swapped_pages"] >= 2 * r["limit"] // 4096 and r["swap_page_us"] > 0
    # the time is the unrecorded run's memory stall (PSI: psi_memstall_enter() around
    # try_to_free_mem_cgroup_pages() in try_charge_memcg()), which a run that reclaims has. It is
    # another run than the recorded one, and the two need not do the same work: on session 25's
    # machine the same file benchmark made 703-2,022 memcg reclaim calls in four unrecorded runs,
    # and the unrecorded stall exceeded the recorded run's reclaim time in one round of nine and in
    # one CI run (docs/validation-notes.md, "Unobserved times"), so the two runs are not compared here
    if os.path.exists("/proc/pressure/memory"):
        assert r["time"] == "psi"
        assert r["file_s"] > 0 and r["anon_s"] > 0 and r["file_s_recorded"] > 0 and r["anon_s_recorded"] > 0
    m = {"storage": profile.storage(str(tmp_path), file_mb=8, seconds_per_size=0.02),
         "zram": {"lz4": profile.zram_python("lz4", profile.sample_pages(64))}, "compute": None, "reclaim": r}
    d = device.parse(tomllib.loads(profile.to_toml(m)), "this-machine.toml")
    assert d.file_folio_us == pytest.approx(r["file_folio_us"], rel=1e-2)
    assert d.swap_page_us == pytest.approx(r["swap_page_us"], rel=1e-2)
    if r["time"] == "psi":              # the recorded run's costs kept beside (validate's runs pay them)
        assert d.recorded == pytest.approx(r["recorded"], rel=1e-2)
        assert d.recorded["swap_page_us"] >= d.swap_page_us
    if "model" in r:
        # the cost model from the calls of the three benchmarks (llama.cpp's run among them): a list
        # shrunk and a page swapped cost something on every machine (shrink_inactive_list() takes
        # the LRU lock and drains the per-CPU batches; zram compresses the page), and the fit gives
        # back the calls' time within a fifth
        m = r["model"]
        assert m["calls"] > 1000 and m["list_us"] > 0 and m["swap_page_us"] > 0
        assert 0.8 < m["explained"] < 1.2, m
        assert (d.list_us, d.file_page_us) == pytest.approx((r["list_us"], r["file_page_us"]), rel=1e-2, abs=1e-3)
