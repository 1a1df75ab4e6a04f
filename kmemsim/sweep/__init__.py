"""Grids of replays on Dask: a grid file read and checked into its points (grid.py), the runner that
maps tasks over a Dask cluster or this process (runner.py), one point's work as a task (points.py),
`kmemsim sweep` itself with its resumable Parquet results and plots (run.py), and the paper
experiments split over the same runner (experiments.py). The face imports nothing: `kmemsim --help`
loads neither Dask nor the C core."""
__all__ = ["experiments", "grid", "points", "run", "runner"]
