"""cb_eval recorder (kmemsim.workload.llama.cb_eval) against the generator's graph order."""
import pytest

from kmemsim.workload import gguf_layout, synth
from kmemsim.report import trace_info
from kmemsim.workload.llama import cb_eval as lt
from skips import needs_llama_cpp

pytestmark = pytest.mark.llama


@pytest.fixture(scope="module", params=["Llama-3.2-1B", "Qwen2.5-1.5B", "Qwen3-0.6B", "Mixtral-8x7B"])
def model(request, tmp_path_factory):
    needs_llama_cpp()
    p = tmp_path_factory.mktemp("m") / f"{request.param}.gguf"
    return synth.write_model(p, request.param, "q4_0", layers=2 if "x7B" not in request.param else 1,
                             progress=False)


def test_recorded_order_matches_generator(model):
    # llama_context_params.cb_eval -> ggml_backend_sched_compute_splits asks for every node in graph order
    rec = lt.record(model, prompt=40, decode=3, ctx=256, batch=32, ubatch=16)
    gen = lt.generated_items(gguf_layout.read_layout(model))
    assert len(rec["ubatches"]) == 3 + 3          # 40 tokens: batches 32 + 8 -> ubatches 16, 16, 8; 3 decodes
    for u in rec["ubatches"]:
        assert u == gen
    assert len(rec["generated"]) == 3


def test_trace_llama_same_schema(model, tmp_path):
    tr, rec = lt.trace(model, 20, 4, 256)
    d = trace_info.info(tr)
    assert d["decode_tokens"] == 4 and d["prefill_tokens"] == 20
    L = gguf_layout.read_layout(model)
    tied = L.tensor("output.weight") is None
    expect = sum(t.n_bytes for t in L.tensors if t.name != "token_embd.weight")
    if tied:
        expect += L.tensor("token_embd.weight").n_bytes
    if L.hparams["n_expert"]:
        return
    assert abs(d["weight_bytes_per_decode_token"] - expect) / expect < 0.01
