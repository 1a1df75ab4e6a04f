"""Live accuracy of the recorder (root, real BPF, real cgroups, real zram; runs in CI).

Sources: filemap:mm_filemap_add_to_page_cache / mm_filemap_delete_from_page_cache (one event per folio,
__filemap_add_folio / __filemap_remove_folio), counted by an independent bpftrace one-liner and by the
memcg's workingset_refault_file (workingset_refault()); the read bios (block:block_bio_queue to
block:block_rq_complete) against the pages added; swap-out through block:block_bio_queue vs
zram's own block stat (zram_submit_bio accounting) and vmstat pswpout (swap_writepage's count_vm_events)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from kmemsim.core import trace as tr
from test_record_helpers import kmemsim, machine_restored, summary, within  # noqa: F401 (fixture)

pytestmark = pytest.mark.live

CYCLIC_READER = r"""
import mmap, sys
f = open(sys.argv[1], 'rb')
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
s = 0
for _ in range(int(sys.argv[2])):
    for i in range(0, len(m), 4096):
        s += m[i]
print(s)
"""

ANON_WRITER = r"""
import numpy as np
a = np.empty(int(__import__('sys').argv[1]) << 20, np.uint8)
rng = np.random.default_rng(0)
for i in range(0, len(a), 1 << 20):
    a[i:i + (1 << 20)] = rng.integers(0, 4, 1 << 20, dtype=np.uint8)   # compressible, never same-filled
