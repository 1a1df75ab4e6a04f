"""Engine-side memory managers: one file per manager. KV managers behind KVCache (base.py), selectable
by name (registry.py, `--kv-manager NAME`): llamacpp.py. Whole-LLM managers with their own restore
pipelines: mzcache.py (mzCache) and partial_offload.py (its storage-backed baseline). MoE expert
caches: expert_slots.py (the `direct:SLOTS` load mode's slot cache). A new KV manager
is one file here and one import line below."""
from .base import KV_TYPES, TENSOR_ALIGNMENT, KVCache, KVGeometry
from .registry import get, names, register
from . import llamacpp                      # noqa: F401  (registers "llamacpp")
from .expert_slots import ExpertSlots       # MoE: llama.cpp #25294's O_DIRECT slot cache

DEFAULT = "llamacpp"

__all__ = ["ExpertSlots", "KVCache", "KVGeometry", "KV_TYPES", "TENSOR_ALIGNMENT", "DEFAULT", "get", "names", "register"]
