"""`kmemsim replay TRACE`: run one trace through the emulator and print its counters.

TRACE is a kmemsim Parquet trace, or a libCacheSim trace (oracleGeneral binary or csv with one object
id per line; see libcachesim_io.py). Every option is checked before the trace is read, and nothing
is printed until the replay has finished, so a bad input leaves stdout empty.
"""
from __future__ import annotations

import json
import math

import click

from ..core.errors import InputError
from ..core.limits import check_zram_size
from ..core.paths import input_file
from ..core.units import PAGE_SIZE, format_size, parse_size

# The counters the table shows first, in this order (names as in /proc/vmstat and zram's mm_stat);
# any other scalar in the summary follows.
MAIN_COUNTERS = [
    "accesses", "misses",
    "pgfault", "pgmajfault", "pgpgin", "pgpgout", "pswpin", "pswpout",
    "workingset_refault_file", "workingset_refault_anon",
    "workingset_activate_file", "workingset_activate_anon",
    "workingset_restore_file", "workingset_restore_anon",
    "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd", "pgsteal_direct",
    "nr_active_file", "nr_inactive_file", "nr_active_anon", "nr_inactive_anon",
    "zram_orig_data_size", "zram_compr_data_size", "zram_mem_used_total",
    "oom_kill",
]

def check_zram(spec: str) -> str:
    """The form ALGO:SIZE and the size; the emulator's Config names the compressors it models."""
    algo, sep, size = spec.partition(":")
    if not sep or not algo or not size:
        raise InputError(f"--zram: expected ALGO:SIZE such as lz4:2G, got {spec!r}")
    check_zram_size(parse_size(size, "--zram size"), "--zram size", size)
    return spec


def build_config(mem, memcg_limit, swappiness, zram, policy, lru="classic"):
    """Check the options and return the Config keyword arguments (sizes in bytes)."""
    if mem is None and memcg_limit is None:
        raise InputError("give the memory to emulate: --mem SIZE (device RAM) or "
                         "--memcg-limit SIZE (a memory cgroup limit)")
    kw = {"swappiness": swappiness, "policy": policy, "lru": lru}
    if mem is not None:
        kw["mem"] = _whole_pages(parse_size(mem, "--mem"), "--mem", mem)
    if memcg_limit is not None:
        kw["memcg_limit"] = _whole_pages(parse_size(memcg_limit, "--memcg-limit"), "--memcg-limit",
                                         memcg_limit)
    if zram is not None:
        kw["zram"] = check_zram(zram)
    from ..engine.kernel import POLICIES      # here, not at the top: loads the C core (start-up)
    if policy not in POLICIES:
        raise InputError(f"--policy: unknown policy {policy!r}; known: {', '.join(sorted(POLICIES))}")
    return kw


def _whole_pages(n: int, what: str, raw) -> int:
    if n < PAGE_SIZE:
        raise InputError(f"{what}: {raw!r} is less than one 4 KiB page")
    return n


def _jsonable(x):
    import numpy as np          # here: the summary's values are numpy's; `--help` needs none
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if hasattr(x, "to_dict"):
        return x.to_dict()
    raise TypeError(f"cannot write {type(x).__name__} as JSON")


def _scalar(v):
    import numpy as np  # here: only for the values replay gives
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def format_table(summary: dict, header: list[tuple[str, str]]) -> str:
    rows = list(header)
    keys = [k for k in MAIN_COUNTERS if k in summary and _scalar(summary[k])]
    keys += sorted(k for k, v in summary.items() if k not in MAIN_COUNTERS and _scalar(v))
    for k in keys:
        v = summary[k]
        if isinstance(v, float) and not v.is_integer():
            s = f"{v:,.4f}"
        else:
            s = f"{int(v):,}" if not (isinstance(v, float) and math.isnan(v)) else "nan"
        rows.append((k, s))
        if k == "misses" and summary.get("accesses"):
            rows.append(("miss ratio", f"{summary['misses'] / summary['accesses']:.4f}"))
    w = max(len(k) for k, _ in rows)
    wv = max(len(v) for _, v in rows)
    return "\n".join(f"{k:<{w}}  {v:>{wv}}" for k, v in rows)


@click.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--mem", metavar="SIZE", help="Device RAM to emulate (e.g. 512M, 8G).")
@click.option("--memcg-limit", metavar="SIZE", help="Memory cgroup limit (memory.max) to replay under.")
@click.option("--swappiness", type=click.IntRange(0, 200), default=60, show_default=True,
              help="vm.swappiness, 0-200.")
@click.option("--zram", metavar="ALGO:SIZE", help="zram swap device, e.g. lz4:2G (default: no swap).")
@click.option("--policy", default="stock", show_default=True,
              help="Reclaim policy; 'lru' is a plain one-list LRU for cross-checks with libCacheSim.")
@click.option("--lru", type=click.Choice(["classic", "mglru"]), default="classic", show_default=True,
              help="the active/inactive lists or the multi-generational LRU (docs/mglru.md)")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def replay(trace, mem, memcg_limit, swappiness, zram, policy, lru, as_json):
    """Replay TRACE (kmemsim Parquet, libCacheSim oracleGeneral, or csv of object ids) through the
    emulator and print the kernel's counters.

    With a libCacheSim trace each object is one 4 KiB page of one file and each request a read of
    it; `--policy lru --mem SIZE --json` gives `accesses` and `misses` comparable with libCacheSim's
    LRU at a capacity of SIZE / 4 KiB objects.
    """
    kw = build_config(mem, memcg_limit, swappiness, zram, policy, lru)
    input_file(trace, expected="trace file")
    # here, not at the top: `kmemsim --help` loads no pandas or C core
    from ..workload.libcachesim_io import load_any
    try:
        from ..engine.kernel import Config, Emulator   # the C core: a build without it says so
    except ImportError as e:
        missing = InputError(f"the emulator core is not available ({e}); install kmemsim with "
                             "'pip install -e .' (make setup) to build it")
        load_any(trace)          # still report a bad trace first
        raise missing
    emu = Emulator(Config(**kw))   # the emulator's own checks (policy, compressor) before the trace
    tr = load_any(trace)
    res = emu.replay(tr)
    summary = dict(res.summary)
    if as_json:
        click.echo(json.dumps(summary, default=_jsonable, indent=2, sort_keys=False))
        return
    header = [("trace", trace), ("events", f"{len(tr):,}"), ("policy", policy)]
    if "mem" in kw:
        header.append(("mem", format_size(kw["mem"])))
    if "memcg_limit" in kw:
        header.append(("memcg limit", format_size(kw["memcg_limit"])))
    header.append(("swappiness", str(swappiness)))
    header.append(("zram", zram or "none"))
    click.echo(format_table(summary, header))
