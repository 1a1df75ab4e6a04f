"""What a recorder killed with SIGKILL leaves on the machine, and putting it right.

A run writes its ledger, /run/kmemsim/run-PID.json, *before* each change it makes to the machine
(a sysctl or /sys knob with its old value, a memory cgroup, a zram device and whether it was
hot-added, a cgroup controller it enabled), and removes the ledger after restoring everything. A
ledger whose owner is gone (its pid dead, or reused by another process: the ledger keeps the owner's
start time) names exactly what was left behind. Two markers find leftovers even without a ledger:
the zram swap's label, `kmemsim-PID` (mkswap -L), and the cgroup's name, `kmemsim-PID`. Nothing
without a dead owner's ledger entry or marker is touched.

/run is a tmpfs: after a reboot no ledger remains, and nothing a ledger could name (swap, zram
devices, cgroups, sysctls) survives a reboot either."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import time

from .cgroup import read, write
from .swap_setup import ZRAM_CONTROL, active_swaps

STATE_DIR = "/run/kmemsim"
MARKER = "kmemsim-"             # the zram swap's label and the cgroup's name: kmemsim-PID


# Where the live test stops a recorder (SIGSTOP to itself) to SIGKILL it there: KMEMSIM_STOP_AT=NAME
# (tests/test_leftovers_live.py). "setup": the machine changed, no probe attached; "running": the
# command runs under the probes; "writing": the run directory half-written.
STOP_POINTS = ("setup", "running", "writing")


def stop_point(name):
    if os.environ.get("KMEMSIM_STOP_AT") == name:
        os.kill(os.getpid(), signal.SIGSTOP)


def start_time(pid):
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid, started):
    """The process that wrote a ledger or marker is still running (same pid, same start time)."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


class Ledger:
    """One run's record of its changes, written before each change (atomically: temp file, rename)."""

    def __init__(self, state_dir=STATE_DIR):
        self.pid = os.getpid()
        self.marker = f"{MARKER}{self.pid}"     # the run's cgroup name and zram swap label
        self.path = os.path.join(state_dir, f"run-{self.pid}.json")
        self.entries = []
        os.makedirs(state_dir, exist_ok=True)
        self._save()

    def _save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": self.pid, "started": start_time(self.pid), "entries": self.entries}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def note(self, **entry):
        """Record a change about to be made; returns the entry (update it and call save())."""
        self.entries.append(entry)
        self._save()
        return entry

    def save(self):
        self._save()

    def close(self):
        """Everything was restored: the ledger goes."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def swap_label(dev):
    """The swap signature's label of /dev/DEV (blkid probes the device itself, no cache), or ''."""
    r = subprocess.run(["blkid", "-p", "-s", "LABEL", "-o", "value", f"/dev/{dev}"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def owner_of(name):
    """'kmemsim-1234' -> 1234, else None."""
    m = re.fullmatch(re.escape(MARKER) + r"(\d+)", name)
    return int(m.group(1)) if m else None


def kill_cgroup_tasks(path, parent, timeout=10.0):
    """SIGKILL what the run's command left in its cgroup, move stragglers to the parent, rmdir."""
    procs = os.path.join(path, "cgroup.procs")
    deadline = time.monotonic() + timeout
    while True:
        try:
            pids = [int(p) for p in read(procs).split()]
        except FileNotFoundError:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                for pid in pids:
                    with contextlib.suppress(OSError):
                        write(os.path.join(parent, "cgroup.procs"), pid)
                with contextlib.suppress(OSError):
                    os.rmdir(path)
                return
            time.sleep(0.05)


def undo_zram(dev, hot_added, found):
    if f"/dev/{dev}" in active_swaps():
        r = subprocess.run(["swapoff", f"/dev/{dev}"], capture_output=True, text=True)
        if r.returncode:
            found.append(f"could not swapoff /dev/{dev}: {r.stderr.strip()}")
            return
        found.append(f"swapped off /dev/{dev}")
    if os.path.isdir(f"/sys/block/{dev}"):
        with contextlib.suppress(OSError):
            write(f"/sys/block/{dev}/reset", 1)
            found.append(f"reset {dev}")
        if hot_added:
            with contextlib.suppress(OSError):
                write(f"{ZRAM_CONTROL}/hot_remove", dev[4:])
                found.append(f"removed {dev}")


def undo(entry, found):
    """Undo one ledger entry; what was done goes into `found`."""
    kind = entry["kind"]
    if kind == "knob":
        path, old, new = entry["path"], entry["old"], str(entry["new"])
        try:
            now = read(path)
        except OSError:
            return
        if now == new:              # still ours: someone else's later setting is left alone
            write(path, old)
            found.append(f"{path}: {now} -> {old}")
    elif kind == "cgroup":
        path = entry["path"]
        if os.path.isdir(path):
            kill_cgroup_tasks(path, os.path.dirname(path))
            found.append(f"removed cgroup {path}")
    elif kind == "controller":      # cgroup v2 subtree_control "+memory"; "-memory" fails while in use
        with contextlib.suppress(OSError):
            write(entry["path"], entry["undo"])
    elif kind == "zram" and entry.get("dev"):
        undo_zram(entry["dev"], entry.get("hot_added", False), found)


def ledgers(state_dir=STATE_DIR, suffix=".json"):
    try:
        names = sorted(os.listdir(state_dir))
    except FileNotFoundError:
        return []
    return [os.path.join(state_dir, n) for n in names
            if re.fullmatch(r"run-\d+" + re.escape(suffix), n)]


def memory_cgroup_roots():
    """Where a run's memory cgroup can be: the cgroup2 mounts and v1 memory mounts."""
    with open("/proc/mounts") as f:
        mounts = [line.split()[:4] for line in f]
    return [path for _, path, fstype, opts in mounts
            if fstype == "cgroup2" or (fstype == "cgroup" and "memory" in opts.split(","))]


def cleanup(state_dir=STATE_DIR):
    """Put right what dead recorders left; returns one line per thing restored (empty: nothing)."""
    found = []
    for path in ledgers(state_dir):
        with open(path) as f:
            ledger = json.load(f)   # whole: written to a temp file and renamed
        if alive(ledger["pid"], ledger.get("started")):
            continue
        for entry in reversed(ledger["entries"]):
            undo(entry, found)
        os.unlink(path)
    for tmp in ledgers(state_dir, ".json.tmp"):     # a kill between a ledger's write and its rename
        if start_time(int(os.path.basename(tmp)[4:-9])) is None:
            os.unlink(tmp)
    # By marker, for what a ledger cannot name (killed between a change and the ledger's update).
    for dev in (d for d in os.listdir("/sys/block") if d.startswith("zram")):
        if f"/dev/{dev}" in active_swaps():
            pid = owner_of(swap_label(dev))
            if pid is not None and start_time(pid) is None:
                undo_zram(dev, dev != "zram0", found)
    for root in memory_cgroup_roots():
        with contextlib.suppress(OSError):
            for name in os.listdir(root):
                pid = owner_of(name)
                if pid is not None and start_time(pid) is None and os.path.isdir(os.path.join(root, name)):
                    kill_cgroup_tasks(os.path.join(root, name), root)
                    found.append(f"removed cgroup {os.path.join(root, name)}")
    return found
