"""Multitasking scenarios: apps switching in the foreground beside on-device LLM sessions.

A scenario is an editable TOML file (docs/scenarios.md; bundled ones in workloads/scenarios/). This
module parses and validates it, plans the timeline (which app is foreground when, when each LLM
request arrives and how long it is) and turns the plan into one Trace:

- every app is a process (PROC_START with its oom_score_adj, PROC_EXIT when killed), with its
  anonymous regions (MMAP anon, PageClass for zram) and file regions (MMAP of the APK, libraries,
  assets; files with the same path share one page cache);
- a cold start touches the app's whole working set (WRITE of anon heaps, READ of code/resources);
  a warm switch re-touches its hot part; while foreground the app touches a `churn` window of each
  region every `tick` seconds; backgrounded apps are idle (no events);
- lmkd priorities: oom_score_adj 0 foreground, 100 visible, 700 previous, 900+ cached (Android's
  ProcessList values); changes are SET_OOM_ADJ events on the app's pid;
- switch patterns Random, Markov, Gaussian (LLMS §2.6) or the fixed ten-app round (mzCache Fig 15,
  scripts/mzcache/record_demo_rounds.sh);
- LLM sessions (contexts) with Poisson request arrivals, delta lengths from LLMS Table 3, and N
  speculative candidate paths (N KV sequences) come from kmemsim.llama_workload.generate and are merged
  onto the same timeline.

Randomness comes only from numpy Generators seeded by the file's `seed`, so one file gives one trace.
Python loops here run per app, per switch and per request, never per page.
"""
from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field

import numpy as np

from .errors import InputError
from .trace import PAGE_SIZE, MapFlag, Op, PageClass, Trace, TraceBuilder

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
KV_TYPES = ("f16", "q8_0")
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

    def range(self, k, default=_REQ, *, lo=0, integer=False):
        """A number or a [low, high] pair (uniform draw); returns (low, high)."""
        self.used.add(k)
        if k not in self.d:
            if default is _T._REQ:
                raise InputError(f"{self.file}: missing key {self.key(k)!r}")
            return default
        v = self.d[k]
        vals = v if isinstance(v, list) else [v, v]
        ok = len(vals) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                    for x in vals)
        if ok and integer:
            ok = all(float(x).is_integer() for x in vals)
        if not ok:
            raise self.err(k, f"expected a {'whole ' if integer else ''}number or a [low, high] pair, got {v!r}")
        a, b = vals
        if a < lo or b < lo:
            raise self.err(k, f"must be >= {lo}, got {v!r}")
        if b < a:
            raise self.err(k, f"[low, high] with high < low: {v!r}")
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
    arrival: str           # poisson | times | round
    mean_interval: float
    times: list
    count: int | None
    pattern: str
    stay: float
    matrix: list | None
    sigma: float | None
    prompt: int | None     # fixed prompt instead of session deltas (kv-prealloc style)


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
               pages=_pages(t.get("mb", "num", lo=0)),
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
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
        raise t.err("scale", f"expected a number > 0, got {scale!r}")
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
                 anon=anon, files=files, launch=a.get("launch", "num", 1.0, lo=0),
                 tick=a.get("tick", "num", 1.0, lo=0.01),
                 background=a.get("background", "str", "cached",
                                  choices=("cached", "visible", "perceptible")))
    a.get("description", "str", "")
    a.done()
    return app


def _read_toml(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file")
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: not valid TOML ({e})")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a scenario .toml file")


