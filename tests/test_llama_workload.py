"""The llama.cpp workload generator (kmemsim.workload.llama) and `trace info`."""
import time

import numpy as np
import pytest

from kmemsim.workload import synth
from kmemsim.core import trace
from kmemsim.report import trace_info
from kmemsim.engine.time.compute import TimeModel
from kmemsim.workload import llama as lw
from kmemsim.core.errors import InputError
from kmemsim.core import PAGE_SIZE
from kmemsim.core.trace import MapFlag, Op


def _kv_map(tr):
    return next(m["id"] for m in tr.meta["maps"] if m["name"].startswith("KV cache"))


@pytest.mark.parametrize("wtype,repack", [("f16", "auto"), ("q8_0", "auto"), ("q4_0", "avx2"), ("q4_0", "none")])
def test_weight_bytes_per_decode_token_is_model_size(wtype, repack):
    # An untied dense model reads every weight once per decode step; token_embd only one row (get_rows).
    L = synth.layout_from_preset("Llama-2-7B", type=wtype, layers=2)
    tr = lw.generate(L, prompt=16, decode=8, ctx=256, repack=repack)
    d = trace_info.info(tr)
    expect = sum(t.n_bytes for t in L.tensors if t.name != "token_embd.weight")
    row = L.tensor("token_embd.weight").row_bytes
    assert d["decode_tokens"] == 8 and d["prefill_tokens"] == 16
    assert abs(d["weight_bytes_per_decode_token"] - (expect + row)) / expect < 0.01


def test_repack_q4_0_makes_anonymous_copies():
    # ggml_repack_get_optimal_repack_type: Q4_0 with AVX2 -> CPU_REPACK buffer; read once at load
    L = synth.layout_from_preset("Llama-3.2-1B", type="q4_0", layers=2)
    tr = lw.generate(L, prompt=8, decode=4, ctx=256, repack="avx2")
    meta = tr.meta["llama"][0]
    mats = [t for t in L.tensors if lw.is_matmul_weight(t)]
    tok = L.tensor("token_embd.weight")     # tied: its OUTPUT duplicate is repacked too
    assert meta["repack_bytes"] >= sum(t.n_bytes for t in mats) + tok.n_bytes
    q8 = lw.generate(synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=2), 8, 4, 256, repack="avx2")
    assert q8.meta["llama"][0]["repack_bytes"] == 0       # no Q8_0 repack on x86


