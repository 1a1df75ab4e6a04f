"""Synthetic random-weight GGUF models with the shapes of real ones.

The file is a real GGUF that llama.cpp (llama-cpp-python 0.3.36) loads and generates with: llama-family
metadata plus an SPM ("llama") tokenizer carrying the 256 byte tokens <0x00>..<0xFF> (type 6), scores,
types and bos/eos ids (environment.md). Weights are random normals quantised with `gguf.quants`; to
keep multi-GB files fast and bounded in memory, one pool of quantised random blocks is made per type
and every tensor is streamed from it in chunks, starting at a random block boundary.

Tensor sizes follow llama.cpp's loaders (src/models/llama.cpp, qwen2.cpp, qwen3.cpp, qwen3moe.cpp
load_arch_tensors): presets whose real model ties input and output embeddings (Llama-3.2, Qwen2.5,
Qwen3-0.6B, EXAONE-4.0-1.2B) have no output.weight, exactly like their real GGUFs.
"""
from __future__ import annotations

import io
import os
import struct

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFValueType as VT, quants
from gguf.gguf_writer import WriterState
from tqdm import tqdm

from ..core.atomic import atomic_path
from ..core.errors import InputError
from .gguf_layout import ModelLayout, TensorInfo
from .presets import model_shape

TYPES = ("f16", "q8_0", "q4_0")

def _ggml_type(t):
    t = str(t).lower()
    if t not in TYPES:
        raise InputError(f"unknown weight type {t!r}; choose one of {', '.join(TYPES)}")
    return {"f16": Q.F16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}[t]


def _nbytes(qtype, ne):
    block, size = GGML_QUANT_SIZES[qtype]
    n = int(np.prod(ne, dtype=np.int64))
    return n // block * size


def tensor_specs(s, wtype) -> list:
    """[(name, ggml type, ne tuple)] in file order; ne is ggml order (ne0 = row length)."""
    w = _ggml_type(wtype)
    E, F, V = s["n_embd"], s["n_ff"], s["n_vocab"]
    hd, nh, nkv = s["head_dim"], s["n_head"], s["n_head_kv"]
    out = [("token_embd.weight", w, (E, V))]
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", Q.F32, (E,)))
        out.append((b + "attn_q.weight", w, (E, nh * hd)))
        out.append((b + "attn_k.weight", w, (E, nkv * hd)))
        out.append((b + "attn_v.weight", w, (E, nkv * hd)))
        if s["qkv_bias"]:
            out += [(b + "attn_q.bias", Q.F32, (nh * hd,)), (b + "attn_k.bias", Q.F32, (nkv * hd,)),
                    (b + "attn_v.bias", Q.F32, (nkv * hd,))]
        if s["arch"] in ("qwen3", "qwen3moe"):
            out += [(b + "attn_q_norm.weight", Q.F32, (hd,)), (b + "attn_k_norm.weight", Q.F32, (hd,))]
        out.append((b + "attn_output.weight", w, (nh * hd, E)))
        out.append((b + "ffn_norm.weight", Q.F32, (E,)))
        if s["n_expert"]:
            X, Fe = s["n_expert"], s["n_ff_exp"]
            out.append((b + "ffn_gate_inp.weight", Q.F32, (E, X)))
            out.append((b + "ffn_gate_exps.weight", w, (E, Fe, X)))
            out.append((b + "ffn_up_exps.weight", w, (E, Fe, X)))
            out.append((b + "ffn_down_exps.weight", w, (Fe, E, X)))
        else:
            out.append((b + "ffn_gate.weight", w, (E, F)))
            out.append((b + "ffn_up.weight", w, (E, F)))
            out.append((b + "ffn_down.weight", w, (F, E)))
    out.append(("output_norm.weight", Q.F32, (E,)))
    if not s["tied"]:
        out.append(("output.weight", w, (E, V)))
    return out


def _tokenizer(n_vocab):
    """SPM vocab: <unk>, <s>, </s>, the 256 byte tokens (type 6 = BYTE), then filler pieces."""
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    if n_vocab < len(toks):
        raise InputError(f"--vocab must be at least {len(toks)} (3 special + 256 byte tokens)")
    toks += [f"\u2581t{i}" for i in range(n_vocab - len(toks))]
    types = np.ones(n_vocab, np.int32)        # 1 = NORMAL
    types[0] = 2                              # UNKNOWN
    types[1:3] = 3                            # CONTROL
    types[3:259] = 6                          # BYTE
    scores = np.zeros(n_vocab, np.float32)
    scores[259:] = -np.arange(1, n_vocab - 258, dtype=np.float32)
    return toks, scores, types


def _fast_writer_class():
    """GGUFWriter whose array packing is vectorised: the stock writer packs a 150k-token vocabulary
    item by item (seconds per model); the bytes are identical (little-endian only)."""

    class FastWriter(gguf.GGUFWriter):
        def _pack_val(self, val, vtype, add_vtype, sub_type=None):
            if vtype == VT.ARRAY and isinstance(val, (list, tuple)) and len(val) > 256:
                ltype = sub_type or VT.get_type(val[0])
                head = (struct.pack("<I", vtype) if add_vtype else b"") + struct.pack("<IQ", ltype, len(val))
                if ltype == VT.STRING:
                    enc = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in val]
                    lens = np.array([len(e) for e in enc], "<u8")
                    parts = [None] * (2 * len(enc))
                    parts[0::2] = [bytes(x) for x in lens.view("V8")]
                    parts[1::2] = enc
                    return head + b"".join(parts)
                dt = {VT.INT32: "<i4", VT.FLOAT32: "<f4", VT.UINT32: "<u4"}.get(ltype)
                if dt is not None:
                    return head + np.asarray(val, dt).tobytes()
            return super()._pack_val(val, vtype, add_vtype, sub_type)
    return FastWriter


