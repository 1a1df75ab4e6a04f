"""Synthetic GGUF models (kmemsim.workload.synth) and their layout (kmemsim.workload.gguf_layout)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from kmemsim.workload import gguf_layout, synth
from kmemsim.core.errors import InputError
from skips import needs_llama_cpp

SMALL = dict(n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, n_vocab=512)


def _sig(L):
    return [(t.name, t.type, t.shape, t.n_bytes, t.data_offset) for t in L.tensors]


@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_0"])
def test_layout_only_matches_written_file(tmp_path, wtype):
    p = synth.write_model(tmp_path / "m.gguf", type=wtype, progress=False, **SMALL)
    L = gguf_layout.read_layout(p)
    assert _sig(L) == _sig(synth.layout_from_preset(type=wtype, **SMALL))
    assert L.file_size == os.path.getsize(p)


def test_fast_header_parser_agrees_with_gguf_reader(tmp_path):
    # gguf-py's GGUFReader is the reference for data_offset / n_bytes (seed-systems.md §4.6)
    import gguf
    p = synth.write_model(tmp_path / "m.gguf", type="q4_0", progress=False, **SMALL)
    r = gguf.GGUFReader(p)
    L = gguf_layout.read_layout(p)
    assert [(t.name, int(t.data_offset), int(t.n_bytes)) for t in r.tensors] == \
        [(t.name, t.data_offset, t.n_bytes) for t in L.tensors]
    assert L.data_start == r.data_offset


def test_preset_shapes_are_real():
    # llama-2-7b Q4_0 is ~3.8 GB (the real file has a Q6_K output head: 3.83 GB)
    L = synth.layout_from_preset("Llama-2-7B", type="q4_0")
    assert 3.7e9 < L.file_size < 3.9e9 and len(L.tensors) == 2 + 32 * 9 + 1
    q = synth.layout_from_preset("Qwen3-0.6B", type="f16")
    assert q.tensor("blk.0.attn_q.weight").shape == (1024, 2048)      # head_dim 128 x 16 heads
    assert q.tensor("output.weight") is None                          # tied embeddings
    moe = synth.layout_from_preset("Qwen3-30B-A3B", type="q4_0", layers=1)
    assert moe.tensor("blk.0.ffn_up_exps.weight").shape == (2048, 768, 128)
    assert moe.hparams["n_expert_used"] == 8


def test_streaming_write_is_atomic_and_bounded(tmp_path):
    p = tmp_path / "big.gguf"
    synth.write_model(p, "Llama-3.2-1B", "q4_0", layers=1, progress=False)
    assert [f for f in os.listdir(tmp_path) if f.startswith(".tmp-")] == []
    assert gguf_layout.read_layout(p).hparams["n_vocab"] == 128256


def test_bad_shapes():
    with pytest.raises(InputError):
        synth.layout_from_preset("NoSuchModel")
    with pytest.raises(InputError):
        synth.layout_from_preset(n_layer=1, n_embd=100, n_ff=512, n_head=4, n_vocab=512)


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(__file__)))
    return subprocess.run([sys.executable, "-m", "kmemsim.cli", *args], capture_output=True, text=True, env=env)


def _assert_one_line_error(r, needle):
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert needle in r.stderr


def test_bad_input_one_line_exit_2(tmp_path):
    import gguf
    good = synth.write_model(tmp_path / "m.gguf", type="q8_0", progress=False, **SMALL)
    out = str(tmp_path / "t.parquet")
    notg = tmp_path / "x.gguf"
    notg.write_bytes(b"hello world, not a model")
    _assert_one_line_error(_cli("workload", "llama", str(notg), "--prompt", "4", "--decode", "1", "--ctx", "64",
                                "-o", out), "not a GGUF")
    data = open(good, "rb").read()
    for cut, what in ((200, "truncated"), (len(data) - 5000, "truncated")):
        tr = tmp_path / f"cut{cut}.gguf"
        tr.write_bytes(data[:cut])
        _assert_one_line_error(_cli("workload", "llama", str(tr), "--prompt", "4", "--decode", "1", "--ctx", "64",
                                    "-o", out), what)
    w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    w.add_block_count(1)
    w.add_tensor("x", np.zeros(8, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    _assert_one_line_error(_cli("workload", "llama", str(tmp_path / "gpt2.gguf"), "--prompt", "4", "--decode", "1",
                                "--ctx", "64", "-o", out), "not supported")
    _assert_one_line_error(_cli("workload", "llama", good, "--prompt", "4", "--decode", "1", "--ctx", "0",
                                "-o", out), "--ctx")
    _assert_one_line_error(_cli("workload", "llama", good, "--prompt", "600", "--decode", "1", "--ctx", "512",
                                "-o", out), "longer than the context")
    assert not os.path.exists(out)


# --- real llama.cpp: every preset family, reduced to one layer, loads and generates ----------------
FAMILIES = ["Llama-3.2-1B", "Llama-2-7B", "Mistral-7B", "EXAONE-4.0-1.2B", "Qwen2.5-1.5B", "Qwen3-0.6B",
            "Qwen3-30B-A3B", "Mixtral-8x7B"]


@pytest.mark.llama
@pytest.mark.parametrize("preset", FAMILIES)
def test_preset_family_loads_and_generates_in_llama_cpp(tmp_path, preset):
    llama_cpp = needs_llama_cpp()
    p = synth.write_model(tmp_path / "m.gguf", preset, "q4_0" if "x7B" in preset or "A3B" in preset else "q8_0",
                          layers=1, progress=False)
    llm = llama_cpp.Llama(str(p), n_ctx=256, n_batch=64, n_threads=2, verbose=False)
    out = llm("hello", max_tokens=4, temperature=0.0)     # text: needs the 256 byte tokens
    assert out["usage"]["completion_tokens"] >= 1
