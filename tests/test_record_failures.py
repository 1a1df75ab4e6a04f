"""Live failure paths of `kmemsim run` / `kmemsim record` (root; runs in CI): whatever happens to the
command or the recorder, the run directory is readable and the machine is restored (the autouse
fixture `machine_restored` compares swaps, zram devices, cgroups and swappiness before and after).
Source for restoration: swapoff(2), zram's reset/hot_remove sysfs, cgroup rmdir (kernel/cgroup)."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from kmemsim.core import trace as tr
from test_record_helpers import kmemsim, machine_restored, popen_kmemsim, summary  # noqa: F401 (fixture)

pytestmark = pytest.mark.live


def readable(out):
    """Every file of the run directory opens: JSON, samples, raw events, the trace."""
    for name in ("command.json", "kernel.json", "summary.json"):
        with open(os.path.join(out, name)) as f:
            json.load(f)
    pd.read_parquet(os.path.join(out, "samples.parquet"))
    for p in glob.glob(os.path.join(out, "raw", "*.parquet")):
        pd.read_parquet(p)
    tr.load(os.path.join(out, "events.parquet"))
    assert not glob.glob(os.path.join(out, ".tmp-*")), "a temp file was left behind"


def wait_for_cgroup_task(proc, timeout=30):
    """The pid of the command once it runs inside the run's cgroup (recording has started)."""
    path = f"/sys/fs/cgroup/memory/kmemsim-{proc.pid}/cgroup.procs"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            with open(path) as f:
                pids = f.read().split()
            if pids:
                with open(f"/proc/{pids[0]}/cmdline") as f:
                    if f.read().startswith("sleep"):
                        return int(pids[0])
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise AssertionError("command never started in the cgroup")


def test_command_fails(tmp_path):
    # source: wait4(2) status of the command; the recording still covers its whole life
    out = str(tmp_path / "run")
    r = kmemsim("run", "--mem-limit", "64M", "--zram", "lz4:64M", "-o", out, "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    readable(out)
    s = summary(out)
    assert s["exit_code"] == 3 and s["complete"] is True


def test_command_killed(tmp_path):
    # source: wait4(2) reports the signal; exit status 128+9 as a shell would
    out = str(tmp_path / "run")
    r = kmemsim("run", "--zram", "lz4:64M", "-o", out, "--", sys.executable, "-c",
                "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == 128 + 9, r.stderr
    readable(out)
    s = summary(out)
    assert s["exit_code"] == -9 and s["complete"] is True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_recorder_interrupted(tmp_path, sig):
    # source: SIGINT/SIGTERM to the recorder: the command is stopped, the directory marked incomplete
    out = str(tmp_path / "run")
    p = popen_kmemsim("run", "--mem-limit", "64M", "--zram", "lz4:64M", "--swappiness", "10", "-o", out,
                      "--", "sleep", "300")
    child = wait_for_cgroup_task(p)
    time.sleep(0.3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    assert not os.path.exists(f"/proc/{child}"), "the command was left running"
    readable(out)
    s = summary(out)
    assert s["complete"] is False and s["interrupted"] is True


def test_bad_input_one_line_exit_2(tmp_path):
    # source: kmemsim.core.errors.InputError -> one line on stderr, exit 2, no traceback
    cases = [
        ("run", "--mem-limit", "lots", "-o", str(tmp_path / "a"), "--", "true"),
        ("run", "--zram", "lz4", "-o", str(tmp_path / "b"), "--", "true"),
        ("run", "--zram", "nosuchalgo:64M", "-o", str(tmp_path / "c"), "--", "true"),
        ("record", "--pid", "999999999", "-o", str(tmp_path / "d")),
        ("run", "--memcg-interval", "-1", "-o", str(tmp_path / "e"), "--", "true"),
    ]
    for args in cases:
        r = kmemsim(*args)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kmemsim: "), (args, r.stderr)


def test_zram_refused_when_swap_active(tmp_path):
    # source: /proc/swaps; another swap would mix its traffic with the run's
    dev = None
    with open("/sys/class/zram-control/hot_add") as f:
        dev = "zram" + f.read().strip()
    try:
        with open(f"/sys/block/{dev}/disksize", "w") as f:
            f.write("16M")
        subprocess.run(["mkswap", f"/dev/{dev}"], check=True, capture_output=True)
        subprocess.run(["swapon", f"/dev/{dev}"], check=True)
        r = kmemsim("run", "--zram", "lz4:64M", "-o", str(tmp_path / "run"), "--", "true")
        assert r.returncode == 2 and "swap already active" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        assert f"/dev/{dev}" in open("/proc/swaps").read()    # left alone
    finally:
        subprocess.run(["swapoff", f"/dev/{dev}"])
        with open(f"/sys/block/{dev}/reset", "w") as f:
            f.write("1")
        with open("/sys/class/zram-control/hot_remove", "w") as f:
            f.write(dev[4:])


def test_record_pid_attaches_and_changes_nothing(tmp_path):
    # source: exceptions:page_fault_user and filemap tracepoints for an already-running process
    data = "/var/tmp/kmemsim-test-record.bin"
    with open(data, "wb") as f:
        f.write(os.urandom(8 << 20))
    reader = subprocess.Popen([sys.executable, "-c", r"""
import mmap, os, sys, time
f = open(sys.argv[1], 'rb')
end = time.time() + 30
while time.time() < end:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    s = sum(m[i] for i in range(0, len(m), 4096))
    m.close()
    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    time.sleep(0.05)
""", data])
    try:
        time.sleep(0.5)
        out = str(tmp_path / "run")
        r = kmemsim("record", "--pid", str(reader.pid), "--duration", "2", "-o", out)
        assert r.returncode == 0, r.stderr
        assert reader.poll() is None, "record must not disturb the process"
        readable(out)
        s = summary(out)
        assert s["complete"] is True and s["fault_events"] > 0
        assert s["files"][data]["pages_added"] > 0 and s["files"][data]["pages_deleted"] > 0
        t = tr.load(os.path.join(out, "events.parquet"))
        assert (t["op"] == tr.Op.READ).sum() > 0
    finally:
        reader.kill()
        reader.wait()
        os.unlink(data)


@pytest.mark.parametrize("after", [0.0, 2.0], ids=["while-the-probes-compile", "recording"])
def test_record_pid_interrupted(tmp_path, after):
    # source: SIGINT to `kmemsim record`: incomplete, readable, target untouched; also when it comes
    # before the probes are attached (bcc compiles them for a second or more on a busy machine):
    # then the run directory has every file, with nothing recorded in them
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        out = str(tmp_path / "run")
        p = popen_kmemsim("record", "--pid", str(sleeper.pid), "-o", out)
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(out, "command.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(after)                   # 2 s: BPF compile and attach, on a quiet machine
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130, err
        assert "Traceback" not in err
        assert sleeper.poll() is None
        readable(out)
        s = summary(out)
        assert s["complete"] is False and s["interrupted"] is True
    finally:
        sleeper.kill()
        sleeper.wait()
