"""Which way of paging an MoE model's experts wins: the llama workload's load modes page-cache,
willneed (llama.cpp #26003), direct:SLOTS (#25294), pin-hot:N (#26414) and cold:T (MADV_COLD) on
MoE presets (Qwen3-30B-A3B, Mixtral-8x7B; fewer layers, the same shapes), across memory (the memcg
limit a share of the model file, plus the process's own buffers) and routing skew (the Zipf exponent
of expert popularity, with Mixtral's temporal locality and our layer correlation:
workload/llama/routing.py), on a phone profile and on this machine's.

Each strategy's parameter follows from the memory: direct's slots per layer are what the budget
left after the dense tensors holds (at least the experts a token routes, at most all); pin-hot's N
pins half of that budget's experts (#26414 pins what its budget allows; the other half is left to
the page cache); cold's T is COLD_T tokens. A point where the kernel kills the process (pin-hot's
mlock beyond the limit) has no time per token and cannot win.

Outputs: summary.csv (device, model, mem_fraction, skew, strategy, storage_bytes_per_token, tpot_s,
peak_bytes, and the rest of each point), winners.csv, winner.png (the winner by memory and skew,
one panel per device and model), storage.png and report.md. With `--set scenario=apps` the phone
(when it is among the devices) also runs beside the other apps of a scenario (workloads/scenarios/moe-apps.toml, lmkd on, zram):
the device's RAM the apps' footprint plus the fraction of the model, each row with the apps lmkd
killed (a strategy that takes memory from the apps wins its time per token with their restarts).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from ..core.atomic import atomic_write
from ..core.data import SCENARIOS
from ..core.errors import InputError
from ..core.limits import MAX_ZIPF_S
from ..core.trace import TraceBuilder
from ..core.units import PAGE_SIZE
from ..engine.kernel import Config, Emulator
from ..engine.time import device as devmod, serial
from ..report import compare as cm
from ..report.tables import markdown
from ..workload import llama as lw, scenario as scn_mod
from ..workload.llama.routing import spec_of
from ..workload.synth import layout_from_preset
from .output import overrides as overrides_of, write_tables

NAME = "moe-paging"
TITLE = "MoE expert paging: which loading strategy wins, by memory and routing skew"
PAPER = ("llama.cpp pull requests #25294 (O_DIRECT slot cache), #26003 (--lazy-experts: WILLNEED/DONTNEED), "
         "#26414 (--pin-hot-experts: mlock); routing statistics: Mixtral of Experts (arXiv:2401.04088) §5")
DEVICES = ("galaxy-s25plus", "this-machine")
MODELS = {"Qwen3-30B-A3B": 12, "Mixtral-8x7B": 4}          # preset -> layers kept (the shapes are the preset's)
FRACTIONS = (0.25, 0.5, 0.75, 1.0)
SKEWS = (0.0, 0.6, 1.2, 2.0)
STRATEGIES = ("page-cache", "willneed", "direct", "pin-hot", "cold")
COLD_T = 8
QUICK = dict(models={"Qwen3-30B-A3B": 4}, fractions=(0.25, 0.5, 1.0), skews=(0.0, 1.2), decode=12)
COLUMNS = ["device", "model", "mem_fraction", "skew", "strategy", "storage_bytes_per_token", "tpot_s", "peak_bytes"]
WTYPE = "q8_0"       # no x86 repack of Q8_0 (ggml-cpu repack.cpp): the experts stay in the mapping


def params(quick=False, overrides=()) -> dict:
    """The grid, --quick's corner, `--set KEY=VALUE` overrides (devices, models as NAME:LAYERS,
    fractions, skews, strategies: comma-separated; prompt, decode: integers), checked whole."""
    p = dict(devices=DEVICES, models=dict(MODELS), fractions=FRACTIONS, skews=SKEWS, strategies=STRATEGIES,
             prompt=32, decode=24, scenario="none")
    if quick:
        p.update(QUICK)
    for key, val in overrides_of(p, overrides).items():
        o = f"{key}={val}"
        items = [v.strip() for v in val.split(",") if v.strip()]
        if not items:
            raise InputError(f"--set {o!r}: no value")
        try:
            if key in ("fractions", "skews"):
                p[key] = tuple(float(v) for v in items)
            elif key in ("prompt", "decode"):
                p[key] = int(val)
            elif key == "scenario":
                if val not in ("none", "apps"):
                    raise InputError(f"--set {o!r}: scenario is none or apps (workloads/scenarios/{SCENARIO}.toml)")
                p[key] = val
            elif key == "models":
                p[key] = {n.partition(":")[0]: int(n.partition(":")[2] or MODELS.get(n, 4)) for n in items}
            else:
                p[key] = tuple(items)
        except ValueError:
            raise InputError(f"--set {o!r}: {key} takes numbers") from None
    for f in p["fractions"]:
        if not 0.05 <= f <= 4.0:
            raise InputError(f"--set fractions: {f:g} is outside 0.05..4 (the memcg limit as a share of the model)")
    for s in p["skews"]:
        if not 0.0 <= s <= MAX_ZIPF_S:
            raise InputError(f"--set skews: {s:g} is outside 0..{MAX_ZIPF_S:g} (the Zipf exponent of expert popularity)")
    bad = [s for s in p["strategies"] if s not in STRATEGIES]
    if bad:
        raise InputError(f"--set strategies: unknown {', '.join(bad)}; known: {', '.join(STRATEGIES)}")
    if not 1 <= p["prompt"] <= 4096 or not 1 <= p["decode"] <= 4096:
        raise InputError("--set prompt/decode: 1..4096 tokens")
    for d in p["devices"]:
        devmod.load(d)
    for m, layers in p["models"].items():
        if not layout_from_preset(m, WTYPE, layers).hparams.get("n_expert"):
            raise InputError(f"--set models: {m} is not an MoE preset")
    return p


def sizes(L) -> dict:
    """Bytes of the dense tensors (every token reads them) and of one expert in one layer."""
    X, n_layer = L.hparams["n_expert"], L.hparams["n_layer"]
    exps = sum(t.n_bytes for t in L.tensors if "_exps" in t.name)
    return {"dense": L.file_size - exps, "expert": exps // (X * n_layer)}


def mode_of(strategy, L, budget) -> str:
    """The load mode a strategy runs as at a budget (bytes of the model the memory may hold)."""
    hp, sz = L.hparams, sizes(L)
    left = max(0, budget - sz["dense"])
    if strategy == "direct":
        slots = int(np.clip(left // (hp["n_layer"] * sz["expert"]), hp["n_expert_used"], hp["n_expert"]))
        return f"direct:{slots}"
    if strategy == "pin-hot":
        n = int(np.clip(left // 2 // sz["expert"], 1, hp["n_layer"] * hp["n_expert"]))
        return f"pin-hot:{n}"
    if strategy == "cold":
        return f"cold:{COLD_T}"
    return strategy


def replay(tr, dev, prompts: dict, batch=512, ubatch=512, **cfg):
    """The trace on the emulator with the device's storage time on its clock (Device.task_costs:
    reads take their time, a task waits for a read still in flight, WILLNEED's included), then the
    time per phase with those waits as the read stall (serial.phase_times read_waits), as validate's
    predict times a run. Returns (Result, phase times, metrics)."""
    algo = dev.zram_algo(cfg.get("zram", dev.config_kwargs().get("zram")))
    c = dict(dev.config_kwargs(), sample_ms=10.0, **dev.task_costs(algo))
    c.update(cfg)
    tr2, occ = serial.split_phases(tr)
    res = Emulator(Config(**c)).replay(tr2)
    toks, outs = lw.step_rows(occ, prompts, batch, ubatch, 1)
    pt = serial.phase_times(res.per_phase, occ, dev, algo, toks, outs, read_waits=True)
    return res, pt, serial.metrics(pt)


def point(dev, L, fraction, skew, strategy, prompt=32, decode=24, seed=0) -> dict:
    """One replay: the session in the strategy's load mode under a memcg of `fraction` of the model
    file plus the process's own buffers; its decode's storage reads per token, time per token, peak."""
    budget = int(fraction * L.file_size)
    mode = mode_of(strategy, L, budget)
    b = TraceBuilder(source=f"kmemsim experiment {NAME}")
    s = lw.generate(L, prompt, decode, 256, load_mode=mode, moe_routing=spec_of(skew), time_model=dev.time_model(),
                    seed=seed, builder=b, repack="none")
    tr = b.build()
    own = s.kv_bytes + s.compute_bytes + s.out_bytes
    # the device's RAM at least the limit and 512 MiB for the kernel (a phone profile's 6 GiB would
    # otherwise cap the larger fractions): the memcg limit is the memory the model gets
    res, pt, m = replay(tr, dev, {"request 0": prompt}, mem=max(dev.available, budget + own + (512 << 20)),
                        memcg_limit=budget + own)
    s_ = res.summary
    dec = pt[pt["kind"] == "decode"]
    killed = bool(s_["oom_kill"] or s_["lmk_kill"])
    return {"mode": mode, "storage_bytes_per_token": float(dec["pgpgin"].sum()) * PAGE_SIZE / max(1, len(dec)),
            "tpot_s": float("nan") if killed or not len(dec) else m["tpot_s"],
            "peak_bytes": int(s_["peak_memory_bytes"]), "memcg_limit_bytes": budget + own,
            "killed": killed, "major_faults_per_token": float(dec["pgmajfault"].sum()) / max(1, len(dec)),
            "read_wait_s_per_token": float(dec["read_s"].sum()) / max(1, len(dec)),
            "swap_in_bytes": int(s_["pswpin"]) * PAGE_SIZE, "model_bytes": L.file_size,
            **{k: v for k, v in tr.meta["llama"][0].items() if k.startswith(("expert_slot", "pinned", "cold_"))}}


SCENARIO = "moe-apps"
PHONE = "galaxy-s25plus"


def apps_point(dev, fraction, skew, strategy) -> dict:
    """The strategy beside the phone's apps (workloads/scenarios/moe-apps.toml) with lmkd on: the
    device's RAM is the apps' footprint plus `fraction` of the model file plus the LLM's own
    buffers, so the part the apps leave is that fraction; the requests' time per token and the
    storage reads per decoded token, the kills and the swap."""
    path = str(SCENARIOS / f"{SCENARIO}.toml")
    scn = scn_mod.load(path, ())
    L = scn_mod.model_layout(scn)
    mode = mode_of(strategy, L, int(fraction * L.file_size))
    sets = (f"llm.load_mode={mode}", f"llm.moe_routing={spec_of(skew)}")
    wl = cm.workload_from_scenario(path, sets)
    apps = sum(a.pages for a in scn.apps.values()) * PAGE_SIZE
    own = 64 << 20                                        # KV (512 cells), compute and logits: < 64 MiB
    mem = apps + int(fraction * L.file_size) + own
    res, pt, m = replay(wl.trace, dev, wl.prompts, wl.batch, wl.ubatch, mem=mem, lmk=True)
    s_ = res.summary
    dec = pt[(pt["kind"] == "decode") & pt["request"].str.startswith("request ")]
    return {"mode": mode, "storage_bytes_per_token": float(dec["pgpgin"].sum()) * PAGE_SIZE / max(1, len(dec)),
            "tpot_s": m["tpot_s"] if len(dec) else float("nan"), "peak_bytes": int(s_["peak_memory_bytes"]),
            "memcg_limit_bytes": None, "device_mem_bytes": mem, "killed": bool(s_["oom_kill"]),
            "lmk_kills": int(s_["lmk_kill"]), "swap_out_bytes": int(s_["pswpout"]) * PAGE_SIZE,
            "switch_latency_s": m["switch_latency_s"], "model_bytes": L.file_size,
            "major_faults_per_token": float(dec["pgmajfault"].sum()) / max(1, len(dec))}


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    rows, t0 = [], time.time()
    for dname in p["devices"]:
        dev = devmod.load(dname)
        for mname, layers in p["models"].items():
            L = layout_from_preset(mname, WTYPE, layers)
            for f in p["fractions"]:
                for sk in p["skews"]:
                    for st in p["strategies"]:
                        r = point(dev, L, f, sk, st, p["prompt"], p["decode"])
                        rows.append({"device": dname, "model": mname, "mem_fraction": f, "skew": sk, "strategy": st, **r,
                                     "layers": layers})
                        if progress:
                            progress(f"{dname} {mname} {f:.0%} skew {sk:g} {r['mode']}: "
                                     f"{r['storage_bytes_per_token'] / 2**20:.1f} MiB/token, tpot {r['tpot_s']:.3f} s")
        if p["scenario"] == "apps" and dname == PHONE:   # after the phone's own rows (a --scheduler cell per device)
            for f in p["fractions"]:
                for sk in p["skews"]:
                    for st in p["strategies"]:
                        r = apps_point(dev, f, sk, st)
                        rows.append({"device": f"{PHONE}+apps", "model": "Qwen3-30B-A3B", "mem_fraction": f,
                                     "skew": sk, "strategy": st, **r, "layers": 6})
                        if progress:
                            progress(f"{PHONE}+apps {f:.0%} skew {sk:g} {r['mode']}: "
                                     f"{r['storage_bytes_per_token'] / 2**20:.1f} MiB/token, tpot {r['tpot_s']:.3f} s, "
                                     f"lmkd kills {r['lmk_kills']}")
    df = pd.DataFrame(rows)
    df = df[COLUMNS + [c for c in df.columns if c not in COLUMNS]]
    df.attrs["wall_s"] = time.time() - t0
    write(out, df)
    return df


TIE = 0.01     # times within 1% are a tie: the simpler strategy (earlier in STRATEGIES) wins it


def winners(df: pd.DataFrame) -> pd.DataFrame:
    """Per device, model, memory and skew: the strategy with the least time per token (a killed one
    never; within TIE of the least, the simplest: page-cache before the rest), its storage reads, and
    the runner-up's time."""
    key = ["device", "model", "mem_fraction", "skew"]
    ok = df[df["tpot_s"].notna()].copy()
    best_t = ok.groupby(key)["tpot_s"].transform("min")
    ok["_tie"] = np.where(ok["tpot_s"] <= best_t * (1 + TIE), 0, 1)
    ok["_rank"] = ok["strategy"].map({s: i for i, s in enumerate(STRATEGIES)})
    ok = ok.sort_values(key + ["_tie", "_rank", "tpot_s"])
    best = ok.groupby(key, as_index=False).nth(0)
    rest = ok.merge(best[key + ["strategy"]], on=key, suffixes=("", "_w"))
    rest = rest[rest["strategy"] != rest["strategy_w"]].sort_values(key + ["tpot_s"])
    second = rest.groupby(key, as_index=False).nth(0)[key + ["strategy", "tpot_s"]]
    second = second.rename(columns={"strategy": "runner_up", "tpot_s": "runner_up_tpot_s"})
    more = [c for c in ("lmk_kills",) if c in ok]         # the apps variant: whom the winner had killed
    w = best[key + ["strategy", "mode", "tpot_s", "storage_bytes_per_token"] + more].merge(second, on=key, how="left")
    return w.rename(columns={"strategy": "winner"}).reset_index(drop=True)