def test_kv_reads_grow_linearly():
    # llama_kv_cache::get_n_kv: n_kv = PAD(used, 256); K and V reads per step cover cells [0, n_kv)
    L = synth.layout_from_preset(type="f16", n_layer=2, n_embd=256, n_ff=512, n_head=4, n_head_kv=4, n_vocab=512)
    for fa in (True, False):
        tr = lw.generate(L, prompt=1, decode=1500, ctx=2048, flash_attn=fa)
        c = tr.cols
        ph = trace_info._phase_of_rows(tr)
        names = tr.meta["phases"]
        dec = np.array([n.startswith("decode token") for n in names])
        sel = (c["op"] == Op.READ) & (c["map"] == _kv_map(tr)) & dec[ph]
        steps = np.unique(ph[sel])
        by = np.array([c["npages"][sel & (ph == s)].sum() for s in steps]) * PAGE_SIZE
        n_kv = np.minimum(2048, np.maximum(256, -(-(np.arange(len(by)) + 2) // 256) * 256))
        coef = np.polyfit(n_kv, by, 1)
        assert np.allclose(np.polyval(coef, n_kv), by, rtol=0.01), fa
        assert coef[0] > 0 and np.all(np.diff(by) >= 0)


def test_kv_created_and_cleared_at_load():
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=2)
    tr = lw.generate(L, 8, 2, 512)
    c = tr.cols
    kv = _kv_map(tr)
    mm = (c["op"] == Op.MMAP) & (c["map"] == kv)
    pages = int(c["npages"][mm][0])
    expect = 2 * 2 * 512 * (8 * 64) * 2            # K and V, 2 layers, 512 cells, 8 kv heads x 64, f16
    assert pages == -(-expect // PAGE_SIZE)
    first_write = np.flatnonzero((c["op"] == Op.WRITE) & (c["map"] == kv))[0]
    assert c["npages"][first_write] == pages       # ggml_backend_buffer_clear writes every page


def test_mmap_flags_and_load_modes():
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=1)
    tr = lw.generate(L, 8, 2, 256)
    c = tr.cols
    mm = np.flatnonzero(c["op"] == Op.MMAP)
    f0 = int(c["flags"][mm[0]])
    assert f0 & MapFlag.SHARED and f0 & MapFlag.READ and f0 & MapFlag.WEIGHTS and f0 & MapFlag.POPULATE
    assert (c["op"] == Op.FADVISE).sum() == 1
    tr2 = lw.generate(L, 8, 2, 256, prefetch=False)
    assert not int(tr2.cols["flags"][np.flatnonzero(tr2.cols["op"] == Op.MMAP)[0]]) & MapFlag.POPULATE
    none = lw.generate(L, 8, 2, 256, load_mode="none")
    d = trace_info.info(none)
    anon_w = [m for m in d["mappings"] if m["weights"] and m["file"] == -1]
    assert anon_w and d["weight_bytes_per_decode_token"] > 0


def test_populate_is_the_mmap_itself():
    """llama_mmap: mmap(MAP_POPULATE) faults the file in inside mmap(2) (vm_mmap_pgoff() ->
    mm_populate()), then posix_madvise(WILLNEED). The POPULATE flag is that populate, so the
    load must not fault the whole mapping once more: under a limit below the file size a second
    pass reads the evicted head of the file again (tiny-f16 at a 100% limit: ~60k model pages
    read during the predicted load against the live kernel's 41k, docs/validation-notes.md)."""
    L = synth.layout_from_preset("Llama-3.2-1B", type="f16", layers=1)
    tr = lw.generate(L, 8, 2, 256)
    c = tr.cols
    wmap = int(c["map"][np.flatnonzero(c["op"] == Op.MMAP)[0]])
    whole = (c["op"] == Op.READ) & (c["map"] == wmap) & (c["page"] == 0) & (c["npages"] >= L.file_pages)
    assert not whole.any()


def test_moe_reads_only_routed_experts():
    L = synth.layout_from_preset("Qwen3-30B-A3B", type="q8_0", layers=2)
    tr = lw.generate(L, 4, 16, 256, moe_routing="zipf:1.2")
    d = trace_info.info(tr)
    X, k = 128, 8
    exps = sum(t.n_bytes for t in L.tensors if "_exps" in t.name)
    dense = sum(t.n_bytes for t in L.tensors if "_exps" not in t.name and t.name != "token_embd.weight")
    got = d["weight_bytes_per_decode_token"]
    assert abs(got - (dense + exps * k / X)) / got < 0.02
    with pytest.raises(InputError):
        lw.generate(L, 4, 4, 256, moe_routing="pareto")


def test_bad_requests():
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=1)
    with pytest.raises(InputError):
        lw.generate(L, 4, 4, 0)
    with pytest.raises(InputError):
        lw.generate(L, 600, 4, 512)
    with pytest.raises(InputError):
        lw.generate(L, 4, 4, 256, kv_type="q8_0", flash_attn=False)


def test_several_sessions_on_one_builder():
    b = trace.TraceBuilder("scenario")
    L = synth.layout_from_preset("Llama-3.2-1B", type="q4_0", layers=1)
    s1 = lw.generate(L, 8, 4, 256, pid=1, builder=b)
    s2 = lw.generate(L, 8, 4, 256, pid=2, builder=b, t0=s1.t + 1000)
    tr = b.build()
    assert {p["pid"] for p in tr.meta["processes"]} == {1, 2}
    assert trace_info.info(tr)["decode_tokens"] == 8


def test_llama2_7b_layout_only_fast_and_compact(tmp_path):
    L = synth.layout_from_preset("Llama-2-7B", type="q4_0")
    t = time.time()
    tr = lw.generate(L, prompt=2048, decode=256, ctx=4096)
    took = time.time() - t
    assert took < 10, took
    n_layer, per_layer = 32, 9 + 4            # 9 weight tensors + K/V writes and reads
    steps = 2048 // 512 + 256
    bound = steps * (n_layer * per_layer + 16) + 2048 + 64    # + one token_embd row per prompt token
    assert len(tr) <= bound, (len(tr), bound)
    trace.save(tr, str(tmp_path / "t.parquet"))
    d = trace_info.info(trace.load(str(tmp_path / "t.parquet")))
    assert d["decode_tokens"] == 256 and d["prefill_tokens"] == 2048


def test_get_rows_reads_the_batch_in_order_split_between_threads():
    # ggml_compute_forward_get_rows (ggml-cpu ops.cpp): each of nth threads takes rows
    # [dr * ith, dr * ith + dr) of the batch's ids, dr = ceil(n / nth), reading row ids[i] in batch
    # order; the threads run at once. Duplicate ids are read again (the second read is a hit).
    ids = np.array([50, 7, 900, 7, 31])
    assert lw.get_rows_order(ids, 1).tolist() == [50, 7, 900, 7, 31]
    assert lw.get_rows_order(ids, 2).tolist() == [50, 7, 7, 31, 900]     # blocks [50 7 900] [7 31]
    assert lw.get_rows_order(ids, 4).tolist() == [50, 900, 31, 7, 7]     # blocks of 2: [50 7] [900 7] [31]
    # the prompt's token_embd reads follow it: a 2-thread session reads the rows in that order
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=1)
    b = trace.TraceBuilder("t")
    s = lw.LlamaSession(L, b, ctx=256, threads=2)
    t = s.load(0)
    toks = [1, 5000, 20, 70000, 300, 9]
    s.request(len(toks), 1, t, tokens=toks + [42])
    tr = b.build()
    emb = next(m["id"] for m in tr.meta["maps"] if m["name"].startswith("weights"))
    tok = L.tensor("token_embd.weight")
    first = (tok.data_offset + np.array(lw.get_rows_order(np.array(toks), 2)) * tok.row_bytes) // PAGE_SIZE
    c = tr.cols
    sel = (c["op"] == Op.READ) & (c["map"] == emb) & np.isin(c["page"], first)
    assert c["page"][sel][:len(toks)].tolist() == first.tolist()


