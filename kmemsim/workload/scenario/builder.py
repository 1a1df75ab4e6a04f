"""A scenario's plan as one Trace: every app a process with its regions, its launches, switches,
touches and kills (lmkd's oom_score_adj), and the LLM process serving its sessions' requests through
kmemsim.workload.llama."""
from __future__ import annotations

import os

import numpy as np

from ...core.errors import InputError
from ...core.trace import MapFlag, Op, Trace, TraceBuilder
from ...engine.managers import llms, mzcache
from ...engine.managers.llms_process import LlmsProcess
from ...engine.time import device as devmod
from ...engine.time.pipeline import Pipeline
from .. import llama as lw, synth
from ..gguf_layout import read_layout
from ..llama.attention import context_density
from ..llama.events import Events
from ..llama.graph import estimate_events
from .timeline import Plan, check_size, plan, rngs
from .schema import APP_PID0, LLM_PID, NS, Region, Scenario

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
        self.b.meta.setdefault("app_pids", []).append({"pid": pid, "app": key})
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


def build(scn: Scenario, progress=None, device=None, engines=None) -> Trace:
    """The scenario's trace: app processes and LLM requests on one timeline. `device` (a
    kmemsim.engine.time.device.Device; None: the default) times an mzCache or LLMS engine; `engines`,
    a list, gets the engine that made the trace (MzEngine: its restores' TTFTs; LlmsProcess: its
    calls as LLMS accounts them)."""
    check_size(scn, request_events(scn))        # the whole trace within the event budget, before any work
    pl = plan(scn)
    rng = rngs(scn.seed)["touch"]
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
    if scn.llm is not None and scn.llm.engine in ("mzcache", "llms"):
        eng = (build_mzcache if scn.llm.engine == "mzcache" else build_llms)(scn, pl, b, device)
        if engines is not None:
            engines.append(eng)
    elif scn.llm is not None:
        build_llm(scn, pl, b, progress=progress)
    return b.build()


# ------------------------------------------------------------------------------------------------
# LLM sessions → trace (through kmemsim.workload.llama).

def request_events(scn: Scenario) -> float:
    """Events one LLM request of the scenario may make at most (its longest prompt and decode on the
    model: kmemsim.workload.llama.graph.estimate_events); 0 without an LLM."""
    llm = scn.llm
    if llm is None:
        return 0.0
    model = model_layout(scn)
    layout = read_layout(model) if isinstance(model, str) else model
    longest = max(s.delta[1] + s.system_prompt for s in llm.sessions)
    if llm.prompt:
        longest = max(longest, llm.prompt)
    return estimate_events(layout, longest, llm.decode[1], min(llm.ubatch, llm.batch), llm.paths)


