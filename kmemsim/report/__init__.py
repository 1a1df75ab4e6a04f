"""Results for people: policies compared side by side (compare.py), their tables (tables.py), every
figure (plots.py), the HTML report (html.py), and a trace's summary (trace_info.py)."""
__all__ = ["compare", "html", "plots", "tables", "trace_info"]
