"""Where kmemsim's own files live: the bundled device profiles, app definitions and scenarios (package
data under kmemsim/data/, so an installed wheel finds them; the checkout's workloads/ points there),
and the per-user cache of measurements."""
from __future__ import annotations

import os
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data"
DEVICES = DATA / "devices"          # device profiles, one TOML each (kmemsim.engine.time.device)
APPS = DATA / "apps"                # app definitions scenarios refer to (kmemsim.workload.scenario)
SCENARIOS = DATA / "scenarios"      # bundled scenarios
DEFAULT_DEVICE = "galaxy-s25plus"   # the profile a command uses when none is named


def cache_dir() -> str:
    """Measurements kept between runs (engine baseline, llama.cpp probes, warm sets, this boot's device
    profile): $KMEMSIM_CACHE, else ~/.cache/kmemsim. Created if missing."""
    d = os.environ.get("KMEMSIM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kmemsim")
    os.makedirs(d, exist_ok=True)
    return d
