"""`kmemsim compare`: several policies on the same trace, counts from the emulator and seconds from
a device profile; writes summary.csv, summary.md, plots and report.html (kmemsim.report)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core import progress as progress_bars
from ..core.errors import InputError
from ..core.units import PAGE_SIZE, parse_size
from ..core import trace
from ..core.trace import Trace
from ..engine.kernel import POLICIES, Config, Emulator, ffi
from ..engine import managers
from ..engine.time import serial as timing
from ..workload import llama as lw, scenario
from ..workload.llama.graph import step_rows
from .perfetto import TIMELINE_COLUMNS
from .tables import describe, markdown, table_markdown

# what a row of the written summary is for (one row per scenario, device, memory, zram and policy)
KEYS = ["scenario", "device", "mem_bytes", "memcg_limit_bytes", "zram_algo", "zram_bytes", "swappiness", "lru",
        "policy"]
COLUMNS = ["policy", "peak_memory_bytes", "mean_memory_bytes", "peak_resident_bytes", "storage_read_bytes",
           "major_faults", "swap_out_bytes", "swap_in_bytes", "ttft_s", "tpot_s", "request_latency_s",
           "switch_latency_s", "llm_stall_s", "oom_kill", "lmk_kill", "peak_memory_vs_stock_pct",
           "mean_memory_vs_stock_pct", "ttft_vs_stock_pct", "tpot_vs_stock_pct"]


@dataclass
class Workload:
    trace: Trace
    name: str
    source: str
    prompts: dict = field(default_factory=dict)   # request label -> new prompt tokens
    batch: int = 512
    ubatch: int = 512
    seqs: int = 1
    params: dict = field(default_factory=dict)


@dataclass
class PolicyRun:
    policy: str
    summary: dict
    timeline: pd.DataFrame
    phases: pd.DataFrame
    metrics: dict
    kills: pd.DataFrame = None         # the emulator's kills: pid, t (ns), by, reason
    per_process: pd.DataFrame = None   # counter totals per pid
    rss: pd.DataFrame = None           # per timeline row: each pid's mapped pages


@dataclass
class Comparison:
    workload: Workload
    device: object
    config: dict
    zram_algo: str
    runs: list
    table: pd.DataFrame


# ------------------------------------------------------------------------------------------------
# Input

def workload_from_scenario(path, overrides=(), kv_manager=None) -> Workload:
    scn = scenario.load(str(path), tuple(overrides))
    if kv_manager is not None:
        if scn.llm is None:
            raise InputError(f"--kv-manager: {path} has no [llm] to keep a KV cache")
        scn.llm.kv_manager = managers.get(kv_manager).name
    tr = scenario.build(scn)
    prompts, batch, ubatch, seqs = {}, 512, 512, 1
    if scn.llm is not None:
        for c in scenario.llm_calls(scn, scenario.plan(scn)):
            prompts[c[5]] = int(c[2])
        batch, ubatch, seqs = scn.llm.batch, scn.llm.ubatch, scn.llm.paths
    return Workload(tr, scn.name, f"scenario {path}" + (f" ({', '.join(overrides)})" if overrides else ""),
                    prompts, batch, ubatch, seqs, {"scenario": str(path), "set": list(overrides),
                                                   "kv_manager": scn.llm.kv_manager if scn.llm else None})


def workload_from_model(path, prompt=256, decode=32, ctx=4096, batch=512, ubatch=512, paths=1,
                        requests=1, kv_manager=None, seed=0, load_mode="mmap", moe_routing="uniform") -> Workload:
    tr = lw.generate(str(path), prompt=prompt, decode=decode, ctx=ctx * paths, batch=batch, ubatch=ubatch,
                     seqs=paths, requests=requests, kv_manager=kv_manager, seed=seed, load_mode=load_mode,
                     moe_routing=moe_routing)
    prompts = {f"request {k}": int(prompt) for k in range(int(requests))}
    return Workload(tr, Path(path).stem, f"model {path}", prompts, batch, min(ubatch, batch), paths,
                    {"model": str(path), "prompt": prompt, "decode": decode, "ctx": ctx, "paths": paths,
                     "kv_manager": tr.meta["llama"][0]["kv_manager"]})


LIVE = ["storage_read_bytes", "major_faults", "swap_out_bytes", "swap_in_bytes", "peak_resident_bytes", "oom_kill",
        "lmk_kill"]


def live_totals(summary: dict) -> dict:
    """A run directory's measured totals in compare's columns (None where the run has no such
    measure): the page cache's adds of every file, faults, swap, peak, kills."""
    files = list(summary.get("files", {}).values()) + list(summary.get("other_files", []))
    g = lambda k: summary.get(k) if summary.get(k) is not None else None
    return {"storage_read_bytes": sum(int(f.get("pages_added", 0)) for f in files) * PAGE_SIZE,
            "major_faults": g("major_faults"),
            "swap_out_bytes": None if g("swap_out_pages") is None else int(summary["swap_out_pages"]) * PAGE_SIZE,
            "swap_in_bytes": None if g("swap_in_pages") is None else int(summary["swap_in_pages"]) * PAGE_SIZE,
            "peak_resident_bytes": g("peak_resident_bytes"), "oom_kill": g("oom_kills"), "lmk_kill": g("lmk_kills")}


