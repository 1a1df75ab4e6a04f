"""A scenario file (docs/scenarios.md): its TOML read and checked, every error naming the file and the
key, into a Scenario: apps and their regions, the switch pattern, the LLM and its sessions."""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field

import numpy as np

from ...core.data import APPS
from ...core.errors import InputError
from ...core.limits import (MAX_APP_SCALE, MAX_LAYERS, MAX_MEM_BYTES, MAX_PATHS, MAX_SCENARIO_BYTES, MAX_SECONDS,
                            MAX_SESSIONS, MAX_TOKENS)
from ...core.paths import input_file
from ...core.trace import PageClass
from ...core.units import PAGE_SIZE, parse_size
from ...engine import managers
from ...engine.managers import llms, mzcache
from ..llama import experts, routing

NS = 1_000_000_000
MB = 1 << 20

PATTERNS = ("random", "markov", "gaussian", "round")

# LLMS Table 3: "delta length" = context growth per callLLM(), in tokens (k = 1000).
TASKS = {
    "agnews": (200, 500),          # News classification, AGnews 0.2k-0.5k
    "xsum": (1000, 2000),          # Document summary, Xsum 1k-2k
    "samsum": (100, 300),          # Chat history summary, Samsum 0.1k-0.3k
    "cnn_dailymail": (500, 1000),  # Text comprehension, cnn_dailymail 0.5-1k
    "wmt17": (100, 500),           # Translation, WMT17-de-en 0.1k-0.5k
    "sst2": (10, 100),             # Sentiment, SST-2 0.01k-0.1k
}

# Android's ProcessList oom_score_adj values (lmkd kills the highest first).
DEFAULT_ADJ = {"foreground": 0, "visible": 100, "perceptible": 200, "previous": 700,
               "cached": 900, "cached_max": 999}

CLASSES = {c.name.lower(): c for c in PageClass}
LOAD_MODES = ("mmap", "mmap+mlock", "none")
KV_TYPES = tuple(managers.KV_TYPES)
ENGINES = ("llama.cpp", "mzcache", "llms")   # the LLM app's engine (llm.engine)
APP_PID0 = 10000      # app pids: 10000, 10001, ... (a relaunch after a kill gets a new pid)
LLM_PID = 2000


# ------------------------------------------------------------------------------------------------
# Validation helpers: every error names the file and the key.

