"""Every figure kmemsim draws: a comparison's (memory by class with the limit, watermarks and the
scenario's moments; storage reads; token latency; memory per process) as PNG, SVG and PDF with the
tables they draw; validation's (predicted beside measured, on the phase axis) and the experiments'."""
from __future__ import annotations

import io
from dataclasses import dataclass, field

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt   # noqa: E402
from matplotlib.colors import to_rgb   # noqa: E402
import numpy as np                # noqa: E402
import pandas as pd               # noqa: E402

from ..core.trace import Op                      # noqa: E402
from ..core.units import PAGE_SIZE, parse_size      # noqa: E402
from ..engine.kernel import POLICIES   # noqa: E402

# each policy's colour, in the core's registry order (stock grey; lru, is, is-tail, dw, is+dw); a
# manager's or a new policy's beyond the palette gets matplotlib's cycle
PALETTE = ["#444444", "#9467bd", "#1f77b4", "#17becf", "#d62728", "#2ca02c"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
# memory by class, stacked bottom up: the small classes (KV cache, zram pool) first, so they sit on
# the axis where their height reads, in saturated colours (label, colour, column in the data)
CLASSES = [
    ("KV cache", "#1f4e9c", "kv_cache_bytes"),
    ("zram pool (compressed)", "#17a34a", "zram_pool_bytes"),
    ("weights (anonymous copies: repack, --no-mmap)", "#f28e2b", "weights_anon_bytes"),
    ("other anonymous (LLM buffers, app heaps)", "#9ecae9", "other_anon_bytes"),
    ("weights (file pages)", "#c0392b", "weights_file_bytes"),
    ("other file pages (apps, libraries)", "#f4a6a6", "other_file_bytes"),
]
# the scenario's moments drawn on every time axis: kind -> (legend label, marker, colour)
EVENTS = {"request": ("LLM request", "v", "#1f4e9c"), "switch": ("app switch", "|", "#555555"),
          "kill": ("kill (OOM or lmkd)", "X", "#d62728")}
FORMATS = ("png", "svg", "pdf")
DPI = 200
LEGEND = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
matplotlib.rcParams.update({"svg.fonttype": "none",          # text stays text: searchable, editable
                            "svg.hashsalt": "kmemsim",       # the same ids every run
                            "pdf.fonttype": 42})             # TrueType in the PDF, as journals ask


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _save(fig) -> dict:
    """The figure as {format: bytes}: PNG at 200 dpi, SVG and PDF (vector), without dates so the same
    run writes the same files."""
    out = {}
    for fmt in FORMATS:
        buf = io.BytesIO()
        meta = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
        fig.savefig(buf, format=fmt, dpi=DPI, bbox_inches="tight", metadata=meta)
        out[fmt] = buf.getvalue()
    plt.close(fig)
    return out


def _color(p, i):
    k = POLICIES.index(p) if p in POLICIES else len(PALETTE)
    return PALETTE[k] if k < len(PALETTE) else f"C{i}"


def twins(series: dict) -> dict:
    """policy -> the first earlier policy whose series is identical (policies that coincide), so both
    can be drawn visibly and the legend can say so."""
    out, seen = {}, []
    for p, y in series.items():
        y = np.asarray(y, float)
        for q, z in seen:
            if y.shape == z.shape and np.array_equal(y, z, equal_nan=True):
                out[p] = q
                break
        seen.append((p, y))
    return out


def _label(p, tw):
    return f"{p} (same as {tw[p]}: drawn dashed)" if p in tw else p


# ------------------------------------------------------------------------------------------------
# A comparison's data: every figure draws one of these tables, and compare writes them beside it

def memory_data(cmp) -> pd.DataFrame:
    """Per policy and timeline row: memory by class (bytes), their sum, what was swapped out, and the
    free memory and watermarks (under a memcg limit the node's free memory and watermarks mean
    nothing to the group, which reclaims at its limit: missing there, and memcg_usage_bytes instead)."""
    parts = []
    memcg = bool(cmp.config.get("memcg_limit"))
    for r in cmp.runs:
        tl = r.timeline
        anon_other = tl.nr_anon_pages - tl.nr_kv_anon_pages - tl.nr_weight_anon_pages
        node = lambda col: pd.array([pd.NA] * len(tl) if memcg else tl[col].to_numpy() * PAGE_SIZE, dtype="Int64")
        parts.append(pd.DataFrame({
            "policy": r.policy, "t_s": tl.t.to_numpy() / 1e9,
            "kv_cache_bytes": tl.nr_kv_anon_pages * PAGE_SIZE,
            "zram_pool_bytes": tl.zram_mem_used_total,
            "weights_anon_bytes": tl.nr_weight_anon_pages * PAGE_SIZE,
            "other_anon_bytes": anon_other * PAGE_SIZE,
            "weights_file_bytes": tl.nr_weight_file_pages * PAGE_SIZE,
            "other_file_bytes": (tl.nr_file_pages - tl.nr_weight_file_pages) * PAGE_SIZE,
            "swapped_bytes": tl.nr_swapped * PAGE_SIZE,
            "memcg_usage_bytes": pd.array(tl.memcg_usage.to_numpy() * PAGE_SIZE if memcg else [pd.NA] * len(tl),
                                          dtype="Int64"),
            "free_bytes": node("nr_free_pages"), "wmark_min_bytes": node("wmark_min"),
            "wmark_low_bytes": node("wmark_low"), "wmark_high_bytes": node("wmark_high")}))
    df = pd.concat(parts, ignore_index=True)
    df.insert(2, "memory_bytes", df[[c for _, _, c in CLASSES]].sum(axis=1))
    return df


def limit(cmp) -> tuple:
    """(bytes, what): the memory the comparison ran in: the memcg limit, else the device's RAM."""
    cfg = cmp.config
    if cfg.get("memcg_limit"):
        return parse_size(cfg["memcg_limit"], "memcg_limit"), "memcg limit"
    return parse_size(cfg["mem"], "mem"), "RAM (mem)"


def events_data(cmp) -> pd.DataFrame:
    """The scenario's moments: LLM requests and app switches (the trace's phase marks), and each
    policy's kills. Columns t_s, kind, label, policy ('' for the trace's own)."""
    c, names = cmp.workload.trace.cols, cmp.workload.trace.meta.get("phases", [])
    ph = np.flatnonzero(c["op"] == Op.PHASE)
    rows = []
    for t, a in zip(c["t"][ph], c["arg"][ph]):
        name = names[int(a)] if 0 <= int(a) < len(names) else ""
        # a request's start (not its "... end" mark); an app brought to the front (a launch is
        # followed by its switch at the same time: one marker)
        kind = "request" if name.startswith("request") and not name.endswith(" end") else \
            "switch" if name.startswith("switch to") else None
        if kind:
            rows.append({"t_s": int(t) / 1e9, "kind": kind, "label": name, "policy": ""})
    procs = _procs(cmp)
    for r in cmp.runs:
        if r.kills is not None:
            for k in r.kills.itertuples(index=False):
                rows.append({"t_s": int(k.t) / 1e9, "kind": "kill", "policy": r.policy,
                             "label": f"{procs.get(int(k.pid), k.pid)} killed by "
                                      + ("the OOM killer" if k.by == "oom" else f"lmkd ({k.reason})")})
    return pd.DataFrame(rows, columns=["t_s", "kind", "label", "policy"])


def _events(ax, ev, policy, top):
    """The moments as markers along the top of the panel; kills only the policy's own."""
    for kind, (label, marker, color) in EVENTS.items():
        d = ev[(ev.kind == kind) & ((ev.policy == "") | (ev.policy == policy))]
        if len(d):
            ax.plot(d.t_s, np.full(len(d), top), linestyle="none", marker=marker, color=color, markersize=7,
                    markeredgewidth=1.5, clip_on=False, gid=f"markers-{kind}", label=label, zorder=5)


def memory_figure(cmp, data=None, ev=None) -> dict:
    data = memory_data(cmp) if data is None else data
    ev = events_data(cmp) if ev is None else ev
    lim, what = limit(cmp)
    n = len(cmp.runs)
    fig, axes = plt.subplots(n, 1, figsize=(8, 1.9 * n + 0.9), sharex=True, sharey=True, squeeze=False)
    top = max(float(data.memory_bytes.max()), lim) / 2**30 * 1.15     # room above the limit for the markers
    for k, (ax, r) in enumerate(zip(axes[:, 0], cmp.runs)):
        d = data[data.policy == r.policy]
        ax.stackplot(d.t_s, *[d[c] / 2**30 for _, _, c in CLASSES], colors=[c for _, c, _ in CLASSES],
                     labels=[l for l, _, _ in CLASSES], step="post", linewidth=0,
                     rasterized=True)     # thousands of steps: pixels in the SVG/PDF, the lines stay vectors
        ax.axhline(lim / 2**30, color="black", lw=1.2, gid="memory-limit", label=f"memory limit: {what}")
        if what.startswith("RAM") and d.wmark_low_bytes.max() > 0:
            # used + free = RAM (less kernel memory): free below a watermark is used above RAM - watermark
            for name, style in (("low", (0, (4, 2))), ("min", (0, (1, 1.5)))):
                y = (lim - int(d[f"wmark_{name}_bytes"].iloc[-1])) / 2**30
                ax.axhline(y, color="black", lw=0.8, linestyle=style, gid=f"watermark-{name}",
                           label=f"RAM - {name} watermark ({'kswapd wakes' if name == 'low' else 'direct reclaim'} "
                                 "when used passes it)")
        if d.swapped_bytes.max() > 0:
            ax.step(d.t_s, d.swapped_bytes / 2**30, where="post", color=CLASSES[1][1], lw=1.2, linestyle=(0, (3, 1.5)),
                    gid="swapped", label="swapped out to zram (uncompressed size; not memory)")
        _events(ax, ev, r.policy, top * 0.96)
        ax.set_ylim(0, top)
        ax.set_ylabel("GiB")
        ax.set_title(f"{r.policy}: peak {r.summary['peak_memory_bytes'] / 2**30:.2f} GiB (resident + zram pool)",
                     fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.patch.set_gid(f"axes-memory-{k}")
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    axes[-1, 0].set_xlabel("trace time (s)")
    fig.suptitle("Memory over time by class", fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    fig.legend(handles, labels, **LEGEND, bbox_transform=axes[0, 0].transAxes).set_gid("legend")
    return _save(fig)


def storage_data(cmp) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({"policy": r.policy, "t_s": r.timeline.t.to_numpy() / 1e9,
                                    "storage_read_bytes": r.timeline.pgpgin.to_numpy() * PAGE_SIZE})
                      for r in cmp.runs], ignore_index=True)


def storage_figure(cmp, data=None, ev=None) -> dict:
    data = storage_data(cmp) if data is None else data
    ev = events_data(cmp) if ev is None else ev
    fig, ax = plt.subplots(figsize=(8, 3.2))
    tw = twins({r.policy: data[data.policy == r.policy].storage_read_bytes for r in cmp.runs})
    for i, r in enumerate(cmp.runs):
        d = data[data.policy == r.policy]
        ax.step(d.t_s, d.storage_read_bytes / 2**20, where="post", color=_color(r.policy, i),
                label=_label(r.policy, tw),
                linewidth=1.6 if r.policy not in tw else 1.2, linestyle=(0, (5, 3)) if r.policy in tw else "-",
                marker=MARKERS[i % len(MARKERS)], markevery=(0.05 + 0.07 * i, 0.25), markersize=4,
                gid=f"line-{r.policy}")
    top = float(data.storage_read_bytes.max()) / 2**20 * 1.06 or 1.0
    _events(ax, ev[ev.kind != "kill"], "", top)
    ax.set_ylim(0, top)
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("MiB read from storage")
    ax.set_title("Cumulative storage reads (pgpgin)", fontsize=11, loc="left")
    ax.grid(alpha=0.3)
    ax.patch.set_gid("axes-storage")
    ax.legend(**LEGEND).set_gid("legend")
    return _save(fig)


def token_data(cmp) -> pd.DataFrame:
    parts = []
    for r in cmp.runs:
        d = r.metrics["decode_steps"]
        parts.append(pd.DataFrame({"policy": r.policy, "step": np.arange(len(d)), "t_s": d["t"].to_numpy() / 1e9,
                                   "step_time_s": d["time_s"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def token_figure(cmp, data=None) -> dict:
    data = token_data(cmp) if data is None else data
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [3, 1]})
    tw = twins({r.policy: data[data.policy == r.policy].step_time_s for r in cmp.runs})
    for i, r in enumerate(cmp.runs):
        d = data[data.policy == r.policy]
        # a policy that coincides with an earlier one: hollow markers of its own shape, nudged right
        x = d.step + (0.3 * (list(tw).index(r.policy) + 1) if r.policy in tw else 0)
        a1.plot(x, d.step_time_s * 1e3, linestyle="none", marker=MARKERS[i % len(MARKERS)], markersize=3.5,
                label=_label(r.policy, tw).replace("drawn dashed", "hollow, nudged right"), color=_color(r.policy, i),
                markerfacecolor="none" if r.policy in tw else _color(r.policy, i), gid=f"points-{r.policy}")
    a1.set_xlabel("decode step (all requests, in order)")
    a1.set_ylabel("ms per step (compute + stall)")
    a1.set_yscale("log")
    a1.set_title("Per-token latency", fontsize=11, loc="left")
    a1.grid(alpha=0.3, which="both")
    a1.patch.set_gid("axes-token")
    ttft = [r.metrics["ttft_s"] * 1e3 for r in cmp.runs]
    a2.bar([r.policy for r in cmp.runs], np.nan_to_num(ttft), color=[_color(r.policy, i) for i, r in enumerate(cmp.runs)])
    a2.set_title("mean TTFT (ms)", fontsize=11, loc="left")
    a2.tick_params(axis="x", labelrotation=45, labelsize=8)
    a2.grid(alpha=0.3, axis="y")
    a2.patch.set_gid("axes-ttft")
    fig.tight_layout()
    fig.legend(*a1.get_legend_handles_labels(), **LEGEND, bbox_transform=a2.transAxes).set_gid("legend")
    return _save(fig)


def _procs(cmp) -> dict:
    """pid -> the process's name, with its pid where two processes share a name (an app relaunched)."""
    ps = cmp.workload.trace.meta.get("processes", [])
    names = [p["name"] for p in ps]
    return {int(p["pid"]): p["name"] if names.count(p["name"]) == 1 else f"{p['name']} ({p['pid']})" for p in ps}


def rss_data(cmp) -> pd.DataFrame:
    """Per policy, timeline row and process: its resident memory (rss: the pages it maps, file and
    anonymous; a file page two processes map counts in both, as in /proc/PID/status)."""
    procs, parts = _procs(cmp), []
    for r in cmp.runs:
        if r.rss is None or not r.rss.shape[1]:
            continue
        t = r.timeline.t.to_numpy() / 1e9
        for pid in r.rss.columns:
            parts.append(pd.DataFrame({"policy": r.policy, "t_s": t, "pid": int(pid),
                                       "process": procs.get(int(pid), str(pid)),
                                       "rss_bytes": r.rss[pid].to_numpy() * PAGE_SIZE}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def rss_figure(cmp, data, ev) -> dict:
    pols = [r.policy for r in cmp.runs]
    fig, axes = plt.subplots(len(pols), 1, figsize=(8, 1.6 * len(pols) + 0.9), sharex=True, sharey=True,
                             squeeze=False)
    names = list(dict.fromkeys(data.process))
    top = float(data.rss_bytes.max()) / 2**30 * 1.15 or 1.0
    for k, (ax, p) in enumerate(zip(axes[:, 0], pols)):
        d = data[data.policy == p]
        for i, name in enumerate(names):
            q = d[d.process == name]
            ax.step(q.t_s, q.rss_bytes / 2**30, where="post", lw=1.3, color=f"C{i}", label=name, gid=f"rss-{i}")
        _events(ax, ev, p, top * 0.96)
        ax.set_ylim(0, top)
        ax.set_ylabel("GiB")
        ax.set_title(p, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        ax.patch.set_gid(f"axes-rss-{k}")
    axes[-1, 0].set_xlabel("trace time (s)")
    fig.suptitle("Resident memory per process (rss: pages mapped)", fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    handles, labels = [], []
    for ax in axes[:, 0]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, **LEGEND, bbox_transform=axes[0, 0].transAxes).set_gid("legend")
    return _save(fig)


PROCESS_METRICS = [  # (title, column, function of per_process -> bytes)
    ("allocated (pgalloc)", "allocated_bytes", lambda p: p.pgalloc * PAGE_SIZE),
    ("read from storage (pgpgin)", "storage_read_bytes", lambda p: p.pgpgin * PAGE_SIZE),
    ("swapped out (pswpout)", "swap_out_bytes", lambda p: p.pswpout * PAGE_SIZE),
    ("refaulted (workingset_refault)", "refault_bytes",
     lambda p: (p.workingset_refault_file + p.workingset_refault_anon) * PAGE_SIZE),
]


def process_data(cmp) -> pd.DataFrame:
    """Per policy and process: what each process allocated, read, swapped out and refaulted."""
    procs = _procs(cmp)
    parts = []
    for r in cmp.runs:
        pp = r.per_process
        if pp is None or not len(pp):
            continue
        d = pd.DataFrame({"policy": r.policy, "pid": pp.index.to_numpy(),
                          "process": [procs.get(int(p), str(p)) for p in pp.index]})
        for _, col, f in PROCESS_METRICS:
            d[col] = f(pp).to_numpy()
        parts.append(d)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def process_figure(cmp, data=None) -> dict:
    data = process_data(cmp) if data is None else data
    fig, axes = plt.subplots(1, len(PROCESS_METRICS), figsize=(10, 3.0), sharey=False)
    names = list(dict.fromkeys(data.process)) if len(data) else []
    pols = [r.policy for r in cmp.runs]
    w = 0.8 / max(len(pols), 1)
    for k, (ax, (title, col, _)) in enumerate(zip(axes, PROCESS_METRICS)):
        ax.patch.set_gid(f"axes-process-{k}")
        for i, p in enumerate(pols):
            d = data[data.policy == p].set_index("process").reindex(names)
            ax.bar(np.arange(len(names)) + (i - (len(pols) - 1) / 2) * w, d[col].fillna(0) / 2**20, w,
                   color=_color(p, i), label=p, hatch=["", "//", "..", "xx", "\\\\", "oo"][i % 6], edgecolor="white",
                   linewidth=0.3)
        ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("MiB")
    fig.suptitle("Memory traffic per process over the run", fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    fig.legend(*axes[0].get_legend_handles_labels(), **LEGEND, bbox_transform=axes[-1].transAxes).set_gid("legend")
    return _save(fig)


CAPTIONS = {  # figure name -> what it shows (the report's captions)
    "memory": "Memory over time by class, one panel per policy: the memory limit and the watermarks as "
              "lines, the scenario's LLM requests, app switches and kills as markers along the top.",
    "storage_reads": "Cumulative storage reads per policy (policies that coincide are drawn dashed).",
    "token_latency": "Per-token latency and mean TTFT per policy.",
    "memory_per_process": "Resident memory (rss) of each process over time, one panel per policy, with the "
                          "scenario's markers.",
    "process_traffic": "Per process over the run: memory allocated, read from storage, swapped out and refaulted.",
}


def comparison(cmp) -> tuple:
    """({figure name: {format: bytes}}, {data name: DataFrame}): every figure of a comparison in PNG,
    SVG and PDF, and the tables they draw (events: the markers; the memory figure's limit and
    watermarks are its table's columns)."""
    ev = events_data(cmp)
    data = {"memory": memory_data(cmp), "storage_reads": storage_data(cmp), "token_latency": token_data(cmp),
            "memory_per_process": rss_data(cmp), "process_traffic": process_data(cmp), "events": ev}
    lim, _ = limit(cmp)
    data["memory"]["limit_bytes"] = lim
    figs = {"memory": memory_figure(cmp, data["memory"], ev),
            "storage_reads": storage_figure(cmp, data["storage_reads"], ev),
            "token_latency": token_figure(cmp, data["token_latency"])}
    if len(data["memory_per_process"]):
        figs["memory_per_process"] = rss_figure(cmp, data["memory_per_process"], ev)
    if len(data["process_traffic"]):
        figs["process_traffic"] = process_figure(cmp, data["process_traffic"])
    return figs, data


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


def times_scatter(df: pd.DataFrame) -> dict:
    """kmemsim validate's TTFT and TPOT: predicted against live (the median run), one point per model
    and limit, on log axes with the 1:1 line and the +-10% and +-15% bands; {format: bytes} (_save).
    df: validation.csv's rows (metric, predicted, measured, model, limit)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    models = sorted(df["model"].unique())
    for a, (metric, name) in zip(axes, (("ttft_s", "TTFT"), ("tpot_s", "TPOT"))):
        d = df[(df["metric"] == metric) & (df["measured"] > 0) & (df["predicted"] > 0)]
        for i, m in enumerate(models):
            g = d[d["model"] == m]
            a.scatter(g["measured"], g["predicted"], s=28, color=PALETTE[i % len(PALETTE)],
                      label=str(m).removesuffix(".gguf"))
        if len(d):
            lo, hi = min(d["measured"].min(), d["predicted"].min()) / 1.5, max(d["measured"].max(), d["predicted"].max()) * 1.5
            x = np.array([lo, hi])
            a.plot(x, x, "k-", lw=0.8)
            for b, alpha in ((0.15, 0.10), (0.10, 0.18)):
                a.fill_between(x, x * (1 - b), x * (1 + b), color="k", alpha=alpha, lw=0)
            within = lambda b: int(((d["predicted"] / d["measured"] - 1).abs() <= b).sum())
            a.set_title(f"{name}: {within(0.10)} / {within(0.15)} of {len(d)} within 10% / 15%")
            a.set_xlim(lo, hi)
            a.set_ylim(lo, hi)
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel(f"live {name} (s, median run)")
        a.set_ylabel(f"predicted {name} (s)")
        a.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return _save(fig)