def workload_from_run(path) -> Workload:
    """A run directory (`kmemsim run`, `kmemsim trace import`): its events.parquet replayed, its
    summary.json's totals kept as the live ground truth beside the policies (live.csv)."""
    ev, sm = Path(path) / "events.parquet", Path(path) / "summary.json"
    if not ev.exists() or not sm.exists():
        raise InputError(f"{path}: a directory, but not a run directory (no events.parquet and summary.json)")
    with open(sm) as f:
        summ = json.load(f)
    tr = trace.load(str(ev))
    if not tr.meta.get("phases") and len(tr):
        # one phase, "run", from the first event: the time model charges its counts to it
        meta = dict(tr.meta, phases=["run"])
        row = {"t": tr.cols["t"][0], "pid": tr.cols["pid"][0], "op": trace.Op.PHASE, "map": -1, "page": 0,
               "npages": 0, "arg": 0, "flags": 0}
        tr = Trace({k: np.insert(v, 0, np.asarray(row[k], v.dtype)) for k, v in tr.cols.items()}, meta)
    return Workload(tr, Path(path).name, f"run directory {path}", params={"run_dir": str(path),
                                                                            "live": live_totals(summ)})


def load_workload(path, overrides=(), kv_manager=None, **model_kw) -> Workload:
    p = Path(path)
    if p.is_dir():
        if overrides or kv_manager is not None:
            raise InputError("--set and --kv-manager apply to a scenario or a model, not to a run directory")
        return workload_from_run(p)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.suffix == ".toml":
        return workload_from_scenario(p, overrides, kv_manager)
    if p.suffix == ".gguf":
        if overrides:
            raise InputError("--set applies to scenario files, not to a model")
        return workload_from_model(p, kv_manager=kv_manager, **model_kw)
    raise InputError(f"{path}: expected a model (.gguf) or a scenario (.toml)")


def run_load_modes(path, modes, policies, dev, cfg: dict, **model_kw) -> Comparison:
    """A model's load modes side by side (an MoE model's expert paging: page-cache, willneed,
    direct:SLOTS, pin-hot:N, cold:T): a trace per mode, each replayed under every policy; a run is
    named by its mode (and its policy, when more than one)."""
    runs, first = [], None
    for mode in modes:
        wl = workload_from_model(path, load_mode=mode, **model_kw)
        first = first or wl
        for r in run(wl, policies, dev, cfg).runs:
            r.policy = mode if len(policies) == 1 else f"{r.policy} {mode}"
            runs.append(r)
    first.params["load_modes"] = list(modes)
    return Comparison(first, dev, cfg, dev.zram_algo(cfg.get("zram")), runs, summarize(runs))


def parse_policies(spec) -> list[str]:
    pols = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if not pols:
        raise InputError("--policy: no policy given")
    known = POLICIES
    bad = [p for p in pols if p not in known]
    if bad:
        raise InputError(f"--policy: unknown {', '.join(bad)}; known: {', '.join(known)}")
    if len(set(pols)) != len(pols):
        raise InputError("--policy: a policy is listed twice")
    return pols


# ------------------------------------------------------------------------------------------------
# Running

def base_config(dev, mem=None, memcg_limit=None, zram=None, **extra) -> dict:
    cfg = dev.config_kwargs()
    if mem is None and memcg_limit is None:
        mem = dev.available
    cfg.update(mem=mem, memcg_limit=memcg_limit)
    if zram is not None:
        cfg["zram"] = zram
    cfg.update({k: v for k, v in extra.items() if v is not None})
    Config(**cfg).to_c(ffi)   # validate early: bad sizes fail before the trace is built
    return cfg


def _mean_memory(tl: pd.DataFrame) -> float:
    if len(tl) < 2:
        return float(((tl.nr_file_pages + tl.nr_anon_pages) * PAGE_SIZE + tl.zram_mem_used_total).mean())
    m = ((tl.nr_file_pages + tl.nr_anon_pages) * PAGE_SIZE + tl.zram_mem_used_total).to_numpy(float)
    t = tl.t.to_numpy(float)
    dt = np.diff(t)
    return float((m[:-1] * dt).sum() / dt.sum()) if dt.sum() > 0 else float(m.mean())


def run(wl: Workload, policies, dev, cfg: dict, progress=True) -> Comparison:
    tr, occ = timing.split_phases(wl.trace)
    tokens, outputs = step_rows(occ, wl.prompts, wl.batch, wl.ubatch, wl.seqs)
    algo = dev.zram_algo(cfg.get("zram"))
    runs = []
    it = policies
    bar = None
    if progress:
        bar = progress_bars.bar(policies, desc="compare", unit="policy")
        it = bar
    for pol in it:
        if bar is not None:
            bar.set_postfix_str(pol)
        res = Emulator(Config(**{**cfg, "policy": pol})).replay(tr)
        pt = timing.phase_times(res.per_phase, occ, dev, algo, tokens, outputs)
        m = timing.metrics(pt)
        runs.append(PolicyRun(pol, res.summary, res.timeline, pt, m, res.kills, res.per_process, res.rss))
    return Comparison(wl, dev, cfg, algo, runs, summarize(runs))