def _apply_override(raw, spec, file):
    """`--set llm.paths=8`: set a (dotted) key; the value is parsed as TOML, else taken as a string."""
    if "=" not in spec:
        raise InputError(f"--set {spec!r}: expected KEY=VALUE, e.g. llm.paths=8")
    key, val = spec.split("=", 1)
    try:
        v = tomllib.loads(f"v = {val}")["v"]
    except tomllib.TOMLDecodeError:
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
        cand = [os.path.join(base_dir, "..", "apps"), os.path.join(base_dir, "apps")]
        apps_dir = next((c for c in cand if os.path.isdir(c)), cand[0])
    elif not os.path.isabs(apps_dir):
        apps_dir = os.path.join(base_dir, apps_dir)
    name = t.get("name", "str", os.path.splitext(os.path.basename(path))[0])
    seed = t.get("seed", "int", lo=0)
    duration = t.get("duration", "num", lo=0)
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
        adj[k] = jt.get(k, "int", lo=-1000, hi=1000, choices=None) if k in DEFAULT_ADJ else jt.get(k, "int")
    jt.done()

    llm = _parse_llm(t.table("llm"), path) if t.has("llm") else None
    sw = _parse_switch(t.table("switch", {}), apps, llm, path)

    events = []
    for i, e in enumerate(t.get("event", "list", [])):
        et = _T(e, f"event[{i}]", path)
        ev = {"t": et.get("t", "num", lo=0),
              "action": et.get("action", "str", choices=("launch", "kill", "idle"))}
        if ev["action"] in ("launch", "kill"):
            ev["app"] = et.get("app", "str")
            if ev["app"] not in apps:
                raise et.err("app", f"unknown app {ev['app']!r}; apps: {', '.join(apps) or 'none'}")
        else:
            ev["duration"] = et.get("duration", "num", lo=0)
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
    except (ValueError, TypeError):
        raise t.err(k, "expected a list of lists of numbers")
    if a.shape != (n, n):
        raise t.err(k, f"expected a {n}x{n} matrix (order: {', '.join(names)}), got shape {a.shape}")
    if (a < 0).any() or (a.sum(1) <= 0).any():
        raise t.err(k, "entries must be >= 0 and every row must have a positive sum")
    return (a / a.sum(1, keepdims=True)).tolist()


def _parse_switch(t: _T, apps, llm, path):
    names = list(apps)
    sw = {"pattern": t.get("pattern", "str", "random", choices=PATTERNS)}
    sw["apps"] = t.get("apps", "list", names)
    for a in sw["apps"]:
        if a not in apps:
            raise t.err("apps", f"unknown app {a!r}; apps: {', '.join(names) or 'none'}")
    sw["start"] = t.get("start", "num", 0.0, lo=0)
    sw["gap"] = t.get("gap", "num", 1.0, lo=0)
    sw["dwell"] = t.range("dwell", (20.0, 20.0), lo=0)
    sw["prelaunch"] = t.get("prelaunch", "list", [])
    for a in sw["prelaunch"]:
        if a not in apps:
            raise t.err("prelaunch", f"unknown app {a!r}; apps: {', '.join(names) or 'none'}")
    n = len(sw["apps"])
    sw["stay"] = t.get("stay", "num", 0.5, lo=0, hi=1)
    sw["matrix"] = _parse_matrix(t, "matrix", n, sw["apps"])
    sw["sigma"] = t.get("sigma", "num", None, lo=0)
    sw["center"] = t.get("center", "num", None, lo=0)
    # round (mzCache Fig 15)
    sw["rounds"] = t.get("rounds", "int", 10, lo=1)
    sw["period"] = t.get("period", "num", 275.0, lo=0)
    sw["visit"] = t.get("visit", "num", 5.0, lo=0)
    sw["return_wait"] = t.get("return_wait", "num", 25.0, lo=0)
    sw["send_delay"] = t.get("send_delay", "num", 1.5, lo=0)
    orders = t.get("orders", "list", None)
    dw = t.table("dwell_of", {})
    sw["dwell_of"] = {}
    for k in dw.d:
        if k not in apps:
            raise dw.err(k, f"unknown app; apps: {', '.join(names)}")
        sw["dwell_of"][k] = dw.get(k, "num", lo=0)
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
        mt.get("layers", "int", None, lo=1)
        for k in mt.d:                     # other keys go to synth.layout_from_preset as they are
            mt.used.add(k)
    ctx = t.get("ctx", "int", lo=1)
    batch = t.get("batch", "int", 512, lo=1)
    ubatch = t.get("ubatch", "int", min(512, batch), lo=1)
    sessions = []
    for i, s in enumerate(t.get("session", "list", [])):
        st = _T(s, f"llm.session[{i}]", path)
        nm = st.get("name", "str", f"s{i}")
        if st.has("task") and st.has("delta"):
            raise st.err("delta", "give either task or delta, not both")
        if st.has("delta"):
            delta = st.range("delta", integer=True, lo=1)
        else:
            task = st.get("task", "str", "samsum", choices=list(TASKS))
            delta = TASKS[task]
        sessions.append(Session(nm, delta, st.get("system_prompt", "int", 0, lo=0)))
        st.done()
    nsess = t.get("sessions", "int", None, lo=1)
    if nsess is not None:                  # `sessions = N`: N sessions cycling through the tasks
        if sessions:
            raise t.err("sessions", "give either sessions = N or [[llm.session]] tables, not both")
        tasks = list(TASKS)
        sessions = [Session(f"s{i}", TASKS[tasks[i % len(tasks)]], 0) for i in range(nsess)]
    prompt = t.get("prompt", "int", None, lo=1)
    if not sessions:
        sessions = [Session("s0", (prompt, prompt) if prompt else TASKS["samsum"], 0)]
    rq = t.table("requests", {})
    arrival = rq.get("arrival", "str", "poisson", choices=("poisson", "times", "round"))
    cfg = LlmCfg(
        model=model, ctx=ctx, batch=batch, ubatch=ubatch,
        kv_type=t.get("kv_type", "str", "f16", choices=KV_TYPES),
        load_mode=t.get("load_mode", "str", "mmap", choices=LOAD_MODES),
        prefetch=t.get("prefetch", "bool", False),
        paths=t.get("paths", "int", 1, lo=1, hi=64),
        decode=t.range("decode", (32, 32), integer=True, lo=1),
        start=t.get("start", "num", 0.0, lo=0),
        adj=t.get("oom_score_adj", "int", None, lo=-1000, hi=1000),
        sessions=sessions, arrival=arrival,
        mean_interval=rq.get("mean_interval", "num", 300.0, lo=0),
        times=rq.get("times", "list", []),
        count=rq.get("count", "int", None, lo=0),
        pattern=rq.get("pattern", "str", "random", choices=("random", "markov", "gaussian")),
        stay=rq.get("stay", "num", 0.5, lo=0, hi=1),
        matrix=_parse_matrix(rq, "matrix", len(sessions), [s.name for s in sessions]),
        sigma=rq.get("sigma", "num", None, lo=0),
        prompt=prompt)
    if cfg.mean_interval <= 0 and arrival == "poisson":
        raise rq.err("mean_interval", "must be > 0 seconds")
    if arrival == "times":
        if not cfg.times:
            raise rq.err("times", "arrival = \"times\" needs a non-empty list of seconds")
        for x in cfg.times:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
                raise rq.err("times", f"expected seconds >= 0, got {x!r}")
    if ubatch > batch:
        raise t.err("ubatch", f"must be <= batch ({batch}), got {ubatch}")
    smallest = min(s.delta[0] + s.system_prompt for s in sessions) + cfg.decode[0]
    if smallest > ctx:
        raise t.err("ctx", f"{ctx} tokens cannot hold even the smallest request ({smallest} tokens "
                    "of prompt + decode)")
    rq.done()
    t.done()
    return cfg


