"""A scenario's plan: which app is in the foreground when (LLMS §2.6's Random, Markov and Gaussian
switching, or mzCache's fixed round), when each LLM request arrives and how long it is. Times in
seconds; randomness from numpy Generators seeded by the scenario's seed."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...core.errors import InputError
from ...core.limits import check_events
from .schema import Scenario

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


def rngs(seed):
    """Independent streams per concern, so adding requests does not move the app switches."""
    ss = np.random.SeedSequence(seed)
    return dict(zip(("switch", "dwell", "touch", "arrival", "session", "delta"),
                    (np.random.default_rng(s) for s in ss.spawn(6))))


def _skip_idle(t, idles):
    for a, b in idles:
        if a <= t < b:
            t = b
    return t


def estimate(scn: Scenario, per_request: float = 1.0) -> tuple[float, str]:
    """The events a scenario's plan and trace will hold, estimated from its numbers alone (nothing
    drawn): foreground slots, each a launch or switch of its app's regions, the apps' touches every
    tick, and its LLM requests at `per_request` events each. Returns (events, what they are); raises
    InputError for a timeline that never moves (every step zero seconds)."""
    sw, llm = scn.switch, scn.llm
    span = max(0.0, scn.duration - sw["start"])
    regions = max((len(a.anon) + len(a.files) for a in scn.apps.values()), default=0)
    ticks = min((a.tick for a in scn.apps.values()), default=1.0)
    lo, hi = sw["dwell"]
    dwell = min([(lo + hi) / 2] + [sw["dwell_of"][a] for a in sw["dwell_of"]])
    rounds = 0.0
    if sw["pattern"] == "round":
        longest = max(len(o) for o in sw["orders"])
        step = (sum(sw["visit"] if a == "visit" else dwell for a in min(sw["orders"], key=len))
                + longest * sw["gap"] + (sw["send_delay"] + sw["return_wait"] if llm else 0.0))
        step = max(step, sw["period"])
        rounds = float(sw["rounds"]) if step <= 0 else min(float(sw["rounds"]), span / step + 1)
        slots = rounds * (longest + 1)
    elif sw["apps"]:
        if dwell + sw["gap"] <= 0:
            raise InputError(f"{scn.file}: switch.dwell and switch.gap are both 0 s: the timeline never moves "
                             "past its start; give a dwell or a gap of more than 0 s")
        slots = span / (dwell + sw["gap"]) + 1
    else:
        slots = 0.0
    requests = 0.0
    if llm is not None:
        span_llm = max(0.0, scn.duration - llm.start)
        requests = {"poisson": span_llm / llm.mean_interval if llm.mean_interval > 0 else 0.0,
                    "times": float(len(llm.times)), "calls": float(len(llm.calls)),
                    "round": rounds}[llm.arrival]
        if llm.count is not None:
            requests = min(requests, float(llm.count))
    app_events = slots * 9 * regions + (scn.duration / ticks) * regions if regions else 0.0
    total = slots + app_events + requests * (1 + per_request)
    what = (f"{slots:,.0f} foreground slots, {requests:,.0f} LLM requests, "
            f"{scn.duration:g} s of scenario time")
    return total, what


def check_size(scn: Scenario, per_request: float = 1.0) -> None:
    """Refuse a scenario whose plan (and trace) would exceed the event budget, before planning it."""
    n, what = estimate(scn, per_request)
    check_events(n, f"{scn.file}: the scenario ({what})",
                 "shorten duration, or lengthen dwell, gap, tick or requests.mean_interval")


def plan(scn: Scenario) -> Plan:
    check_size(scn)
    r = rngs(scn.seed)
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
        elif llm.arrival == "calls":
            times = []
        else:
            times = [s.t0 + sw["send_delay"] for s in slots if s.request]
        if llm.count is not None:
            times = times[:llm.count]
        sizes = [(s.delta[0] + s.delta[1]) / 2 for s in llm.sessions]
        ch = Chooser(llm.pattern, len(llm.sessions), r["session"], stay=llm.stay, matrix=llm.matrix,
                     sizes=sizes, sigma=llm.sigma)
        chosen = [(t, i) for t, i in sorted(llm.calls) if t < scn.duration]
        for t in times:
            # a call goes to a live context (LLMS newLLMCtx/delLLMCtx): a context not yet created
            # or already deleted is drawn again; with none alive the call is not made
            for _ in range(64):
                i = ch.next()
                if llm.sessions[i].alive(t):
                    chosen.append((t, i))
                    break
        for t, i in chosen:
            lo, hi = llm.sessions[i].delta
            d = int(r["delta"].integers(lo, hi + 1))
            dlo, dhi = llm.decode
            reqs.append(Request(t, i, d, int(r["delta"].integers(dlo, dhi + 1))))
    return Plan(slots, reqs, list(scn.events), rounds)
