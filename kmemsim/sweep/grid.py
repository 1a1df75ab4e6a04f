"""A sweep's grid file, read and checked whole before anything runs or is written.

    workload = "model.gguf"            # or a scenario .toml; relative to the grid file
    metrics = ["major_faults", "ttft_s"]   # optional: compare's columns (default: all of them)

    [options]                          # optional: one value for every point
    zram = "zstd:1G"

    [axes]                             # the grid: each key one of compare's options, each value a list
    policy = ["stock", "is", "dw", "is+dw"]
    device = ["galaxy-s25plus", "oneplus-12"]
    mem = ["1G", "1536M", "2G"]
    ctx = [1024, 2048, 4096]

    [axes.set]                         # scenario overrides (compare's --set KEY=VALUE), lists too
    "llm.paths" = [1, 4]

    [plot]                             # optional: what the figures put where (default: chosen from the axes)
    x = "mem"; line = "policy"; facet = ["device", "ctx"]

Each point of the product of the axes is one replay, as `kmemsim compare WORKLOAD --policies POLICY
...` makes it. The trace depends only on the workload axes (WORKLOAD_KEYS, the `set.` keys), so a
sweep builds it once per distinct combination of those and shares it among the points."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import tomllib
from dataclasses import dataclass, field

from ..core.data import DEFAULT_DEVICE
from ..core.errors import InputError
from ..core.units import pad, parse_size
from ..engine import managers
from ..engine.kernel import POLICIES
from ..engine.time import device as devmod
from ..report import compare as cmpmod
from ..workload import scenario

# compare's options a point sets: name -> (type, where it goes)
REPLAY_KEYS = {"policy": str, "device": str, "mem": "size", "memcg_limit": "size", "zram": str,
               "swappiness": int, "policy_param": int}
MODEL_KEYS = {"prompt": int, "decode": int, "ctx": int, "paths": int, "requests": int}
WORKLOAD_KEYS = {**MODEL_KEYS, "kv_manager": str, "seed": int}
KEYS = {**REPLAY_KEYS, **WORKLOAD_KEYS}
# compare's defaults for a model (kmemsim compare --help)
MODEL_DEFAULTS = {"prompt": 256, "decode": 32, "ctx": 4096, "paths": 1, "requests": 1}
METRICS = [c for c in cmpmod.COLUMNS if c != "policy"]
VS_STOCK = [c for c in METRICS if c.endswith("_vs_stock_pct")]
TOP = {"workload", "metrics", "options", "axes", "plot"}


@dataclass
class Grid:
    path: str                 # the grid file
    workload: str             # the model or scenario, absolute
    kind: str                 # "model" or "scenario"
    fingerprint: str          # of the workload file: a changed file makes every point new
    axes: dict                # name -> list of values, in the file's order ("set.KEY" for scenario keys)
    options: dict             # name -> one value
    metrics: list
    plot: dict = field(default_factory=dict)
    points: list = field(default_factory=list)   # dicts: axis -> value, in product order

    def settings(self, point) -> dict:
        """Everything that makes the point's replay: options, then the point's axes."""
        return {**self.options, **point}

    def key(self, point) -> str:
        """The point's name in DIR: a digest of its settings and the workload's fingerprint."""
        s = json.dumps({"workload": self.fingerprint, **self.settings(point)}, sort_keys=True, default=str)
        return hashlib.sha1(s.encode()).hexdigest()[:16]

    def workload_spec(self, point) -> tuple:
        """What the trace depends on, hashable: equal specs share one trace."""
        s = self.settings(point)
        return tuple(sorted((k, v) for k, v in s.items() if k in WORKLOAD_KEYS or k.startswith("set.")))


def fingerprint(path) -> str:
    """A scenario's bytes; a model's size, mtime and first MiB (models are large, their layout is in
    the header)."""
    h = hashlib.sha256()
    st = os.stat(path)
    with open(path, "rb") as f:
        if path.endswith(".toml"):
            h.update(f.read())
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
            h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def toml_value(v) -> str:
    """v written as a TOML value, for a scenario's `--set KEY=VALUE`."""
    return json.dumps(v)