def _writer(s, wtype):
    w = _fast_writer_class()(None, s["arch"])
    a = s["arch"]
    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[wtype]
    w.add_name(f"kmemsim synthetic {s.get('preset') or a} ({wtype})")
    w.add_context_length(int(s["n_ctx_train"]))
    w.add_embedding_length(s["n_embd"])
    w.add_block_count(s["n_layer"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(float(s["rope_theta"]))
    w.add_layer_norm_rms_eps(float(s["rms_eps"]))
    w.add_file_type(int(ftype))
    w.add_vocab_size(s["n_vocab"])
    if s["n_expert"]:
        w.add_expert_count(s["n_expert"])
        w.add_expert_used_count(s["n_expert_used"])
        if a == "qwen3moe":
            w.add_expert_feed_forward_length(s["n_ff_exp"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    toks, scores, types = _tokenizer(s["n_vocab"])
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores.tolist())
    w.add_token_types(types.tolist())
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    specs = []
    for name, qt, ne in tensor_specs(s, wtype):
        nb = _nbytes(qt, ne)
        # add_tensor_info takes the numpy shape (reversed ggml ne) when tensor_dtype is not uint8
        w.add_tensor_info(name, tuple(reversed(ne)), np.float32, nb, raw_dtype=qt)
        specs.append((name, qt, ne, nb))
    return w, specs


def _write_header(w, fobj):
    w.fout = [fobj]
    w.state = WriterState.EMPTY
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()


def _layout(s, wtype, path, header_len, specs, align) -> ModelLayout:
    pad = lambda x: -(-x // align) * align
    off = pad(header_len)
    data_start = off
    tensors = []
    for name, qt, ne, nb in specs:
        tensors.append(TensorInfo(name, qt.name, tuple(int(x) for x in ne), nb, off))
        off += pad(nb)
    hp = {k: s[k] for k in ("n_layer", "n_embd", "n_ff", "n_head", "n_head_kv", "head_dim", "n_vocab",
                            "n_expert", "n_expert_used")}
    hp["n_ff_exp"] = s.get("n_ff_exp") or 0
    hp["n_ctx_train"] = s["n_ctx_train"]
    if s.get("preset"):
        hp["preset"] = s["preset"]
    return ModelLayout(path=str(path) if path else None, arch=s["arch"], hparams=hp, tensors=tensors,
                       file_size=off, alignment=align, data_start=data_start)


def layout_from_preset(preset=None, type="q8_0", layers=None, **shape) -> ModelLayout:
    """The exact tensor layout (names, types, shapes, n_bytes, data offsets) write_model would produce,
    without writing anything."""
    s = model_shape(preset, layers, **shape)
    w, specs = _writer(s, type)
    buf = io.BytesIO()
    _write_header(w, buf)
    return _layout(s, type, None, buf.tell(), specs, w.data_alignment)


_POOL_ELEMS = 1 << 22   # 4 Mi weights per pool: pages of a repacked copy never repeat within 2 MiB


def _pool(qtype, rng):
    x = (rng.standard_normal(_POOL_ELEMS, dtype=np.float32) * 0.02).reshape(-1, 1024)
    if qtype == Q.F32:
        return np.ascontiguousarray(x).view(np.uint8).ravel()
    if qtype == Q.F16:
        return x.astype(np.float16).view(np.uint8).ravel()
    return np.ascontiguousarray(quants.quantize(x, qtype)).ravel()


def write_model(path, preset=None, type="q8_0", layers=None, seed=0, progress=True, **shape) -> str:
    """Write a random-weight GGUF; returns the path. shape keys: n_layer, n_embd, n_ff, n_head,
    n_head_kv, n_vocab, head_dim, n_expert, n_expert_used, n_ff_exp, arch, tied, qkv_bias.
    Streams tensor data in chunks (memory stays around the 16 MiB pools), writes to a temp file in the
    target directory and renames it into place."""
    s = model_shape(preset, layers, **shape)
    path = str(path)
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise InputError(f"{path}: directory {d} does not exist")
    w, specs = _writer(s, type)
    rng = np.random.default_rng(seed)
    pools = {}
    total = sum(nb for *_, nb in specs)
    with atomic_path(path, suffix=".gguf") as tmp, open(tmp, "wb") as f:
        _write_header(w, f)
        align = w.data_alignment
        bar = tqdm(total=total, unit="B", unit_scale=True, desc=os.path.basename(path),
                   disable=not progress, leave=False)
        for name, qt, ne, nb in specs:
            f.write(b"\0" * (-f.tell() % align))
            if qt == Q.F32:
                if name.endswith("norm.weight"):
                    data = np.ones(int(np.prod(ne)), np.float32)
                elif name.endswith(".bias"):
                    data = np.zeros(int(np.prod(ne)), np.float32)
                else:   # router
                    data = (rng.standard_normal(int(np.prod(ne)), dtype=np.float32) * 0.02)
                f.write(data.tobytes())
            else:
                if qt not in pools:
                    pools[qt] = _pool(qt, rng)
                pool = pools[qt]
                bsz = GGML_QUANT_SIZES[qt][1] if qt != Q.F16 else 2
                pos = int(rng.integers(0, len(pool) // bsz)) * bsz
                left = nb
                while left:
                    n = min(left, len(pool) - pos)
                    f.write(memoryview(pool)[pos:pos + n])
                    left -= n
                    pos = 0
            f.write(b"\0" * (-nb % align))
            bar.update(nb)
        bar.close()
    return path
