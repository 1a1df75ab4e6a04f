"""zram swap for a recorded run: pick a free zram device (zram0 if unused, else a fresh one from
/sys/class/zram-control/hot_add), set algorithm and size, mkswap, swapon; undo all of it afterwards.
Refuses when other swap is active, since its traffic would mix with ours."""
from __future__ import annotations

import os
import subprocess

from ..core.errors import InputError
from ..core.units import parse_size

ZRAM_CONTROL = "/sys/class/zram-control"


def active_swaps():
    """Device paths in /proc/swaps."""
    with open("/proc/swaps") as f:
        return [line.split()[0] for line in f.readlines()[1:] if line.strip()]


def zram_devices():
    return sorted((d for d in os.listdir("/sys/block") if d.startswith("zram")), key=lambda d: int(d[4:]))


def _read(path):
    with open(path) as f:
        return f.read().strip()


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def zram_free(dev):
    """Unused: no disksize set (initstate 0) and not a swap device."""
    return _read(f"/sys/block/{dev}/initstate") == "0" and f"/dev/{dev}" not in active_swaps()


def parse_zram(spec):
    """'lz4:512M' -> ('lz4', bytes)."""
    algo, sep, size = spec.partition(":")
    if not sep or not algo or not size:
        raise InputError(f"--zram {spec!r}: expected ALGO:SIZE, e.g. lz4:1G")
    return algo, parse_size(size, "--zram size")


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip() or r.stdout.strip()}")


class ZramSwap:
    """Context manager: on enter the device is swap; on exit it is off, reset, and hot-removed if we
    hot-added it. Each step is undone only if it was done."""

    def __init__(self, algo, size, priority=32767, ledger=None):
        """`ledger` (kmemsim/live/leftovers.Ledger) hears of the device before it is changed; the swap
        is labelled with its marker (kmemsim-PID), which `kmemsim cleanup` finds it by."""
        self.algo, self.size, self.priority, self.ledger = algo, size, priority, ledger
        self.dev = None
        self.hot_added = False
        self.swapped_on = False

    def __enter__(self):
        if not os.path.isdir("/sys/block/zram0") and not os.path.isdir(ZRAM_CONTROL):
            raise InputError("no zram in this kernel (no /sys/block/zram0); run without --zram")
        others = active_swaps()
        if others:
            raise InputError(f"swap already active ({', '.join(others)}): its traffic would mix with the "
                             "run's; swapoff it first or run without --zram")
        try:
            self._setup()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _setup(self):
        note = self.ledger.note if self.ledger else (lambda **e: e)
        if os.path.isdir("/sys/block/zram0") and zram_free("zram0"):
            self.dev = "zram0"
            note(kind="zram", dev=self.dev, hot_added=False)
        elif os.path.exists(f"{ZRAM_CONTROL}/hot_add"):
            entry = note(kind="zram", dev=None, hot_added=True)
            n = _read(f"{ZRAM_CONTROL}/hot_add")   # reading hot_add creates a device
            self.dev, self.hot_added = f"zram{n}", True
            entry["dev"] = self.dev
            if self.ledger:
                self.ledger.save()
        else:
            raise InputError("zram0 is in use and this kernel cannot add zram devices; reset zram0 "
                             "(`echo 1 > /sys/block/zram0/reset`) or run without --zram")
        sysdir = f"/sys/block/{self.dev}"
        algos = _read(f"{sysdir}/comp_algorithm").replace("[", "").replace("]", "").split()
        if self.algo not in algos:
            raise InputError(f"--zram: algorithm {self.algo!r} not offered by this kernel; choose one of "
                             f"{', '.join(algos)}")
        _write(f"{sysdir}/comp_algorithm", self.algo)
        _write(f"{sysdir}/disksize", self.size)
        _run(["mkswap"] + (["-L", self.ledger.marker] if self.ledger else []) + [f"/dev/{self.dev}"])
        _run(["swapon", "-p", str(self.priority), f"/dev/{self.dev}"])
        self.swapped_on = True

    def __exit__(self, *exc):
        if self.dev is None:
            return False
        if self.swapped_on:
            _run(["swapoff", f"/dev/{self.dev}"])
            self.swapped_on = False
        try:
            _write(f"/sys/block/{self.dev}/reset", 1)
        except OSError:
            pass
        if self.hot_added:
            _write(f"{ZRAM_CONTROL}/hot_remove", self.dev[4:])
            self.hot_added = False
        self.dev = None
        return False
