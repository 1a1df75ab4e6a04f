"""mzCache's real-app experiment (MobiCom 2026, Fig 15; mzcache-project/mzcache
scripts/mzcache/record_demo_rounds.sh): ten apps foregrounded in a fixed order per round beside the
LLM app, a Send per round; the paper's run is 10 rounds, the repository's demo 3. The outcome the
paper reports: the OS-paging baseline's process is killed by lmkd and cold-starts, mzCache's keeps its
pid. Here the scenario (kmemsim/data/scenarios/mzcache-ten-apps.toml) is replayed on the Galaxy
S25+'s profile with lmkd on, for three LLM apps:
- os-paging: stock llama.cpp on the CPU (weights mmapped, KV anonymous);
- mzcache: mzCache (kmemsim.engine.managers.mzcache.MzEngine), its arenas mlocked (the artifact's way);
- mzcache-swappable: the same with arenas left to the kernel (the artifact's comment: "an ordinary
  malloc pool is anonymous memory zram swaps out, turning the next swapin into a major-fault storm").
mzCache evicts `trim_step` of its memory per onTrimMemory, one at every switch to another app: with the
app's default step (0.15) it is down to nothing, its arenas offloaded to flash, four switches into a
round, before the other apps' pressure peaks; the storm needs arenas still in RAM, so both arena
settings run again with a step of 0.05 (`storm_step`), which keeps half of its memory through a round.
"""
from __future__ import annotations

import os
import time

import pandas as pd

from ..core.atomic import atomic_write
from ..core.data import SCENARIOS
from ..core.errors import InputError
from ..core.units import parse_size
from ..engine.kernel import Config, Emulator
from ..engine.time import device as devmod, serial
from ..report.tables import markdown
from ..workload import scenario as sc
from ..workload.llama import step_rows
from .output import overrides as overrides_of

NAME = "mzcache-apps"
TITLE = "mzCache Fig 15: the ten-app round, who lmkd kills, and the restores' major faults"
PAPER = "mzCache (Yu, Kim, Park, Lee; MobiCom 2026), Fig 15; scripts/mzcache/record_demo_rounds.sh"
# How to read the outcome (docs/policies.md, mzCache: the ten-app round).
READING = """lmkd here is AOSP lmkd's mp_event_psi() decision with its defaults (c_ext/lmkd.c): it kills on
page-cache thrashing (workingset_refault_file in a second against the file LRU, limit 100%) or low swap,
and spares oom_score_adj <= 200 (the foreground LLM at its Send) unless thrashing passes 200% or memory
is below the min watermark; the highest score dies first. A killed app cold-starts at its next switch
(kmemsim.workload.scenario.relaunch: the kills are fed back into the scenario until none is new).
OS paging's Send faults its evicted weights back in: those refaults make the page cache thrash, and
lmkd kills the background apps that have waited longest, every round; the LLM, in front, is spared.
mzCache restores with O_DIRECT reads into mlocked buffers, which refault nothing, and kills no one.
The paper's kill of the OS-paging LLM itself needs pressure while it is in the background; with the
app footprints of kmemsim/data/apps (estimates) it does not come: `--set mem=4G` gives more kills,
`8G` none, and the LLM survives both. With trim step 0.15 mzCache is down to nothing four switches
into a round; its arenas come back from flash at a Send unlocked (the artifact mlocks them at the end
of a swap-out) and the restore's own allocations can push them to zram before they are decompressed:
the swap-ins in its requests."""
SYSTEMS = {"os-paging": ['llm.engine="llama.cpp"'],
           "mzcache": ['llm.engine="mzcache"', "llm.arena_mlock=true"],
           "mzcache-swappable": ['llm.engine="mzcache"', "llm.arena_mlock=false"]}
DEVICE = "galaxy-s25plus"


