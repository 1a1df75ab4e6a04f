"""Where llama.cpp keeps each weight: mmap'd from the GGUF file, or copied into an anonymous CPU
buffer (repacked for the CPU's kernels, or all of them without mmap); and the compute buffer's size."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.units import PAGE_SIZE, pad
from ...engine.managers import TENSOR_ALIGNMENT
from ..gguf_layout import ModelLayout, TensorInfo
from .graph import is_matmul_weight

LOAD_MODES = ("mmap", "mmap+mlock", "none", "mlock")

# ggml_repack_get_optimal_repack_type (ggml/src/ggml-cpu/repack.cpp): on x86 with AVX2, Q4_0, Q4_K,
# IQ4_NL and MXFP4 weights with ne[1] % 8 == 0 are repacked (8x8 interleave, same size); Q8_0 and F16
# are not (their repacks need ARM NEON/dotprod/i8mm or RISC-V V).
REPACK_TYPES = {"avx2": {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"},
                "avx512": {"Q4_0", "Q4_K", "IQ4_NL", "MXFP4", "Q2_K"},
                "neon-i8mm": {"Q4_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "MXFP4", "Q8_0"},
                "none": set()}


def host_cpu_features() -> str:
    """'avx512', 'avx2' or 'none' for this machine (what ggml_cpu_has_avx2() would say)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith("flags")), "").split()
    except OSError:
        return "none"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "none"


def repacked(t: TensorInfo, cpu: str, as_output=False) -> bool:
    """ggml-cpu extra_buffer_type::supports_op + ggml_repack_get_optimal_repack_type."""
    if not (as_output or is_matmul_weight(t)):
        return False
    return t.type in REPACK_TYPES[cpu] and len(t.shape) >= 2 and t.shape[1] % 8 == 0


@dataclass
class BufferPlan:
    where: dict = field(default_factory=dict)   # tensor name -> (kind, offset); kind "file", "repack", "cpu"
    out_where: tuple = None                     # where the output matmul reads (tied: repacked duplicate)
    load_list: list = field(default_factory=list)   # (tensor, kind, dst offset) loaded by copy
    repack_bytes: int = 0
    cpu_bytes: int = 0


def plan(L: ModelLayout, cpu: str, use_mmap: bool) -> BufferPlan:
    """Which tensor lives where: ('file', byte offset) for mmap'd tensors or (kind, offset) in an
    anonymous copy, in llama.cpp's creation order (tok_embd, output_norm, output, layers)."""
    creation = sorted(L.tensors, key=lambda t: (0 if not t.name.startswith("blk.") and
                                                 not t.name.startswith("output") else
                                                 1 if not t.name.startswith("blk.") else 2))
    tied = L.tensor("output.weight") is None
    p = BufferPlan()
    rep, cpu_off = 0, 0
    for t in creation:
        if repacked(t, cpu):
            p.where[t.name] = ("repack", rep)
            p.load_list.append((t, "repack", rep))
            rep += pad(t.n_bytes, TENSOR_ALIGNMENT)
        elif use_mmap:
            p.where[t.name] = ("file", t.data_offset)
        else:
            p.where[t.name] = ("cpu", cpu_off)
            p.load_list.append((t, "cpu", cpu_off))
            cpu_off += pad(t.n_bytes, TENSOR_ALIGNMENT)
        if tied and t.name == "token_embd.weight":
            # create_tensor(TOKEN_EMBD, TENSOR_DUPLICATED): buffer type chosen for the OUTPUT op
            if repacked(t, cpu, as_output=True):
                p.out_where = ("repack", rep)
                p.load_list.append((t, "repack", rep))
                rep += pad(t.n_bytes, TENSOR_ALIGNMENT)
            else:
                p.out_where = p.where[t.name]
    if not tied:
        p.out_where = p.where["output.weight"]
    p.repack_bytes, p.cpu_bytes = rep, cpu_off
    return p


def compute_bytes(hp: dict, n_tokens, n_kv) -> int:
    """Rough size of ggml-alloc's compute buffer: the largest f32 intermediates live at once."""
    ff = hp["n_ff_exp"] * hp["n_expert_used"] if hp.get("n_expert") else hp["n_ff"]
    qkv = (hp["n_head"] + 2 * hp["n_head_kv"]) * hp["head_dim"]
    return 4 * (3 * n_tokens * hp["n_embd"] + n_tokens * qkv + n_kv * n_tokens * hp["n_head"]
                + 2 * n_tokens * ff + hp["n_vocab"]) + PAGE_SIZE
