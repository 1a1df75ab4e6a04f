"""`kmemsim export perfetto DIR [DIR ...] -o trace.pftrace`: compare and sweep outputs and live run
directories as one Perfetto trace (kmemsim/report/perfetto.py), for ui.perfetto.dev."""
from __future__ import annotations

import click

from . import options


@click.group(epilog="""
\b
Example (each command's --help has its own):
  kmemsim export perfetto cmp -o cmp.pftrace
""")
def export():
    """Write kmemsim's results in other tools' formats."""


@export.command("perfetto", epilog="""
\b
Example (a comparison of the bundled small scenario, then its timelines for ui.perfetto.dev):
  kmemsim compare workloads/scenarios/small.toml --policy stock,is --mem 1G -o cmp
  kmemsim export perfetto cmp -o cmp.pftrace
""")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@options.out(dest="out_path", help="the Perfetto trace to write (.pftrace)")
def perfetto(dirs, out_path):
    """Counter tracks, phases, faults and kills of compare/sweep outputs and live runs, side by side."""
    # here, not at the top: `kmemsim --help` loads no pandas or protobuf
    from ..report import perfetto as pf
    drawn = pf.export(list(dirs), out_path)
    n = sum(len(v) for v in drawn.values())
    click.echo(f"wrote {out_path}: {n} processes from {len(drawn)} directories; open it in ui.perfetto.dev")