def model_layout(scn: Scenario):
    """The model argument for workload.llama.generate: a GGUF path, or a preset's file-less layout."""
    m = dict(scn.llm.model)
    if "path" in m:
        return m["path"]
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

    The process loads the model once (kmemsim.workload.llama.LlamaSession.load: mmap of the weights,
    repacked copies, ...) and holds one llama_context per session, as a llama.cpp server does: each
    session gets its own KV cache (allocated and cleared when the session is created), output and
    compute buffers, and shares the model's mappings. A call prefills its new tokens at positions
    n_past.. of its session's context (the earlier tokens stay in the KV cache), in batches of
    n_batch split into ubatches of n_ubatch, one pass per sequence, then decodes one token per step
    for all sequences. Speculative decoding with N paths = N sequences: the context gets N x ctx
    cells (llama.cpp splits n_ctx among sequences), so the KV bytes scale with N.
    """
    llm = scn.llm
    model = model_layout(scn)
    kw = dict(ctx=llm.ctx * llm.paths, batch=llm.batch, ubatch=llm.ubatch, kv_type=llm.kv_type,
              load_mode=llm.load_mode, prefetch=llm.prefetch, seqs=llm.paths, name="llm",
              seed=scn.seed, kv_manager=llm.kv_manager, moe_routing=llm.moe_routing)
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
    # what kmemsim.engine.time.serial needs of the process (its MACs per token and per output row)
    b.meta.setdefault("llama", []).append(first.meta())


def build_mzcache(scn: Scenario, pl: Plan, b: TraceBuilder, device=None) -> mzcache.MzEngine:
    """The LLM app as mzCache (kmemsim.engine.managers.mzcache.MzEngine): the model loaded into its
    SVM buffers and each session's prompt prefilled; an onTrimMemory (swapout(ratio - trim_step)) at
    every switch to another app, as Android trims a backgrounded app; each call a Send: the restore,
    then the query and its decode."""
    llm = scn.llm
    model = model_layout(scn)
    layout = read_layout(model) if isinstance(model, str) else model
    dev = device or devmod.load()
    ev = Events(b, LLM_PID)
    eng = mzcache.MzEngine(layout, ev, dev, mzcache.costs_of(dev, llm.codec), llm.codec, llm.arena_mlock)
    t_free = int(round(llm.start * NS))
    adj = llm.adj if llm.adj is not None else scn.adj["foreground"]
    b.process(t_free, LLM_PID, "llm (mzcache)", oom_score_adj=adj)
    b.phase(t_free, LLM_PID, "load")
    t_free = eng.load(t_free)
    calls = llm_calls(scn, pl)
    trims = [(s.t0, "trim", None) for s in pl.slots if s.app != "llm" and s.t0 >= llm.start]
    for when, kind, c in sorted(trims + [(c[4], "call", c) for c in calls], key=lambda x: x[0]):
        t = max(int(round(when * NS)), t_free)
        ev.flush()
        if kind == "trim":
            b.phase(t, LLM_PID, "onTrimMemory")
            eng.trim(t, llm.trim_step)
            continue
        si, n_past, new, dec, _, label = c
        b.phase(t, LLM_PID, label)
        if n_past == 0 and eng.tokens == 0:          # the session's prompt: prefilled, nothing to restore
            t = eng.prefill(t, new)
        else:
            t = eng.request(t, new, dec, Pipeline(dev))
        ev.flush()
        b.phase(t, LLM_PID, label + " end")
        t_free = t + 1
    ev.flush()
    return eng


def build_llms(scn: Scenario, pl: Plan, b: TraceBuilder, device=None) -> LlmsProcess:
    """The LLM as LLMS's system service (kmemsim.engine.managers.llms_process.LlmsProcess): the model
    mmapped, each session a context in the service's budget (`llm.service`, `llm.budget`), each
    request a callLLM: the switch as the service does it, then the call's passes; a session's
    `deleted` time its delLLMCtx."""
    llm = scn.llm
    model = model_layout(scn)
    layout = read_layout(model) if isinstance(model, str) else model
    dev = device or devmod.load()
    shape = llms.shape_of(layout.name, layout.hparams, layout.file_size, llm.ctx)
    svc = llms.service(llm.service, llm.budget, shape, dev, context_density)
    proc = LlmsProcess(layout.path or f"<layout:{layout.name}>", layout.file_pages, Events(b, LLM_PID), svc)
    t_free = int(round(llm.start * NS))
    adj = llm.adj if llm.adj is not None else scn.adj["foreground"]
    b.process(t_free, LLM_PID, f"llms service ({llm.service})", oom_score_adj=adj)
    b.phase(t_free, LLM_PID, "load")
    t_free = proc.load(t_free) + 1
    deletes = [(int(round(s.deleted * NS)), k) for k, s in enumerate(llm.sessions) if s.deleted is not None]
    for i, q in enumerate(sorted(pl.requests, key=lambda q: q.t)):
        t = max(int(round(q.t * NS)), t_free)
        while deletes and min(deletes)[0] <= t:
            td, k = min(deletes)
            deletes.remove((td, k))
            proc.delete(max(td, t_free), k)
        t_free = proc.call(t, q.session, q.delta, q.decode, f"request {i} session {llm.sessions[q.session].name}")
    for td, k in sorted(deletes):
        if td < int(round(scn.duration * NS)):
            proc.delete(max(td, t_free), k)
    return proc


def _serve(s, b, t, n_past, new, decode, label):
    """A request to session `s`: `new` tokens at positions n_past.. and `decode` generated tokens."""
    b.phase(t, LLM_PID, label)
    t = s.serve(t, new, decode, n_past=n_past)
    b.phase(t, LLM_PID, label + " end")
    return t
