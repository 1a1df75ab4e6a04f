"""Each seed paper's experiment as one command: `kmemsim experiment list`, `kmemsim experiment NAME -o DIR
[--quick]`. One module per experiment, registered in registry.py with one line; each writes
DIR/summary.csv (and .parquet), DIR/paper.csv (the paper's figures beside ours) and a report."""
from .registry import EXPERIMENTS, get, names

__all__ = ["EXPERIMENTS", "get", "names"]
