"""Direct I/O against the live kernel: an O_DIRECT reader of a file region in a memory cgroup makes no
page-cache adds on the live kernel (the recorder's mm_filemap_add_to_page_cache records) and none in
the emulator (the trace's DIO_READ); the same region read with plain read(2) makes adds in both, so
the check can fail."""
import json
import os
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from kmemsim.core.trace import Op, TraceBuilder
from kmemsim.engine.kernel import Config, Emulator

pytestmark = pytest.mark.live

FILE_PAGES, OFF, N = 8192, 2048, 1024            # a 32 MiB file; pages [2048, 3072): 4 MiB read at once
LIMIT = 256 << 20

# The reader: the region in one preadv(2), O_DIRECT into a page-aligned (mmap'd) buffer, or plain.
READER = textwrap.dedent("""
    import mmap, os, sys
    path, mode, off, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0))
    buf = mmap.mmap(-1, n * 4096)
    got = os.preadv(fd, [buf], off * 4096)
    assert got == n * 4096, got
    print(sum(buf[::4096]))
""")


def cold_file(path, pages):
    """A file of random pages, written and fsynced, then dropped from the page cache
    (POSIX_FADV_DONTNEED drops clean folios: all of them after the fsync)."""
    rng = np.random.default_rng(7)
    with open(path, "wb") as f:
        for lo in range(0, pages, 2048):
            f.write(rng.integers(0, 255, min(2048, pages - lo) * 4096, dtype=np.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())
    drop_cache(path)
    return path


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def queue_value(path, name):
    """The block queue setting `name` (read_ahead_kb, max_sectors_kb) of the device holding path."""
    dev = os.stat(path).st_dev
    base = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    for p in (f"{base}/queue/{name}", f"{base}/../queue/{name}"):
        if os.path.exists(p):
            return int(open(p).read())
    pytest.skip(f"live test: cannot find {name} for the test file's device")


def recorded_read(path, run, mode):
    """READER run under the recorder in a fresh memory cgroup of LIMIT bytes. Returns (pages added
    to the file's page cache by summary.json, pages in its filemap add records, the run's read
    bios)."""
    from kmemsim.live.recorder import run_command
    drop_cache(path)
    script = run.parent / f"{run.name}.py"
    script.write_text(READER)
    rc = run_command([sys.executable, str(script), str(path), mode, str(OFF), str(N)], str(run),
                     mem_limit=str(LIMIT), smaps_interval=0)
    assert rc == 0
    summary = json.load(open(run / "summary.json"))
    assert summary["complete"] and summary["lost_events"] == 0, summary
    ino = os.stat(path).st_ino
    # a file read but never mapped is listed under other_files, and only once it got a page
    rows = [r for r in list(summary["files"].values()) + summary["other_files"] if r["ino"] == ino]
    added = sum(r["pages_added"] for r in rows)
    fm = pd.read_parquet(run / "raw" / "filemap.parquet")
    adds = fm[(fm["kind"] == "add") & (fm["ino"] == ino)]
    return added, int((1 << adds["order"].to_numpy().astype(np.int64)).sum()), summary["read_bios"]


def emulated_read(op, ra_kb, max_sectors_kb):
    """The reader's I/O in the emulator: open(2) of a file of the same pages, then the region read
    with `op` (DIO_READ, or FREAD for plain read(2)); a storage time (any) so that its bios are
    counted. Returns (pages added to the file, summary)."""
    b = TraceBuilder("reader")
    f = b.file("/f", FILE_PAGES)
    b.process(0, 1, "reader")
    b.event(1, 1, Op.OPEN, -1, 0, 0, 0, f)
    b.event(2, 1, op, -1, OFF, N, 0, f)
    cfg = Config(memcg_limit=LIMIT, read_ahead_kb=ra_kb, max_sectors_kb=max_sectors_kb, sample_ms=0,
                 io_latency_us=100, io_read_gbps=1.0)
    r = Emulator(cfg).replay(b.build(), check_invariants=True)
    return int(r.files.set_index("path").loc["/f", "pages_added"]), r.summary


def test_an_o_direct_reader_adds_no_page_cache_pages_live_or_emulated(tmp_path):
    # ext4_dio_read_iter() -> iomap_dio_rw(): the region goes from the device into the reader's buffer
    # and no folio is added to the file's page cache (no mm_filemap_add_to_page_cache for its inode);
    # filemap_read() of the same region adds its folios (and readahead's beyond). The emulator's
    # DIO_READ adds none either and counts the 1024 pages in pgpgin; its FREAD twin adds them.
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = cold_file(tmp_path / "kv.bin", FILE_PAGES)
    ra_kb, ms_kb = queue_value(path, "read_ahead_kb"), queue_value(path, "max_sectors_kb")

    live_direct = recorded_read(path, tmp_path / "direct", "direct")
    live_plain = recorded_read(path, tmp_path / "plain", "plain")
    emu_direct, sd = emulated_read(Op.DIO_READ, ra_kb, ms_kb)
    emu_plain, sp = emulated_read(Op.FREAD, ra_kb, ms_kb)
    print(f"\npages added (summary.json, filemap records): live O_DIRECT {live_direct[:2]}, read(2) "
          f"{live_plain[:2]}; emulated DIO_READ {emu_direct}, FREAD {emu_plain}\n"
          f"read bios: live O_DIRECT {live_direct[2]}, read(2) {live_plain[2]}; emulated DIO_READ "
          f"{sd['bio_reads']} ({sd['pgpgin']} pages), FREAD {sp['bio_reads']} ({sp['pgpgin']} pages)")

    assert live_direct[:2] == (0, 0)
    assert emu_direct == 0 and sd["nr_file_pages"] == 0 and sd["pgpgin"] == N
    # the control: read(2) of the region does add it, live and emulated
    assert live_plain[0] >= N and live_plain[1] >= N
    assert emu_plain >= N and sp["pgpgin"] == emu_plain
    # and the O_DIRECT bios read the region from the device (readio: the reader's read bios)
    assert live_direct[2]["pages"] >= N
