"""Every figure kmemsim draws, as PNG bytes: a comparison's (memory by class, storage reads, token
latency) and validation's (predicted beside measured, on the phase axis)."""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt   # noqa: E402
from matplotlib.colors import to_rgb   # noqa: E402
import numpy as np                # noqa: E402

from ..core.units import PAGE_SIZE      # noqa: E402
from ..engine.kernel import POLICIES   # noqa: E402

# each policy's colour, in the core's registry order (stock grey; lru, is, is-tail, dw, is+dw); a
# manager's or a new policy's beyond the palette gets matplotlib's cycle
PALETTE = ["#444444", "#9467bd", "#1f77b4", "#17becf", "#d62728", "#2ca02c"]
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
    k = POLICIES.index(p) if p in POLICIES else len(PALETTE)
    return PALETTE[k] if k < len(PALETTE) else f"C{i}"


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


def comparison(cmp) -> dict:
    return {"memory.png": memory_plot(cmp), "storage_reads.png": storage_plot(cmp),
            "token_latency.png": token_plot(cmp)}


@dataclass
class Panel:
    """One panel of phase_panels: lines (x, y, style, label, colour or None) and labelled hlines."""
    title: str
    ylabel: str
    lines: list
    hlines: list = field(default_factory=list)


def phase_panels(panels, phases) -> bytes:
    """Panels side by side on a phase axis (each phase one unit wide, named at its middle)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for a, p in zip(axes[0], panels):
        for x, y, style, label, color in p.lines:
            a.plot(x, y, style, label=label, **({"color": color} if color else {}))
        for y, label in p.hlines:
            a.axhline(y, color="grey", lw=0.5, label=label)
        a.set_ylabel(p.ylabel)
        a.set_title(p.title)
        a.set_xticks(np.arange(len(phases)) + 0.5, phases)
        for x in range(1, len(phases)):
            a.axvline(x, color="grey", lw=0.3)
        a.legend(fontsize=7, loc="upper left")     # "best" searches every point: slow on long runs
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def experiment_lines(df, x, y, line, facet, logy=False, title="", xlabel="", ylabel="") -> bytes:
    """A metric against an axis, one line per `line` value, one panel per combination of the `facet`
    columns (rows by the first, columns by the second), every panel on the same scale."""
    rows = sorted(df[facet[0]].unique())
    cols = sorted(df[facet[1]].unique())
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.6 * len(cols) + 1, 2.8 * len(rows) + 0.8),
                             sharex=True, sharey=True, squeeze=False)
    names = list(dict.fromkeys(df[line]))
    for (i, r), (j, c) in ((a, b) for a in enumerate(rows) for b in enumerate(cols)):
        ax = axes[i, j]
        sub = df[(df[facet[0]] == r) & (df[facet[1]] == c)]
        for k, name in enumerate(names):
            d = sub[sub[line] == name].groupby(x, as_index=False)[y].mean().sort_values(x)
            ax.plot(d[x], d[y], marker="o", ms=3, lw=1.2, label=name, color=f"C{k}")
        ax.set_title(", ".join(x for x in (str(r), f"{facet[1]} {c}".strip()) if x), fontsize=9)
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
        if i == len(rows) - 1:
            ax.set_xlabel(xlabel or x)
        if j == 0:
            ax.set_ylabel(ylabel or y)
    axes[0, -1].legend(fontsize=7, loc="upper right")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _png(fig)


def winner_map(df, x, y, value, facet, title="", xlabel="", ylabel="", note=None) -> bytes:
    """Which `value` (a category: the winner) holds each (x, y) cell, one panel per `facet` value,
    each cell labelled with it (and with `note`'s column under it, when given)."""
    panels = list(dict.fromkeys(df[facet]))
    names = sorted(df[value].unique())
    xs, ys = sorted(df[x].unique()), sorted(df[y].unique())
    fig, axes = plt.subplots(1, len(panels), figsize=(1.2 * len(xs) * len(panels) + 2, 0.55 * len(ys) + 1.8),
                             squeeze=False)
    cmap = {n: f"C{i}" for i, n in enumerate(names)}
    for ax, p in zip(axes[0], panels):
        sub = df[df[facet] == p]
        img = np.ones((len(ys), len(xs), 3))
        for _, r in sub.iterrows():
            i, j = ys.index(r[y]), xs.index(r[x])
            img[i, j] = to_rgb(cmap[r[value]])
            label = str(r[value]) + (f"\n{r[note]}" if note else "")
            ax.text(j, i, label, ha="center", va="center", fontsize=7, color="white")
        ax.imshow(img, origin="lower", aspect="auto")
        ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
        ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(ylabel or y)
        ax.set_title(str(p), fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return _png(fig)