def summarize(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        s, m = r.summary, r.metrics
        rows.append({
            "policy": r.policy,
            "peak_memory_bytes": s["peak_memory_bytes"],
            "mean_memory_bytes": int(_mean_memory(r.timeline)),
            "peak_resident_bytes": s["peak_resident_bytes"],
            "storage_read_bytes": s["pgpgin"] * PAGE_SIZE,
            "major_faults": s["pgmajfault"],
            "swap_out_bytes": s["pswpout"] * PAGE_SIZE,
            "swap_in_bytes": s["pswpin"] * PAGE_SIZE,
            "ttft_s": m["ttft_s"], "tpot_s": m["tpot_s"], "request_latency_s": m["request_latency_s"],
            "switch_latency_s": m["switch_latency_s"], "llm_stall_s": m["llm_stall_s"],
            "oom_kill": s["oom_kill"], "lmk_kill": s["lmk_kill"],
        })
    df = pd.DataFrame(rows)
    base = df[df.policy == "stock"]
    for col, out in [("peak_memory_bytes", "peak_memory_vs_stock_pct"), ("mean_memory_bytes", "mean_memory_vs_stock_pct"),
                     ("ttft_s", "ttft_vs_stock_pct"), ("tpot_s", "tpot_vs_stock_pct")]:
        if len(base) and float(base[col].iloc[0]) > 0:
            df[out] = (df[col] / float(base[col].iloc[0]) - 1.0) * 100.0
        else:
            df[out] = np.nan
    return df[COLUMNS]


def tidy(cmp: Comparison) -> pd.DataFrame:
    """The summary with its keys as columns (KEYS; sizes in bytes, None where not set), one row per
    policy: comparisons concatenated stay one tidy table (sweeps, several `compare` runs)."""
    cfg, size = cmp.config, lambda v, what: None if v in (None, "") else parse_size(v, what)
    algo, _, zsize = str(cfg.get("zram") or "").partition(":")
    keys = {"scenario": cmp.workload.name, "device": cmp.device.name, "mem_bytes": size(cfg.get("mem"), "mem"),
            "memcg_limit_bytes": size(cfg.get("memcg_limit"), "memcg_limit"), "zram_algo": algo or None,
            "zram_bytes": size(zsize, "zram") if zsize else None, "swappiness": cfg.get("swappiness"),
            "lru": cfg.get("lru", "classic")}
    df = cmp.table.copy()
    for i, k in enumerate(KEYS[:-1]):
        v = keys[k]
        df.insert(i, k, pd.array([v] * len(df), dtype="Int64") if k.endswith("_bytes") or k == "swappiness" else v)
    df["workload"] = cmp.workload.source
    return df


# ------------------------------------------------------------------------------------------------
# Output

def write(cmp: Comparison, out_dir) -> dict:
    """All outputs into out_dir (created); each file written atomically. Returns name -> path.

    summary.csv and summary.parquet (tidy: KEYS, then compare's columns, units in their names),
    summary.md, phases.csv, timeline.parquet (each policy's timeline, `export perfetto`'s input),
    each figure as NAME.png (200 dpi), NAME.svg and NAME.pdf with the table it draws as NAME.csv and
    NAME.parquet (events.csv: the markers), and report.html."""
    from . import html, plots          # here: matplotlib takes 0.3 s, and only writing the report draws
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"-o {out_dir}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}

    def put(name, what):
        atomic_write(out / name, what)
        paths[name] = out / name

    def table(stem, df):
        put(f"{stem}.csv", df.to_csv(index=False))
        put(f"{stem}.parquet", lambda tmp: df.to_parquet(tmp, index=False))

    table("summary", tidy(cmp))
    md = f"# kmemsim compare\n\n{describe(cmp)}\n\n{table_markdown(cmp.table)}\n"
    live = cmp.workload.params.get("live")
    if live is not None:           # a run directory's own measures, beside what each policy makes of its trace
        row = pd.DataFrame([{"source": "live", **live}])
        put("live.csv", row.to_csv(index=False))
        md += f"\n## Measured in the run ({cmp.workload.source})\n\n{markdown(row)}\n"
    put("summary.md", md)
    ph = pd.concat([r.phases.assign(policy=r.policy) for r in cmp.runs])
    put("phases.csv", ph.to_csv())
    # each policy's timeline, the columns `kmemsim export perfetto DIR` draws
    tl = pd.concat([r.timeline[[c for c in TIMELINE_COLUMNS if c in r.timeline]].assign(policy=r.policy)
                    for r in cmp.runs], ignore_index=True)
    put("timeline.parquet", lambda tmp: tl.to_parquet(tmp, index=False))
    figs, data = plots.comparison(cmp)
    for name, files in figs.items():
        for fmt, b in files.items():
            put(f"{name}.{fmt}", b)
    for name, df in data.items():
        table(name, df)
    put("report.html", html.report(cmp, {n: f["svg"] for n, f in figs.items()}, data["events"]))
    return paths
