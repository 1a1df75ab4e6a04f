"""kmemsim: what the Linux kernel's memory management does to on-device LLM inference."""
__version__ = "0.1.0"