def test_a_step_takes_its_weight_bytes_and_its_matmuls_time():
    # TimeModel: each node streams its weights, then does n_rows x P multiply-accumulates. With 1 GB/s
    # and 1 GMAC/s (1 byte or 1 MAC per ns) a decode step lasts its weight bytes + the session's MACs
    # per token and per output row; a prefill ubatch with no output (not the prompt's last) skips
    # the last layer's FFN and the output head (llm_build_llama: inp_out_ids, then ggml_is_empty).
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=2)
    tm = TimeModel(weight_gbps=1.0, matmul_gmac_s=1.0)
    b = trace.TraceBuilder()
    s = lw.LlamaSession(L, b, ctx=512, batch=512, ubatch=16, time_model=tm, repack="none")
    t = s.load()
    s.request(32, 2, t)
    tr = b.build()
    c, names = tr.cols, tr.meta["phases"]
    ph = np.flatnonzero(c["op"] == Op.PHASE)
    at = {names[int(c["arg"][i])]: int(c["t"][i]) for i in ph}
    m_tok, m_out = s.step_macs
    rows = L.tensor("token_embd.weight").row_bytes
    head = L.tensor("token_embd.weight").n_bytes                   # tied: the output head
    last_ffn = sum(L.tensor(f"blk.1.ffn_{k}.weight").n_bytes for k in ("gate", "up", "down"))
    mats = sum(t.n_bytes for t in L.tensors if t.name != "token_embd.weight")
    assert m_out == L.tensor("token_embd.weight").n_elements + \
        sum(L.tensor(f"blk.1.ffn_{k}.weight").n_elements for k in ("gate", "up", "down"))
    decode = at["decode token 1"] - at["decode token 0"]
    assert decode == pytest.approx(mats + head + rows + m_tok + m_out, abs=2)
    no_out = at["prefill ubatch 1"] - at["prefill ubatch 0"]
    assert no_out == pytest.approx(mats - last_ffn + 16 * rows + 16 * m_tok, rel=1e-3)
    with_out = at["decode token 0"] - at["prefill ubatch 1"]
    assert with_out == pytest.approx(mats + head + 16 * rows + 16 * m_tok + m_out, rel=1e-3)


