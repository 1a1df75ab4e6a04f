"""Kills fed back into the scenario (kmemsim.workload.scenario.relaunch): on a phone an app lmkd killed
is gone, and the next switch to it cold-starts a new process (ActivityManager starts a new pid; the
app's whole working set is read and written again)."""
from kmemsim.core.data import SCENARIOS
from kmemsim.core.trace import Op
from kmemsim.engine.kernel import Config, Emulator
from kmemsim.engine.time import device
from kmemsim.workload import scenario as sc


def test_an_app_lmkd_killed_cold_starts_at_its_next_switch():
    # Two rounds of mzCache Fig 15's round with stock llama.cpp: its first Send faults its evicted
    # weights back and lmkd kills background apps (low_mem_and_thrashing, c_ext/lmkd.c)
    scn = sc.load(str(SCENARIOS / "mzcache-ten-apps.toml"), ["switch.rounds=2", "duration=600"])
    dev = device.load("galaxy-s25plus")
    # the classic lists, as when this was worked out (the profile's MGLRU thrashes less file here: lmkd
    # kills later; docs/mglru.md)
    emu = Emulator(Config(**dict(dev.config_kwargs(), mem=dev.available, lmk=True, lru="classic")))
    tr, res, kills = sc.replay_relaunching(scn, emu)
    first = kills[kills["t"] < 275e9]
    assert len(first) >= 1 and set(first["by"]) == {"lmkd"}, kills
    pids = {}
    for q in tr.meta["app_pids"]:
        pids.setdefault(q["app"], []).append(q["pid"])
    for _, k in first.iterrows():
        # the victim's process is gone, and round 2 launched the app again under a new pid
        assert k["pid"] in pids[k["app"]] and pids[k["app"]][-1] != k["pid"], (k, pids[k["app"]])
        born = tr["t"][(tr["op"] == Op.PROC_START) & (tr["pid"] == pids[k["app"]][-1])]
        assert len(born) == 1 and born[0] > k["t"], (k, born)
    # each process dies once
    assert kills["pid"].is_unique, kills