# ------------------------------------------------------------------------------------------------
# Choosing: the switch patterns of LLMS §2.6 (Random, Markov, Gaussian).

class Chooser:
    """Draws the next item (app or session index) by one of LLMS's switching patterns.

    random:   uniform over all items (a draw of the current item means "stay").
    markov:   first-order chain; row i of `matrix` is P(next | current = i). Without a matrix, the
              chain stays on the current (most recently used) item with probability `stay` and
              otherwise moves uniformly, so the recently used item is favoured.
    gaussian: independent draws with P(i) ∝ exp(-(x_i - c)^2 / 2σ^2), x_i = the item's size (mean
              delta length for sessions, footprint for apps), c = `center` (default: mean of x),
              σ = `sigma` (default: std of x): moderate-workload items are the likeliest.
    """

    def __init__(self, pattern, n, rng, *, stay=0.5, matrix=None, sizes=None, sigma=None, center=None):
        self.pattern, self.n, self.rng = pattern, n, rng
        self.cur = None
        if pattern == "markov":
            if matrix is not None:
                self.P = np.asarray(matrix, float)
            else:
                off = (1.0 - stay) / (n - 1) if n > 1 else 0.0
                self.P = np.full((n, n), off)
                np.fill_diagonal(self.P, stay if n > 1 else 1.0)
            self.cum = np.cumsum(self.P, axis=1)
        elif pattern == "gaussian":
            x = np.asarray(sizes, float)
            c = float(x.mean()) if center is None else center
            s = float(x.std()) if sigma is None else sigma
            w = np.ones(n) if s <= 0 else np.exp(-((x - c) ** 2) / (2 * s * s))
            if w.sum() <= 0:
                w = np.ones(n)
            self.p = w / w.sum()
            self.cum = np.cumsum(self.p)

    def next(self):
        u = self.rng.random()
        if self.pattern == "markov" and self.cur is not None:
            i = int(np.searchsorted(self.cum[self.cur], u * self.cum[self.cur][-1], side="right"))
        elif self.pattern == "gaussian":
            i = int(np.searchsorted(self.cum, u * self.cum[-1], side="right"))
        else:
            i = int(u * self.n)
        self.cur = min(i, self.n - 1)
        return self.cur


