"""The experiments by name. An experiment module has NAME, TITLE, PAPER (the source), and
run(out_dir, quick=False, progress=None) -> pandas.DataFrame (the summary it wrote)."""
from __future__ import annotations

from ..core.errors import InputError
from . import (dynakv_latency, dynakv_phone, llms_capacity, llms_phone, llms_switch, moe_paging, mzcache_apps,
               mzcache_ttft)

EXPERIMENTS = {m.NAME: m for m in (mzcache_ttft, mzcache_apps, llms_switch, llms_capacity, llms_phone, dynakv_latency,
                                    dynakv_phone, moe_paging)}


def names() -> list[str]:
    return list(EXPERIMENTS)


def get(name):
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise InputError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)} "
                         "(kmemsim experiment list)") from None