def params(quick=False, overrides=()) -> dict:
    p = dict(rounds=3 if quick else 10, trim_step=0.15, storm_step=0.05, device=DEVICE, mem="")
    for key, val in overrides_of(p, overrides).items():
        try:
            p[key] = val if key in ("device", "mem") else (int(val) if key == "rounds" else float(val))
        except ValueError:
            raise InputError(f"--set {key + '=' + val!r}: {key} takes a number") from None
    if not 1 <= p["rounds"] <= 100:
        raise InputError(f"--set rounds={p['rounds']}: expected 1..100")
    for k in ("trim_step", "storm_step"):
        if not 0.0 < p[k] <= 1.0:
            raise InputError(f"--set {k}={p[k]}: expected a share of the LLM's memory in (0, 1]")
    devmod.load(p["device"]).engine_costs()
    if p["mem"]:
        try:
            parse_size(p["mem"])
        except (ValueError, InputError):
            raise InputError(f"--set mem={p['mem']}: expected a size such as 6G (the memory the scenario gets)") from None
    return p


def run_one(system, step, p, dev):
    over = SYSTEMS[system] + [f"switch.rounds={p['rounds']}", f"duration={23 + 275 * p['rounds'] + 30}"]
    if step is not None:
        over.append(f"llm.trim_step={step}")
    scn = sc.load(str(SCENARIOS / "mzcache-ten-apps.toml"), over)
    engines, made = [], {}

    def make(s):
        engines.clear()
        made["trace"], made["occ"] = serial.split_phases(sc.build(s, device=dev, engines=engines))
        return made["trace"]
    cfg = dict(dev.config_kwargs(), mem=p["mem"] or dev.available, lmk=True)
    tr, res, kills = sc.replay_relaunching(scn, Emulator(Config(**cfg)), make)
    occ = made["occ"]
    kills = kills.assign(system=system, trim_step=step, t_s=kills["t"] / 1e9,
                         process=[scn.apps[a].name if a in scn.apps else a for a in kills["app"]])
    llm_kill = kills[kills["pid"] == sc.LLM_PID]
    # the LLM's requests: their phase occurrences, the major faults and swap-ins in them
    pp = res.per_phase.reset_index(drop=True)
    req = occ[(occ["pid"] == sc.LLM_PID) & (occ["kind"] == "request")]
    rows = []
    if engines:                               # mzCache: each Send's restore, timed by its pipeline
        algo = dev.zram_algo(cfg.get("zram"))
        pt = serial.phase_times(res.per_phase, occ, dev, algo)
        for k, ((t, ttft, jobs), (i, o)) in enumerate(zip(engines[0].requests, req.iterrows())):
            # what the restore waited for beyond its pipeline: swap-ins (a swapped arena's pages) and
            # the reclaim its allocations made (its flash reads are the pipeline's already)
            stall = float(pt.loc[i, "swapin_s"] + pt.loc[i, "reclaim_s"])
            rows.append(dict(system=system, trim_step=step, request=k, t_s=t / 1e9, restore_ttft_s=ttft, stall_s=stall,
                             ttft_s=ttft + stall, jobs=jobs, major_faults=int(pp.loc[i, "pgmajfault"]),
                             swap_in_pages=int(pp.loc[i, "pswpin"])))
    else:
        prompts = {c[5]: int(c[2]) for c in sc.llm_calls(scn, sc.plan(scn))}
        toks, outs = step_rows(occ, prompts, scn.llm.batch, scn.llm.ubatch, scn.llm.paths)
        pt = serial.phase_times(res.per_phase, occ, dev, dev.zram_algo(cfg.get("zram")), toks, outs)
        met = serial.metrics(pt)["requests"]
        for k, (name, r) in enumerate(met.iterrows()):
            ph = occ[(occ["request"] == name)].index
            rows.append(dict(system=system, trim_step=None, request=k, t_s=r["t"] / 1e9, restore_ttft_s=None, stall_s=None,
                             ttft_s=float(r["ttft_s"]), jobs=None,
                             major_faults=int(pp.loc[ph, "pgmajfault"].sum()),
                             swap_in_pages=int(pp.loc[ph, "pswpin"].sum())))
    summary = dict(system=system, rounds=p["rounds"], trim_step=step if system != "os-paging" else None,
                   llm_killed=bool(len(llm_kill)), llm_killed_at_s=float(llm_kill["t"].min() / 1e9) if len(llm_kill) else None,
                   lmkd_kills=int((kills["by"] == "lmkd").sum()), requests_served=len(rows),
                   restore_major_faults=int(sum(r["major_faults"] for r in rows)))
    return summary, rows, kills[["system", "trim_step", "t_s", "pid", "process", "by", "reason"]]


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    dev = devmod.load(p["device"])
    t0 = time.time()
    summaries, rows, kills = [], [], []
    runs = [("os-paging", None)] + [(s, step) for step in (p["trim_step"], p["storm_step"])
                                     for s in ("mzcache", "mzcache-swappable")]
    for system, step in runs:
        s, r, k = run_one(system, step, p, dev)
        summaries.append(s)
        rows += r
        kills.append(k)
        if progress:
            progress(f"{system} (trim step {step}): LLM killed {s['llm_killed']}, {s['lmkd_kills']} lmkd kills, "
                     f"{s['restore_major_faults']:,} major faults in its requests")
    df = pd.DataFrame(summaries)
    req = pd.DataFrame(rows)
    kills = pd.concat(kills, ignore_index=True)
    df.attrs["wall_s"] = time.time() - t0
    atomic_write(os.path.join(out, "summary.csv"), lambda tmp: df.to_csv(tmp, index=False))
    atomic_write(os.path.join(out, "summary.parquet"), lambda tmp: df.to_parquet(tmp, index=False))
    atomic_write(os.path.join(out, "requests.csv"), lambda tmp: req.to_csv(tmp, index=False))
    atomic_write(os.path.join(out, "kills.csv"), lambda tmp: kills.to_csv(tmp, index=False))
    at = lambda system, step: df[(df["system"] == system) & ((df["trim_step"] == step) if step else df["trim_step"].isna())].iloc[0]

    def killed(system, step):
        r, k = at(system, step), kills[(kills["system"] == system) &
                                         ((kills["trim_step"] == step) if step else kills["trim_step"].isna())]
        others = k[k["pid"] != sc.LLM_PID]
        why = ", ".join(f"{n} {c}" for c, n in others["reason"].value_counts().items())
        return (f"{'yes' if r['llm_killed'] else 'no'}; lmkd killed {len(others)} other app(s)" +
                (f" ({why})" if why else ""))
    paper = pd.DataFrame([
        dict(system="os-paging", metric="llm_killed", paper="yes: lmkd kills it, the next Send cold-starts",
             ours=killed("os-paging", None)),
        dict(system="mzcache", metric="llm_killed", paper="no: it keeps its pid", ours=killed("mzcache", p["trim_step"])),
        dict(system=f"mzcache-swappable, trim step {p['storm_step']}", metric="restore_major_faults",
             paper="a major-fault storm (artifact comment; ~114 MB measured of the mins/maxs pool alone)",
             ours=f"{int(at('mzcache-swappable', p['storm_step'])['restore_major_faults']):,} faults"),
        dict(system=f"mzcache, trim step {p['storm_step']}", metric="restore_major_faults", paper="none (arenas mlocked)",
             ours=f"{int(at('mzcache', p['storm_step'])['restore_major_faults']):,} faults")])
    atomic_write(os.path.join(out, "paper.csv"), lambda tmp: paper.to_csv(tmp, index=False))
    md = [f"# {TITLE}", "", f"Source: {PAPER}.", "", markdown(paper), "", READING, "", "## Per system", "", markdown(df), "",
          "## What lmkd killed", "", markdown(kills) if len(kills) else "Nothing.", "",
          "## Per request", "", markdown(req), "", f"{df.attrs['wall_s']:.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
    return df
