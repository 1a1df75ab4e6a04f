"""Live (root; runs in CI): a tracefs capture made on this machine while `kmemsim run` records the same
command, imported with `kmemsim trace import ftrace`: its page-cache adds and deletes are the
recorder's (issue 41). The capture uses an ftrace instance of its own, so it leaves the machine's
tracing as it found it."""
import glob
import json
import os
import shutil
import sys

import pandas as pd
import pytest

from test_record_helpers import kmemsim, machine_restored, summary  # noqa: F401 (fixture)

pytestmark = pytest.mark.live

READER = r"""
import mmap, sys
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
s = 0
for _ in range(int(sys.argv[2])):
    for i in range(0, len(m), 4096):
        s += m[i]
print(s)
"""
EVENTS = ("filemap/mm_filemap_add_to_page_cache", "filemap/mm_filemap_delete_from_page_cache",
          "filemap/mm_filemap_fault", "sched/sched_process_fork", "sched/sched_process_exec",
          "sched/sched_process_exit")


def tracing_root():
    for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.exists(os.path.join(p, "instances")):
            return p
    pytest.fail("no tracefs with instances (mount -t tracefs nodev /sys/kernel/tracing)")


def put(path, value):
    with open(path, "w") as f:
        f.write(str(value))


@pytest.fixture
def instance():
    """An ftrace instance with the filemap and sched events on, tgids recorded, a 32 MiB buffer per
    CPU; removed after."""
    d = os.path.join(tracing_root(), "instances", f"kmemsim-test-{os.getpid()}")
    os.mkdir(d)
    try:
        put(os.path.join(d, "buffer_size_kb"), 32768)
        put(os.path.join(d, "trace_clock"), "mono")     # the recorder's clock: CLOCK_MONOTONIC
        if os.path.exists(os.path.join(d, "options", "record-tgid")):
            put(os.path.join(d, "options", "record-tgid"), 1)
        for e in EVENTS:
            put(os.path.join(d, "events", e, "enable"), 1)
        yield d
    finally:
        put(os.path.join(d, "tracing_on"), 0)
        for e in EVENTS:
            put(os.path.join(d, "events", e, "enable"), 0)
        os.rmdir(d)


@pytest.fixture
def big_file():
    path = "/var/tmp/kmemsim-test-ftrace.bin"          # a disk filesystem: page cache, not shmem
    with open(path, "wb") as f:
        blk = os.urandom(1 << 20)
        for _ in range(128):
            f.write(blk)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)   # start cold
    yield path
    os.unlink(path)


def counts(s):
    """(dev, ino) -> (pages added, pages deleted) of a summary.json, files with neither left out."""
    out = {}
    for f in list(s["files"].values()) + s["other_files"]:
        if f["pages_added"] or f["pages_deleted"]:
            out[(f["dev"], f["ino"])] = (f["pages_added"], f["pages_deleted"])
    return out


def test_a_tracefs_capture_imports_to_the_recorders_page_cache_counts(instance, big_file, tmp_path):
    out, cap = str(tmp_path / "run"), tmp_path / "capture.txt"
    put(os.path.join(instance, "trace"), "")
    put(os.path.join(instance, "tracing_on"), 1)
    try:
        # a 128 MiB file read twice through a 48 MiB limit: adds, and the memcg's reclaim deleting
        r = kmemsim("run", "--mem-limit", "48M", "-o", out, "--", sys.executable, "-c", READER, big_file, "2",
                    timeout=600)
    finally:
        put(os.path.join(instance, "tracing_on"), 0)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(instance, "trace")) as src, open(cap, "w") as dst:
        shutil.copyfileobj(src, dst)
    s = summary(out)
    assert s["complete"] and not s["lost_events"], {k: s.get(k) for k in ("complete", "lost_events")}
    # the command's pid: the recorder's own record of its exec
    tasks = pd.read_parquet(os.path.join(out, "raw", "tasks.parquet"))
    root = int(tasks[tasks["kind"].astype(str) == "exec"]["pid"].iloc[0])
    imp = tmp_path / "imported"
    r = kmemsim("trace", "import", "ftrace", str(cap), "-o", str(imp), "--pid", str(root))
    assert r.returncode == 0, r.stderr[-3000:]
    with open(imp / "summary.json") as f:
        got = json.load(f)
    rec, ours = counts(s), counts(got)
    ino = os.stat(big_file).st_ino
    key = next(k for k in rec if k[1] == ino)
    added, deleted = rec[key]
    assert added >= 2 * (128 << 20) // 4096 * 0.9 and deleted > 0, rec[key]      # it cycled, and reclaim ran
    # The capture runs from before `kmemsim run` to after it: the file's pages the kernel deleted once
    # the recorder's probes were gone (the run's cgroup removed, reclaim elsewhere) are the capture's
    # alone. Both clocks are CLOCK_MONOTONIC: those are the capture's deletes after the recorder's last
    # event of any kind (an event while attached would have been recorded).
    last = max(int(pd.read_parquet(p, columns=["t"])["t"].max()) for p in
               glob.glob(os.path.join(out, "raw", "*.parquet")) if len(pd.read_parquet(p, columns=["t"])))
    end = s["t0_monotonic_ns"] + last
    fm = pd.read_parquet(imp / "raw" / "filemap.parquet")
    after = fm[(fm["ino"] == ino) & (fm["kind"].astype(str) == "delete") & (fm["t"] + got["t0_monotonic_ns"] > end)]
    late = int((2 ** after["order"].astype(int)).sum()) if "order" in after else len(after)   # pages
    assert ours[key] == (added, deleted + late), (ours[key], rec[key], late)
    # every file the recorder counted is in the import too (the interpreter's libraries and modules);
    # their counts are not compared: the capture runs a moment longer than the recorder's probes, and
    # other processes may touch those shared files then
    assert set(rec) <= set(ours), set(rec) - set(ours)
