"""The recorder: `run` a command under a memory limit with zram swap, or attach to a running pid, with
the BPF probes (kmemsim/live/probes.py) and the counter sampler attached, and write a run directory
(kmemsim/live/rundir.py). Everything `run` changes is undone in one ExitStack, also on errors, when the
command fails, and on SIGINT/SIGTERM/SIGHUP."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from . import leftovers, rundir
from .cgroup import MemCgroup
from ..core.errors import InputError
from .probes import Probes, kernel_dev
from .samplers import INTERVAL_S, Sampler, proc_faults
from .swap_setup import ZramSwap, active_swaps, parse_zram
from ..core.units import parse_size


def require_root():
    if os.geteuid() != 0:
        raise InputError("the recorder needs root (BPF, cgroups, swap); run it with sudo")


def read_maps(pid):
    """[(start, end, perms, offset, dev 'maj:min' hex, inode, path)] of /proc/PID/maps."""
    out = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 5:
                    continue
                lo, hi = parts[0].split("-")
                out.append((int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), parts[3], int(parts[4]),
                            parts[5].strip() if len(parts) > 5 else ""))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


# How often the ring buffers are drained, whatever the sampling interval: a 4 MiB buffer holds ~48 k
# records, ~0.5 s of the busiest probe's at its average rate in a qwen 60% run (filemap, 84 k/s).
DRAIN_S = 0.01


class Recording:
    """Probes + the sampler, driven by one thread, for the tracked processes.

    The thread drains the ring buffers every DRAIN_S (raw records, decoded vectorised when the
    recording ends), samples at each tick, and re-reads /proc/PID/maps when mmap/exec events arrived
    (paths and inodes for the mappings)."""

    def __init__(self, interval=INTERVAL_S, memcg_stat=None, zram_dev=None, smaps_interval=5.0,
                 memcg_interval=INTERVAL_S):
        self.probes = Probes()
        self.interval, self.memcg_stat, self.zram_dev = interval, memcg_stat, zram_dev
        self.smaps_interval, self.memcg_interval = smaps_interval, memcg_interval
        self.sampler = None
        self.root_pid = None
        self.maps = {}                  # (pid, start, end, perms, off, dev, ino, path) -> first seen ns
        self._stop = threading.Event()
        self._thread = None
        self.file_counts = None         # the kernel's per-file totals as the recording ended
        self.recursion_misses = {}      # tracepoint programs' runs skipped (Probes.recursion_misses)
        self.t0 = time.monotonic_ns()
        for dev in active_swaps():
            try:
                self.probes.watch_swap_dev(kernel_dev(os.stat(dev).st_rdev))
            except OSError:
                pass

    def track(self, pid, seed_inodes=False):
        """Record `pid` (and, via sched_process_fork, what it forks). seed_inodes: count page-cache
        deletions of the files it already maps (record --pid), not only of files it brings in."""
        self.probes.track(pid)
        if self.root_pid is None:
            self.root_pid = pid
        if seed_inodes:
            for lo, hi, perms, off, dev, ino, path in read_maps(pid):
                if ino:
                    maj, mnr = (int(x, 16) for x in dev.split(":"))
                    self.probes.watch_inode((maj << 20) | mnr, ino)

    def start(self, pid):
        self.sampler = Sampler(self.interval, self.memcg_stat, self.zram_dev, pid, self.smaps_interval > 0,
                               self.smaps_interval, self.memcg_interval)
        self.sampler.start(thread=False)    # sampled from _loop: one thread, fewer wake-ups
        self._thread = threading.Thread(target=self._loop, name="kmemsim-recorder", daemon=True)
        self._thread.start()

    def pids(self):
        pids = {self.root_pid} if self.root_pid else set()
        t = self.probes["tasks"]
        if t.count:
            tab = t.table()
            pids.update(int(p) for p in tab["other"][tab["kind"] == 0])
        return pids

    def snapshot_maps(self):
        now = time.monotonic_ns()
        for pid in self.pids():
            for m in read_maps(pid):
                self.maps.setdefault((pid,) + m, now)

    def _loop(self):
        seen, last = 0, 0.0
        nxt = time.monotonic()
        while not self._stop.is_set():
            # the programs wake no one (bpf/common.h): drain every DRAIN_S, sample at each tick
            self._stop.wait(min(DRAIN_S, max(0.0, nxt - time.monotonic())))
            self.probes.drain()
            now = time.monotonic()
            if now >= nxt:
                self.sampler.sample()
                nxt += self.interval
                if nxt < now:                  # fell behind: skip ticks, don't burst
                    nxt = now + self.interval
            n = self.probes["mmap"].count + self.probes["tasks"].count
            if n != seen and time.monotonic() - last > 0.05:
                # the address space changed: re-read maps for paths and inodes (at most 20 times a
                # second; the mmap events themselves carry exact ranges and times)
                seen, last = n, time.monotonic()
                self.snapshot_maps()
        self.probes.drain()             # what the kernel already wrote
        # the totals as of the events just drained: the page cache of a file the run read stays
        # after the process exits, and whatever drops it later (another cgroup's reclaim, this
        # machine's DAMON pageout scheme) is not the run's doing
        self.file_counts = self.probes.file_counts()
        self.recursion_misses = self.probes.recursion_misses()
        self.snapshot_maps()

    def stop(self):
        if self._thread and self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        if self.sampler:
            self.sampler.stop()

    def close(self):
        self.stop()
        self.probes.close()


@contextlib.contextmanager
def signals_interrupt():
    """SIGINT, SIGTERM and SIGHUP end the recording as Ctrl-C does (KeyboardInterrupt), so cleanup
    runs; SIGINT too because a shell starts a background job with it ignored, which Python keeps."""
    def handler(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_ignored():
    """While restoring the machine a second Ctrl-C must not cut the restoration short."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def stop_tree(proc, cg, grace=3.0):
    """SIGINT the command's process group, then SIGKILL it and anything left in its cgroup."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
            os.killpg(proc.pid, signal.SIGCONT)     # it may still be stopped at the gate
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for _ in range(100):                # daemons the command left in the cgroup
        left = cg.pids() if cg else []
        if not left:
            break
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def set_knob(stack, ledger, path, value):
    """Write a /proc/sys or /sys file and register the old value's restoration (in the ledger first,
    for a recorder killed before it can restore: kmemsim/live/leftovers.py)."""
    with open(path) as f:
        old = f.read().strip()
    ledger.note(kind="knob", path=path, old=old, new=str(value))
    stack.callback(lambda: open(path, "w").write(old))
    with open(path, "w") as f:
        f.write(str(value))


def set_sysctl(stack, ledger, name, value):
    """Write /proc/sys/<name> and register the old value's restoration."""
    set_knob(stack, ledger, "/proc/sys/" + name.replace(".", "/"), value)


