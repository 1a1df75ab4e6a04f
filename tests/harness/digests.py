"""Digests of many replays, to show a refactor changed no result (issue 7: "bit-identical results").

    python tests/harness/digests.py -o before.json [--grid DIR]
    python tests/harness/digests.py -o after.json [--grid DIR] --against before.json

Each case is one replay (or one generated trace): its digest is a SHA-256 over the trace's columns
and metadata and the Result's summary, timeline, per-phase, per-process, files and page states.
Cases: every policy on every bundled scenario (under two devices), llama.cpp workloads of synthetic
models in several shapes and modes under two limits, hypothesis-drawn traces and configurations
(derandomised: the same draws every run), libCacheSim id traces, and, with --grid, `kmemsim
predict` re-run on a validation grid's stored live runs with the inputs validate gives it (each
limit's engine baseline, the model's probe and warm set, DIR's device profile): recorded and
unrecorded, over the kernel's flush phases, and the ±1% heap band.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

try:                                           # the flat package before issue 7
    from kmemsim.emulator import Config, Emulator, known_policies
    from kmemsim.trace import Trace
    from kmemsim import device as devmod
    from kmemsim.trace import TraceBuilder, Op, MapFlag, Advice, PageClass
    from kmemsim import llama_workload as lw
    from kmemsim.libcachesim_io import ids_to_trace
    from kmemsim.synth import layout_from_preset
    from kmemsim.compare import base_config, workload_from_scenario
    from kmemsim import predict as P
    POLICIES = known_policies()
except ImportError:                            # its folders
    from kmemsim.engine import POLICIES, Config, Emulator
    from kmemsim.core.trace import Trace
    from kmemsim.engine.time import device as devmod
    from kmemsim.workload import llama as lw
    from kmemsim.workload.libcachesim_io import ids_to_trace
    from kmemsim.workload.synth import layout_from_preset
    from kmemsim.report.compare import base_config, workload_from_scenario
    from kmemsim.validate import predict as P
from kmemsim.core.errors import InputError


def _h(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str(p.dtype).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        elif isinstance(p, pd.DataFrame):
            h.update(json.dumps([str(c) for c in p.columns]).encode())
            h.update(json.dumps([str(i) for i in p.index]).encode())
            for c in p.columns:
                col = p[c]
                if not (pd.api.types.is_numeric_dtype(col) or pd.api.types.is_bool_dtype(col)):
                    h.update(json.dumps([str(v) for v in col]).encode())   # object or string: by value
                else:
                    h.update(str(col.dtype).encode())
                    h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
        else:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def trace_digest(tr) -> str:
    """The events: the columns the core replays (the metadata is digested apart, meta_digest)."""
    return _h(*[tr.cols[k] for k in sorted(tr.cols)])


# metadata keys added since the harness was first run, left out so the rest is compared: the KV
# manager a llama session's cache was kept by (issue 7)
ADDED_META = {"kv_manager"}


def meta_digest(tr) -> str:
    meta = dict(tr.meta)
    if "llama" in meta:
        meta["llama"] = [{k: v for k, v in m.items() if k not in ADDED_META} for m in meta["llama"]]
    return _h(meta)


def result_digest(r) -> str:
    return _h(r.summary, r.timeline, r.per_phase, r.per_process, r.files,
              *[x for k in sorted(r.page_states) for x in (k, r.page_states[k])])


class Cases:
    def __init__(self):
        self.out = {}

    def add(self, name, value):
        if name in self.out:
            raise SystemExit(f"case {name} twice")
        self.out[name] = value

    def trace(self, name, tr):
        self.add(f"trace {name}", trace_digest(tr))
        self.add(f"meta {name}", meta_digest(tr))

    def replay(self, name, tr, cfg):
        try:
            self.add(name, result_digest(Emulator(cfg).replay(tr)))
        except InputError as e:     # a trace larger than this machine can emulate: its refusal is the case
            self.add(name, "refused: " + str(e).split(", more than")[0])


def scenarios(c: Cases):
    for path in sorted(glob.glob(os.path.join(ROOT, "workloads", "scenarios", "*.toml"))):
        name = os.path.basename(path)
        wl = workload_from_scenario(path)
        c.trace(f"scenario {name}", wl.trace)
        for dev in ("galaxy-s25plus", "xiaomi-14"):
            d = devmod.load(dev)
            cfg = base_config(d)
            for pol in POLICIES:
                c.replay(f"scenario {name} {dev} {pol}", wl.trace, Config(**{**cfg, "policy": pol}))


LLAMA = [  # (name, preset, type, layers, generate() keywords)
    ("qwen q4_0", "Qwen3-0.6B", "q4_0", 4, dict(prompt=96, decode=6, ctx=512)),
    ("llama q8_0 seqs2", "Llama-3.2-1B", "q8_0", 3, dict(prompt=64, decode=4, ctx=1024, seqs=2)),
    ("llama f16 fa", "Llama-3.2-1B", "f16", 2, dict(prompt=40, decode=5, ctx=512, flash_attn=True)),
    ("qwen q8 kvq8", "Qwen2.5-1.5B", "q8_0", 3, dict(prompt=300, decode=3, ctx=1024, kv_type="q8_0",
                                                     batch=128, ubatch=64)),
    ("mixtral moe zipf", "Mixtral-8x7B", "q4_0", 2, dict(prompt=20, decode=4, ctx=256, moe_routing="zipf:1.2")),
    ("llama nommap", "Llama-3.2-1B", "q4_0", 2, dict(prompt=32, decode=3, ctx=256, load_mode="none")),
    ("llama mlock 2req", "Llama-3.2-1B", "q8_0", 2, dict(prompt=32, decode=3, ctx=512, load_mode="mmap+mlock",
                                                         requests=2)),
    ("qwen3moe", "Qwen3-30B-A3B", "q4_0", 2, dict(prompt=16, decode=3, ctx=256)),
]


def llama(c: Cases):
    for name, preset, typ, layers, kw in LLAMA:
        L = layout_from_preset(preset, type=typ, layers=layers)
        for repack in ("none", "avx2"):
            tr = lw.generate(L, repack=repack, **kw)
            c.trace(f"llama {name} {repack}", tr)
            if repack == "avx2":
                continue
            size = L.file_size
            for frac in (0.5, 1.5):
                for pol in POLICIES:
                    cfg = Config(memcg_limit=max(1 << 20, int(size * frac)) // 4096 * 4096, zram="lz4:1G",
                                 policy=pol, threads=2 if frac < 1 else 1, io_latency_us=50, io_read_gbps=1.5,
                                 file_folio_us=2.0, swapout_us=10, swapin_us=5, stats_flush_ms=10)
                    c.replay(f"llama {name} {frac} {pol}", tr, cfg)


def hypothesis_traces(c: Cases, n=160):
    """The core-invariant test's strategies, drawn derandomised in a process of their own that imports
    nothing else (hypothesis' generation was seen to depend on what else the process had imported:
    the same draws on every run of one tree, other draws beside another set of modules)."""
    import pickle
    import subprocess
    prog = f"""