class _T:
    """One TOML table being validated: typed getters, and `done()` rejects unknown keys."""
    _REQ = object()

    def __init__(self, d, where, file):
        if not isinstance(d, dict):
            raise InputError(f"{file}: {where or 'top level'} must be a table, got {_tname(d)}")
        self.d, self.where, self.file, self.used = d, where, file, set()

    def key(self, k):
        return f"{self.where}.{k}" if self.where else k

    def err(self, k, msg):
        return InputError(f"{self.file}: {self.key(k)}: {msg}")

    def has(self, k):
        return k in self.d

    def get(self, k, kind, default=_REQ, *, lo=None, hi=None, choices=None):
        self.used.add(k)
        if k not in self.d:
            if default is _T._REQ:
                raise InputError(f"{self.file}: missing key {self.key(k)!r}")
            return default
        v = self.d[k]
        if kind == "num":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise self.err(k, f"expected a number, got {_tname(v)} {v!r}")
        elif kind == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise self.err(k, f"expected an integer, got {_tname(v)} {v!r}")
            if not -(1 << 62) <= v <= 1 << 62 and hi is None:
                raise self.err(k, f"{v} is out of range")
        elif kind == "str":
            if not isinstance(v, str):
                raise self.err(k, f"expected a string, got {_tname(v)} {v!r}")
        elif kind == "bool":
            if not isinstance(v, bool):
                raise self.err(k, f"expected true or false, got {_tname(v)} {v!r}")
        elif kind == "list":
            if not isinstance(v, list):
                raise self.err(k, f"expected a list, got {_tname(v)} {v!r}")
        elif kind == "table":
            if not isinstance(v, dict):
                raise self.err(k, f"expected a table, got {_tname(v)}")
        if choices is not None and v not in choices:
            raise self.err(k, f"unknown value {v!r}; expected one of {', '.join(map(str, choices))}")
        if lo is not None and v < lo:
            raise self.err(k, f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            raise self.err(k, f"must be <= {hi}, got {v}")
        return v

    def range(self, k, default=_REQ, *, lo=0, hi=None, integer=False):
        """A number or a [low, high] pair (uniform draw), finite and within [lo, hi]; returns (low, high)."""
        self.used.add(k)
        if k not in self.d:
            if default is _T._REQ:
                raise InputError(f"{self.file}: missing key {self.key(k)!r}")
            return default
        v = self.d[k]
        vals = v if isinstance(v, list) else [v, v]
        ok = len(vals) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    and math.isfinite(x) for x in vals)
        if ok and integer:
            ok = all(float(x).is_integer() for x in vals)
        if not ok:
            raise self.err(k, f"expected a {'whole ' if integer else ''}number or a [low, high] pair, got {v!r}")
        a, b = vals
        if a < lo or b < lo:
            raise self.err(k, f"must be >= {lo}, got {v!r}")
        if b < a:
            raise self.err(k, f"[low, high] with high < low: {v!r}")
        if hi is not None and b > hi:
            raise self.err(k, f"must be <= {hi:g}, got {v!r}")
        return (int(a), int(b)) if integer else (float(a), float(b))

    def table(self, k, default=_REQ):
        v = self.get(k, "table", default)
        return None if v is None else _T(v, self.key(k), self.file)

    def done(self):
        extra = sorted(set(self.d) - self.used)
        if extra:
            known = ", ".join(sorted(self.used))
            raise InputError(f"{self.file}: unknown key {self.key(extra[0])!r}"
                             + (f" (known here: {known})" if known else ""))


def _tname(v):
    return {dict: "table", list: "list", str: "string", bool: "boolean", int: "integer",
            float: "number"}.get(type(v), type(v).__name__)


def _pages(mb):
    return max(1, int(math.ceil(mb * MB / PAGE_SIZE)))


# ------------------------------------------------------------------------------------------------
# The parsed scenario.

@dataclass
class Region:
    name: str
    pages: int
    hot: float             # fraction touched at every switch-in
    churn: float           # fraction touched per foreground tick
    cls: PageClass = PageClass.HEAP
    path: str | None = None   # file regions only
    exec: bool = False


@dataclass
class AppDef:
    key: str
    name: str
    package: str
    anon: list
    files: list
    launch: float          # seconds of cold start
    tick: float            # seconds between touches while foreground
    background: str = "cached"   # adj class when not foreground: cached | visible | perceptible

    @property
    def pages(self):
        return sum(r.pages for r in self.anon + self.files)


@dataclass
class Session:
    name: str
    delta: tuple           # (lo, hi) tokens added per request
    system_prompt: int     # tokens prefilled at the first request
    created: float = 0.0   # newLLMCtx (LLMS Table 1): no call before it
    deleted: float | None = None   # delLLMCtx: no call from it on; LLMS frees the context

    def alive(self, t) -> bool:
        return self.created <= t and (self.deleted is None or t < self.deleted)


@dataclass
class LlmCfg:
    model: dict            # {"preset": ..., "type": ..., ...} or {"path": ...}
    ctx: int
    batch: int
    ubatch: int
    kv_type: str
    load_mode: str
    prefetch: bool
    paths: int             # speculative candidate paths = KV sequences
    decode: tuple
    start: float
    adj: int | None        # fixed oom_score_adj (a service); None: follows foreground like an app
    sessions: list
    arrival: str           # poisson | times | round | calls (explicit [t, session] pairs)
    mean_interval: float
    times: list
    count: int | None
    pattern: str
    stay: float
    matrix: list | None
    sigma: float | None
    prompt: int | None     # fixed prompt instead of session deltas (kv-prealloc style)
    kv_manager: str = managers.DEFAULT     # who keeps the KV cache (kmemsim.engine.managers)
    moe_routing: str = "uniform"           # an MoE model's routing (workload/llama/routing.py)
    calls: list = field(default_factory=list)   # arrival "calls": (seconds, session index)
    engine: str = "llama.cpp"              # the LLM app: llama.cpp on the CPU, or mzCache (its own memory)
    codec: str = "flexgen8"                # mzCache's KV codec
    arena_mlock: bool = True               # mzCache mlocks its compressed arenas (else zram may take them)
    trim_step: float = 0.25                # mzCache's eviction per onTrimMemory (the demo driver's step)
    service: str = "llms"                  # engine "llms": LLMS or one of its baselines (engine/managers/llms.py)
    budget: int = 3 << 30                  # engine "llms": the service's memory budget for resident chunks


