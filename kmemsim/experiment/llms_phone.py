"""What LLMS's paper never measured: its service inside a phone whose kernel is reclaiming too.

LLMS accounts for its memory itself: chunks within its budget are resident, and a call to a context
whose chunks are all resident switches for free. On a phone the service is a process: its resident
chunks are anonymous memory that the kernel swaps to zram when the apps beside it need memory, its
model weights are mmapped file pages that reclaim drops, and its chunk files sit in the page cache.
Here the LLMS scenario (kmemsim/data/scenarios/llms-sessions.toml: 8 contexts, Markov switching, Poisson
calls, three apps used around it) runs with `llm.engine = "llms"`
(kmemsim.engine.managers.llms_process) on the Xiaomi 14's profile, at several amounts of memory, and
each call's switching latency is taken two ways:
- `llms_s`: as LLMS accounts it (its pipeline of flash reads and recompute, engine/managers/llms.py);
- `kernel_s`: as the emulated kernel makes it: the switch's recompute plus what the switch waited for
  in the replay (chunk-file reads that missed the page cache, swap-ins of chunks the kernel had taken,
  reclaim), engine/time/serial.py's stall seconds of the switch's phase, added (no overlap assumed).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.data import SCENARIOS
from ..core.errors import InputError
from ..core.units import parse_size
from ..engine.kernel import Config, Emulator
from ..engine.managers import llms
from ..engine.time import device as devmod, serial
from ..report.tables import markdown
from ..workload import scenario as sc
from ..workload.scenario.schema import LLM_PID
from . import output

NAME = "llms-phone"
TITLE = "LLMS inside a phone: switching latency as LLMS accounts it and as the kernel makes it"
PAPER = "LLMS (Yin, Xu, Li, Liu; arXiv 2403.11805): the same service, under kernel memory pressure (not in the paper)"
SCENARIO = SCENARIOS / "llms-sessions.toml"


def params(quick=False, overrides=()) -> dict:
    p = dict(device="xiaomi-14", mems="4G,5G,6G", services="llms,vllm-sq", budget="3G", hours=4.0)
    if quick:
        p.update(mems="5G", services="llms", hours=1.0)
    p.update(output.overrides(p, overrides))
    p["mem_bytes"] = [parse_size(m.strip(), "mems") for m in str(p["mems"]).split(",") if m.strip()]
    p["service_list"] = [s.strip() for s in str(p["services"]).split(",") if s.strip()]
    for s in p["service_list"]:
        if s not in llms.SYSTEMS:
            raise InputError(f"services: unknown {s!r}; known: {', '.join(llms.SYSTEMS)}")
    parse_size(p["budget"], "budget")
    try:
        p["hours"] = float(p["hours"])
    except ValueError:
        raise InputError(f"hours={p['hours']!r}: a number of hours") from None
    if not 0 < p["hours"] <= 72 or not p["mem_bytes"]:
        raise InputError("hours in (0, 72] and at least one mem")
    llms.costs_of(devmod.load(p["device"]), llms.LlmShape("check", 1, 1, 1.0, 1.0, 16, 1))   # has [gpu]
    return p


def run_one(dev, mem, service, p):
    scn = sc.load(str(SCENARIO), ['llm.engine="llms"', f'llm.service="{service}"', f'llm.budget="{p["budget"]}"',
                                  f"duration={p['hours'] * 3600}"])
    engines = []
    tr, occ = serial.split_phases(sc.build(scn, device=dev, engines=engines))
    res = Emulator(Config(**dict(dev.config_kwargs(), mem=mem))).replay(tr)
    counts = res.per_phase.reset_index(drop=True).iloc[:len(occ)].set_axis(occ.index)
    stall = serial.stall_seconds(counts, dev, dev.zram_algo(None))
    sw = occ[(occ["pid"] == LLM_PID) & occ["name"].str.endswith(" switch")].index
    calls = pd.DataFrame(engines[0].calls)
    out = calls.assign(mem_bytes=mem, service=service,
                       kernel_s=calls["recompute_s"].to_numpy() + stall.loc[sw, "stall_s"].to_numpy(),
                       swapin_s=stall.loc[sw, "swapin_s"].to_numpy(), read_s=stall.loc[sw, "read_s"].to_numpy(),
                       reclaim_s=stall.loc[sw, "reclaim_s"].to_numpy(),
                       swapin_pages=counts.loc[sw, "pswpin"].to_numpy())
    return out


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    dev = devmod.load(p["device"])
    t0 = time.time()
    per_call = []
    for mem in p["mem_bytes"]:
        for service in p["service_list"]:
            c = run_one(dev, mem, service, p)
            per_call.append(c)
            if progress:
                progress(f"{mem / 2**30:.1f} GiB, {service}: switching {c['llms_s'].mean() * 1e3:.1f} ms as LLMS "
                         f"accounts it, {c['kernel_s'].mean() * 1e3:.1f} ms with the kernel")
    calls = pd.concat(per_call, ignore_index=True)
    df = (calls.groupby(["mem_bytes", "service"], sort=False)
          .agg(calls=("ctx", "size"), llms_s=("llms_s", "mean"), kernel_s=("kernel_s", "mean"),
               kernel_p90_s=("kernel_s", lambda s: float(np.quantile(s, 0.9))),
               swapin_s=("swapin_s", "mean"), read_s=("read_s", "mean"), reclaim_s=("reclaim_s", "mean"),
               free_in_llms=("llms_s", lambda s: float((s == 0).mean())))
          .reset_index())
    df.insert(0, "device", p["device"])
    df.attrs["wall_s"] = time.time() - t0
    paper = pd.DataFrame([dict(metric="switching latency under kernel pressure", paper="not measured",
                               ours="; ".join(f"{r.service} at {r.mem_bytes / 2**30:.1f} GiB: {r.llms_s * 1e3:.1f} ms "
                                              f"(LLMS) vs {r.kernel_s * 1e3:.1f} ms (kernel)" for r in df.itertuples()))])
    output.write_tables(out, df, paper, calls=calls)
    md = [f"# {TITLE}", "", __doc__.strip(), "", "## Per memory and service", "", markdown(df), "",
          f"{len(calls)} calls; {df.attrs['wall_s']:.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
    return df
