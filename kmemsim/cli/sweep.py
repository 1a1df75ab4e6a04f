"""`kmemsim sweep GRID.toml -o DIR [--scheduler local|serial|tcp://HOST:PORT] [--workers N] [--dry-run]`:
every point of a grid (policy x device x memory x context x scenario keys ...) replayed as `compare`
replays it, on Dask; results.parquet (one row per point), plots, resumable (docs/sweep.md)."""
from __future__ import annotations

import click

from ..core.progress import note, quiet
from . import options


@click.command(epilog="""
\b
Example (the bundled small grid: two policies at two memory sizes, in this process):
  kmemsim sweep workloads/sweeps/small.toml --scheduler serial -o sw
""")
@click.argument("grid", type=click.Path(dir_okay=False))
@options.out(required=False, kind="dir", dest="out_dir", help="output directory (a rerun resumes it)")
@click.option("--scheduler", default="local", show_default=True,
              help="local (a Dask LocalCluster here), serial (this process, one point after another), "
                   "or a Dask scheduler's address, tcp://HOST:PORT")
@click.option("--workers", type=int, default=None, help="LocalCluster worker processes [default: one per core]")
@click.option("--dry-run", is_flag=True, help="print the number of points and an estimated time; run and write nothing")
@options.quiet
def sweep(grid, out_dir, scheduler, workers, dry_run):
    """Replay every point of a grid of compare's options on a Dask cluster."""
    # here, not at the top: `kmemsim --help` loads no pandas, Dask or C core
    from ..core.errors import InputError
    from ..sweep import run as sweepmod
    if not out_dir:
        raise InputError("give -o DIR for the sweep's results (a rerun with the same DIR resumes)")
    r = sweepmod.sweep(grid, out_dir, scheduler=scheduler, workers=workers, dry_run=dry_run,
                       echo=(lambda s: click.echo(s, err=True)) if dry_run else note, quiet=quiet())
    if dry_run:
        return
    click.echo(f"{r['run']} points run in {r['wall_s']:.1f} s on {r['scheduler']} "
               f"({r['done_before']} points done before); {out_dir}/results.parquet holds {len(r['results'])} points "
               f"(the grid has {r['points']} points)" + (f"; plots: {' '.join(r['plots'])}" if r["plots"] else ""))
