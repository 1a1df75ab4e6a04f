"""`kmemsim replay TRACE`: run one trace through the emulator and print its counters.

TRACE is a kmemsim Parquet trace, or a libCacheSim trace (oracleGeneral binary or csv with one object
id per line; see libcachesim_io.py). Every option is checked before the trace is read, and nothing
is printed until the replay has finished, so a bad input leaves stdout empty.
"""
from __future__ import annotations

import json
import os

import click

from ..core.errors import InputError
from ..core.paths import input_file
from ..core.progress import say
from ..core.units import parse_size
from . import options

def build_config(mem, mem_limit, swappiness, zram, policy, lru="classic"):
    """The Config keyword arguments (sizes in bytes); the options' forms are checked as they are read
    (options.Size, options.Zram)."""
    if mem is None and mem_limit is None:
        raise InputError("give the memory to emulate: --mem SIZE (device RAM) or "
                         "--mem-limit SIZE (a memory cgroup limit)")
    kw = {"swappiness": swappiness, "policy": policy, "lru": lru}
    if mem is not None:
        kw["mem"] = parse_size(mem, options.flag("mem", "--mem"))
    if mem_limit is not None:
        kw["memcg_limit"] = parse_size(mem_limit, options.flag("mem_limit", "--mem-limit"))
    if zram is not None:
        kw["zram"] = zram
    return kw


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


def describe(trace, tr, stream=None) -> dict:
    """The trace as --json carries it: where it came from, its size, duration and processes (of the
    whole trace when `tr` is only the header of a stream)."""
    t = tr.cols["t"]
    meta = tr.meta
    events = stream.events if stream else len(tr)
    span = stream.duration_ns if stream else (float(t[-1] - t[0]) if len(tr) else 0.0)
    return {"path": os.path.abspath(trace), "source": meta.get("source", "libCacheSim" if not meta else ""),
            "events": int(events), "duration_s": float(span) / 1e9,
            "processes": [{"pid": int(p["pid"]), "name": p.get("name", "")} for p in meta.get("processes", [])],
            "files": [{"path": f["path"], "pages": int(f["pages"])} for f in meta.get("files", [])]}


EXAMPLE = """
\b
Example (a bundled scenario as a trace, then replayed under a 256 MiB cgroup with 1 GiB of zram):
  kmemsim workload scenario workloads/scenarios/small.toml -o small.parquet
  kmemsim replay small.parquet --mem-limit 256M --zram lz4:1G
"""


@click.command(epilog=EXAMPLE)
@click.argument("trace", type=click.Path(dir_okay=False))
@options.mem(help="device RAM to emulate (no cgroup), e.g. 8G; give it or --mem-limit")
@options.mem_limit(help="memory cgroup limit (memory.max) to replay under, e.g. 512M")
@options.swappiness(default=60, show_default=True)
@options.zram(help="zram swap device, e.g. lz4:2G [default: no swap]")
@options.policy(default="stock", show_default=True,
                help="reclaim policy; lru is a plain one-list LRU for cross-checks with libCacheSim")
@click.option("--lru", type=click.Choice(["classic", "mglru"]), default="classic", show_default=True,
              help="the active/inactive lists or the multi-generational LRU (docs/mglru.md)")
@click.option("--json", "as_json", is_flag=True,
              help="print the trace, the configuration and every counter, each key with its unit")
def replay(trace, mem, mem_limit, swappiness, zram, policy, lru, as_json):
    """Replay TRACE (kmemsim Parquet, libCacheSim oracleGeneral, or csv of object ids) through the
    emulator and print the kernel's counters, grouped, each with its unit.

    With a libCacheSim trace each object is one 4 KiB page of one file and each request a read of
    it; `--policy lru --mem SIZE --json` gives `accesses_pages` and `misses_pages` comparable with
    libCacheSim's LRU at a capacity of SIZE / 4 KiB objects.

    zram_* are the pool now (gauges) while pswpout counts every page swapped out: the pool empties
    as the trace's processes exit, so the table gives each gauge's peak beside its end value.
    """
    kw = build_config(mem, mem_limit, swappiness, zram, policy, lru)
    input_file(trace, expected="trace file")
    # here, not at the top: `kmemsim --help` loads no pandas or C core
    from ..report import counters
    from ..workload.libcachesim_io import OracleGeneralStream, detect_format, load_any
    try:
        from ..engine.kernel import Config, Emulator   # the C core: a build without it says so
    except ImportError as e:
        missing = InputError(f"the emulator core is not available ({e}); install kmemsim with "
                             "'pip install -e .' (make setup) to build it")
        load_any(trace)          # still report a bad trace first
        raise missing
    emu = Emulator(Config(**kw))   # the emulator's own checks (policy, compressor) before the trace
    # an oracleGeneral file is replayed a slice at a time, never loaded whole (its requests are
    # independent reads of one mapping); other formats whole
    stream = OracleGeneralStream(trace) if detect_format(trace) == "oracleGeneral" else None
    tr = stream.header if stream else load_any(trace)
    say(f"replaying {stream.events if stream else len(tr):,} events ({trace}) under the {policy} policy")
    res = emu.replay_batches(tr, stream.batches()) if stream else emu.replay(tr)
    summary = dict(res.summary)
    node = "mem" in kw
    if as_json:
        cfg = {"policy": policy, "lru": lru, "swappiness": swappiness, "zram": zram,
               "zram_bytes": parse_size(zram.partition(":")[2]) if zram else 0,
               "mem_bytes": kw.get("mem"), "mem_limit_bytes": kw.get("memcg_limit")}
        out = {"trace": describe(trace, tr, stream), "config": cfg,
               "counters": counters.json_counters(summary, res, node),
               "miss_ratio": summary["misses"] / summary["accesses"] if summary.get("accesses") else None,
               "notes": NOTES}
        click.echo(json.dumps(out, default=_jsonable, indent=2, sort_keys=False))
        return
    d = describe(trace, tr, stream)
    mem_txt = ", ".join(([f"RAM {counters.human_bytes(kw['mem'])}"] if node else [])
                        + ([f"cgroup limit {counters.human_bytes(kw['memcg_limit'])}"] if "memcg_limit" in kw else []))
    click.echo(f"trace     {trace}: {d['events']:,} events over {d['duration_s']:.3f} s of trace time"
               + (f", from {d['source']}" if d["source"] else ""))
    click.echo(f"config    policy {policy} ({lru} LRU), {mem_txt}, swappiness {swappiness}, "
               f"zram {zram or 'none'}")
    click.echo(counters.text_table(summary, res, node))
    if not node:
        click.echo("(nr_free_pages and the watermarks describe a node's RAM: give --mem to see them)")


# what a reader of --json needs to read its numbers right (report/counters.py)
NOTES = ["zram_* and nr_swapped are gauges (zram's mm_stat): the pool at the end, after the trace's "
         "processes exited and freed their swap slots; *_peak_* are their largest samples over the run. "
         "pswpout/pswpin count every page swapped.",
         "nr_free_pages and the watermarks are given only with mem_bytes (a node's RAM): a cgroup alone "
         "has none to run out of."]