def write(out, df: pd.DataFrame):
    w = winners(df)
    write_tables(out, df, pd.DataFrame({"source": [PAPER]}), winners=w)
    from ..report import plots          # here: matplotlib takes 0.3 s, and the tables come first
    w = w.assign(panel=w["device"] + ", " + w["model"], margin=(w["runner_up_tpot_s"] / w["tpot_s"]).map(
        lambda v: f"x{v:.2f}" if v == v else ""))
    atomic_write(os.path.join(out, "winner.png"), plots.winner_map(
        w, x="mem_fraction", y="skew", value="winner", facet="panel", note="margin",
        title="MoE experts: the strategy with the least time per token (x: the runner-up's time over it)",
        xlabel="memcg limit / model size", ylabel="routing skew (Zipf exponent)"))
    d = df.assign(mib_per_token=df["storage_bytes_per_token"] / 2**20, panel=df["device"] + ", " + df["model"])
    atomic_write(os.path.join(out, "storage.png"), plots.experiment_lines(
        d[d["skew"] == d["skew"].max()], x="mem_fraction", y="mib_per_token", line="strategy",
        facet=("panel", "skew"), logy=True, title="storage reads per decoded token (the highest skew)",
        xlabel="memcg limit / model size", ylabel="MiB per token"))
    md = [f"# {TITLE}", "", f"Sources: {PAPER}.", "", "## The winner at each point", "", markdown(w), "",
          "## Every point", "", markdown(df[COLUMNS + ["mode", "killed"]]), "",
          f"{len(df)} rows; {df.attrs.get('wall_s', 0):.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