import pickle, sys
from dataclasses import asdict
sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
from hypothesis import HealthCheck, given, settings
import test_core_invariants as tci
got = []
@settings(max_examples={n}, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(tci.traces(), tci.configs())
def draw(trace, cfg):
    got.append((dict(trace.cols), trace.meta, asdict(cfg)))
draw()
sys.stdout.buffer.write(pickle.dumps(got))
"""
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, check=True).stdout
    for i, (cols, meta, cfg) in enumerate(pickle.loads(out)):
        tr = Trace(cols, meta)
        c.trace(f"hypothesis {i}", tr)
        c.replay(f"hypothesis {i} {cfg['policy']}", tr, Config(**cfg))


def libcachesim(c: Cases):
    rng = np.random.default_rng(7)
    loop = np.tile(np.arange(3000), 4)
    zipf = rng.zipf(1.3, 12000) % 5000
    for name, ids in (("loop", loop), ("zipf", zipf), ("mix", np.concatenate([loop, zipf]))):
        tr = ids_to_trace(ids.astype(np.int64), source=name)
        for pol in ("lru", "stock"):
            for pages in (500, 2500):
                c.replay(f"libcachesim {name} {pol} {pages}", tr, Config(mem=pages * 4096, policy=pol, sample_ms=0))


def grid(c: Cases, d):
    """predict on DIR's stored runs, as `kmemsim validate --reuse` re-runs it (validate.validate)."""
    for mdir in sorted(glob.glob(os.path.join(d, "*", "device-profile.toml"))):
        mdir = os.path.dirname(mdir)
        model = os.path.join(os.path.dirname(os.path.dirname(mdir)), "models", os.path.basename(mdir) + ".gguf")
        dev = devmod.load(os.path.join(mdir, "device-profile.toml"))
        with open(glob.glob(os.path.join(mdir, "*", "predicted.json"))[0]) as f:
            conf = json.load(f)["config"]
        args0 = (model, conf["prompt"], conf["decode"], conf["ctx"])
        rest = (conf["batch"], conf["ubatch"], conf["threads"], conf["zram"], conf["swappiness"])
        for ldir in sorted(glob.glob(os.path.join(mdir, "*", "engine-baseline.json"))):
            ldir = os.path.dirname(ldir)
            with open(os.path.join(ldir, "predicted.json")) as f:
                limit = json.load(f)["config"]["mem_limit_bytes"]
            with open(os.path.join(ldir, "engine-baseline.json")) as f:
                eng = json.load(f)
            probe = P_validate().llama_probe(model, conf["ctx"], conf["batch"], conf["ubatch"], conf["threads"])
            warm = P_validate().engine_warm_set(model, conf["prompt"], conf["ctx"], conf["batch"], conf["ubatch"],
                                                conf["threads"], P_validate().warm_steps(conf["decode"]))
            args = (*args0, limit, *rest)
            kw = dict(engine=eng, probe=probe, warm=warm, device=dev, keep_result=True)
            tag = f"grid {os.path.basename(mdir)} {os.path.basename(ldir)}"
            variants = [("recorded", dict(recorded=True, stats_flush_ms=10.0)),
                        ("unrecorded", dict(stats_flush_ms=P.FLUSH_TIME_MS))]
            variants += [(f"unrecorded phase {f}", dict(stats_flush_ms=P.FLUSH_TIME_MS,
                                                        stats_flush_phase_ms=f * P.FLUSH_TIME_MS))
                         for f in P.FLUSH_PHASES[1:]]
            variants += [(f"heap {f}", dict(recorded=True, stats_flush_ms=10.0,
                                            probe=dict(probe, anon_bytes=int(probe["anon_bytes"] * f))))
                         for f in (0.99, 1.01)]
            variants += [(f"policy {p}", dict(policy=p, stats_flush_ms=P.FLUSH_TIME_MS)) for p in ("is", "dw")]
            for vname, v in variants:
                r = P.predict(*args, **{**kw, **v})
                res, tr = r.pop("_result"), r.pop("_trace")
                c.trace(f"{tag} {vname}", tr)
                c.add(f"{tag} {vname}", result_digest(res))
                c.add(f"{tag} {vname} metrics", _h({k: v for k, v in r.items() if k != "config"}))


def P_validate():
    for name in ("kmemsim.validate.measure", "kmemsim.validate.run", "kmemsim.validate"):
        try:
            V = __import__(name, fromlist=["x"])
        except ImportError:
            continue
        if hasattr(V, "llama_probe"):
            return V


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--grid", help="a `make validate-grid` output directory (GRID/out)")
    ap.add_argument("--against", help="digests to compare with")
    ap.add_argument("--parts", default="scenarios,llama,hypothesis_traces,libcachesim",
                    help="which cases (comma-separated; --grid adds the grid's)")
    a = ap.parse_args()
    c = Cases()
    for part in (globals()[p] for p in a.parts.split(",")):
        t = time.time()
        part(c)
        print(f"{part.__name__}: {len(c.out)} cases so far ({time.time() - t:.1f} s)", flush=True)
    if a.grid:
        grid(c, a.grid)
        print(f"grid: {len(c.out)} cases", flush=True)
    replays = sum(1 for k in c.out if not k.startswith(("trace ", "meta ")))
    print(f"{replays} replays, {sum(1 for k in c.out if k.startswith('trace '))} traces")
    with open(a.out, "w") as f:
        json.dump(c.out, f, indent=0, sort_keys=True)
    if a.against:
        with open(a.against) as f:
            old = json.load(f)
        keys = set(old) | set(c.out) if a.parts == ap.get_default("parts") and a.grid else set(c.out)
        diff = sorted(k for k in keys if old.get(k) != c.out.get(k))
        for k in diff[:40]:
            print(f"DIFFERS: {k}: {old.get(k)} -> {c.out.get(k)}")
        print(f"{len(c.out)} cases, {len(diff)} differ")
        sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
