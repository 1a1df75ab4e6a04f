"""A recorder killed with SIGKILL, then `kmemsim cleanup`: the machine as it was before the run
(kmemsim/live/leftovers.py). Each run is stopped at one point (KMEMSIM_STOP_AT, a SIGSTOP the
recorder sends itself) and killed there: before the probes attach with the machine set up, with the
command running under the probes, and with the run directory half-written."""
import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from kmemsim.live import leftovers
from kmemsim.live.rundir import PAGE_REPORTING_MIN_FREE

pytestmark = pytest.mark.live

KMEMSIM = [sys.executable, "-m", "kmemsim.cli"]


def machine():
    """What a run changes: swaps, zram sizes, kmemsim cgroups, the knobs it sets, ledgers."""
    def text(p):
        try:
            with open(p) as f:
                return f.read().strip()
        except OSError:
            return None
    zram = {}
    for d in glob.glob("/sys/block/zram*"):
        zram[os.path.basename(d)] = text(f"{d}/disksize")
    return {"swaps": leftovers.active_swaps(), "zram": zram,
            "cgroups": sorted(glob.glob("/sys/fs/cgroup/*/kmemsim-*") + glob.glob("/sys/fs/cgroup/kmemsim-*")),
            "swappiness": text("/proc/sys/vm/swappiness"),
            "page_reporting": text(PAGE_REPORTING_MIN_FREE),
            "ledgers": leftovers.ledgers()}


def wait_stopped(pid, timeout=120):
    """Until the recorder has stopped itself at its point (state T in /proc/PID/stat)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.05)
    raise AssertionError(f"recorder {pid} never reached its stop point")


@pytest.mark.parametrize("point", leftovers.STOP_POINTS)
def test_sigkill_then_cleanup_restores_the_machine(tmp_path, point):
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    subprocess.run(KMEMSIM + ["cleanup"], check=True, capture_output=True)
    before = machine()
    assert not before["swaps"], f"another swap is on ({before['swaps']}): the run could not set up zram"
    # The command must outlive the point; at "writing" it has ended (the recorder writes after it).
    cmd = ["sleep", "0.5"] if point == "writing" else ["sleep", "60"]
    p = subprocess.Popen(KMEMSIM + ["run", "--mem-limit", "256M", "--zram", "lz4:128M", "--swappiness", "100",
                                    "-o", str(tmp_path / "run"), "--"] + cmd,
                         env=dict(os.environ, KMEMSIM_STOP_AT=point), stderr=subprocess.PIPE)
    try:
        wait_stopped(p.pid)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    left = machine()
    # What the kill left (kmemsim/live/recorder.run_command's set-up): the run's zram swap, its cgroup,
    # the VM's free page reporting held (where the machine has it), and the ledger naming them.
    assert left["swaps"] and left["cgroups"] != before["cgroups"] and left["ledgers"], left
    if before["page_reporting"] is not None:
        assert left["page_reporting"] == "300000"
    r = subprocess.run(KMEMSIM + ["cleanup"], capture_output=True, text=True)
    assert r.returncode == 0 and "swapped off" in r.stderr and "removed cgroup" in r.stderr, r.stderr
    assert machine() == before
    if point == "running":          # the command the killed recorder ran was killed with its cgroup
        assert subprocess.run(["pgrep", "-f", "^sleep 60$"], capture_output=True).returncode == 1
    # and the next run finds the machine as a run expects it
    r = subprocess.run(KMEMSIM + ["run", "--mem-limit", "256M", "--zram", "lz4:128M", "-o", str(tmp_path / "again"),
                                  "--", "true"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert machine() == before


def test_the_next_run_puts_right_what_a_killed_run_left(tmp_path):
    """No `kmemsim cleanup` in between: `kmemsim run` does it first and says so."""
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    subprocess.run(KMEMSIM + ["cleanup"], check=True, capture_output=True)
    before = machine()
    p = subprocess.Popen(KMEMSIM + ["run", "--zram", "lz4:64M", "-o", str(tmp_path / "run"), "--", "sleep", "60"],
                         env=dict(os.environ, KMEMSIM_STOP_AT="setup"), stderr=subprocess.PIPE)
    try:
        wait_stopped(p.pid)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    r = subprocess.run(KMEMSIM + ["run", "--zram", "lz4:64M", "-o", str(tmp_path / "again"), "--", "true"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "put right what a killed run left" in r.stderr and "swapped off" in r.stderr, r.stderr
    assert machine() == before


def test_cleanup_leaves_what_kmemsim_did_not_make(tmp_path):
    """A swap that is not the recorder's (no kmemsim-PID label, no ledger) stays on."""
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    subprocess.run(KMEMSIM + ["cleanup"], check=True, capture_output=True)
    swapfile = tmp_path / "swap"
    subprocess.run(["dd", "if=/dev/zero", f"of={swapfile}", "bs=1M", "count=16"], check=True, capture_output=True)
    os.chmod(swapfile, 0o600)
    subprocess.run(["mkswap", "-L", "kmemsim-1", str(swapfile)], check=True, capture_output=True)
    cg = "/sys/fs/cgroup/memory/kmemsim-notours"
    subprocess.run(["swapon", str(swapfile)], check=True)
    try:
        os.makedirs(cg, exist_ok=True)
        r = subprocess.run(KMEMSIM + ["cleanup"], capture_output=True, text=True)
        assert r.returncode == 0 and "nothing left" in r.stderr, r.stderr
        assert str(swapfile) in leftovers.active_swaps() and os.path.isdir(cg)
    finally:
        subprocess.run(["swapoff", str(swapfile)])
        if os.path.isdir(cg):
            os.rmdir(cg)
