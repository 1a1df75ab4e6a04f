"""Tables of a comparison: each value in its unit (MiB, %, ms, counts), as text, Markdown and, with the
unit in the header, as the DataFrames the HTML report styles (`human`)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def fmt(v, col):
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if col.endswith("_bytes"):
        return f"{v / 2**20:,.1f} MiB"
    if col.endswith("_pct"):
        return f"{v:+.1f}%"
    if col.endswith("_s"):
        return f"{v * 1e3:,.1f} ms"
    return f"{int(v):,}"


SHOWN = ["policy", "peak_memory_bytes", "peak_memory_vs_stock_pct", "mean_memory_bytes", "mean_memory_vs_stock_pct",
         "storage_read_bytes", "major_faults", "swap_out_bytes", "ttft_s", "tpot_s", "switch_latency_s"]


def table_text(df: pd.DataFrame, cols=SHOWN) -> str:
    cells = [[fmt(v, c) for c, v in zip(cols, row)] for row in df[cols].itertuples(index=False)]
    heads = [c.replace("_bytes", "").replace("_vs_stock_pct", " vs stock").replace("_s", "") for c in cols]
    w = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
    line = lambda r: "  ".join(x.rjust(w[i]) if i else x.ljust(w[i]) for i, x in enumerate(r))
    return "\n".join([line(heads)] + [line(r) for r in cells])


def table_markdown(df: pd.DataFrame, cols=SHOWN) -> str:
    heads = [c.replace("_bytes", "").replace("_vs_stock_pct", " vs stock").replace("_s", "") for c in cols]
    out = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df[cols].itertuples(index=False):
        out.append("| " + " | ".join(fmt(v, c) for c, v in zip(cols, row)) + " |")
    return "\n".join(out)


def describe(cmp) -> str:
    """One line: the workload, its events, the device and the memory the comparison ran with."""
    cfg = cmp.config
    mem = f"memcg limit {cfg['memcg_limit']}" if cfg.get("memcg_limit") else f"mem {cfg.get('mem')}"
    if isinstance(cfg.get("mem"), int):
        mem = f"mem {cfg['mem'] / 2**30:.2f} GiB"
    return (f"{cmp.workload.name}: {len(cmp.workload.trace):,} events; device {cmp.device.name}; {mem}; "
            f"zram {cfg.get('zram')}")


def markdown(df: pd.DataFrame, digits=3) -> str:
    """Any table as Markdown: floats to `digits` significant figures, missing values as '-'."""
    def cell(v):
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "-"
        if isinstance(v, (float, np.floating)):
            return f"{v:.{digits}g}"
        return str(v)
    cols = [str(c) for c in df.columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        out.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(out)


# a machine column's unit suffix -> (what a person reads in the header, the factor to that unit)
UNITS = [("_vs_stock_pct", "vs stock (%)", 1.0), ("_pct", "(%)", 1.0), ("_bytes", "(MiB)", 1 / 2**20),
         ("_pages", "(pages)", 1.0), ("_ns", "(ms)", 1e-6), ("_s", "(ms)", 1e3)]
# columns whose name is already what a person reads, or a count
HEADERS = {"policy": "policy", "major_faults": "major faults", "oom_kill": "OOM kills", "lmk_kill": "lmkd kills",
           "decode_steps": "decode steps", "t_s": "at (s)", "start_s": "start (s)"}


def header(col: str) -> tuple[str, float]:
    """(the header a person reads, with its unit; the factor from the column's unit to it)."""
    if col in HEADERS:
        return HEADERS[col], 1.0
    for suffix, unit, k in UNITS:
        if col.endswith(suffix):
            return f"{col[:-len(suffix)].replace('_', ' ')} {unit}", k
    return col.replace("_", " "), 1.0


def human(df: pd.DataFrame) -> pd.DataFrame:
    """The table in a person's units: each numeric column converted (bytes to MiB, seconds to ms)
    under a header that names the unit."""
    out = {}
    for c in df.columns:
        h, k = header(str(c))
        v = df[c]
        out[h] = v * k if k != 1.0 and pd.api.types.is_numeric_dtype(v) else v
    return pd.DataFrame(out, index=df.index)
