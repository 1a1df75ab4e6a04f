"""The emulation engine: the kernel's memory management (kernel.py over the C core in c_ext/), the
inference engine's own memory managers (managers/), and time (time/: device profiles, compute, the
time model)."""
from .kernel import COUNTERS, GAUGES, POLICIES, Config, Emulator, PageState, Result

__all__ = ["Config", "Emulator", "Result", "PageState", "POLICIES", "COUNTERS", "GAUGES"]
