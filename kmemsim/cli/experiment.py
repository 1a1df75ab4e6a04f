"""`kmemsim experiment list` and `kmemsim experiment NAME -o DIR [--quick]`: a seed paper's experiment
in one command (kmemsim/experiment/): DIR/summary.csv and .parquet, DIR/paper.csv (the paper's
figures beside ours), report.md and the experiment's own tables and plots."""
from __future__ import annotations

import os

import click

from ..core.errors import InputError
from ..core.paths import output_dir
from ..core.progress import note
from . import options


@click.command(epilog="""
\b
Example (the experiments there are, then one at a corner of its grid):
  kmemsim experiment list
  kmemsim experiment llms-switch --quick -o llms
""")
@click.argument("name")
@options.out(required=False, kind="dir", dest="out_dir", help="output directory")
@click.option("--quick", is_flag=True, help="a corner of the grid, in seconds (each experiment says which)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="change the grid, e.g. --set contexts=8193,16385 --set remaining=0.5 (repeatable)")
@click.option("--scheduler", default=None, help="run the grid's cells on Dask: local (a LocalCluster here) or "
              "tcp://HOST:PORT [default: this process] (kmemsim/sweep/experiments.py)")
@click.option("--workers", type=int, default=None, help="with --scheduler local: worker processes [default: one per core]")
@options.quiet
def experiment(name, out_dir, quick, overrides, scheduler, workers):
    """Run a seed paper's experiment (NAME), or `list` them."""
    from .. import experiment as ex     # here, not at the top: `kmemsim --help` loads no pandas or C core
    if name == "list":
        for n, m in ex.EXPERIMENTS.items():
            click.echo(f"{n:24s} {m.TITLE}")
        return
    mod = ex.get(name)
    if out_dir is None:
        raise InputError("give -o DIR for the experiment's outputs")
    output_dir(out_dir)
    from ..sweep import experiments as on_runner     # here: as above; Dask loads only with --scheduler
    df = on_runner.run(mod, out_dir, quick=quick, overrides=overrides, scheduler=scheduler, workers=workers,
                       progress=note)
    click.echo(f"{len(df)} rows in {df.attrs.get('wall_s', 0):.1f} s; wrote {out_dir}/: "
               + " ".join(sorted(os.listdir(out_dir))))
