"""Plots (PNG bytes) and the self-contained report.html of a kmemsim.compare.Comparison."""
from __future__ import annotations

import base64
import html as _html
import io
import json

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt   # noqa: E402
import numpy as np                # noqa: E402

from .trace import PAGE_SIZE      # noqa: E402

COLORS = {"stock": "#444444", "is": "#1f77b4", "is-tail": "#17becf", "dw": "#d62728", "is+dw": "#2ca02c",
          "lru": "#9467bd"}
CLASSES = [  # (label, colour, function of the timeline -> bytes)
    ("weights (file pages)", "#d62728", lambda tl: tl.nr_weight_file_pages * PAGE_SIZE),
    ("other file pages (apps, libraries)", "#ff9896", lambda tl: (tl.nr_file_pages - tl.nr_weight_file_pages) * PAGE_SIZE),
    ("weights (anonymous copies: repack, --no-mmap)", "#ff7f0e", lambda tl: tl.nr_weight_anon_pages * PAGE_SIZE),
    ("KV cache", "#1f77b4", lambda tl: tl.nr_kv_anon_pages * PAGE_SIZE),
    ("other anonymous (LLM buffers, app heaps)", "#aec7e8",
     lambda tl: (tl.nr_anon_pages - tl.nr_kv_anon_pages - tl.nr_weight_anon_pages) * PAGE_SIZE),
    ("zram pool", "#2ca02c", lambda tl: tl.zram_mem_used_total),
]


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _color(p, i):
    return COLORS.get(p, f"C{i}")


def memory_plot(cmp) -> bytes:
    n = len(cmp.runs)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 * n + 0.6), sharex=True, squeeze=False)
    top = max(float(((r.timeline.nr_file_pages + r.timeline.nr_anon_pages) * PAGE_SIZE
                     + r.timeline.zram_mem_used_total).max()) for r in cmp.runs) / 2**30 * 1.05
    for ax, r in zip(axes[:, 0], cmp.runs):
        tl = r.timeline
        t = tl.t.to_numpy() / 1e9
        ys = [np.asarray(f(tl), float) / 2**30 for _, _, f in CLASSES]
        ax.stackplot(t, *ys, colors=[c for _, c, _ in CLASSES], labels=[l for l, _, _ in CLASSES],
                     step="post", linewidth=0)
        ax.set_ylim(0, max(top, 1e-3))
        ax.set_ylabel("GiB")
        ax.set_title(f"{r.policy}: peak {r.summary['peak_memory_bytes'] / 2**30:.2f} GiB (resident + zram pool)",
                     fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=7, ncol=2)
    axes[-1, 0].set_xlabel("trace time (s)")
    fig.suptitle("Memory over time by class", fontsize=11)
    return _png(fig)


def storage_plot(cmp) -> bytes:
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for i, r in enumerate(cmp.runs):
        tl = r.timeline
        ax.step(tl.t / 1e9, tl.pgpgin * PAGE_SIZE / 2**20, where="post", label=r.policy, color=_color(r.policy, i),
                linewidth=1.6)
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("MiB read from storage")
    ax.set_title("Cumulative storage reads (pgpgin)", fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def token_plot(cmp) -> bytes:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [3, 1]})
    for i, r in enumerate(cmp.runs):
        d = r.metrics["decode_steps"]
        a1.plot(np.arange(len(d)), d["time_s"].to_numpy() * 1e3, ".", markersize=3, label=r.policy,
                color=_color(r.policy, i), alpha=0.8)
    a1.set_xlabel("decode step (all requests, in order)")
    a1.set_ylabel("ms per step (compute + stall)")
    a1.set_yscale("log")
    a1.set_title("Per-token latency", fontsize=11)
    a1.grid(alpha=0.3, which="both")
    a1.legend(fontsize=8)
    ttft = [r.metrics["ttft_s"] * 1e3 for r in cmp.runs]
    a2.bar([r.policy for r in cmp.runs], np.nan_to_num(ttft), color=[_color(r.policy, i) for i, r in enumerate(cmp.runs)])
    a2.set_title("mean TTFT (ms)", fontsize=11)
    a2.tick_params(axis="x", labelrotation=45, labelsize=8)
    a2.grid(alpha=0.3, axis="y")
    return _png(fig)


def plots(cmp) -> dict:
    return {"memory.png": memory_plot(cmp), "storage_reads.png": storage_plot(cmp),
            "token_latency.png": token_plot(cmp)}


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


def html(cmp, pngs: dict) -> str:
    from .compare import SHOWN, _fmt, describe
    imgs = "".join(
        f'<figure><img alt="{_html.escape(n)}" src="data:image/png;base64,{base64.b64encode(b).decode()}">'
        f"<figcaption>{_html.escape(n)}</figcaption></figure>" for n, b in pngs.items())
    full = cmp.table.copy()
    req = []
    for r in cmp.runs:
        q = r.metrics["requests"].reset_index()
        q.insert(0, "policy", r.policy)
        req.append(q)
    import pandas as pd
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
Counts come from the emulator; seconds are counts x the device profile (kmemsim.timing).
Memory = resident pages + zram pool.</p>
<h2>Summary</h2>
{_df_html(cmp.table[SHOWN], _fmt)}
<h2>Plots</h2>
{imgs}
<h2>All columns</h2>
{_df_html(full, _fmt)}
<h2>Requests</h2>
{_df_html(reqs, lambda v, c: f"{v * 1e3:,.1f} ms" if c.endswith("_s") else v) if len(reqs) else "<p>no LLM requests</p>"}
<h2>Emulator configuration</h2>
<pre>{_html.escape(cfg)}</pre>
<h2>Device profile</h2>
<pre>{_html.escape(dev)}</pre>
</body></html>
"""
