"""DynaKV's decoding latency (arXiv 2511.07427, Fig 10b-c, Fig 11, Fig 12, Table 6): long decoding on a
phone with the KV cache on flash, retrieved by clusters (kmemsim.engine.managers.dynakv), DynaKV
against token-level retrieval, PQCache and ClusterKV, on the OnePlus 12 with the paper's five models.

Per model, a few of its KV heads (`heads`, sampled) are simulated step by step over the decoding; each
layer's reads are its heads' reads (the sampled heads' runs, scaled to the layer's KV heads), on the
device's flash model. A step's time is, per layer, the longer of its compute (llama.cpp on the CPU:
the layer's FP8 weights streamed at the profile's [compute] weight_gbps) and its reads, which DynaKV's
pipeline overlaps with the projections (§6, the same pipeline for every system here). Keys and
queries are synthetic with drifting clusters (workload/llama/keys.py); the prompt is `prefill`
tokens (MMLU-like, an assumption). Reported per decoding length L: the mean step latency over the
first L steps, the useful bytes over the read time (effective bandwidth), the mean run of contiguous
entries per read, and the bytes moved (read and written)."""
from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from ..core.errors import InputError
from ..core.units import PAGE_SIZE
from ..engine.managers import dynakv as dk
from ..engine.time import device as devmod
from ..report.tables import markdown
from ..core.atomic import atomic_write
from ..workload.llama.keys import kmeans, synthetic_keys
from ..workload.presets import model_shape as preset
from . import output

NAME = "dynakv-latency"
TITLE = "DynaKV Fig 10/Table 6: decoding latency with the KV cache on flash, by cluster retrieval"
PAPER = "DynaKV (Wang et al., arXiv 2511.07427), Fig 10b-c, 11, 12, Table 6; ../shared/reference/seed-systems.md §3"
MODELS = ("Qwen2.5-1.5B", "Qwen2.5-3B", "Llama-3.2-1B", "Llama-3.2-3B", "Mistral-7B")
LENGTHS = (1024, 2048, 4096, 8192, 16384)
QUICK = dict(models=("Llama-3.2-1B",), lengths=(512, 1024), heads=1, prefill=512)
# Table 6 (OnePlus 12, MMLU), ms, "as printed" (per step or per request is not said)
TABLE6 = {"Qwen2.5-1.5B": (84.6, 96.5, 123.5, 209.2, 376.3), "Qwen2.5-3B": (152.5, 167.5, 215.1, 326.3, 636.8),
          "Llama-3.2-1B": (76.7, 97.6, 189.4, 346.7, 677.3), "Llama-3.2-3B": (189.3, 289.6, 499.6, 1044.0, 1802.3)}
SPEEDUP = {"no-cluster": 2.00, "pqcache": 1.47, "clusterkv": 1.31}          # Fig 10b
BANDWIDTH = {"no-cluster": 2.10, "pqcache": 1.83, "clusterkv": 1.56}        # Fig 10c
CONTIGUOUS = {"dynakv-seq": "< 7.9 (sequence order)", "dynakv-intra": "25.3 (intra-cluster placement)",
              "dynakv": "40.8 (intra + inter-cluster placement)"}   # Fig 12 (Qwen-M, MMLU)
# Table 2: probability that an updated cluster is retrieved within t steps, t = 1, 2, 4, 8, 16
RETRIEVED_WITHIN = {"Qwen2.5-1.5B": (42.4, 47.9, 53.7, 60.5, 67.0), "Qwen2.5-3B": (59.4, None, None, None, 80.1),
                    "Llama-3.2-1B": (36.5, None, None, None, 61.4), "Llama-3.2-3B": (30.1, None, None, None, 54.9)}
HORIZONS = (1, 2, 4, 8, 16)


