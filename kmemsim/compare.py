"""`kmemsim compare`: several policies on the same trace, counts from the emulator and seconds from
a device profile; writes summary.csv, summary.md, plots and report.html (kmemsim.report)."""
from __future__ import annotations

from dataclasses import dataclass, field, asdict
from pathlib import Path

import numpy as np
import pandas as pd

from . import device as devmod
from . import timing
from .atomic import atomic_write
from .emulator import Config, Emulator, ffi, known_policies
from .errors import InputError
from .trace import PAGE_SIZE, Trace

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

def workload_from_scenario(path, overrides=()) -> Workload:
    from . import scenario
    scn = scenario.load(str(path), tuple(overrides))
    tr = scenario.build(scn)
    prompts, batch, ubatch, seqs = {}, 512, 512, 1
    if scn.llm is not None:
        for c in scenario.llm_calls(scn, scenario.plan(scn)):
            prompts[c[5]] = int(c[2])
        batch, ubatch, seqs = scn.llm.batch, scn.llm.ubatch, scn.llm.paths
    return Workload(tr, scn.name, f"scenario {path}" + (f" ({', '.join(overrides)})" if overrides else ""),
                    prompts, batch, ubatch, seqs, {"scenario": str(path), "set": list(overrides)})


def workload_from_model(path, prompt=256, decode=32, ctx=4096, batch=512, ubatch=512, paths=1,
                        requests=1) -> Workload:
    from . import llama_workload as lw
    tr = lw.generate(str(path), prompt=prompt, decode=decode, ctx=ctx * paths, batch=batch, ubatch=ubatch,
                     seqs=paths, requests=requests)
    prompts = {f"request {k}": int(prompt) for k in range(int(requests))}
    return Workload(tr, Path(path).stem, f"model {path}", prompts, batch, min(ubatch, batch), paths,
                    {"model": str(path), "prompt": prompt, "decode": decode, "ctx": ctx, "paths": paths})


def load_workload(path, overrides=(), **model_kw) -> Workload:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.suffix == ".toml":
        return workload_from_scenario(p, overrides)
    if p.suffix == ".gguf":
        if overrides:
            raise InputError("--set applies to scenario files, not to a model")
        return workload_from_model(p, **model_kw)
    raise InputError(f"{path}: expected a model (.gguf) or a scenario (.toml)")


def parse_policies(spec) -> list[str]:
    pols = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    if not pols:
        raise InputError("--policies: no policy given")
    known = known_policies()
    bad = [p for p in pols if p not in known]
    if bad:
        raise InputError(f"--policies: unknown {', '.join(bad)}; known: {', '.join(known)}")
    if len(set(pols)) != len(pols):
        raise InputError("--policies: a policy is listed twice")
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
    tokens, outputs = timing.step_rows(occ, wl.prompts, wl.batch, wl.ubatch, wl.seqs)
    algo = dev.zram_algo(cfg.get("zram"))
    runs = []
    it = policies
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(policies, desc="compare", unit="policy", leave=False, disable=None)
        it = bar
    for pol in it:
        if bar is not None:
            bar.set_postfix_str(pol)
        res = Emulator(Config(**{**cfg, "policy": pol})).replay(tr)
        pt = timing.phase_times(res.per_phase, occ, dev, algo, tokens, outputs)
        m = timing.metrics(pt)
        runs.append(PolicyRun(pol, res.summary, res.timeline, pt, m))
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


# ------------------------------------------------------------------------------------------------
# Output

def _fmt(v, col):
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
    cells = [[_fmt(v, c) for c, v in zip(cols, row)] for row in df[cols].itertuples(index=False)]
    heads = [c.replace("_bytes", "").replace("_vs_stock_pct", " vs stock").replace("_s", "") for c in cols]
    w = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
    line = lambda r: "  ".join(x.rjust(w[i]) if i else x.ljust(w[i]) for i, x in enumerate(r))
    return "\n".join([line(heads)] + [line(r) for r in cells])


def table_markdown(df: pd.DataFrame, cols=SHOWN) -> str:
    heads = [c.replace("_bytes", "").replace("_vs_stock_pct", " vs stock").replace("_s", "") for c in cols]
    out = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df[cols].itertuples(index=False):
        out.append("| " + " | ".join(_fmt(v, c) for c, v in zip(cols, row)) + " |")
    return "\n".join(out)


def describe(cmp: Comparison) -> str:
    cfg = cmp.config
    mem = f"memcg limit {cfg['memcg_limit']}" if cfg.get("memcg_limit") else f"mem {cfg.get('mem')}"
    if isinstance(cfg.get("mem"), int):
        mem = f"mem {cfg['mem'] / 2**30:.2f} GiB"
    return (f"{cmp.workload.name}: {len(cmp.workload.trace):,} events; device {cmp.device.name}; {mem}; "
            f"zram {cfg.get('zram')}")


def write(cmp: Comparison, out_dir) -> dict:
    """All outputs into out_dir (created); each file written atomically. Returns name -> path."""
    from . import report
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"-o {out_dir}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    csv = cmp.table.to_csv(index=False)
    atomic_write(out / "summary.csv", csv); paths["summary.csv"] = out / "summary.csv"
    md = f"# kmemsim compare\n\n{describe(cmp)}\n\n{table_markdown(cmp.table)}\n"
    atomic_write(out / "summary.md", md); paths["summary.md"] = out / "summary.md"
    ph = pd.concat([r.phases.assign(policy=r.policy) for r in cmp.runs])
    atomic_write(out / "phases.csv", ph.to_csv()); paths["phases.csv"] = out / "phases.csv"
    pngs = report.plots(cmp)
    for name, data in pngs.items():
        atomic_write(out / name, data)
        paths[name] = out / name
    atomic_write(out / "report.html", report.html(cmp, pngs)); paths["report.html"] = out / "report.html"
    return paths
