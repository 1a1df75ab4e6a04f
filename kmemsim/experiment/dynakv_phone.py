"""What DynaKV's paper did not measure: its retrieval on a phone whose kernel is reclaiming for other apps.

DynaKV (kmemsim.engine.managers.dynakv) accounts for its DRAM cache itself: an entry it holds is served
from DRAM, only misses are read from flash. The paper runs it alone on the phone. Here its cache is what
it is on a phone, anonymous memory of the LLM process (kmemsim.engine.managers.dynakv_process), beside
the apps of the scenario kmemsim/data/scenarios/dynakv-decoding.toml (five prelaunched, Markov
switching among six) and the model's mmapped FP8 weights, replayed by the kernel emulation on the
OnePlus 12's profile at several amounts of memory. Each decoding step's latency is taken two ways:
- `manager_s`: as the manager accounts it, exactly as dynakv-latency does (its run_model: the step on
  DynaKV's pipeline, the layers' compute beside the loader thread's flash reads of the representatives
  and the retrieved KV, the sampled heads' reads scaled to the layer's KV heads);
- `kernel_s`: manager_s plus what the step waited for in the replay (engine/time/serial.py's stall
  seconds of the step's phase): swap-ins of cache pages the kernel took to zram (a DRAM hit on such a
  page, or an entry entering one), weight pages the kernel dropped and the step read back, and the
  step's own direct reclaim. Added, no overlap assumed: a fault stops the thread that touched the page.
The flash reads are O_DIRECT (no page cache: nothing reclaim changes) and stay as the manager times
them. The trace's clock is the manager's (each step starts when its accounting says the last ended).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.data import SCENARIOS
from ..core.errors import InputError
from ..core.trace import TraceBuilder, merge
from ..core.units import parse_size
from ..engine.kernel import Config, Emulator
from ..engine.managers import dynakv as dk
from ..engine.managers.dynakv_process import DynakvProcess, residency, retrieve
from ..engine.time import device as devmod, serial
from ..report.tables import markdown
from ..workload import scenario as sc
from ..workload.llama.keys import kmeans, synthetic_keys
from ..workload.scenario.schema import LLM_PID, NS
from ..workload.presets import model_shape as preset
from . import dynakv_latency, output
from .dynakv_latency import shape

NAME = "dynakv-phone"
TITLE = "DynaKV inside a phone: decoding step latency as the retrieval accounts it and as the kernel makes it"
PAPER = ("DynaKV (Wang et al., arXiv 2511.07427): the same retrieval with its DRAM cache as anonymous memory "
         "under a kernel reclaiming for other apps (not in the paper)")
SCENARIO = SCENARIOS / "dynakv-decoding.toml"
NOT_MEASURED = ("Not measured by the paper: DynaKV ran alone on the phone, so its DRAM cache never shared "
                "memory with other apps. Here the cache is anonymous memory of the LLM process while other apps "
                "run; a DRAM hit on a page the kernel swapped to zram waits for a swap-in that the manager's "
                "accounting does not see.")
SPEEDUP = {"no-cluster": 2.00, "pqcache": 1.47, "clusterkv": 1.31}       # Fig 10b (OnePlus 12)
# [assumption] a long generation runs as a foreground service (a notification): Android's
# PERCEPTIBLE_APP_ADJ; the OnePlus 12 profile runs no lmkd, so only the OOM killer reads it
ADJ = 200
# quick: 1536 steps reach the first warm switch back to a large app (chrome at 60 s), 12 GiB has room
QUICK = dict(mems="2G,12G", steps=1536, prefill=512, heads=1)


def params(quick=False, overrides=()) -> dict:
    p = dict(device="oneplus-12", model="Llama-3.2-1B", mems="2G,2.5G,3G,6G", systems=",".join(dk.SYSTEMS),
             steps=4096, prefill=1024, heads=2, seed=11, start=3.0, budget=dk.Params.budget,
             k=dk.Params.k, buffer=dk.Params.buffer, cache=dk.Params.cache_entries, cluster_size=dk.Params.cluster_size)
    if quick:
        p.update(QUICK)
    for key, val in output.overrides(p, overrides).items():
        if key in ("device", "model", "mems", "systems"):
            p[key] = val
        elif key in ("start", "budget"):
            try:
                p[key] = float(val)
            except ValueError:
                raise InputError(f"--set {key}={val}: expected a number") from None
        else:
            try:
                p[key] = int(val)
            except ValueError:
                raise InputError(f"--set {key}={val}: expected a whole number") from None
    p["mem_bytes"] = [parse_size(m.strip(), "mems") for m in str(p["mems"]).split(",") if m.strip()]
    p["system_list"] = [s.strip() for s in str(p["systems"]).split(",") if s.strip()]
    if not p["mem_bytes"] or not p["system_list"]:
        raise InputError("give at least one of mems and of systems")
    for s in p["system_list"]:
        if s not in dk.HEADS:
            raise InputError(f"systems: unknown {s!r}; known: {', '.join(dk.HEADS)}")
    hp = preset(p["model"])
    if not hp.get("n_head_kv") or hp["n_head_kv"] >= hp["n_head"]:
        raise InputError(f"model {p['model']}: no GQA metadata (n_head_kv < n_head); DynaKV's models are GQA")
    n_layer, n_kv, _, _ = shape(p["model"])
    if p["steps"] < 1 or p["prefill"] < 2 * p["cluster_size"] or not 1 <= p["heads"] <= n_layer * n_kv:
        raise InputError(f"steps >= 1, prefill >= 2 x cluster_size, heads in [1, {n_layer * n_kv}] "
                         "(the model's KV heads)")
    if not 0 <= p["start"] < 3600:
        raise InputError(f"start={p['start']}: seconds in [0, 3600)")
    dk.Params(budget=p["budget"], k=p["k"], buffer=p["buffer"], cache_entries=p["cache"],
              cluster_size=p["cluster_size"]).check(
        max(1, p["prefill"] // p["cluster_size"]))
    devmod.load(p["device"]).zram_algo(None)
    return p


def decode(dev, p, system, keys, queries):
    """One system's decoding of the sampled heads: per step the manager's latency (s) and DRAM hits,
    each head's pool accesses with the number of heads it stands for, and the weights' bytes."""
    n_layer, n_kv, head_dim, parts = shape(p["model"])
    # the manager's own accounting of each step, exactly as dynakv-latency makes it
    acct = dynakv_latency.run_model(dev, p["model"], p, system, keys, queries)
    prm = dk.Params(budget=p["budget"], k=p["k"], buffer=p["buffer"], cache_entries=p["cache"],
                    cluster_size=p["cluster_size"], entry_bytes=2 * head_dim)
    rng = np.random.default_rng(p["seed"])          # as run_model seeds it: the same retrieval, recorded
    per_head = [retrieve(system, keys[h], queries[h], p["prefill"], prm, kmeans, rng) for h in range(len(keys))]
    S = len(per_head[0][0])
    read = np.array([sum(int(h[0][s].runs.sum()) for h in per_head) for s in range(S)])
    if len(acct["step_s"]) != S or not np.array_equal(read, acct["runs_sum"]):
        raise RuntimeError(f"{system}: the recorded retrieval reads other entries than dynakv-latency's")
    total = n_layer * n_kv                # the heads of every layer, split among the sampled ones
    copies = [total // len(keys) + (h < total % len(keys)) for h in range(len(keys))]
    heads = [(residency(needs, [st.hits for st in steps], p["prefill"]), c)
             for (steps, needs), c in zip(per_head, copies)]
    hits = np.array([sum(len(h[0][s].hits) for h in per_head) for s in range(S)]) / len(keys)
    return dict(step_s=np.asarray(acct["step_s"], float), hits=hits, heads=heads, entry_bytes=prm.entry_bytes,
                weight_bytes=n_layer * int(np.sum(parts)))


def build(dev, p, d):
    """The scenario's apps and the DynaKV process on one timeline; the steps' start times (ns)."""
    t0 = int(p["start"] * NS)
    b = TraceBuilder(source=f"kmemsim experiment {NAME}: DynaKV ({p['model']})")
    proc = DynakvProcess(b, LLM_PID, p["model"], d["weight_bytes"], d["entry_bytes"])
    proc.load(t0, ADJ)
    # [assumption] the load reads the weights at the flash's rate for readahead's requests
    # (max_sectors_kb), and the prompt is one pass over the weights plus a MAC per weight byte per token
    # (FP8: a byte a weight); neither is reported, they only place the decoding on the timeline
    rate = dev.task_costs(dev.zram_algo(None))["io_read_gbps"] * 1e9
    t_pre = t0 + int(d["weight_bytes"] / rate * NS)
    proc.prefill(t_pre)
    t_dec = t_pre + int(dev.time_model().ns(d["weight_bytes"], p["prefill"] * d["weight_bytes"]))
    t_steps = t_dec + np.r_[0, np.cumsum(np.round(d["step_s"][:-1] * NS).astype(np.int64) + 1)]
    pool_pages = proc.decode(t_steps, d["heads"])
    end_s = (int(t_steps[-1]) + int(d["step_s"][-1] * NS)) / NS + 1
    apps = sc.build(sc.load(str(SCENARIO), [f"duration={end_s}"]))
    return merge([apps, b.build()], source=f"{SCENARIO.name} + {b.meta['source']}"), t_steps, sum(pool_pages)


def run_one(dev, mem, tr, occ, system, d, p):
    res = Emulator(Config(**dict(dev.config_kwargs(), mem=mem))).replay(tr)
    if (res.kills["pid"] == LLM_PID).any():
        raise InputError(f"mems={mem / 2**30:.1f}G: the OOM killer killed the LLM process ({system}); "
                         "give it more memory")
    counts = res.per_phase.reset_index(drop=True).iloc[:len(occ)].set_axis(occ.index)
    steps = occ[(occ["pid"] == LLM_PID) & occ["name"].str.startswith("dynakv step ")].index
    if len(steps) != len(d["step_s"]):
        raise RuntimeError(f"{len(steps)} step phases for {len(d['step_s'])} steps")
    st = serial.stall_seconds(counts.loc[steps], dev, dev.zram_algo(None))
    return pd.DataFrame({"mem_bytes": mem, "system": system, "step": np.arange(len(steps)),
                         "manager_s": d["step_s"], "kernel_s": d["step_s"] + st["stall_s"].to_numpy(),
                         "swapin_s": st["swapin_s"].to_numpy(), "read_s": st["read_s"].to_numpy(),
                         "reclaim_s": st["reclaim_s"].to_numpy(),
                         "cache_swapin_pages": counts.loc[steps, "kv_swapin_pages"].to_numpy(),
                         "swapin_pages": counts.loc[steps, "pswpin"].to_numpy(),
                         "hits": d["hits"]}), int((res.kills["pid"] != LLM_PID).sum())


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    dev = devmod.load(p["device"])
    t0 = time.time()
    _, _, head_dim, _ = shape(p["model"])
    keys, queries = synthetic_keys(p["prefill"], p["steps"], head_dim, p["heads"], np.random.default_rng(p["seed"]))
    per_step, rows = [], []
    for system in p["system_list"]:
        d = decode(dev, p, system, keys, queries)
        merged, _, pool_pages = build(dev, p, d)
        tr, occ = serial.split_phases(merged)
        for mem in p["mem_bytes"]:
            s, kills = run_one(dev, mem, tr, occ, system, d, p)
            per_step.append(s)
            rows.append(dict(device=p["device"], model=p["model"], mem_bytes=mem, system=system, steps=len(s),
                             hits_per_step=float(s["hits"].mean()), cache_mib=pool_pages * 4096 / 2**20,
                             manager_s=float(s["manager_s"].mean()), kernel_s=float(s["kernel_s"].mean()),
                             kernel_p99_s=float(np.quantile(s["kernel_s"], 0.99)),
                             worst_extra_s=float((s["kernel_s"] - s["manager_s"]).max()),
                             slowdown=float(s["kernel_s"].sum() / s["manager_s"].sum()),
                             cache_swapin_pages=int(s["cache_swapin_pages"].sum()),
                             steps_with_swapin=float((s["cache_swapin_pages"] > 0).mean()),
                             swapin_s=float(s["swapin_s"].mean()), weights_read_s=float(s["read_s"].mean()),
                             reclaim_s=float(s["reclaim_s"].mean()), app_kills=kills))
            if progress:
                r = rows[-1]
                progress(f"{mem / 2**30:.1f} GiB, {system}: {r['manager_s'] * 1e3:.1f} ms a step as it accounts it, "
                         f"{r['kernel_s'] * 1e3:.1f} ms with the kernel ({r['cache_swapin_pages']} cache pages "
                         f"swapped in over {r['steps']} steps)")
    df = pd.DataFrame(rows)
    df.attrs["wall_s"] = time.time() - t0
    paper = paper_table(df)
    said = [NOT_MEASURED] + findings(df)
    if progress:
        for line in said:
            progress(line)
    os.makedirs(out, exist_ok=True)
    output.write_tables(out, df, paper, steps=pd.concat(per_step, ignore_index=True))
    md = [f"# {TITLE}", "", f"Source: {PAPER}.", "", "## What the paper did not measure", "", *said, "",
          __doc__.strip(), "", "## Beside the paper", "", markdown(paper), "", "## Per memory and system", "",
          markdown(df), "", f"{len(df)} rows; {df.attrs['wall_s']:.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
    return df


def findings(df) -> list[str]:
    """Per memory size, what the kernel did to the cache and what it added to the steps."""
    out = []
    for mem, g in df.groupby("mem_bytes", sort=False):
        pages = int(g["cache_swapin_pages"].sum())
        worst = g.loc[g["worst_extra_s"].idxmax()]
        out.append(f"At {mem / 2**30:.1f} GiB: {pages} cache pages swapped in over {len(g)} systems' decodings; "
                   f"the kernel added {float((g['kernel_s'] / g['manager_s']).max() - 1) * 100:.3f}% at most to a "
                   f"system's mean step, and {worst.worst_extra_s * 1e3:.2f} ms at most to one step ({worst.system}).")
    return out


def paper_table(df) -> pd.DataFrame:
    rows = []
    for mem, g in df.groupby("mem_bytes", sort=False):
        g = g.set_index("system")
        at = f"{mem / 2**30:.1f} GiB"
        if "dynakv" in g.index:
            r = g.loc["dynakv"]
            rows.append(dict(metric=f"dynakv step latency, {at}", paper="not measured (ran alone)",
                             ours=f"{r.manager_s * 1e3:.1f} ms as it accounts it, {r.kernel_s * 1e3:.1f} ms with the "
                                  f"kernel ({r.cache_swapin_pages} cache pages swapped in)"))
            for base, v in SPEEDUP.items():
                if base in g.index:
                    rows.append(dict(metric=f"latency {base} / dynakv, {at}", paper=f"{v}x (alone)",
                                     ours=f"{g.loc[base, 'manager_s'] / r.manager_s:.2f}x as accounted, "
                                          f"{g.loc[base, 'kernel_s'] / r.kernel_s:.2f}x with the kernel"))
    return pd.DataFrame(rows, columns=["metric", "paper", "ours"])