@dataclass
class Scenario:
    file: str
    name: str
    seed: int
    duration: float
    apps: dict
    switch: dict
    events: list
    adj: dict
    llm: LlmCfg | None
    description: str = ""


def _parse_region(t: _T, kind):
    r = Region(name=t.get("name", "str"),
               pages=_pages(t.get("mb", "num", lo=0, hi=MAX_MEM_BYTES // MB)),
               hot=t.get("hot", "num", 1.0, lo=0, hi=1),
               churn=t.get("churn", "num", 0.05, lo=0, hi=1))
    if t.d.get("mb", 1) <= 0:
        raise t.err("mb", f"must be > 0, got {t.d['mb']}")
    if kind == "anon":
        r.cls = CLASSES[t.get("class", "str", "heap", choices=list(CLASSES))]
    else:
        r.path = t.get("path", "str")
        r.exec = t.get("exec", "bool", False)
    t.done()
    return r


def _parse_app(key, d, file, apps_dir):
    t = _T(d, f"apps.{key}", file)
    base = {}
    if t.has("from"):
        ref = t.get("from", "str")
        p = ref if os.path.isabs(ref) else os.path.join(apps_dir, ref if ref.endswith(".toml") else ref + ".toml")
        if not os.path.exists(p):
            raise t.err("from", f"no app definition {p}")
        base = _read_toml(p)
        file_for_base = p
    else:
        file_for_base = file
    merged = {**base, **{k: v for k, v in d.items() if k != "from"}}
    scale = merged.pop("scale", 1.0)
    if (isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale)
            or not 0 < scale <= MAX_APP_SCALE):
        raise t.err("scale", f"expected a number > 0 (at most {MAX_APP_SCALE:g}), got {scale!r}")
    src = file if base == {} else f"{file_for_base} (as apps.{key} in {file})"
    a = _T(merged, "" if base else f"apps.{key}", src)
    anon = [_parse_region(_T(r, f"{a.key('anon')}[{i}]", src), "anon")
            for i, r in enumerate(a.get("anon", "list", []))]
    files = [_parse_region(_T(r, f"{a.key('file')}[{i}]", src), "file")
             for i, r in enumerate(a.get("file", "list", []))]
    for r in anon + files:
        r.pages = max(1, int(round(r.pages * scale)))
    if not anon and not files:
        raise InputError(f"{src}: app {key!r} has neither [[anon]] nor [[file]] regions")
    app = AppDef(key=key, name=a.get("name", "str", key), package=a.get("package", "str", key),
                 anon=anon, files=files, launch=a.get("launch", "num", 1.0, lo=0, hi=MAX_SECONDS),
                 tick=a.get("tick", "num", 1.0, lo=0.01, hi=MAX_SECONDS),
                 background=a.get("background", "str", "cached",
                                  choices=("cached", "visible", "perceptible")))
    a.get("description", "str", "")
    a.done()
    return app


def _read_toml(path):
    input_file(path, expected="scenario .toml file")
    if os.path.getsize(path) > MAX_SCENARIO_BYTES:
        raise InputError(f"{path}: {os.path.getsize(path):,} bytes; a scenario file is a few KiB "
                         f"(at most {MAX_SCENARIO_BYTES:,} bytes)")
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file")
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e})")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start}); TOML files are UTF-8")
    except RecursionError:
        raise InputError(f"{path}: not valid TOML (nested too deeply)")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a scenario .toml file")