# A VM whose balloon reports free memory to its host (virtio-balloon free page reporting) gives the
# host the pages a run frees (drop_caches, reclaim), and the run's next use of them waits for the
# host's faults: the reference run's model load read at half the disk's speed after the first few
# hundred MiB (docs/validation-notes.md, "Readahead's storage speed"). That is the hypervisor's doing, not
# the guest kernel's memory management. Where the reporting waits for a page to stay free a minimum
# time (this project's VMs: rundir.PAGE_REPORTING_MIN_FREE), a run holds that time at the longest
# their kernel accepts, 5 min: longer than any reference run.
PAGE_REPORTING_HOLD_MS = 300000


def hold_page_reporting(stack, ledger):
    """Defer the VM's free page reporting for the run (restored after), where the machine has
    that setting."""
    if os.path.exists(rundir.PAGE_REPORTING_MIN_FREE):
        set_knob(stack, ledger, rundir.PAGE_REPORTING_MIN_FREE, PAGE_REPORTING_HOLD_MS)


def put_right_leftovers():
    """Undo what a recorder killed with SIGKILL left (kmemsim/live/leftovers.py), saying what."""
    found = leftovers.cleanup()
    if found:
        print(f"kmemsim: put right what a killed run left: {'; '.join(found)}", file=sys.stderr)
    return found



