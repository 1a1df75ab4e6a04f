"""llama.cpp's compute graph as the workload walks it: which weights a ubatch reads, in what order, in
what chunks its threads take them, what multiply-accumulates each node does, and how a prompt is cut
into ubatches."""
from __future__ import annotations

import numpy as np

from ...core.units import PAGE_SIZE
from ..gguf_layout import ModelLayout, TensorInfo


def get_rows_order(ids, nth):
    """The token_embd rows get_rows reads, in order: ggml_compute_forward_get_rows gives each of nth
    threads a block of dr = ceil(n / nth) of the batch's ids (ir0 = dr * ith), each read in batch
    order; the threads run side by side, so one stream takes the i-th id of every block in turn."""
    n = len(ids)
    dr = -(-n // nth)
    i = (np.arange(dr)[:, None] + dr * np.arange(nth)[None, :]).ravel()
    return ids[i[i < n]]


def mul_mat_chunk_pages(t: TensorInfo, n_rows: int, nth: int) -> int:
    """Pages of weight t in each chunk nth threads take (trace READ arg, the emulator's threads
    reading side by side); 0 for one reader. Thread i starts on chunk i and each takes the next as
    it finishes (ggml_threadpool_chunk_add()).
    - one token row (decode): ggml_compute_forward_mul_mat(), chunks of 64 weight rows, or nth
      chunks when that makes fewer than 4 per thread;
    - more: llamafile_sgemm() (it declines n < 2). tinyBLAS (F32, F16, BF16) takes jobs of
      RM * BM = 16 rows (8 or 4 where the rows do not divide, sgemm.cpp's matmul()); tinyBLAS_Q0_AVX
      (Q8_0, Q4_0 on x86) gives each thread one contiguous block of row tiles (gemm(): duty)."""
    if nth < 2 or len(t.shape) < 2:
        return 0
    rows = t.n_bytes // t.row_bytes
    if n_rows == 1:
        nchunk = -(-rows // 64)
        chunk = -(-rows // (nth if nchunk < nth * 4 else nchunk))
    elif t.type in ("F32", "F16", "BF16"):
        chunk = next((r for r in (16, 8, 4) if rows % r == 0 and (r < 16 or rows // 16 >= nth)), 0)
    elif t.type in ("Q8_0", "Q4_0"):
        chunk = -(-rows // nth)
    else:
        return 0
    return max(1, round(chunk * t.row_bytes / PAGE_SIZE)) if chunk else 0


def graph_order(layout: ModelLayout) -> list:
    """The weight tensors in the order the llama.cpp CPU graph reads them for one ubatch, as
    ('embd', name) | ('w', name) | ('kv', il) | ('exps', name) | ('router', name) items.

    Order: llm_build_llama / qwen2 / qwen3 / qwen3moe (src/models/*.cpp) built through
    llm_graph_context::build_attn (llama-graph.cpp: expands q, v, k, then cpy_k, cpy_v, then K*Q and V*KQ)
    and build_ffn (swiglu_split(gate, up) -> gate is visited first by ggml_visit_parents), checked
    against cb_eval recordings (tests/test_llama_trace.py)."""
    names = {t.name for t in layout.tensors}
    has = names.__contains__
    out = [("embd", "token_embd.weight")]
    for il in range(layout.hparams["n_layer"]):
        b = f"blk.{il}."
        seq = [b + "attn_norm.weight", b + "attn_q.weight", b + "attn_q.bias", b + "attn_q_norm.weight",
               b + "attn_v.weight", b + "attn_v.bias",
               b + "attn_k.weight", b + "attn_k.bias", b + "attn_k_norm.weight"]
        out += [("w", n) for n in seq if has(n)]
        out.append(("kv", il))
        out += [("w", n) for n in (b + "attn_output.weight", b + "ffn_norm.weight") if has(n)]
        if has(b + "ffn_gate_inp.weight"):
            out.append(("router", b + "ffn_gate_inp.weight"))
            out += [("exps", n) for n in (b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight",
                                          b + "ffn_down_exps.weight") if has(n)]
        else:
            out += [("w", n) for n in (b + "ffn_gate.weight", b + "ffn_up.weight", b + "ffn_down.weight")
                    if has(n)]
    out.append(("w", "output_norm.weight"))
    out.append(("w", "output.weight" if has("output.weight") else "token_embd.weight"))
    return out


def is_matmul_weight(t: TensorInfo) -> bool:
    """The tensors llama.cpp uses as src0 of MUL_MAT / MUL_MAT_ID (llm_tensor_info_mapping)."""
    n = t.name
    return (len(t.shape) >= 2 and n.endswith(".weight") and not n.startswith("token_embd")
            and "norm" not in n and "ffn_gate_inp" not in n)


def macs_per_row(kind: str, t: TensorInfo, hp: dict) -> int:
    """Multiply-accumulates a graph node does per token row: a matmul's weight elements (the output
    head, token_embd when tied, included; get_rows and norms none); an MoE row goes through
    n_expert_used of the n_expert slices."""
    if kind == "exps":
        return hp["n_expert_used"] * (t.n_elements // hp["n_expert"])
    if kind == "router" or kind == "w" and (is_matmul_weight(t) or t.name == "token_embd.weight"):
        return t.n_elements
    return 0


def output_rows_only(kind: str, name, last: str) -> bool:
    """Nodes that work on the output rows only: after inp_out_ids get_rows (llm_build_*: the last
    layer, once its attention is done) the last layer's FFN, then the output norm and head."""
    return kind != "kv" and (name.startswith(last + "ffn") or (kind == "w" and not name.startswith("blk.")))


def split_prompt(new: int, batch: int, ubatch: int, seqs: int):
    """The prefill ubatches of `new` prompt tokens, as llama_batch_allocr / split_simple cut them:
    per sequence, n_batch chunks cut into n_ubatch pieces. Yields (sequence, first token's position,
    tokens, output rows): the last ubatch of a sequence outputs its last token's logits."""
    for s in range(max(1, int(seqs))):
        pos = 0
        while pos < new:
            nb = min(batch, new - pos)
            b = pos
            while b < pos + nb:
                nu = min(ubatch, pos + nb - b)
                yield s, b, nu, int(b + nu == new)
                b += nu
            pos += nb


def estimate_events(layout: ModelLayout, prompt: int, decode: int, ubatch: int, seqs: int = 1,
                    requests: int = 1) -> float:
    """Events a session's trace will hold, from its numbers alone (kmemsim.core.limits's budget is
    checked against it before anything is generated): per request its prefill ubatches on every
    sequence and its decode steps, each a walk of graph_order(). The events per item (a weight's
    reads, its KV cache's, the compute buffer's) are measured on generated traces, rounded up: a
    prefill ubatch some 4 (MoE: its experts' slices, more) and 1.2 more per further sequence, a
    decode step 1.5 and 0.4 more per further sequence; the load some 40 per tensor. Within a factor
    of two or so either way: a budget, not a count."""
    items = len(graph_order(layout))
    moe = bool(layout.hparams.get("n_expert"))
    seqs = max(1, int(seqs))
    ubatches = -(-max(1, int(prompt)) // max(1, int(ubatch))) * seqs
    per_request = items * (ubatches * ((5.5 if moe else 4.0) + 1.2 * (seqs - 1))
                           + max(0, int(decode)) * (1.5 + 0.4 * (seqs - 1)) * (1.8 if moe else 1.0))
    return float(requests) * per_request + 2000 + 40 * len(layout.tensors)


def step_rows(occ, prompts: dict, batch: int, ubatch: int, seqs: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and output rows per phase occurrence (kmemsim.engine.time.serial.split_phases' table):
    prompts maps a request label (e.g. "request 3 session chat") to its new prompt tokens, cut into
    ubatches as the generator cuts them (split_prompt); decode steps get `seqs` tokens, each an
    output."""
    tok = np.zeros(len(occ), np.int64)
    outs = np.zeros(len(occ), np.int64)
    kinds, reqs, ubs = occ["kind"].to_numpy(), occ["request"].to_numpy(), occ["ubatch"].to_numpy()
    sizes = {r: [(n, o) for _, _, n, o in split_prompt(new, batch, ubatch, seqs)] for r, new in prompts.items()}
    for i in np.flatnonzero(kinds == "prefill"):
        s = sizes.get(reqs[i])
        tok[i], outs[i] = s[ubs[i]] if s is not None and 0 <= ubs[i] < len(s) else (1, 0)
    tok[kinds == "decode"] = outs[kinds == "decode"] = max(1, int(seqs))
    return tok, outs
