"""The self-contained report.html of a comparison (kmemsim.report.compare.Comparison): the page a
jinja2 template, every table a DataFrame styled by pandas' Styler with the unit in its header, the
figures inline as SVG (the PNG and PDF beside the report), the configuration and the device profile
as tables, and, for a scenario that reproduces a paper's setting, the paper's figures beside ours."""
from __future__ import annotations

import jinja2
import pandas as pd

from . import explain, papers
from .plots import CAPTIONS
from .tables import SHOWN, describe, human

PAGE = jinja2.Template("""<!doctype html>
<html><head><meta charset="utf-8"><title>kmemsim compare: {{ name }}</title>
<style>
body{font-family:sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #bbb;padding:3px 7px;text-align:right}th{background:#eee}
td:first-child,th:first-child,th.row_heading{text-align:left}.settings td{text-align:left}
.wide{overflow-x:auto}figure{margin:1.5em 0}figure svg{max-width:100%;height:auto}
figcaption{font-size:13px;color:#444}.files a{margin-right:.8em}
</style></head><body>
<h1>kmemsim compare: {{ name }}</h1>
<p>{{ line }}. Source: {{ source }}. Counts come from the emulator; seconds are counts x the device
profile (kmemsim.engine.time.serial). Memory = resident pages + zram pool.</p>
<h2>Summary</h2>
{{ summary }}
{% if explain %}<h3>What the differences mean</h3>
<ul>{% for head, why in explain %}<li>{{ head }}<br><small>{{ why }}</small></li>{% endfor %}</ul>{% endif %}
{% if paper %}<h2>Beside the paper</h2>
<p>Source: {{ paper_source }}. Percentages are against the stock kernel.</p>
{{ paper }}{% endif %}
<h2>Figures</h2>
{% for f in figures %}<figure id="figure-{{ f.name }}">{{ f.svg }}
<figcaption>{{ f.caption }} <span class="files">
{% for ext in ["png", "svg", "pdf"] %}<a href="{{ f.name }}.{{ ext }}">{{ ext | upper }}</a>{% endfor %}
<a href="{{ f.name }}.csv">data (CSV)</a></span></figcaption></figure>
{% endfor %}
<h2>All columns</h2>
<div class="wide">{{ full }}</div>
<h2>Requests</h2>
{{ requests }}
<h2>Kills</h2>
{{ kills }}
<h2>Emulator configuration</h2>
{{ config }}
<h2>Device profile: {{ device }}</h2>
{{ profile }}
</body></html>
""", autoescape=False)    # the parts are escaped where they are made (Styler, SVG from matplotlib, escape())


def styled(name: str, df: pd.DataFrame, digits: int = 1, index: bool = False, counts=(), cls: str = "") -> str:
    """A table's HTML through pandas' Styler: floats to `digits` decimals with thousands separators
    (the rows in `counts` as whole numbers), missing values as '-'; its ids from `name`, so the same
    run writes the same page."""
    st = df.style.format(precision=digits, thousands=",", na_rep="-").set_uuid(name)
    if len(counts):
        st = st.format(precision=0, thousands=",", na_rep="-", subset=pd.IndexSlice[list(counts), :])
    if not index:
        st = st.hide(axis="index")
    if cls:
        st = st.set_table_attributes(f'class="{cls}"')
    return st.to_html()


def _svg(b: bytes) -> str:
    """An SVG file's text, inline: without its XML declaration and DOCTYPE."""
    s = b.decode()
    return s[s.index("<svg"):]


def _rows(d: dict, prefix="") -> list:
    """A nested dict as (setting, value) rows: sections joined by '.', lists joined by ', '."""
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows += _rows(v, key + ".") if v else [(key, "-")]
        elif isinstance(v, (list, tuple)):
            rows.append((key, ", ".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)))
        else:
            num = isinstance(v, int) and not isinstance(v, bool)
            rows.append((key, "-" if v is None else f"{v:,}" if num else str(v)))
    return rows


def settings_table(name: str, d: dict) -> str:
    """A configuration as a two-column table; sizes in bytes also as MiB/GiB (a column named
    `..._bytes`)."""
    rows = []
    for k, v in _rows(d):
        if k.endswith("_bytes") and v.replace(",", "").isdigit():
            n = int(v.replace(",", ""))
            v = f"{v} ({n / 2**30:,.2f} GiB)" if n >= 2**30 else f"{v} ({n / 2**20:,.1f} MiB)"
        rows.append({"setting": k, "value": v})
    return styled(name, pd.DataFrame(rows), cls="settings")


def report(cmp, svgs: dict, events: pd.DataFrame | None = None) -> str:
    """The page; `events` the figures' markers (plots.events_data), whose kills it lists."""
    from html import escape
    full = human(cmp.table).set_index("policy").T      # a row per column: wide tables stay on the page
    full.index.name = None
    counts = [h for h in full.index if "(" not in h]     # counts (faults, kills): whole numbers
    reqs = []
    for r in cmp.runs:
        q = r.metrics["requests"].reset_index()
        if len(q):
            reqs.append(pd.DataFrame({"policy": r.policy, "request": q["request"], "start_s": q["t"] / 1e9,
                                      "ttft_s": q["ttft_s"], "latency_s": q["latency_s"],
                                      "decode_steps": q["decode_steps"]}))
    requests = "<p>no LLM requests</p>"
    if reqs:
        requests = styled("requests", human(pd.concat(reqs, ignore_index=True)), 2)
    kills = "<p>no process was killed</p>"
    if events is not None and (events.kind == "kill").any():
        k = events[events.kind == "kill"]
        kills = styled("kills", pd.DataFrame({"policy": k.policy, "at (s)": k.t_s, "what": k.label}), 3)
    lines = [escape(x.strip()) for x in explain.lines(cmp)]
    pap = papers.beside(cmp)
    figures = [{"name": n, "svg": _svg(b), "caption": escape(CAPTIONS.get(n, n))} for n, b in svgs.items()]
    dev = {k: v for k, v in cmp.device.as_dict().items() if k != "path"}
    return PAGE.render(
        name=escape(cmp.workload.name), line=escape(describe(cmp)), source=escape(cmp.workload.source),
        summary=styled("summary", human(cmp.table[SHOWN])), paper=styled("paper", pap[1]) if pap else None,
        paper_source=escape(pap[0]) if pap else "", figures=figures,
        full=styled("all", full, index=True, counts=counts), requests=requests, kills=kills,
        config=settings_table("config", cmp.config), device=escape(cmp.device.name),
        profile=settings_table("device", dev), explain=list(zip(lines[::2], lines[1::2])))
