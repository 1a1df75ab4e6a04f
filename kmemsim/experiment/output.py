"""What every experiment does with its command line and its results: `--set KEY=VALUE` overrides
checked against the experiment's keys, and the tables written whole or not at all."""
from __future__ import annotations

import os

from ..core.atomic import atomic_write
from ..core.errors import InputError


def overrides(keys, items) -> dict:
    """{KEY: VALUE (a string)} from `--set KEY=VALUE` items, each KEY one of keys."""
    out = {}
    for o in items:
        key, eq, val = str(o).partition("=")
        if not eq or key not in keys:
            raise InputError(f"--set {o!r}: expected KEY=VALUE with KEY one of {', '.join(keys)}")
        out[key] = val.strip()
    return out


def write_tables(out, summary, paper, **more):
    """DIR/summary.csv and .parquet, DIR/paper.csv, and DIR/<name>.csv for each further table."""
    atomic_write(os.path.join(out, "summary.csv"), lambda tmp: summary.to_csv(tmp, index=False))
    atomic_write(os.path.join(out, "summary.parquet"), lambda tmp: summary.to_parquet(tmp, index=False))
    atomic_write(os.path.join(out, "paper.csv"), lambda tmp: paper.to_csv(tmp, index=False))
    for name, df in more.items():
        atomic_write(os.path.join(out, f"{name}.csv"), lambda tmp, df=df: df.to_csv(tmp, index=False))