def test_matmuls_are_read_in_chunks_the_threads_take_in_turn():
    # Which rows of a weight each of nth threads reads, and in what turn:
    # - one token row: ggml_compute_forward_mul_mat() (ggml-cpu.c) makes chunks of 64 rows
    #   (chunk_size 64 when nr1 == 1), or nth chunks when that gives fewer than nth * 4; thread i
    #   starts on chunk i and the rest go to whoever finishes first. Llama-3.2-1B's Q8_0 rows of
    #   2,048 elements are 2,176 bytes: 64 rows are 34 pages;
    # - more token rows: llamafile_sgemm() runs the matmul. tinyBLAS_Q0_AVX (Q8_0, Q4_0) gives
    #   each thread one contiguous block (gemm(): duty), tinyBLAS (F16) jobs of 16 rows;
    # - one thread, or a repacked weight (CPU_REPACK's own gemv): one reader (arg 0).
    L = synth.layout_from_preset("Llama-3.2-1B", type="q8_0", layers=1)
    q = L.tensor("blk.0.attn_q.weight")
    assert (q.row_bytes, lw.mul_mat_chunk_pages(q, 1, 2)) == (2176, 34)
    assert lw.mul_mat_chunk_pages(q, 64, 2) == 1024 * 2176 // PAGE_SIZE
    assert lw.mul_mat_chunk_pages(q, 1, 1) == lw.mul_mat_chunk_pages(q, 64, 1) == 0
    small = synth.layout_from_preset(type="f16", n_layer=1, n_embd=256, n_ff=512, n_head=4, n_head_kv=4,
                                     n_vocab=512).tensor("blk.0.attn_q.weight")
    assert lw.mul_mat_chunk_pages(small, 1, 2) == 128 * 512 // PAGE_SIZE     # 256 rows < 64 * 8: halves
    assert lw.mul_mat_chunk_pages(small, 64, 2) == 16 * 512 // PAGE_SIZE
    L4 = synth.layout_from_preset("Llama-3.2-1B", type="q4_0", layers=1)
    q4 = L4.tensor("blk.0.attn_q.weight")             # 1,152-byte rows: 64 are 18 pages
    for repack, chunked in (("none", True), ("avx2", False)):
        b = trace.TraceBuilder("t")
        s = lw.LlamaSession(L4, b, ctx=256, repack=repack, threads=2)
        s.request(8, 2, s.load(0))
        tr = b.build()
        c = tr.cols
        decode_ids = [i for i, name in enumerate(tr.meta["phases"]) if name.startswith("decode")]
        decode = c["t"] >= c["t"][(c["op"] == Op.PHASE) & np.isin(c["arg"], decode_ids)].min()
        attn_q = (c["op"] == Op.READ) & (c["npages"] > 1) & (c["page"] == q4.data_offset // PAGE_SIZE)
        if chunked:       # the prompt's 8 token rows in halves, a decode step's in 64-row chunks
            assert c["arg"][attn_q & ~decode].tolist() == [1024 * 1152 // PAGE_SIZE]
            assert c["arg"][attn_q & decode].tolist() == [18, 18]
        else:             # q4_0 repacked (CPU_REPACK): the copy's reads, one reader
            assert not (attn_q & decode).any() and not (c["arg"][c["op"] == Op.READ] > 0).any()