def check_periods(interval, memcg_interval):
    if interval <= 0:
        raise InputError(f"--interval {interval}: expected a positive number of seconds")
    if memcg_interval < 0:
        raise InputError(f"--memcg-interval {memcg_interval}: expected 0 or a positive number of seconds")


def run_command(argv, out, mem_limit=None, zram=None, swappiness=None, drop_caches=False,
                interval=INTERVAL_S, smaps_interval=5.0, record=True, memcg_interval=INTERVAL_S):
    """Run argv in a fresh memory cgroup and record it; returns the command's exit status as a shell
    reports it (128+N when killed by signal N, 130 when the recording was interrupted). record=False
    sets the machine up and restores it the same way but attaches no probe and samples nothing: the
    command runs as it would unobserved (the sampler's reads of the cgroup's memory.stat flush the
    memcg statistics reclaim decides by, and the probes cost time: docs/recorder.md); `out` then holds
    command.json and summary.json (raw/ stays empty)."""
    if not argv:
        raise InputError("no command given; usage: kmemsim run [OPTIONS] -o RUNDIR -- COMMAND...")
    limit = parse_size(mem_limit, "--mem-limit") if mem_limit else None
    zram_spec = parse_zram(zram) if zram else None
    check_periods(interval, memcg_interval)
    if swappiness is not None and not 0 <= swappiness <= 200:
        raise InputError(f"--swappiness {swappiness}: expected 0..200")
    require_root()
    put_right_leftovers()
    if zram_spec and active_swaps():
        raise InputError(f"swap already active ({', '.join(active_swaps())}): its traffic would mix with the "
                         "run's; swapoff it first or run without --zram")
    rd = rundir.RunDir.create(out)
    info = {"argv": list(argv), "mode": "run" if record else "run-unrecorded", "mem_limit": limit, "zram": zram,
            "swappiness": swappiness, "drop_caches": drop_caches, "interval": interval,
            "memcg_interval": memcg_interval, "cwd": os.getcwd(),
            "started": time.time()}
    status = {"complete": False, "exit_code": None, "interrupted": False, "error": None}
    rec = cg = proc = zs = vm1 = None
    rusage = None
    with signals_interrupt(), contextlib.ExitStack() as stack:
        try:
            rd.write_json("command.json", info)     # an interrupt from here on leaves a whole directory
            ledger = leftovers.Ledger()
            stack.callback(ledger.close)            # last: after everything below is restored
            cg = MemCgroup.create(ledger.marker, ledger)
            stack.callback(cg.remove)
            if limit:
                cg.set_limit(limit)
            if swappiness is not None:
                if cg.version == 1:
                    cg.set_swappiness(swappiness)
                else:                   # cgroup v2 has no per-cgroup swappiness
                    set_sysctl(stack, ledger, "vm.swappiness", swappiness)
            if zram_spec:
                zs = stack.enter_context(ZramSwap(*zram_spec, ledger=ledger))
            hold_page_reporting(stack, ledger)
            leftovers.stop_point("setup")
            if drop_caches:
                os.sync()
                with open("/proc/sys/vm/drop_caches", "w") as f:
                    f.write("3")
            if record:
                rec = Recording(interval, cg.stat_path, zs.dev if zs else None, smaps_interval, memcg_interval)
                stack.callback(rec.close)
            # The shell stops itself; while it is stopped we put it in the cgroup and track it, then
            # it continues and execs the command (same pid): nothing the command does escapes.
            proc = subprocess.Popen(["/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "kmemsim-gate"] + list(argv),
                                    process_group=0)
            _, st = os.waitpid(proc.pid, os.WUNTRACED)
            if not os.WIFSTOPPED(st):
                raise RuntimeError(f"the command's launcher ended before starting it (status {st})")
            cg.add(proc.pid)
            if rec is not None:
                rec.track(proc.pid)
                rec.start(proc.pid)
            vm0 = None if record else rundir.vmstat()   # unrecorded: the machine's counters instead
            os.kill(proc.pid, signal.SIGCONT)
            leftovers.stop_point("running")
            _, st, rusage = os.wait4(proc.pid, 0)
            vm1 = None if record else rundir.vmstat()
            proc.returncode = os.waitstatus_to_exitcode(st)
            status["exit_code"] = proc.returncode
            status["complete"] = True
        except KeyboardInterrupt:
            status["interrupted"] = True
        except InputError:
            raise
        except Exception as e:
            status["error"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            with signals_ignored():
                if proc is not None:
                    stop_tree(proc, cg)
                    if status["exit_code"] is None:
                        status["exit_code"] = proc.returncode
                env = lambda: rundir.environment(cg=cg, zram=zs, swappiness=swappiness, limit=limit)
                try:
                    if rec is not None:
                        rec.stop()
                        rd.write_all(rec, status, cg=cg, rusage=rusage, env=env())
                    elif record:        # interrupted or failed before the probes attached
                        rd.write_none_recorded(status, env())
                    elif vm1 is None:
                        rd.write_json("summary.json", dict(status, lost_events=0, files={}))
                    else:               # unrecorded: what needs no probe (the machine's vmstat: it runs alone)
                        rd.write_json("summary.json", dict(
                            status, lost_events=0, files={}, major_faults=rusage.ru_majflt,
                            minor_faults=rusage.ru_minflt, faults_source="wait4 rusage",
                            peak_resident_bytes=cg.peak(), vmstat_delta={k: vm1[k] - vm0[k] for k in vm0}))
                finally:
                    stack.close()       # restore the machine before leaving the ignored-signal zone
    if status["interrupted"]:
        return 130
    code = status["exit_code"]
    return 128 - code if code < 0 else code


def record_pid(pid, out, duration=None, interval=INTERVAL_S, smaps_interval=5.0, memcg_interval=INTERVAL_S):
    """Attach to a running process (and what it forks) and record until it exits, `duration` seconds
    pass, or Ctrl-C. Changes nothing on the machine."""
    require_root()
    if not os.path.exists(f"/proc/{pid}"):
        raise InputError(f"no process with pid {pid}; check it with `ps -p {pid}`")
    check_periods(interval, memcg_interval)
    if duration is not None and duration <= 0:
        raise InputError(f"--duration {duration}: expected a positive number of seconds")
    memcg_stat = rundir.memcg_stat_of(pid)
    rd = rundir.RunDir.create(out)
    start_faults = proc_faults(pid)
    status = {"complete": False, "exit_code": None, "interrupted": False, "error": None}
    rec = None
    with signals_interrupt(), contextlib.ExitStack() as stack:
        try:
            rd.write_json("command.json", {"mode": "record", "pid": pid, "cmdline": rundir.cmdline(pid),
                                           "duration": duration, "interval": interval,
                                           "memcg_interval": memcg_interval, "started": time.time()})
            rec = Recording(interval, memcg_stat, None, smaps_interval, memcg_interval)
            stack.callback(rec.close)
            rec.track(pid, seed_inodes=True)
            for tid in os.listdir(f"/proc/{pid}/task"):     # children forked before we attached
                try:
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        for child in f.read().split():
                            rec.probes.track(int(child))
                except OSError:
                    pass
            rec.snapshot_maps()
            rec.start(pid)
            end = time.monotonic() + duration if duration else None
            while os.path.exists(f"/proc/{pid}") and (end is None or time.monotonic() < end):
                time.sleep(0.05)
                last = proc_faults(pid)
                if last:
                    status["faults_now"] = last
            status["complete"] = True
        except KeyboardInterrupt:
            status["interrupted"] = True
        finally:
            with signals_ignored():
                try:
                    if rec is not None:
                        rec.stop()
                        now = status.pop("faults_now", None) or start_faults
                        faults = None
                        if start_faults and now:
                            faults = (now[0] - start_faults[0], now[1] - start_faults[1])
                        rd.write_all(rec, status, faults=faults, env=rundir.environment(pid=pid), pid=pid)
                    else:
                        rd.write_none_recorded(status, rundir.environment(pid=pid))
                finally:
                    stack.close()
    return 130 if status["interrupted"] else 0