print(int(a[::4096].sum()))
"""


@pytest.fixture
def big_file(tmp_path_factory):
    # /var/tmp: a disk filesystem (tmpfs pages are shmem, not page cache of a file)
    path = "/var/tmp/kmemsim-test-cyclic.bin"
    with open(path, "wb") as f:
        blk = os.urandom(1 << 20)
        for _ in range(256):
            f.write(blk)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)   # start cold
    yield path
    os.unlink(path)


def bpftrace_counter(ino):
    """Independent count of the same tracepoints for one inode, by bpftrace."""
    prog = (f"tracepoint:filemap:mm_filemap_add_to_page_cache /args->i_ino == {ino}/ "
            "{ @add = sum(1 << args->order); } "
            f"tracepoint:filemap:mm_filemap_delete_from_page_cache /args->i_ino == {ino}/ "
            "{ @del = sum(1 << args->order); }")
    p = subprocess.Popen(["bpftrace", "-f", "json", "-e", prog], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()           # {"type": "attached_probes", ...}: counting from here
    assert "attached_probes" in line, line
    return p


def bpftrace_result(p):
    import json
    # bpftrace prints its maps and exits on SIGINT or SIGTERM; once in a CI run it did not on the
    # first SIGINT within 30 s, so ask again before giving up
    out = None
    for sig in (signal.SIGINT, signal.SIGTERM):
        p.send_signal(sig)
        try:
            out, _ = p.communicate(timeout=30)
            break
        except subprocess.TimeoutExpired:
            continue
    if out is None:
        p.kill()
        p.communicate()
        pytest.fail("bpftrace did not exit on SIGINT or SIGTERM within 60 s")
    vals = {}
    for line in out.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            if d.get("type") == "map":
                vals.update(d["data"])
    return vals.get("@add", 0), vals.get("@del", 0)


def test_cyclic_file_read_page_cache_matches_bpftrace(big_file, tmp_path):
    # source: filemap:mm_filemap_add_to_page_cache / mm_filemap_delete_from_page_cache
    # (mm/filemap.c __filemap_add_folio, page_cache_delete), memcg workingset_refault_file
    if not shutil.which("bpftrace"):
        pytest.skip("bpftrace not installed (make system installs it)")
    ino = os.stat(big_file).st_ino
    bt = bpftrace_counter(ino)
    out = str(tmp_path / "run")
    try:
        r = kmemsim("run", "--mem-limit", "128M", "-o", out, "--", sys.executable, "-c", CYCLIC_READER,
                    big_file, "3")
    finally:
        added, deleted = bpftrace_result(bt)
    assert r.returncode == 0, r.stderr
    s = summary(out)
    f = s["files"][big_file]
    file_pages = os.stat(big_file).st_size // 4096
    # the file (256 MiB) does not fit the limit (128 MiB): every pass re-reads it
    assert f["pages_added"] > 2.5 * file_pages
    assert f["pages_deleted"] > 1.5 * file_pages
    assert within(f["pages_added"], added, 0.01), (f, added)
    assert within(f["pages_deleted"], deleted, 0.01), (f, deleted)
    # kernel counter: everything added after the first pass is a refault of an evicted page
    assert within(f["pages_added"] - file_pages, s["memcg"]["workingset_refault_file"], 0.01)
    assert s["complete"] is True and s["exit_code"] == 0 and s["lost_events"] == 0
    # The reads behind those pages (readio.c): every folio a read adds to the page cache is read by
    # a bio the reading task submits (read_pages() -> ext4_mpage_readpages() -> submit_bio()), so
    # the bios submitted hold the pages the run added, on every file (the interpreter's too). A
    # blk-mq request's completion ends its bios (blk_update_request(), block:block_rq_complete),
    # each after it went. That tracepoint fires in the disk's interrupt, and trace_call_bpf() skips
    # it when the interrupt came while another of the recorder's programs ran on that CPU
    # (bpf_prog_active; counted in bpf_recursion_misses): a few requests a run here, so the bios
    # recorded ended hold at least 95% of the pages submitted, and all of them when none was skipped.
    import numpy as np
    import pandas as pd
    from kmemsim.validate import phases
    fm = pd.read_parquet(os.path.join(out, "raw", "filemap.parquet"))
    fm = fm[(fm.kind == "add") & (fm.tracked == 1)]
    assert s["read_bios"]["pages"] == np.left_shift(1, fm.order.to_numpy().astype(np.int64)).sum()
    bios = phases.read_bios(out)
    assert len(bios) <= s["read_bios"]["submitted"] and (bios["ns"] > 0).all()
    assert bios["pages"].sum() >= 0.95 * s["read_bios"]["pages"] and bios["pages"].sum() > 2.5 * file_pages
    if not s["bpf_recursion_misses"].get("block:block_rq_complete"):
        assert len(bios) == s["read_bios"]["submitted"]
    # the trace: the file is mapped and read through its mapping
    t = tr.load(os.path.join(out, "events.parquet"))
    fid = next(x["id"] for x in t.meta["files"] if x["path"] == big_file)
    mm = (t["op"] == tr.Op.MMAP) & (t["arg"] == fid)
    assert mm.sum() == 1 and t["npages"][mm][0] == file_pages
    reads = (t["op"] == tr.Op.READ) & (t["map"] == t["map"][mm][0])
    assert reads.sum() > 0 and t["page"][reads].max() < file_pages


def test_anon_beyond_limit_swap_out_matches_zram(tmp_path):
    # source: block:block_bio_queue (submit_bio) to the swap device vs zram's /sys/block/zramN/stat
    # (bdev io accounting in zram_submit_bio) and vmstat pswpout (mm/page_io.c count_swpout_vm_event)
    out = str(tmp_path / "run")
    r = kmemsim("run", "--mem-limit", "64M", "--zram", "lz4:1G", "--swappiness", "100", "-o", out, "--",
                sys.executable, "-c", ANON_WRITER, "512")
    assert r.returncode == 0, r.stderr
    s = summary(out)
    assert s["swap_out_pages"] > 100_000                   # 512 MiB in 64 MiB: at least 448 MiB out
    zram_written = s["zram"]["bio_write_sectors"] // 8     # fresh device; includes mkswap's header page
    assert within(s["swap_out_pages"], zram_written, 0.01), (s["swap_out_pages"], zram_written)
    assert within(s["swap_out_pages"], s["vmstat_delta"]["pswpout"], 0.01)
    assert within(s["swap_in_pages"], s["vmstat_delta"]["pswpin"], 0.01)
    assert s["peak_resident_bytes"] <= 64 << 20
    assert s["reclaim"]["memcg_reclaims"] > 0 and s["major_faults"] > 0
    import json
    k = json.load(open(os.path.join(out, "kernel.json")))
    assert k["zram"]["algorithm"] == "lz4" and k["mem_limit"] == 64 << 20 and k["swappiness"] == 100
    # The raw tables are the programs' ring-buffer records (bpf/common.h OUTPUT, copied out by
    # c_ext/ringbuf.c km_ringbuf_drain as libbpf's ringbuf_process_ring() consumes them), the totals
    # above the same program's in-kernel counters (swapio.c swap_totals). A bio per page swapped
    # out: over 7 MB of 72-byte records through the 4 MiB buffer, so it wraps. Every record must
    # arrive, and decode whole.
    import pandas as pd
    assert s["lost_events"] == 0
    sw = pd.read_parquet(os.path.join(out, "raw", "swapio.parquet"))
    assert len(sw) * 72 > 4 << 20
    pages = sw["nr_sector"] // 8
    assert pages[sw["write"] == 1].sum() == s["swap_out_pages"]
    assert pages[sw["write"] == 0].sum() == s["swap_in_pages"]
    assert sw["dev"].nunique() == 1 and (sw["tracked"] == 1).all() and (sw["pid"] == sw["pid"].iloc[0]).all()


def test_an_unrecorded_run_sets_the_machine_up_the_same_way(tmp_path):
    # validate times the reference run again unrecorded (docs/validation.md): run_command(record=False)
    # puts the command in a limited cgroup with zram as a recorded run does, attaches no probe, and
    # restores the machine after (machine_restored). Source for the swapping: vmstat pswpout
    # (mm/page_io.c count_swpout_vm_event), read by the test itself around the run.
    from kmemsim.live.recorder import run_command
    from kmemsim.live.rundir import vmstat

    def pswpout():
        return vmstat(("pswpout",))["pswpout"]
    before = pswpout()
    out = tmp_path / "run"
    rc = run_command([sys.executable, "-c", ANON_WRITER, "128"], str(out), mem_limit="64M", zram="lz4:512M",
                     swappiness=100, record=False)
    assert rc == 0
    assert pswpout() - before > 16384                      # 128 MiB in 64 MiB: at least 64 MiB out
    s = summary(str(out))
    assert s["complete"] and s["exit_code"] == 0
    assert not any((out / "raw").iterdir()) and not (out / "samples.parquet").exists()   # no probe


def test_memory_stat_read_at_the_start_and_end_only(tmp_path):
    # --memcg-interval 0: the cgroup's memory.stat (whose read flushes the statistics reclaim decides
    # by, mem_cgroup_flush_stats() in memory_stat_show()) and v1's kmem usage are read at the first
    # and last tick, so reclaim sees them as the kernel's own 2 s flush leaves them
    # (docs/recorder.md); the rest is sampled every tick, and the kernel memory's peak comes from v1's
    # watermark (memory.kmem.max_usage_in_bytes, page_counter's watermark) read at the end.
    import pandas as pd
    out = tmp_path / "run"
    r = kmemsim("run", "--mem-limit", "64M", "--zram", "lz4:512M", "--memcg-interval", "0", "-o", str(out),
                "--", sys.executable, "-c", ANON_WRITER, "128")
    assert r.returncode == 0, r.stderr
    s = pd.read_parquet(out / "samples.parquet")
    assert len(s) > 20
    memcg = s.filter(like="memcg_").iloc[:-1]
    assert (memcg.nunique() == 1).all()                     # one read before the last tick
    assert s["status_VmSwap"].nunique() > 2 and s["stat_minflt"].is_monotonic_increasing
    assert s["stat_minflt"].iloc[-1] > s["stat_minflt"].iloc[0]
    sm = summary(str(out))
    assert sm["swap_out_pages"] > 16384                     # 128 MiB written in 64 MiB
    if "memcg_kmem_usage_in_bytes" in s:
        assert sm["kernel_memory_peak_bytes"] >= s["memcg_kmem_usage_in_bytes"].max() > 0


def test_a_run_holds_the_vms_free_page_reporting(tmp_path):
    # A VM's balloon with free page reporting (virtio-balloon VIRTIO_BALLOON_F_REPORTING) hands the
    # host the pages a run frees, and their next use waits for the host: the reference run's load
    # read at half the disk's speed (docs/validation-notes.md). Where the machine has the reporting's
    # minimum free time, the run holds it at PAGE_REPORTING_HOLD_MS (read by the command itself),
    # its environment says so, and the setting is restored after (machine_restored).
    from kmemsim.live.recorder import PAGE_REPORTING_HOLD_MS, run_command
    from kmemsim.live.rundir import PAGE_REPORTING_MIN_FREE
    out = tmp_path / "run"
    seen = tmp_path / "seen"
    rc = run_command(["/bin/sh", "-c", f"cat {PAGE_REPORTING_MIN_FREE} > {seen} 2>/dev/null; true"], str(out),
                     mem_limit="64M")
    assert rc == 0
    env = json.loads((out / "kernel.json").read_text())
    if os.path.exists(PAGE_REPORTING_MIN_FREE):
        assert int(seen.read_text()) == PAGE_REPORTING_HOLD_MS
        assert env["page_reporting_min_free_ms"] == PAGE_REPORTING_HOLD_MS
    else:
        assert seen.read_text() == "" and env["page_reporting_min_free_ms"] is None
