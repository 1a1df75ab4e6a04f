"""Engine-side memory managers: one file per manager. KV managers behind KVCache (base.py), selectable
by name (registry.py, `--kv-manager NAME`): llamacpp.py. Whole-LLM managers with their own restore
pipelines: mzcache.py (mzCache) and partial_offload.py (its storage-backed baseline). A new KV manager
is one file here and one import line below."""
from .base import KV_TYPES, TENSOR_ALIGNMENT, KVCache, KVGeometry
from .registry import get, names, register
from . import llamacpp                      # noqa: F401  (registers "llamacpp")

DEFAULT = "llamacpp"

__all__ = ["KVCache", "KVGeometry", "KV_TYPES", "TENSOR_ALIGNMENT", "DEFAULT", "get", "names", "register"]