def _check_value(name, v, where):
    kind = KEYS.get(name)
    if name.startswith("set."):
        if isinstance(v, dict):
            raise InputError(f"{where}: {name} takes plain values, not tables")
        return v
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{where}: {name} takes whole numbers, got {v!r}")
        if name in MODEL_KEYS and v < 1:
            raise InputError(f"{where}: {name} must be at least 1, got {v}")
        if name == "seed" and v < 0:
            raise InputError(f"{where}: seed must be >= 0, got {v}")
        if name == "swappiness" and not 0 <= v <= 200:
            raise InputError(f"{where}: swappiness {v} is outside 0..200")
        return v
    if kind == "size":
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise InputError(f"{where}: {name} takes sizes like \"2G\" or bytes, got {v!r}")
        parse_size(v, f"{where}: {name}")
        return v
    if not isinstance(v, str) or not v:
        raise InputError(f"{where}: {name} takes names (strings), got {v!r}")
    return v


def _flatten(d, prefix="set."):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _known(name, where):
    if name not in KEYS:
        raise InputError(f"{where}: unknown axis {name!r}; known: {', '.join(KEYS)}, and scenario keys "
                         "under [axes.set]")


def load(path) -> Grid:
    """The grid file checked whole: keys, values, the workload, every device, policy, size and
    scenario override each point would use; an InputError names the first thing wrong."""
    path = str(path)
    if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
        raise InputError(f"{path}: not a regular file")
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a grid file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not TOML: {e}") from None
    bad = set(raw) - TOP
    if bad:
        raise InputError(f"{path}: unknown key {sorted(bad)[0]!r}; a grid has {', '.join(sorted(TOP))}")
    wl = raw.get("workload")
    if not isinstance(wl, str) or not wl:
        raise InputError(f"{path}: workload = \"MODEL.gguf\" or \"SCENARIO.toml\" is missing")
    wl = wl if os.path.isabs(wl) else os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), wl))
    if not os.path.exists(wl):
        raise InputError(f"{path}: workload {wl}: no such file")
    if not os.path.isfile(wl):
        raise InputError(f"{path}: workload {wl}: not a regular file")
    kind = {".gguf": "model", ".toml": "scenario"}.get(os.path.splitext(wl)[1])
    if kind is None:
        raise InputError(f"{path}: workload {wl}: expected a model (.gguf) or a scenario (.toml)")

    axes_raw = raw.get("axes")
    if not isinstance(axes_raw, dict) or not axes_raw:
        raise InputError(f"{path}: no [axes]: a grid needs at least one axis (e.g. policy = [\"stock\", \"is\"])")
    axes = {}
    for name, vals in axes_raw.items():
        if name == "set":
            if not isinstance(vals, dict) or not vals:
                raise InputError(f"{path}: [axes.set] holds scenario keys, each with a list of values")
            for k, v in _flatten(vals).items():
                axes[k] = v
            continue
        _known(name, f"{path}: [axes]")
        axes[name] = vals
    for name, vals in axes.items():
        where = f"{path}: axis {name}"
        if not isinstance(vals, list):
            raise InputError(f"{where}: takes a list of values (one value for every point goes under [options])")
        if not vals:
            raise InputError(f"{where}: is empty; give at least one value")
        for v in vals:
            _check_value(name, v, where)
        if len({json.dumps(v, sort_keys=True) for v in vals}) != len(vals):
            raise InputError(f"{where}: a value is listed twice")

    opts_raw = raw.get("options", {})
    if not isinstance(opts_raw, dict):
        raise InputError(f"{path}: [options] is a table of single values")
    options = {}
    for name, v in opts_raw.items():
        if name == "set":
            if not isinstance(v, dict):
                raise InputError(f"{path}: [options.set] holds scenario keys")
            options.update(_flatten(v))
            continue
        _known(name, f"{path}: [options]")
        if isinstance(v, list):
            raise InputError(f"{path}: option {name} takes one value (lists go under [axes])")
        options[name] = v
    for name, v in options.items():
        _check_value(name, v, f"{path}: option {name}")
        if name in axes:
            raise InputError(f"{path}: {name} is both an axis and an option")

    metrics = raw.get("metrics", METRICS)
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise InputError(f"{path}: metrics is a list of names: {', '.join(METRICS)}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise InputError(f"{path}: unknown metric {unknown[0]!r}; known: {', '.join(METRICS)}")

    names = list(axes)
    points = [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]
    g = Grid(path=os.path.abspath(path), workload=wl, kind=kind, fingerprint=fingerprint(wl), axes=axes,
             options=options, metrics=list(dict.fromkeys(metrics)), points=points)
    g.plot = _plot(raw.get("plot", {}), g, path)
    _check_points(g, path)
    return g


def _plot(p, g, path) -> dict:
    if not isinstance(p, dict):
        raise InputError(f"{path}: [plot] is a table: x, line, facet")
    bad = set(p) - {"x", "line", "facet"}
    if bad:
        raise InputError(f"{path}: [plot]: unknown key {sorted(bad)[0]!r}; known: x, line, facet")
    out = dict(p)
    if "facet" in out:
        f = out["facet"]
        out["facet"] = [f] if isinstance(f, str) else f
    for k, v in out.items():
        for name in ([v] if isinstance(v, str) else v if isinstance(v, list) else [None]):
            if name not in g.axes:
                raise InputError(f"{path}: [plot] {k} = {v!r}: not one of the axes ({', '.join(g.axes)})")
    return out


def _check_points(g: Grid, path):
    """What each point would do, checked as compare checks its options: the workload's kind, the
    device, policy, sizes and zram (base_config), the scenario overrides and KV managers."""
    keys = set(g.axes) | set(g.options)
    if g.kind == "scenario":
        wrong = sorted(keys & set(MODEL_KEYS))
        if wrong:
            raise InputError(f"{path}: {wrong[0]} applies to a model; for a scenario use its key under "
                             "[axes.set] (e.g. \"llm.ctx\")")
    elif any(k.startswith("set.") for k in keys):
        raise InputError(f"{path}: scenario keys ([axes.set]) apply to a scenario workload, not to a model")
    if "mem" in keys and "memcg_limit" in keys:
        raise InputError(f"{path}: give mem or memcg_limit, not both")
    for pol in {g.settings(p).get("policy", "stock") for p in g.points}:
        if pol not in POLICIES:
            raise InputError(f"{path}: unknown policy {pol!r}; known: {', '.join(POLICIES)}")
    for kv in {g.settings(p).get("kv_manager") for p in g.points} - {None}:
        managers.get(kv)
    devs = {}
    seen = set()
    for p in g.points:
        s = g.settings(p)
        dname = s.get("device", DEFAULT_DEVICE)
        if dname not in devs:
            devs[dname] = devmod.load(dname)
        rk = (dname,) + tuple(s.get(k) for k in ("mem", "memcg_limit", "zram", "swappiness", "policy_param"))
        if rk not in seen:
            seen.add(rk)
            cfg = replay_config(devs[dname], s)
            devs[dname].zram_algo(cfg.get("zram"))
    if g.kind == "scenario":
        for spec in {g.workload_spec(p) for p in g.points}:
            scenario.load(g.workload, scenario_overrides(dict(spec)))
    else:
        for spec in {g.workload_spec(p) for p in g.points}:
            kw = model_kwargs(dict(spec))
            # what the llama session refuses (workload/llama/session.py, request()), with compare's
            # context of ctx x paths, llama.cpp's n_ctx padded to 256 and split among the paths
            n_ctx = kw["ctx"] * kw["paths"]
            kv = pad(pad(n_ctx, 256) // kw["paths"], 256) if kw["paths"] > 1 else pad(n_ctx, 256)
            if kw["prompt"] > n_ctx or kw["prompt"] + kw["decode"] > kv:
                raise InputError(f"{path}: prompt {kw['prompt']} + decode {kw['decode']} do not fit ctx "
                                 f"{kw['ctx']} (a point of the grid); raise ctx or lower prompt, decode")


def replay_config(dev, s) -> dict:
    """compare's configuration of a point (kmemsim.report.compare.base_config)."""
    return cmpmod.base_config(dev, mem=s.get("mem"), memcg_limit=s.get("memcg_limit"), zram=s.get("zram"),
                              swappiness=s.get("swappiness"), policy_param=s.get("policy_param"))


def scenario_overrides(s) -> tuple:
    """A point's scenario `--set KEY=VALUE` items: its `set.` keys, and seed."""
    out = [f"{k[4:]}={toml_value(v)}" for k, v in s.items() if k.startswith("set.")]
    if "seed" in s:
        out.append(f"seed={int(s['seed'])}")
    return tuple(out)


def model_kwargs(s) -> dict:
    """A point's model options as compare takes them (its defaults where the grid says nothing)."""
    kw = {k: int(s.get(k, v)) for k, v in MODEL_DEFAULTS.items()}
    if "seed" in s:
        kw["seed"] = int(s["seed"])
    return kw
