"""`kmemsim experiment list` and `kmemsim experiment NAME -o DIR [--quick]`: a seed paper's experiment
in one command (kmemsim/experiment/): DIR/summary.csv and .parquet, DIR/paper.csv (the paper's
figures beside ours), report.md and the experiment's own tables and plots."""
from __future__ import annotations

import os

import click

from ..core.errors import InputError


@click.command()
@click.argument("name")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), help="output directory")
@click.option("--quick", is_flag=True, help="a corner of the grid, in seconds (each experiment says which)")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="change the grid, e.g. --set contexts=8193,16385 --set remaining=0.5 (repeatable)")
def experiment(name, out_dir, quick, overrides):
    """Run a seed paper's experiment (NAME), or `list` them."""
    from .. import experiment as ex     # here, not at the top: `kmemsim --help` loads no pandas or C core
    if name == "list":
        for n, m in ex.EXPERIMENTS.items():
            click.echo(f"{n:24s} {m.TITLE}")
        return
    mod = ex.get(name)
    if not out_dir:
        raise InputError("give -o DIR for the experiment's outputs")
    df = mod.run(out_dir, quick=quick, overrides=overrides, progress=lambda s: click.echo(s, err=True))
    click.echo(f"{len(df)} rows in {df.attrs.get('wall_s', 0):.1f} s; wrote {out_dir}/: "
               + " ".join(sorted(os.listdir(out_dir))))
