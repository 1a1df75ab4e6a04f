"""The emulator's kills fed back into the scenario: an app that lmkd (or the OOM killer) kills is
gone, and the next switch to it cold-starts it with a new pid, as on a phone.

A trace is built before it is replayed, so a kill the emulator makes cannot change the trace: the
victim's later events just vanish (docs/architecture.md). replay() closes the loop by iteration:
replay, turn the kills into the scenario's own `kill` events (just before the emulator's), rebuild,
replay again. Up to the first kill the trace is the real run's; after it, only the victim's next
switch differs (a cold start instead of nothing), so every kill before the first such switch is real
and is kept in one pass. Passes end when a replay kills nothing new."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ...core.errors import InputError
from .builder import build
from .schema import NS, Scenario
from .timeline import plan

MAX_PASSES = 50


def replay(scn: Scenario, emulator, make=build, progress=None):
    """Replay scn on `emulator` (a kmemsim.engine.kernel.Emulator) with killed apps relaunching.
    `make(scenario) -> Trace` builds what is replayed (default: build). Returns (trace, result,
    kills): kills, every kill of the run (the result's columns and `app`, the scenario's key or "llm"),
    in time order. Kills of the LLM are not fed back (its later requests vanish)."""
    slots = plan(scn).slots
    fed = []                                     # kill rows fed back so far
    for n in range(MAX_PASSES):
        events = scn.events + [{"t": (int(k["t"]) - 1) / NS, "action": "kill", "app": k["app"]} for k in fed]
        tr = make(replace(scn, events=sorted(events, key=lambda e: e["t"])))
        res = emulator.replay(tr)
        app_of = {q["pid"]: q["app"] for q in tr.meta.get("app_pids", [])}
        k = res.kills.assign(app=[app_of.get(int(p), "llm") for p in res.kills["pid"]])
        # an app already fed back may die a little earlier now (lmkd's state moves with each kill):
        # the same death, not a new one
        new = k[(k["app"] != "llm") & ~k["pid"].isin([r["pid"] for r in fed])]
        if new.empty:
            # a fed-back app lmkd took a little earlier this time is reported as it died here
            fed = pd.DataFrame(fed, columns=k.columns)
            kills = pd.concat([fed[~fed["pid"].isin(k["pid"])], k], ignore_index=True)
            return tr, res, kills.sort_values("t", kind="stable", ignore_index=True)
        # kills up to the first victim's next foreground slot are the real run's
        horizon = min(next((sl.t0 * NS for sl in slots if sl.app == a and sl.t0 * NS > t), np.inf)
                      for t, a in zip(new["t"], new["app"]))
        fed += [r for r in new.to_dict("records") if r["t"] < horizon]
        if progress:
            progress(f"pass {n + 1}: {len(fed)} app kills fed back")
    raise InputError(f"{scn.file}: kills did not settle in {MAX_PASSES} passes; "
                     "replay without lmk or give the apps more memory")