def _apply_override(raw, spec, file):
    """`--set llm.paths=8`: set a (dotted) key; the value is parsed as TOML, else taken as a string."""
    if "=" not in spec:
        raise InputError(f"--set {spec!r}: expected KEY=VALUE, e.g. llm.paths=8")
    key, val = spec.split("=", 1)
    try:
        v = tomllib.loads(f"v = {val}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        v = val
    parts = key.strip().split(".")
    d = raw
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise InputError(f"{file}: --set {key}: {p!r} is not a table")
    d[parts[-1]] = v


def load(path, overrides=()) -> Scenario:
    """Parse and validate a scenario file; `overrides` are `KEY=VALUE` strings (`--set`)."""
    path = str(path)
    raw = _read_toml(path)
    for o in overrides:
        _apply_override(raw, o, path)
    return parse(raw, path)


def parse(raw: dict, path="<scenario>") -> Scenario:
    t = _T(raw, "", path)
    base_dir = os.path.dirname(os.path.abspath(path))
    apps_dir = t.get("apps_dir", "str", None)
    if apps_dir is None:
        # beside the scenario (as the bundled ones are), else the bundled apps (a user's own file)
        cand = [os.path.join(base_dir, "..", "apps"), os.path.join(base_dir, "apps"), str(APPS)]
        apps_dir = next((c for c in cand if os.path.isdir(c)), cand[0])
    elif not os.path.isabs(apps_dir):
        apps_dir = os.path.join(base_dir, apps_dir)
    name = t.get("name", "str", os.path.splitext(os.path.basename(path))[0])
    seed = t.get("seed", "int", lo=0)
    duration = t.get("duration", "num", lo=0, hi=MAX_SECONDS)
    if duration <= 0:
        raise t.err("duration", f"must be > 0 seconds, got {duration}")
    description = t.get("description", "str", "")

    at = t.table("apps", {})
    apps = {}
    for k in at.d:
        at.used.add(k)
        apps[k] = _parse_app(k, at.d[k], path, apps_dir)
    if "llm" in apps:
        raise at.err("llm", "the name 'llm' is reserved for the LLM process")

    adj = dict(DEFAULT_ADJ)
    jt = t.table("oom_score_adj", {})
    for k in list(jt.d):
        adj[k] = jt.get(k, "int", lo=-1000, hi=1000)
    jt.done()

    llm = _parse_llm(t.table("llm"), path) if t.has("llm") else None
    sw = _parse_switch(t.table("switch", {}), apps, llm, path)

    events = []
    for i, e in enumerate(t.get("event", "list", [])):
        et = _T(e, f"event[{i}]", path)
        ev = {"t": et.get("t", "num", lo=0, hi=MAX_SECONDS),
              "action": et.get("action", "str", choices=("launch", "kill", "idle"))}
        if ev["action"] in ("launch", "kill"):
            ev["app"] = et.get("app", "str")
            if ev["app"] not in apps:
                raise et.err("app", f"unknown app {ev['app']!r}; apps: {', '.join(apps) or 'none'}")
        else:
            ev["duration"] = et.get("duration", "num", lo=0, hi=MAX_SECONDS)
        et.done()
        events.append(ev)
    events.sort(key=lambda e: e["t"])
    t.done()
    if not apps and llm is None:
        raise InputError(f"{path}: a scenario needs [apps] or [llm] (it has neither)")
    return Scenario(file=path, name=name, seed=seed, duration=duration, apps=apps, switch=sw,
                    events=events, adj=adj, llm=llm, description=description)


def _parse_matrix(t: _T, k, n, names):
    m = t.get(k, "list", None)
    if m is None:
        return None
    try:
        a = np.array(m, dtype=float)
    except (ValueError, TypeError, OverflowError):
        raise t.err(k, "expected a list of lists of numbers")
    if a.shape != (n, n):
        raise t.err(k, f"expected a {n}x{n} matrix (order: {', '.join(names)}), got shape {a.shape}")
    if not np.isfinite(a).all():
        raise t.err(k, "entries must be finite numbers (no nan or inf)")
    if (a < 0).any() or (a.sum(1) <= 0).any():
        raise t.err(k, "entries must be >= 0 and every row must have a positive sum")
    return (a / a.sum(1, keepdims=True)).tolist()


def _load_mode(t: _T) -> str:
    """llm.load_mode: one of LOAD_MODES, or an MoE model's expert paging (page-cache, willneed,
    direct:SLOTS, pin-hot:N, cold:T: checked against the model when the session is built); and
    llm.moe_routing checked as --moe-routing is."""
    v = t.get("load_mode", "str", "mmap")
    if v not in LOAD_MODES and not experts.is_moe_mode(v):
        raise t.err("load_mode", f"{v!r}: choose one of {', '.join(LOAD_MODES)} or {', '.join(experts.MOE_MODES)}")
    routing.parse(t.get("moe_routing", "str", "uniform"))
    return v


def _sigma(t: _T):
    """A Gaussian pattern's width: > 0 (at 0 every weight is exp(-inf): no distribution at all)."""
    v = t.get("sigma", "num", None, lo=0)
    if v is not None and v <= 0:
        raise t.err("sigma", f"must be > 0, got {v}")
    return v


def _parse_switch(t: _T, apps, llm, path):
    names = list(apps)
    sw = {"pattern": t.get("pattern", "str", "random", choices=PATTERNS)}
    sw["apps"] = t.get("apps", "list", names)
    for a in sw["apps"]:
        if a not in apps:
            raise t.err("apps", f"unknown app {a!r}; apps: {', '.join(names) or 'none'}")
    sw["start"] = t.get("start", "num", 0.0, lo=0, hi=MAX_SECONDS)
    sw["gap"] = t.get("gap", "num", 1.0, lo=0, hi=MAX_SECONDS)
    sw["dwell"] = t.range("dwell", (20.0, 20.0), lo=0, hi=MAX_SECONDS)
    sw["prelaunch"] = t.get("prelaunch", "list", [])
    for a in sw["prelaunch"]:
        if a not in apps:
            raise t.err("prelaunch", f"unknown app {a!r}; apps: {', '.join(names) or 'none'}")
    n = len(sw["apps"])
    sw["stay"] = t.get("stay", "num", 0.5, lo=0, hi=1)
    sw["matrix"] = _parse_matrix(t, "matrix", n, sw["apps"])
    sw["sigma"] = _sigma(t)
    sw["center"] = t.get("center", "num", None, lo=0)
    # round (mzCache Fig 15)
    sw["rounds"] = t.get("rounds", "int", 10, lo=1)
    sw["period"] = t.get("period", "num", 275.0, lo=0, hi=MAX_SECONDS)
    sw["visit"] = t.get("visit", "num", 5.0, lo=0, hi=MAX_SECONDS)
    sw["return_wait"] = t.get("return_wait", "num", 25.0, lo=0, hi=MAX_SECONDS)
    sw["send_delay"] = t.get("send_delay", "num", 1.5, lo=0, hi=MAX_SECONDS)
    orders = t.get("orders", "list", None)
    dw = t.table("dwell_of", {})
    sw["dwell_of"] = {}
    for k in dw.d:
        if k not in apps:
            raise dw.err(k, f"unknown app; apps: {', '.join(names)}")
        sw["dwell_of"][k] = dw.get(k, "num", lo=0, hi=MAX_SECONDS)
    dw.done()
    if sw["pattern"] == "round":
        if orders is None:
            raise InputError(f"{path}: switch.pattern = \"round\" needs switch.orders "
                             "(a list of rounds, each a list of app names or \"visit\")")
        if not orders or not all(isinstance(o, list) and o for o in orders):
            raise t.err("orders", "expected a non-empty list of non-empty lists of app names")
        for o in orders:
            for a in o:
                if a != "visit" and a not in apps:
                    raise t.err("orders", f"unknown app {a!r}; apps: {', '.join(names)} (or \"visit\")")
                if a == "visit" and llm is None:
                    raise t.err("orders", "\"visit\" foregrounds the LLM app but there is no [llm]")
    elif not sw["apps"] and names:
        raise t.err("apps", "empty list: name at least one app to switch between")
    sw["orders"] = orders
    t.done()
    return sw


def _parse_llm(t: _T, path) -> LlmCfg:
    mt = t.table("model")
    if mt.has("path") == mt.has("preset"):
        raise InputError(f"{path}: llm.model needs exactly one of path = \"file.gguf\" or "
                         "preset = \"NAME\" (e.g. model = {{ preset = \"Qwen3-0.6B\", type = \"q4_0\" }})")
    model = dict(mt.d)
    if mt.has("path"):
        p = mt.get("path", "str")
        if not os.path.isabs(p):
            p = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), p))
        if not os.path.exists(p):
            raise mt.err("path", f"no such model file {p}")
        model["path"] = p
        mt.done()
    else:
        mt.get("preset", "str")
        mt.get("type", "str", "q8_0")      # synth.layout_from_preset checks the name and type
        mt.get("layers", "int", None, lo=1, hi=MAX_LAYERS)
        for k in mt.d:                     # other keys go to synth.layout_from_preset as they are
            mt.used.add(k)
    ctx = t.get("ctx", "int", lo=1, hi=MAX_TOKENS)
    batch = t.get("batch", "int", 512, lo=1, hi=MAX_TOKENS)
    ubatch = t.get("ubatch", "int", min(512, batch), lo=1, hi=MAX_TOKENS)
    sessions = []
    for i, s in enumerate(t.get("session", "list", [])):
        st = _T(s, f"llm.session[{i}]", path)
        nm = st.get("name", "str", f"s{i}")
        if st.has("task") and st.has("delta"):
            raise st.err("delta", "give either task or delta, not both")
        if st.has("delta"):
            delta = st.range("delta", integer=True, lo=1, hi=MAX_TOKENS)
        else:
            task = st.get("task", "str", "samsum", choices=list(TASKS))
            delta = TASKS[task]
        created = st.get("created", "num", 0.0, lo=0, hi=MAX_SECONDS)
        deleted = st.get("deleted", "num", None, lo=0, hi=MAX_SECONDS)
        if deleted is not None and deleted <= created:
            raise st.err("deleted", f"a context is deleted after it is created ({created} s), got {deleted} s")
        sessions.append(Session(nm, delta, st.get("system_prompt", "int", 0, lo=0, hi=MAX_TOKENS), created, deleted))
        st.done()
    nsess = t.get("sessions", "int", None, lo=1, hi=MAX_SESSIONS)
    if nsess is not None:                  # `sessions = N`: N sessions cycling through the tasks
        if sessions:
            raise t.err("sessions", "give either sessions = N or [[llm.session]] tables, not both")
        tasks = list(TASKS)
        sessions = [Session(f"s{i}", TASKS[tasks[i % len(tasks)]], 0) for i in range(nsess)]
    prompt = t.get("prompt", "int", None, lo=1, hi=MAX_TOKENS)
    if not sessions:
        sessions = [Session("s0", (prompt, prompt) if prompt else TASKS["samsum"], 0)]
    rq = t.table("requests", {})
    arrival = rq.get("arrival", "str", "poisson", choices=("poisson", "times", "round", "calls"))
    cfg = LlmCfg(
        model=model, ctx=ctx, batch=batch, ubatch=ubatch,
        kv_type=t.get("kv_type", "str", "f16", choices=KV_TYPES),
        kv_manager=t.get("kv_manager", "str", managers.DEFAULT, choices=managers.names()),
        engine=t.get("engine", "str", "llama.cpp", choices=ENGINES),
        codec=t.get("codec", "str", "flexgen8", choices=tuple(mzcache.CODECS)),
        arena_mlock=t.get("arena_mlock", "bool", True),
        trim_step=t.get("trim_step", "num", 0.25, lo=0, hi=1),
        service=t.get("service", "str", "llms", choices=tuple(llms.SYSTEMS)),
        budget=parse_size(t.get("budget", "str", "3G"), "llm.budget"),
        load_mode=_load_mode(t),
        moe_routing=t.get("moe_routing", "str", "uniform"),
        prefetch=t.get("prefetch", "bool", False),
        paths=t.get("paths", "int", 1, lo=1, hi=MAX_PATHS),
        decode=t.range("decode", (32, 32), integer=True, lo=1, hi=MAX_TOKENS),
        start=t.get("start", "num", 0.0, lo=0, hi=MAX_SECONDS),
        adj=t.get("oom_score_adj", "int", None, lo=-1000, hi=1000),
        sessions=sessions, arrival=arrival,
        mean_interval=rq.get("mean_interval", "num", 300.0, lo=0, hi=MAX_SECONDS),
        times=rq.get("times", "list", []),
        count=rq.get("count", "int", None, lo=0),
        pattern=rq.get("pattern", "str", "random", choices=("random", "markov", "gaussian")),
        stay=rq.get("stay", "num", 0.5, lo=0, hi=1),
        matrix=_parse_matrix(rq, "matrix", len(sessions), [s.name for s in sessions]),
        sigma=_sigma(rq),
        prompt=prompt)
    if cfg.mean_interval <= 0 and arrival == "poisson":
        raise rq.err("mean_interval", "must be > 0 seconds")
    cfg.calls = []
    if arrival == "calls":                 # explicit callLLM()s: [seconds, "session"] each
        names = [x.name for x in sessions]
        for j, c in enumerate(rq.get("calls", "list", [])):
            if (not isinstance(c, list) or len(c) != 2 or isinstance(c[0], bool)
                    or not isinstance(c[0], (int, float)) or not 0 <= c[0] <= MAX_SECONDS
                    or not isinstance(c[1], str)):
                raise rq.err("calls", f"call {j}: expected [seconds, \"session\"], got {c!r}")
            if c[1] not in names:
                raise rq.err("calls", f"call {j}: unknown session {c[1]!r}; sessions: {', '.join(names)}")
            se = sessions[names.index(c[1])]
            if se.deleted is not None and c[0] >= se.deleted:
                raise rq.err("calls", f"call {j} at {c[0]} s switches to {c[1]!r}, deleted at {se.deleted} s "
                             "(delLLMCtx): call a live context")
            if c[0] < se.created:
                raise rq.err("calls", f"call {j} at {c[0]} s switches to {c[1]!r} before it is created "
                             f"({se.created} s, newLLMCtx)")
            cfg.calls.append((float(c[0]), names.index(c[1])))
        if not cfg.calls:
            raise rq.err("calls", 'arrival = "calls" needs a non-empty list of [seconds, "session"]')
    if arrival == "times":
        if not cfg.times:
            raise rq.err("times", "arrival = \"times\" needs a non-empty list of seconds")
        for x in cfg.times:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= MAX_SECONDS:
                raise rq.err("times", f"expected seconds in 0..{MAX_SECONDS:g}, got {x!r}")
    if ubatch > batch:
        raise t.err("ubatch", f"must be <= batch ({batch}), got {ubatch}")
    if cfg.engine == "llms":              # LLMS keeps its contexts' KV itself
        for k, ok, what in (("paths", cfg.paths == 1, "paths = 1"),
                            ("kv_manager", cfg.kv_manager == managers.DEFAULT, "the default kv_manager (LLMS is its own)")):
            if not ok:
                raise t.err(k, f'engine = "llms" takes {what}')
    if cfg.engine == "mzcache":           # mzCache holds one context, fp16 KV chunks, its own loader
        for k, ok, what in (("sessions", len(sessions) == 1, "one session"), ("paths", cfg.paths == 1, "paths = 1"),
                            ("kv_type", cfg.kv_type == "f16", 'kv_type = "f16" (its raw chunks; codec compresses)'),
                            ("kv_manager", cfg.kv_manager == managers.DEFAULT, "the default kv_manager (mzCache is its own)")):
            if not ok:
                raise t.err(k, f'engine = "mzcache" takes {what}')
    smallest = min(s.delta[0] + s.system_prompt for s in sessions) + cfg.decode[0]
    if smallest > ctx:
        raise t.err("ctx", f"{ctx} tokens cannot hold even the smallest request ({smallest} tokens "
                    "of prompt + decode)")
    rq.done()
    t.done()
    return cfg
