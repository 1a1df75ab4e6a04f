"""Results for people: policies compared side by side (compare.py), their tables (tables.py), every
figure (plots.py), the HTML report (html.py), a trace's summary (trace_info.py), and results and live
runs as a Perfetto trace (perfetto.py)."""
__all__ = ["compare", "html", "perfetto", "plots", "tables", "trace_info"]