def params(quick=False, overrides=()) -> dict:
    p = dict(device="oneplus-12", models=MODELS, lengths=LENGTHS, prefill=1024, heads=2, seed=11,
             budget=dk.Params.budget, k=dk.Params.k, buffer=dk.Params.buffer, cache=dk.Params.cache_entries, cluster_size=dk.Params.cluster_size)
    if quick:
        p.update(QUICK)
    for key, val in output.overrides(p, overrides).items():
        items = [v.strip() for v in val.split(",") if v.strip()]
        try:
            if key == "models":
                p[key] = tuple(items)
            elif key == "lengths":
                p[key] = tuple(int(v) for v in items)
            elif key == "device":
                p[key] = val
            elif key == "budget":
                p[key] = float(val)
            else:
                p[key] = int(val)
        except ValueError:
            raise InputError(f"--set {key}={val}: expected {'a number' if key == 'budget' else 'whole numbers'}") from None
    for m in p["models"]:
        hp = preset(m)
        if not hp.get("n_head_kv") or hp["n_head_kv"] >= hp["n_head"]:
            raise InputError(f"model {m}: no GQA metadata (n_head_kv < n_head); DynaKV's models are GQA")
    if not p["lengths"] or min(p["lengths"]) < 1 or p["prefill"] < 2 * p["cluster_size"] or p["heads"] < 1:
        raise InputError("lengths >= 1, prefill >= 2 x cluster_size, heads >= 1")
    dk.Params(budget=p["budget"], k=p["k"], buffer=p["buffer"], cache_entries=p["cache"],
              cluster_size=p["cluster_size"]).check(
        max(1, p["prefill"] // p["cluster_size"]))
    devmod.load(p["device"])
    return p


def shape(model):
    """(n_layer, n_head_kv, head_dim, the layer's FP8 weight bytes (a byte each) by step: Q
    projection, K and V projections, attention's output projection, FFN)."""
    hp = preset(model)
    head_dim = hp.get("head_dim") or hp["n_embd"] // hp["n_head"]
    parts = (hp["n_embd"] * hp["n_head"] * head_dim, 2 * hp["n_embd"] * hp["n_head_kv"] * head_dim,
             hp["n_head"] * head_dim * hp["n_embd"], 3 * hp["n_embd"] * hp["n_ff"])
    return hp["n_layer"], hp["n_head_kv"], head_dim, parts


def pages(runs, entry_bytes) -> float:
    """Bytes read for runs of entries: whole 4 KiB pages (O_DIRECT)."""
    return float(np.ceil(np.asarray(runs) * entry_bytes / PAGE_SIZE).sum() * PAGE_SIZE)


def run_model(dev, model, p, system, keys, queries, buffer=None):
    n_layer, n_kv, head_dim, parts = shape(model)
    prm = dk.Params(budget=p["budget"], k=p["k"], buffer=buffer or p["buffer"], cache_entries=p["cache"], cluster_size=p["cluster_size"],
                    entry_bytes=2 * head_dim)
    rng = np.random.default_rng(p["seed"])
    heads = []
    per_head = [dk.simulate(system, keys[h], queries[h], p["prefill"], prm, kmeans, rng, heads) for h in range(len(keys))]
    crossings = np.sum([getattr(h, "crossings", [0, 0]) for h in heads], axis=0)
    steps = len(per_head[0])
    compute = tuple(b / (dev.weight_gbps * 1e9) for b in parts)      # decoding streams the weights
    scale = n_kv / len(keys)
    io = np.zeros(steps)
    step_s = np.zeros(steps)
    useful = np.zeros(steps)
    runs_n, runs_sum, moved, update = np.zeros(steps), np.zeros(steps), np.zeros(steps), np.zeros(steps)
    for s in range(steps):
        runs = np.concatenate([h[s].runs for h in per_head])
        io[s] = dk.io_seconds(dev, runs, prm.entry_bytes, in_flight=len(runs) * scale) * scale
        useful[s] = runs.sum() * prm.entry_bytes * scale
        runs_n[s], runs_sum[s] = len(runs), runs.sum()
        written = sum(h[s].written for h in per_head) * prm.entry_bytes
        moved[s] = (pages(runs, prm.entry_bytes) + written) * scale
        update[s] = (pages(np.concatenate([h[s].forced for h in per_head]), prm.entry_bytes) + written) * scale
        # the layer's representatives: every KV head's centroids (FP8, head_dim bytes), one read
        rep = n_kv * max(h[s].clusters for h in per_head) * head_dim
        rep_s = rep / float(dev.flash_throughput(rep, 1)) if rep else 0.0
        step_s[s] = dk.step_seconds(dev, compute, io[s], rep_s, n_layer)
    return dict(step_s=step_s, io=io * n_layer, useful=useful * n_layer, runs_n=runs_n, runs_sum=runs_sum,
                moved=moved * n_layer, update=update * n_layer, crossings=crossings, within=dk.retrieved_within(per_head[0], HORIZONS))


def run(out, quick=False, progress=None, overrides=()) -> pd.DataFrame:
    p = params(quick, overrides)
    os.makedirs(out, exist_ok=True)
    dev = devmod.load(p["device"])
    t0 = time.time()
    rows, buffers, within = [], [], []
    L = max(p["lengths"])
    for model in p["models"]:
        _, _, head_dim, _ = shape(model)
        keys, queries = synthetic_keys(p["prefill"], L, head_dim, p["heads"], np.random.default_rng(p["seed"]))
        for system in dk.SYSTEMS:
            r = run_model(dev, model, p, system, keys, queries)
            for n in p["lengths"]:
                sl = slice(0, n)
                rows.append(dict(device=p["device"], model=model, decode_len=n, system=system,
                                 latency_s=float(r["step_s"][sl].mean()),
                                 effective_bandwidth_bytes_per_s=float(r["useful"][sl].sum() / max(r["io"][sl].sum(), 1e-12)),
                                 mean_contiguous_entries=float(r["runs_sum"][sl].sum() / max(r["runs_n"][sl].sum(), 1)),
                                 bytes_moved=float(r["moved"][sl].sum())))
            if progress:
                progress(f"{model} {system}: {rows[-1]['latency_s'] * 1e3:.1f} ms a step at {L} tokens")
            if system == "dynakv":
                full = r
                within.append(dict(model=model, **{f"t{h}": v for h, v in r["within"].items()}))
        for system in ("dynakv-seq", "dynakv-intra"):   # Fig 12: DynaKV's clusters on other layouts
            r = run_model(dev, model, p, system, keys, queries)
            rows.append(dict(device=p["device"], model=model, decode_len=L, system=system,
                             latency_s=float(r["step_s"].mean()),
                             effective_bandwidth_bytes_per_s=float(r["useful"].sum() / max(r["io"].sum(), 1e-12)),
                             mean_contiguous_entries=float(r["runs_sum"].sum() / max(r["runs_n"].sum(), 1)),
                             bytes_moved=float(r["moved"].sum())))
        # the delayed-split buffer's cut in transferred volume (§8.3, Fig 11): a buffer of one entry
        # (each over-threshold entry splits its cluster at once, loading it if it is not in DRAM)
        # against the full buffer; all data moved, and the updates' alone (loads to split + writes)
        one = run_model(dev, model, p, "dynakv", keys, queries, buffer=1)
        buffers.append(dict(model=model, buffer=p["buffer"], moved_without=float(one["moved"].sum()),
                            moved_with=float(full["moved"].sum()), update_without=float(one["update"].sum()),
                            update_with=float(full["update"].sum()),
                            cut=float(one["moved"].sum() / max(full["moved"].sum(), 1)),
                            update_cut=float(one["update"].sum() / max(full["update"].sum(), 1)),
                            crossings=int(full["crossings"].sum()), crossings_not_in_dram=int(full["crossings"][0])))
    df = pd.DataFrame(rows)
    df.attrs["wall_s"] = time.time() - t0
    paper = paper_table(df, pd.DataFrame(buffers), pd.DataFrame(within), p)
    output.write_tables(out, df, paper, buffer=pd.DataFrame(buffers))
    md = [f"# {TITLE}", "", f"Source: {PAPER}.", "", __doc__.strip(), "", "## Our figures beside the paper's", "",
          markdown(paper), "", "## Per point", "", markdown(df), "",
          f"{len(df)} rows; {df.attrs['wall_s']:.1f} s of wall time.", ""]
    atomic_write(os.path.join(out, "report.md"), "\n".join(md))
    return df


def paper_table(df, buffers, within, p) -> pd.DataFrame:
    rows = []
    L = max(p["lengths"])
    piv = df[df["decode_len"] == L].pivot_table(index="model", columns="system",
                                               values=["latency_s", "effective_bandwidth_bytes_per_s"])
    for base, v in SPEEDUP.items():
        r = piv["latency_s"][base] / piv["latency_s"]["dynakv"]
        rows.append(dict(metric=f"latency {base} / dynakv", paper=f"{v}x", ours=f"{r.mean():.2f}x (models {r.min():.2f}-{r.max():.2f})"))
    for base, v in BANDWIDTH.items():
        r = piv["effective_bandwidth_bytes_per_s"]["dynakv"] / piv["effective_bandwidth_bytes_per_s"][base]
        rows.append(dict(metric=f"effective bandwidth dynakv / {base}", paper=f"{v}x", ours=f"{r.mean():.2f}x"))
    mc = df[df["decode_len"] == L].groupby("system")["mean_contiguous_entries"].mean()
    for s, v in CONTIGUOUS.items():
        rows.append(dict(metric=f"mean contiguous entries, {s}", paper=v, ours=f"{mc.get(s, float('nan')):.1f}"))
    if len(buffers):
        rows.append(dict(metric=f"delayed-split buffer ({p['buffer']}) against none: transferred volume cut",
                         paper="up to 2.32x", ours=f"up to {buffers['cut'].max():.2f}x (all reads and writes); "
                                                   f"up to {buffers['update_cut'].max():.2f}x (the updates' loads and writes)"))
    for _, w in within.iterrows():
        for h, v in zip(HORIZONS, RETRIEVED_WITHIN.get(w["model"], (None,) * len(HORIZONS))):
            rows.append(dict(metric=f"Table 2 {w['model']}: updated cluster retrieved within {h} steps (%)",
                             paper="-" if v is None else f"{v}", ours=f"{100 * w[f't{h}']:.1f}"))
    for model, vals in TABLE6.items():
        for n, v in zip(LENGTHS, vals):
            hit = df[(df["model"] == model) & (df["decode_len"] == n) & (df["system"] == "dynakv")]
            if len(hit):
                rows.append(dict(metric=f"Table 6 {model} {n}: dynakv latency (ms)", paper=f"{v}",
                                 ours=f"{hit['latency_s'].iloc[0] * 1e3:.1f} (a step)"))
    return pd.DataFrame(rows)
