"""DynaKV's retrieval (kmemsim.engine.managers.dynakv) against the paper (arXiv 2511.07427;
../shared/reference/seed-systems.md §3): reads as runs of contiguous flash entries issued as whole
pages on the device's flash model, the layouts' contiguity in Fig 12's order, and the experiment's
bad input."""
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core.errors import InputError
from kmemsim.engine.managers import dynakv as dk
from kmemsim.engine.time import device
from kmemsim.workload.llama.keys import kmeans, synthetic_keys


def test_runs_are_the_contiguous_stretches_of_flash_addresses():
    assert list(dk.runs_of([7, 3, 4, 5, 9, 10, 20])) == [3, 1, 2, 1]
    assert list(dk.runs_of([])) == []


def test_a_read_is_whole_pages_on_the_flash_model():
    # O_DIRECT reads whole 4 KiB pages: a run of 3 entries of 256 B is one page; 64 entries are 16 KiB.
    # Alone (queue depth 1) a read of S bytes takes S / flash_throughput(S, 1).
    dev = device.load("oneplus-12")
    assert dk.io_seconds(dev, np.array([3]), 256) == pytest.approx(4096 / dev.flash_throughput(4096, 1))
    assert dk.io_seconds(dev, np.array([64]), 256) == pytest.approx(16384 / dev.flash_throughput(16384, 1))
    # 32 page reads in flight share the device at its queue-depth-32 rate
    assert dk.io_seconds(dev, np.full(32, 1), 256) == pytest.approx(32 * 4096 / dev.flash_throughput(4096, 32))


def contiguity(system, n_prefill=512, n_decode=768):
    keys, q = synthetic_keys(n_prefill, n_decode, 64, 1, np.random.default_rng(3))
    steps = dk.simulate(system, keys[0], q[0], n_prefill, dk.Params(entry_bytes=128), kmeans, np.random.default_rng(1))
    runs = np.concatenate([s.runs for s in steps])
    return runs.mean()


def test_fig12_order_sequence_then_intra_cluster_then_inter_cluster():
    # Fig 12: DynaKV's clusters read with mean contiguous access lengths that grow from sequence order
    # (< 7.9 entries) to intra-cluster placement (25.3) to intra + inter-cluster placement (40.8)
    seq, intra, inter = contiguity("dynakv-seq"), contiguity("dynakv-intra"), contiguity("dynakv")
    assert seq < 7.9 and seq < intra <= inter, (seq, intra, inter)
    # token-level retrieval over sequence order reads shorter runs still than whole clusters do
    assert contiguity("no-cluster") < seq


def test_retrieval_budget_is_a_share_of_the_context():
    # PQCache's selection: clusters in order of q . centroid until they hold the budget's tokens;
    # token-level retrieval takes exactly the budget's tokens
    keys, q = synthetic_keys(512, 256, 64, 1, np.random.default_rng(3))
    for system in ("pqcache", "no-cluster"):
        steps = dk.simulate(system, keys[0], q[0], 512, dk.Params(budget=0.25, entry_bytes=128), kmeans,
                            np.random.default_rng(1))
        need = np.ceil(0.25 * (512 + np.arange(256) + 1))
        got = np.array([s.retrieved for s in steps])
        assert (got >= need).all() if system == "pqcache" else (got == need).all()
    assert got[-1] > got[0]                 # the context grows, so does the retrieval


def test_bad_parameters_are_one_line():
    keys, q = synthetic_keys(256, 8, 64, 1, np.random.default_rng(0))
    with pytest.raises(InputError, match="k=99"):
        dk.simulate("dynakv", keys[0], q[0], 256, dk.Params(budget=0, k=99), kmeans, np.random.default_rng(0))
    with pytest.raises(InputError, match="budget=1.5"):
        dk.simulate("dynakv", keys[0], q[0], 256, dk.Params(budget=1.5), kmeans, np.random.default_rng(0))
    with pytest.raises(InputError, match="buffer=0"):
        dk.simulate("dynakv", keys[0], q[0], 256, dk.Params(buffer=0), kmeans, np.random.default_rng(0))


def test_experiment_quick(tmp_path):
    r = CliRunner().invoke(main, ["experiment", "dynakv-latency", "--quick", "-o", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "x" / "summary.csv")
    assert {"device", "model", "decode_len", "system", "latency_s", "effective_bandwidth_bytes_per_s",
            "mean_contiguous_entries", "bytes_moved"} <= set(df.columns)
    assert {"dynakv", "no-cluster", "pqcache", "clusterkv"} <= set(df["system"])


@pytest.mark.parametrize("args,msg", [
    (["--set", "budget=0", "--set", "k=1000"], "k=1000"),
    (["--set", "budget=nan"], "budget=nan"),
    (["--set", "buffer=0"], "buffer=0"),
    (["--set", "models=Llama-2-7B"], "no GQA"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["experiment", "dynakv-latency", "--quick", *args, "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "o").exists()


def test_a_steps_reads_hide_behind_the_kv_projection_and_no_more():
    # DynaKV §6: the retrieved KV is read while the K and V projections run (after the query is
    # known); attention waits for both. So a read no longer than the KV projection costs nothing, and
    # a longer one shows by what it exceeds it, in every layer.
    dev = device.load("oneplus-12")
    q, kv, att, ffn = 1e-3, 2e-3, 0.5e-3, 3e-3
    compute = 12 * (q + kv + att + ffn)
    assert dk.step_seconds(dev, (q, kv, att, ffn), 0.0, 0.0, 12) == pytest.approx(compute)
    assert dk.step_seconds(dev, (q, kv, att, ffn), 1.5e-3, 0.0, 12) == pytest.approx(compute)
    assert dk.step_seconds(dev, (q, kv, att, ffn), 5e-3, 0.0, 12) == pytest.approx(compute + 12 * 3e-3)
    # the representatives are prefetched from the previous layer's FFN on, and are needed once the
    # query is known: 4 ms of them hide behind FFN + Q projection, only the first layer (which has
    # no FFN before it) waits, by what they exceed its Q + KV projections
    assert dk.step_seconds(dev, (q, kv, att, ffn), 0.0, 4e-3, 12) == pytest.approx(compute + 1e-3)


def test_a_steps_time_is_the_whole_pipelines():
    # step_seconds runs three layers and adds the rest at the third's period: the whole pipeline
    # gives the same time, whichever of compute, KV reads or representatives binds
    dev = device.load("oneplus-12")
    rng = np.random.default_rng(0)
    for _ in range(40):
        comp = tuple(rng.uniform(0.1e-3, 3e-3, 4))
        kv, rep = rng.uniform(0, 8e-3), rng.uniform(0, 8e-3) * rng.integers(0, 2)
        for n in (1, 2, 3, 4, 28):
            assert dk.step_seconds(dev, comp, kv, rep, n) == pytest.approx(dk.layer_pipeline(dev, comp, kv, rep, n),
                                                                           rel=1e-9)
