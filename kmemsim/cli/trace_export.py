"""`kmemsim trace export TRACE --format oracleGeneral|csv -o OUT`: a kmemsim trace as a libCacheSim
trace, one 4 KiB object per page and one request per page referenced
(kmemsim/workload/libcachesim_export.py), so libCacheSim's policies can run it; libCacheSim's LRU
at a cache of SIZE bytes misses as `kmemsim replay TRACE --policy lru --mem SIZE` does."""
from __future__ import annotations

import click

from ..core.paths import input_file, output_file
from . import options


@click.command("export")
@click.argument("trace_path", metavar="TRACE", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["oracleGeneral", "csv"]), default="oracleGeneral",
              show_default=True, help="oracleGeneral: libCacheSim's 24-byte binary records (clock time in "
                                      "seconds, object id, size 4096, next access); csv: one object id a line")
@options.out(help="the libCacheSim trace to write")
def trace_export(trace_path, fmt, out):
    """Write TRACE (kmemsim Parquet) as a libCacheSim trace: one request per page referenced.

    \b
    Example (a 4-layer model from `kmemsim model synth`, its llama.cpp trace, then the export):
      kmemsim model synth model.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
      kmemsim workload llama model.gguf --prompt 64 --decode 8 --ctx 512 -o llama.parquet
      kmemsim trace export llama.parquet --format oracleGeneral -o llama.oracleGeneral
    """
    output_file(out)
    input_file(trace_path, "TRACE", "trace file")
    # here, not at the top: `kmemsim --help` loads no numpy, pandas or pyarrow
    from ..core.atomic import atomic_write
    from ..core.units import PAGE_SIZE
    from ..workload import libcachesim_export as ex
    from ..workload.libcachesim_io import load_any
    tr = load_any(trace_path)
    reqs = ex.references(tr)
    atomic_write(out, lambda tmp: ex.write(reqs, tmp, fmt))
    distinct = reqs.distinct()
    click.echo(f"{out}: {len(reqs.obj_id):,} requests (one per page referenced) of {distinct:,} objects "
               f"({distinct * PAGE_SIZE / 2**20:,.1f} MiB), object size {PAGE_SIZE:,} bytes, {fmt}")
    gone = ex.frees(tr)
    if gone:
        click.echo(f"note: {gone:,} event(s) free pages before the trace ends (munmap, DONTNEED, exit); "
                   "libCacheSim's formats cannot say so, its cache keeps those pages until they age out")
