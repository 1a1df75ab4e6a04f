"""No tests here: helpers shared by the recorder's live tests (tests/test_record*.py): run the CLI as a subprocess
and take a picture of the machine state the recorder must leave as it found it."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kmemsim(*args, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kmemsim.cli", *args], capture_output=True, text=True,
                          env=env, **kw)


def popen_kmemsim(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "kmemsim.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def summary(rundir):
    with open(os.path.join(rundir, "summary.json")) as f:
        return json.load(f)


def machine_state():
    """Swaps, zram devices (with their size), kmemsim cgroups, swappiness and the VM's free page
    reporting delay: what a run may touch."""
    with open("/proc/swaps") as f:
        swaps = f.read()
    zram = {}
    for d in os.listdir("/sys/block"):
        if d.startswith("zram"):
            with open(f"/sys/block/{d}/disksize") as f:
                zram[d] = f.read().strip()
    cgroups = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        cgroups += [os.path.join(root, d) for d in dirs if d.startswith("kmemsim")]
        if root.count("/") > 4:
            dirs[:] = []
    with open("/proc/sys/vm/swappiness") as f:
        swappiness = f.read()
    from kmemsim.live.rundir import PAGE_REPORTING_MIN_FREE
    reporting = open(PAGE_REPORTING_MIN_FREE).read() if os.path.exists(PAGE_REPORTING_MIN_FREE) else None
    return {"swaps": swaps, "zram": zram, "cgroups": sorted(cgroups), "swappiness": swappiness,
            "page_reporting_min_free_ms": reporting}


def within(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1)


@pytest.fixture(autouse=True)
def machine_restored():
    """After every live test, what machine_state() reads is as before."""
    before = machine_state()
    yield
    assert machine_state() == before
