"""A memory cgroup for one recorded run: v2 where the unified hierarchy has the memory controller,
else v1 (this machine: /sys/fs/cgroup/memory). Creating it and removing it are the only changes it
makes; `remove` moves any task left back to the parent first, so rmdir cannot fail on tasks."""
from __future__ import annotations

import errno
import os
import time

from ..core.errors import InputError
from .samplers import read_kv


def mounts():
    with open("/proc/mounts") as f:
        return [line.split()[:4] for line in f]


def v2_root():
    """The cgroup2 mount whose root offers the memory controller, or None."""
    for dev, path, fstype, opts in mounts():
        if fstype == "cgroup2":
            try:
                with open(os.path.join(path, "cgroup.controllers")) as f:
                    if "memory" in f.read().split():
                        return path
            except OSError:
                pass
    return None


def v1_root():
    for dev, path, fstype, opts in mounts():
        if fstype == "cgroup" and "memory" in opts.split(","):
            return path
    return None


def write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def read(path):
    with open(path) as f:
        return f.read().strip()


class MemCgroup:
    """Create with `MemCgroup.create(name, ledger)`; `version` is 1 or 2."""

    def __init__(self, path, version, undo):
        self.path, self.version, self._undo = path, version, undo

    @classmethod
    def create(cls, name, ledger):
        """`ledger` (kmemsim/live/leftovers.Ledger) hears of each change before it is made."""
        undo = []
        root = v2_root()
        if root:
            version = 2
            ctl = os.path.join(root, "cgroup.subtree_control")
            if "memory" not in read(ctl).split():
                ledger.note(kind="controller", path=ctl, undo="-memory")
                write(ctl, "+memory")
                undo.append((ctl, "-memory"))
        else:
            root = v1_root()
            version = 1
            if not root:
                raise InputError("no memory cgroup controller is mounted (neither cgroup v2 with memory nor "
                                 "v1 memory); mount one, e.g. `mount -t cgroup -o memory none /sys/fs/cgroup/memory`")
        path = os.path.join(root, name)
        ledger.note(kind="cgroup", path=path)
        try:
            os.mkdir(path)
        except FileExistsError:
            raise InputError(f"cgroup {path} already exists (another kmemsim run?); remove it with rmdir first")
        except PermissionError:
            raise InputError(f"cannot create cgroup {path}: permission denied; run as root")
        return cls(path, version, undo)

    def file(self, v1name, v2name):
        return os.path.join(self.path, v1name if self.version == 1 else v2name)

    def set_limit(self, nbytes):
        write(self.file("memory.limit_in_bytes", "memory.max"), nbytes)

    def limit(self):
        v = read(self.file("memory.limit_in_bytes", "memory.max"))
        return None if v == "max" or int(v) >= (1 << 62) else int(v)

    def set_swappiness(self, n):
        """v1 only: cgroup v2 has no per-cgroup swappiness (the caller sets vm.swappiness)."""
        write(os.path.join(self.path, "memory.swappiness"), n)

    @property
    def stat_path(self):
        return os.path.join(self.path, "memory.stat")

    def stat(self):
        return read_kv(self.stat_path)

    @staticmethod
    def _watermark(path):
        try:
            return int(read(path))
        except (FileNotFoundError, ValueError):
            return None

    def peak(self):
        """Largest charge seen: v1 memory.max_usage_in_bytes, v2 memory.peak (6.?+)."""
        return self._watermark(self.file("memory.max_usage_in_bytes", "memory.peak"))

    def kmem_peak(self):
        """Largest kernel-memory charge seen: v1 memory.kmem.max_usage_in_bytes; v2 has none."""
        return self._watermark(os.path.join(self.path, "memory.kmem.max_usage_in_bytes"))

    def add(self, pid):
        write(os.path.join(self.path, "cgroup.procs"), pid)

    def pids(self):
        try:
            return [int(p) for p in read(os.path.join(self.path, "cgroup.procs")).split()]
        except FileNotFoundError:
            return []

    def remove(self, timeout=10.0):
        """Move leftover tasks to the parent, then rmdir (retried while exiting tasks drain)."""
        parent = os.path.join(os.path.dirname(self.path), "cgroup.procs")
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.pids():
                try:
                    write(parent, pid)
                except OSError:
                    pass                    # exited meanwhile
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        for path, value in reversed(self._undo):
            try:
                write(path, value)
            except OSError:
                pass                        # another cgroup now uses the controller: leave it on
