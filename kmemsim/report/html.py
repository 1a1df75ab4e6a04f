"""The self-contained report.html of a comparison (kmemsim.report.compare.Comparison): its tables, its
plots inlined, the configuration and the device profile."""
from __future__ import annotations

import base64
import html as _html
import json

import pandas as pd

from .tables import SHOWN, describe, fmt

def _df_html(df, fmt=None):
    heads = "".join(f"<th>{_html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, row):
            s = fmt(v, c) if fmt else v
            cells.append(f"<td>{_html.escape(str(s))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def report(cmp, pngs: dict) -> str:
    imgs = "".join(
        f'<figure><img alt="{_html.escape(n)}" src="data:image/png;base64,{base64.b64encode(b).decode()}">'
        f"<figcaption>{_html.escape(n)}</figcaption></figure>" for n, b in pngs.items())
    full = cmp.table.copy()
    req = []
    for r in cmp.runs:
        q = r.metrics["requests"].reset_index()
        q.insert(0, "policy", r.policy)
        req.append(q)
    reqs = pd.concat(req) if req else pd.DataFrame()
    dev = json.dumps(cmp.device.as_dict(), indent=1, default=str)
    cfg = json.dumps(cmp.config, indent=1, default=str)
    css = ("body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
           "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
           "td,th{border:1px solid #bbb;padding:3px 7px;text-align:right}th{background:#eee}"
           "td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #ddd}"
           "pre{background:#f6f6f6;padding:1em;font-size:12px;overflow:auto}figure{margin:1em 0}")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>kmemsim compare: {_html.escape(cmp.workload.name)}</title>
<style>{css}</style></head><body>
<h1>kmemsim compare: {_html.escape(cmp.workload.name)}</h1>
<p>{_html.escape(describe(cmp))}. Source: {_html.escape(cmp.workload.source)}.
Counts come from the emulator; seconds are counts x the device profile (kmemsim.engine.time.serial).
Memory = resident pages + zram pool.</p>
<h2>Summary</h2>
{_df_html(cmp.table[SHOWN], fmt)}
<h2>Plots</h2>
{imgs}
<h2>All columns</h2>
{_df_html(full, fmt)}
<h2>Requests</h2>
{_df_html(reqs, lambda v, c: f"{v * 1e3:,.1f} ms" if c.endswith("_s") else v) if len(reqs) else "<p>no LLM requests</p>"}
<h2>Emulator configuration</h2>
<pre>{_html.escape(cfg)}</pre>
<h2>Device profile</h2>
<pre>{_html.escape(dev)}</pre>
</body></html>
"""
