"""The shapes of real models (each from its HF config.json), and a model shape checked and completed:
what synth.py writes and the scenario's `llm.model.preset` names. No heavy import: the CLI lists the
presets in its help."""
from __future__ import annotations

from ..core.errors import InputError
from ..core.limits import (MAX_EMBD, MAX_EXPERTS, MAX_FF, MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_U32,
                           MAX_VOCAB)
from .gguf_layout import SUPPORTED_ARCHS

# each shape field: its option's name and the largest a real model has (kmemsim.core.limits)
_FIELDS = {"n_layer": ("--layers", MAX_LAYERS), "n_embd": ("--dim", MAX_EMBD), "n_ff": ("--ffn", MAX_FF),
           "n_head": ("--heads", MAX_HEADS), "n_head_kv": ("--kv-heads", MAX_HEADS),
           "n_vocab": ("--vocab", MAX_VOCAB), "head_dim": ("--head-dim", MAX_HEAD_DIM),
           "n_expert": ("--experts", MAX_EXPERTS), "n_expert_used": ("--experts-used", MAX_EXPERTS),
           "n_ff_exp": ("n_ff_exp", MAX_FF), "n_ctx_train": ("n_ctx_train", MAX_U32)}

# Real shapes (HF config.json of each model). head_dim only where it differs from n_embd / n_head.
PRESETS = {
    "Qwen3-0.6B": dict(arch="qwen3", n_layer=28, n_embd=1024, n_ff=3072, n_head=16, n_head_kv=8,
                       head_dim=128, n_vocab=151936, tied=True, rope_theta=1e6, n_ctx_train=40960),
    # EXAONE 4.0 1.2B: QK-norm and post-norm in the real model (arch exaone4); the norm vectors are
    # tiny, so arch "llama" reproduces every weight matrix's size exactly.
    "EXAONE-4.0-1.2B": dict(arch="llama", n_layer=30, n_embd=2048, n_ff=4096, n_head=32, n_head_kv=8,
                            n_vocab=102400, tied=True, rope_theta=1e6, n_ctx_train=65536),
    "Llama-3.2-1B": dict(arch="llama", n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                         n_vocab=128256, tied=True, rope_theta=5e5, n_ctx_train=131072),
    "Llama-3.2-3B": dict(arch="llama", n_layer=28, n_embd=3072, n_ff=8192, n_head=24, n_head_kv=8,
                         n_vocab=128256, tied=True, rope_theta=5e5, n_ctx_train=131072),
    "Qwen2.5-1.5B": dict(arch="qwen2", n_layer=28, n_embd=1536, n_ff=8960, n_head=12, n_head_kv=2,
                         n_vocab=151936, tied=True, qkv_bias=True, rope_theta=1e6, n_ctx_train=32768),
    "Qwen2.5-3B": dict(arch="qwen2", n_layer=36, n_embd=2048, n_ff=11008, n_head=16, n_head_kv=2,
                       n_vocab=151936, tied=True, qkv_bias=True, rope_theta=1e6, n_ctx_train=32768),
    "Llama-2-7B": dict(arch="llama", n_layer=32, n_embd=4096, n_ff=11008, n_head=32, n_head_kv=32,
                       n_vocab=32000, tied=False, rope_theta=1e4, n_ctx_train=4096),
    "Mistral-7B": dict(arch="llama", n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8,
                       n_vocab=32000, tied=False, rope_theta=1e4, n_ctx_train=32768),
    # MoE presets: Mixtral as llama.cpp's "llama" arch with experts; Qwen3-30B-A3B as "qwen3moe".
    "Mixtral-8x7B": dict(arch="llama", n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8,
                         n_vocab=32000, tied=False, n_expert=8, n_expert_used=2, rope_theta=1e6,
                         n_ctx_train=32768),
    "Qwen3-30B-A3B": dict(arch="qwen3moe", n_layer=48, n_embd=2048, n_ff=6144, n_head=32, n_head_kv=4,
                          head_dim=128, n_vocab=151936, tied=False, n_expert=128, n_expert_used=8,
                          n_ff_exp=768, rope_theta=1e6, n_ctx_train=40960),
}

_BASE = dict(arch="llama", head_dim=None, tied=False, qkv_bias=False, n_expert=0, n_expert_used=0,
             n_ff_exp=None, rope_theta=1e4, n_ctx_train=4096, rms_eps=1e-5)


def preset_names():
    return list(PRESETS)


def preset_shape(name) -> dict:
    """The full shape dict of a preset (case-insensitive name)."""
    for k, v in PRESETS.items():
        if k.lower() == str(name).lower():
            s = dict(_BASE)
            s.update(v)
            s["preset"] = k
            return complete(s)
    raise InputError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")


def complete(s) -> dict:
    """A shape with every derived field (n_head_kv, head_dim, experts), checked."""
    s = dict(s)
    for key, (opt, hi) in _FIELDS.items():
        v = s.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"model shape: {key} ({opt}) {v!r} is not a whole number")
        if not 0 <= v <= hi:
            raise InputError(f"model shape: {key} ({opt}) {v:,} is outside 0..{hi:,} (no real model has that)")
    if s.get("arch") not in SUPPORTED_ARCHS:
        raise InputError(f"model shape: arch {s.get('arch')!r} is not one the workload generator models "
                         f"({', '.join(SUPPORTED_ARCHS)})")
    for key in ("n_layer", "n_embd", "n_ff", "n_head", "n_vocab"):
        if not s.get(key) or int(s[key]) <= 0:
            raise InputError(f"model shape needs a positive {key.replace('n_', '--')} "
                             f"(or --preset NAME; presets: {', '.join(PRESETS)})")
    s["n_head_kv"] = int(s.get("n_head_kv") or s["n_head"])
    if s["n_head"] % s["n_head_kv"]:
        raise InputError(f"--heads {s['n_head']} is not a multiple of --kv-heads {s['n_head_kv']}")
    if not s.get("head_dim"):
        if s["n_embd"] % s["n_head"]:
            raise InputError(f"--dim {s['n_embd']} is not a multiple of --heads {s['n_head']}")
        s["head_dim"] = s["n_embd"] // s["n_head"]
    s["n_expert"] = int(s.get("n_expert") or 0)
    s["n_expert_used"] = int(s.get("n_expert_used") or 0)
    if s["n_expert"]:
        if not 0 < s["n_expert_used"] <= s["n_expert"]:
            raise InputError(f"--experts-used must be in 1..{s['n_expert']}")
        s["n_ff_exp"] = int(s.get("n_ff_exp") or s["n_ff"])
    if s["arch"] == "qwen3moe" and not s["n_expert"]:
        raise InputError("arch qwen3moe needs --experts")
    for key in ("n_embd", "n_ff", "head_dim"):
        if s[key] % 32:
            raise InputError(f"{key} = {s[key]} must be a multiple of 32 (quantisation block size)")
    return s


def model_shape(preset=None, layers=None, **shape) -> dict:
    """A preset's shape with the given fields replaced, or a shape from the fields alone."""
    if preset:
        s = preset_shape(preset)
        for k, v in shape.items():
            if v is not None:
                s[k] = v
    else:
        s = dict(_BASE)
        s.update({k: v for k, v in shape.items() if v is not None})
        if layers is not None:
            s["n_layer"] = layers
    if layers is not None:
        if isinstance(layers, bool) or not isinstance(layers, int) or layers <= 0:
            raise InputError(f"--layers {layers!r}: must be a positive whole number")
        s["n_layer"] = layers
    return complete(s)