def sequence(pattern, n_items, n_draws, seed, **kw):
    """n_draws choices by a pattern (for tests and tools)."""
    ch = Chooser(pattern, n_items, np.random.default_rng(seed), **kw)
    return np.array([ch.next() for _ in range(n_draws)], np.int64)


# ------------------------------------------------------------------------------------------------
# The plan: slots of foreground time, requests, kills. Times in seconds.

@dataclass
class Slot:
    t0: float
    t1: float
    app: str               # app key, or "llm"
    request: bool = False  # the LLM slot at the end of a round sends a request (mzCache "Send")


@dataclass
class Request:
    t: float
    session: int
    delta: int
    decode: int


@dataclass
class Plan:
    slots: list
    requests: list
    events: list           # explicit launch/kill/idle events
    rounds: list = field(default_factory=list)   # round start times (round pattern)


def plan_dict(scn: Scenario, pl: Plan) -> dict:
    """The plan as plain JSON-able data (for `--plan` and for people)."""
    sess = scn.llm.sessions if scn.llm else []
    return {
        "scenario": scn.name, "seed": scn.seed, "duration_s": scn.duration,
        "slots": [{"t0": round(s.t0, 3), "t1": round(s.t1, 3), "app": s.app,
                   **({"request": True} if s.request else {})} for s in pl.slots],
        "requests": [{"t": round(q.t, 3), "session": sess[q.session].name, "delta": q.delta,
                      "decode": q.decode} for q in pl.requests],
        "events": pl.events,
        "rounds": [round(x, 3) for x in pl.rounds],
    }


def _rngs(seed):
    """Independent streams per concern, so adding requests does not move the app switches."""
    ss = np.random.SeedSequence(seed)
    return dict(zip(("switch", "dwell", "touch", "arrival", "session", "delta"),
                    (np.random.default_rng(s) for s in ss.spawn(6))))


def _skip_idle(t, idles):
    for a, b in idles:
        if a <= t < b:
            t = b
    return t


def plan(scn: Scenario) -> Plan:
    r = _rngs(scn.seed)
    sw = scn.switch
    idles = [(e["t"], e["t"] + e["duration"]) for e in scn.events if e["action"] == "idle"]
    slots, rounds = [], []
    llm = scn.llm
    llm_ready = llm.start if llm else 0.0

    def dwell_of(app):
        if app in sw["dwell_of"]:
            return sw["dwell_of"][app]
        lo, hi = sw["dwell"]
        return lo if hi == lo else float(r["dwell"].uniform(lo, hi))

    if sw["pattern"] == "round":
        t = max(sw["start"], llm_ready)
        for k in range(sw["rounds"]):
            t = _skip_idle(t, idles)
            if t >= scn.duration:
                break
            t_r0 = t
            rounds.append(t_r0)
            for a in sw["orders"][k % len(sw["orders"])]:
                d = sw["visit"] if a == "visit" else dwell_of(a)
                slots.append(Slot(t, t + d, "llm" if a == "visit" else a))
                t += d + sw["gap"]
            if llm is not None:      # return to the LLM app + Send, then RETURN_WAIT
                slots.append(Slot(t, t + sw["send_delay"] + sw["return_wait"], "llm", request=True))
                t += sw["send_delay"] + sw["return_wait"]
            if sw["period"] > 0:
                t = max(t, t_r0 + sw["period"])
    elif sw["apps"]:
        names = sw["apps"]
        sizes = [scn.apps[a].pages for a in names]
        ch = Chooser(sw["pattern"], len(names), r["switch"], stay=sw["stay"], matrix=sw["matrix"],
                     sizes=sizes, sigma=sw["sigma"], center=sw["center"])
        t = sw["start"]
        while True:
            t = _skip_idle(t, idles)
            if t >= scn.duration:
                break
            a = names[ch.next()]
            d = dwell_of(a)
            if slots and slots[-1].app == a and abs(slots[-1].t1 + sw["gap"] - t) < 1e-9:
                slots[-1].t1 = t + d          # drawing the current app again: it stays foreground
            else:
                slots.append(Slot(t, t + d, a))
            t += d + sw["gap"]
    slots = [s for s in slots if s.t0 < scn.duration]
    for s in slots:
        s.t1 = min(s.t1, scn.duration)

    reqs = []
    if llm is not None:
        if llm.arrival == "poisson":
            # LLMS §5.1: call times are a Poisson process, one request per 5 minutes on average.
            times, t = [], llm_ready
            while True:
                t += float(r["arrival"].exponential(llm.mean_interval))
                if t >= scn.duration or (llm.count is not None and len(times) >= llm.count):
                    break
                times.append(t)
        elif llm.arrival == "times":
            times = sorted(float(x) for x in llm.times if x < scn.duration)
        else:
            times = [s.t0 + sw["send_delay"] for s in slots if s.request]
        if llm.count is not None:
            times = times[:llm.count]
        sizes = [(s.delta[0] + s.delta[1]) / 2 for s in llm.sessions]
        ch = Chooser(llm.pattern, len(llm.sessions), r["session"], stay=llm.stay, matrix=llm.matrix,
                     sizes=sizes, sigma=llm.sigma)
        for t in times:
            i = ch.next()
            lo, hi = llm.sessions[i].delta
            d = int(r["delta"].integers(lo, hi + 1))
            dlo, dhi = llm.decode
            reqs.append(Request(t, i, d, int(r["delta"].integers(dlo, dhi + 1))))
    return Plan(slots, reqs, list(scn.events), rounds)


