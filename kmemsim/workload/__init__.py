"""Workloads: what touches memory, as traces. GGUF layouts (gguf_layout.py) and random-weight models
(synth.py), llama.cpp inference (llama/), multitasking scenarios (scenario/), libCacheSim traces
(libcachesim_io.py). The face stays light (no llama/ or scenario/, which load the engine): the CLI
reads synth's presets for its help text. Its names load with gguf_layout on first use (PEP 562), so
`kmemsim replay` of a libCacheSim trace does not build the GGUF tables."""
__all__ = ["ModelLayout", "TensorInfo", "layout_of", "read_layout"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import gguf_layout      # here: on first use (see above)
    value = getattr(gguf_layout, name)
    globals()[name] = value
    return value
