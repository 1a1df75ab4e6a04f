"""Workloads: what touches memory, as traces. GGUF layouts (gguf_layout.py) and random-weight models
(synth.py), llama.cpp inference (llama/), multitasking scenarios (scenario/), libCacheSim traces
(libcachesim_io.py). The face stays light (no llama/ or scenario/, which load the engine): the CLI
reads synth's presets for its help text."""
from .gguf_layout import ModelLayout, TensorInfo, layout_of, read_layout

__all__ = ["ModelLayout", "TensorInfo", "layout_of", "read_layout"]