# ------------------------------------------------------------------------------------------------
# Apps → trace events.

class _AppProc:
    def __init__(self, app, pid):
        self.app, self.pid = app, pid
        self.maps = []      # (map id, Region, is_file)
        self.alive = True


class _AppSide:
    """Turns the plan's slots and events into app process events in one TraceBuilder."""

    def __init__(self, scn: Scenario, b: TraceBuilder, rng):
        self.scn, self.b, self.rng = scn, b, rng
        self.files = {}                 # path -> file id (one page cache per path)
        self.procs = {}                 # app key -> _AppProc (alive)
        self.next_pid = APP_PID0
        self.mru = []                   # app keys, most recently foreground first
        self.adj_now = {}

    def ns(self, t):
        return int(round(t * NS))

    def fid(self, r: Region):
        if r.path not in self.files:
            self.files[r.path] = self.b.file(r.path, r.pages)
        return self.files[r.path]

    def launch(self, t, key):
        app = self.scn.apps[key]
        pid = self.next_pid
        self.next_pid += 1
        p = _AppProc(app, pid)
        T = self.ns(t)
        self.b.process(T, pid, f"{app.name}", oom_score_adj=self.scn.adj["foreground"])
        self.b.phase(T, pid, f"launch {key}")
        for r in app.files:
            fl = MapFlag.READ | (MapFlag.EXEC if r.exec else 0)
            m = self.b.mmap(T, pid, f"{key}:{r.name}", r.pages, file=self.fid(r), flags=fl)
            p.maps.append((m, r, True))
        for r in app.anon:
            m = self.b.mmap(T, pid, f"{key}:{r.name}", r.pages, flags=MapFlag.READ | MapFlag.WRITE,
                            cls=r.cls)
            p.maps.append((m, r, False))
        # Cold start: the whole working set is touched, spread over `launch` seconds in 8 steps.
        steps = 8
        ts = T + (np.arange(steps) * self.ns(app.launch) // steps)
        for m, r, is_file in p.maps:
            edges = np.linspace(0, r.pages, steps + 1).astype(np.int64)
            keep = np.diff(edges) > 0
            self.b.ranges(ts[keep], pid, Op.READ if is_file else Op.WRITE, m, edges[:-1][keep],
                          np.diff(edges)[keep])
        self.procs[key] = p
        self.adj_now[pid] = self.scn.adj["foreground"]
        return p

    def kill(self, t, key):
        p = self.procs.pop(key, None)
        if p is None:
            return
        self.b.phase(self.ns(t), p.pid, f"kill {key}")
        self.b.event(self.ns(t), p.pid, Op.PROC_EXIT)
        if key in self.mru:
            self.mru.remove(key)

    def set_adj(self, t, pid, v):
        if self.adj_now.get(pid) != v:
            self.adj_now[pid] = v
            self.b.event(self.ns(t), pid, Op.SET_OOM_ADJ, arg=v)

    def foreground(self, t, key, llm_pid=None):
        """`key` comes to the foreground at t: oom_score_adj of everyone follows Android's order."""
        if key in self.mru:
            self.mru.remove(key)
        self.mru.insert(0, key)
        adj = self.scn.adj
        cached_rank = 0
        for i, k in enumerate(self.mru):
            if k == "llm":
                if llm_pid is None or self.scn.llm.adj is not None:
                    continue
                pid, bg = llm_pid, "cached"
            elif k in self.procs:
                pid, bg = self.procs[k].pid, self.scn.apps[k].background
            else:
                continue
            if i == 0:
                v = adj["foreground"]
            elif bg in ("visible", "perceptible"):
                v = adj[bg]
            elif i == 1:
                v = adj["previous"]
            else:
                v = min(adj["cached"] + 10 * cached_rank, adj["cached_max"])
                cached_rank += 1
            self.set_adj(t, pid, v)

    def touch(self, key, t0, t1, warm):
        """Foreground accesses of app `key` in [t0, t1): hot set at switch-in (warm), then churn."""
        p = self.procs[key]
        app = p.app
        T0, T1 = self.ns(t0), self.ns(t1)
        if warm:
            for m, r, is_file in p.maps:
                n = int(r.pages * r.hot)
                if n:
                    self.b.ranges(T0, p.pid, Op.READ, m, 0, n)
                    if not is_file:
                        self.b.ranges(T0, p.pid, Op.WRITE, m, 0, max(1, n // 4))
        start = T0 + (self.ns(app.launch) if not warm else 0)
        ticks = np.arange(start + self.ns(app.tick), T1, self.ns(app.tick), dtype=np.int64)
        if not len(ticks):
            return
        for m, r, is_file in p.maps:
            n = int(r.pages * r.churn)
            if n <= 0:
                continue
            off = self.rng.integers(0, r.pages - n + 1, size=len(ticks))
            self.b.ranges(ticks, p.pid, Op.READ if is_file else Op.WRITE, m, off, n)


def build(scn: Scenario, progress=None) -> Trace:
    """The scenario's trace: app processes and LLM requests on one timeline."""
    pl = plan(scn)
    rng = _rngs(scn.seed)["touch"]
    b = TraceBuilder(source=f"kmemsim scenario {scn.name} ({os.path.basename(scn.file)}, seed {scn.seed})")
    side = _AppSide(scn, b, rng)
    llm_pid = LLM_PID if scn.llm is not None else None

    # Explicit events and slots interleave by time; process them in order.
    items = [(e["t"], 0, "event", e) for e in pl.events if e["action"] != "idle"]
    items += [(s.t0, 1, "slot", s) for s in pl.slots]
    for i, a in enumerate(scn.switch["prelaunch"]):
        items.append((0.5 * i, -1, "prelaunch", a))
    for e in pl.events:
        if e["action"] == "idle":
            b.phase(side.ns(e["t"]), 0, "idle")
    items.sort(key=lambda x: (x[0], x[1]))
    kill_times = {}
    for e in pl.events:
        if e["action"] == "kill":
            kill_times.setdefault(e["app"], []).append(e["t"])
    for t, _, kind, x in items:
        if kind == "prelaunch":
            if x not in side.procs:
                side.launch(t, x)
                side.touch(x, t, t + scn.apps[x].launch, warm=False)
                side.foreground(t, x, llm_pid)
        elif kind == "event":
            if x["action"] == "kill":
                side.kill(t, x["app"])
            elif x["app"] not in side.procs:
                side.launch(t, x["app"])
                side.foreground(t, x["app"], llm_pid)
        else:
            s = x
            if s.app == "llm":
                b.phase(side.ns(s.t0), llm_pid, "switch to llm")
                side.foreground(s.t0, "llm", llm_pid)
                continue
            # a kill inside the slot ends the app's foreground time there
            t1 = min([s.t1] + [k for k in kill_times.get(s.app, []) if s.t0 < k < s.t1])
            cold = s.app not in side.procs
            if cold:
                side.launch(s.t0, s.app)
            pid = side.procs[s.app].pid
            b.phase(side.ns(s.t0), pid, f"switch to {s.app}")
            side.foreground(s.t0, s.app, llm_pid)
            side.touch(s.app, s.t0, t1, warm=not cold)
    if scn.llm is not None:
        build_llm(scn, pl, b, progress=progress)
    return b.build()


# ------------------------------------------------------------------------------------------------
# LLM sessions → trace (through kmemsim.llama_workload).

def model_layout(scn: Scenario):
    """The model argument for llama_workload.generate: a GGUF path, or a preset's file-less layout."""
    m = dict(scn.llm.model)
    if "path" in m:
        return m["path"]
    from . import synth
    preset = m.pop("preset")
    try:
        return synth.layout_from_preset(preset, **m)
    except InputError as e:
        raise InputError(f"{scn.file}: llm.model: {e}")
    except TypeError as e:
        raise InputError(f"{scn.file}: llm.model: {e}")


def llm_calls(scn: Scenario, pl: Plan):
    """The generate() calls that serve the plan, in time order: (session, n_past, new tokens,
    decode, arrival time, label). A session with a system prompt is created when the model loads
    (LLMS newLLMCtx(systemPrompt)); a context that would overflow ctx is reset to position 0."""
    llm = scn.llm
    calls, n_past = [], [0] * len(llm.sessions)
    for i, s in enumerate(llm.sessions):
        if s.system_prompt:
            calls.append((i, 0, s.system_prompt, 1, llm.start, f"create session {s.name}"))
            n_past[i] = s.system_prompt + 1
    for k, q in enumerate(pl.requests):
        p = n_past[q.session]
        if p + q.delta + q.decode > llm.ctx:
            p = 0
        calls.append((q.session, p, q.delta, q.decode, q.t,
                      f"request {k} session {llm.sessions[q.session].name}"))
        n_past[q.session] = p + q.delta + q.decode
    return calls


def build_llm(scn: Scenario, pl: Plan, b: TraceBuilder, progress=None) -> None:
    """One LLM process (pid LLM_PID) serving every call of the plan, one at a time, on builder b.

    The process loads the model once (kmemsim.llama_workload.LlamaSession.load: mmap of the weights,
    repacked copies, ...) and holds one llama_context per session, as a llama.cpp server does: each
    session gets its own KV cache (allocated and cleared when the session is created), output and
    compute buffers, and shares the model's mappings. A call prefills its new tokens at positions
    n_past.. of its session's context (the earlier tokens stay in the KV cache), in batches of
    n_batch split into ubatches of n_ubatch, one pass per sequence, then decodes one token per step
    for all sequences. Speculative decoding with N paths = N sequences: the context gets N x ctx
    cells (llama.cpp splits n_ctx among sequences), so the KV bytes scale with N.
    """
    from . import llama_workload as lw
    llm = scn.llm
    model = model_layout(scn)
    kw = dict(ctx=llm.ctx * llm.paths, batch=llm.batch, ubatch=llm.ubatch, kv_type=llm.kv_type,
              load_mode=llm.load_mode, prefetch=llm.prefetch, seqs=llm.paths, name="llm",
              seed=scn.seed)
    sessions = [None] * len(llm.sessions)
    calls = llm_calls(scn, pl)
    if not calls:
        return
    t_free = int(round(llm.start * NS))          # ns: the LLM serves one call at a time
    adj = llm.adj if llm.adj is not None else scn.adj["foreground"]
    b.process(t_free, LLM_PID, "llm", oom_score_adj=adj)
    first = lw.LlamaSession(model, b, pid=LLM_PID, **kw)
    t_free = first.load(t_free, start_process=False)   # model load + the first session's context
    spare = first
    for k, (si, p, new, dec, t_arr, label) in enumerate(calls):
        t = max(int(round(t_arr * NS)), t_free)
        s = sessions[si]
        if s is None:                       # llama_init_from_model: a context for this session
            if spare is not None:
                s, spare = spare, None
            else:
                b.phase(t, LLM_PID, f"create context {llm.sessions[si].name}")
                s = first.new_context(t, **kw)
            sessions[si] = s
        t = _serve(s, b, t, p, new, dec, label)
        t_free = t + 1
        if progress:
            progress(k + 1)
    # what kmemsim.timing needs of the process (its MACs per token and per output row)
    b.meta.setdefault("llama", []).append(first.meta())


def _serve(s, b, t, n_past, new, decode, label):
    """A request to session `s`: `new` tokens at positions n_past.. and `decode` generated tokens."""
    b.phase(t, LLM_PID, label)
    t = s.serve(t, new, decode, n_past=n_past)
    b.phase(t, LLM_PID, label + " end")
    return t
