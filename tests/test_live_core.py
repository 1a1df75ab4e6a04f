"""The core against the live kernel on the simplest case that exercises readahead: one process
mmaps a 256 MiB file and touches it page by page, with and without POSIX_FADV_SEQUENTIAL. Folios
added to the page cache (trace_mm_filemap_add_to_page_cache, one event per folio) are counted by
bpftrace; the emulator must give the same count: the read-around window (do_sync_mmap_readahead),
the async window (page_cache_async_ra) and its folio orders growing by two per round
(page_cache_ra_order, 6.16+) decide it."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kmemsim.emulator import Config, Emulator
from kmemsim.trace import Advice, MapFlag, Op, TraceBuilder

pytestmark = pytest.mark.live
PAGES = 65536

TOUCH = textwrap.dedent("""
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    size = os.fstat(fd).st_size
    if sys.argv[2] == "seq":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    print(sum(m[off] for off in range(0, size, 4096)))
""")


def read_ahead_kb(path):
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    base = f"/sys/dev/block/{major}:{minor}"
    for p in (f"{base}/queue/read_ahead_kb", f"{base}/../queue/read_ahead_kb", f"{base}/bdi/read_ahead_kb"):
        if os.path.exists(p):
            return int(open(p).read())
    pytest.skip("live test: cannot find read_ahead_kb for the test file's device")


def live_folios(path, mode, tmp_path):
    if not shutil.which("bpftrace"):
        pytest.fail("bpftrace missing: make setup installs it")
    ino = os.stat(path).st_ino
    script = tmp_path / "count.bt"
    script.write_text(
        f"tracepoint:filemap:mm_filemap_add_to_page_cache /args->i_ino == {ino}/ "
        "{ @folios = count(); @pages = sum(1 << args->order); }\n")
    touch = tmp_path / "touch.py"
    touch.write_text(TOUCH)
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    out = subprocess.run(["bpftrace", str(script), "-c", f"{sys.executable} {touch} {path} {mode}"],
                         capture_output=True, text=True, timeout=120)
    vals = {}
    for line in out.stdout.splitlines():
        if line.startswith("@"):
            k, v = line.split(":")
            vals[k.strip("@ ")] = int(v)
    assert "folios" in vals, out.stdout + out.stderr
    return vals["folios"], vals["pages"]


def emulated(mode, ra_kb):
    b = TraceBuilder("touch")
    f = b.file("/f", PAGES)
    b.process(0, 1, "touch")
    if mode == "seq":
        b.event(1, 1, Op.FADVISE, -1, 0, PAGES, Advice.SEQUENTIAL, f)
    m = b.mmap(2, 1, "m", PAGES, file=f, flags=MapFlag.SHARED | MapFlag.READ)
    b.ranges(np.arange(3, 3 + PAGES), 1, Op.READ, m, np.arange(PAGES), 1)
    s = Emulator(Config(mem="16G", read_ahead_kb=ra_kb, sample_ms=0)).replay(b.build()).summary
    return s["file_folios_added"], s["file_pages_added"]


@pytest.mark.parametrize("mode", ["seq", "normal"])
def test_readahead_folios_match_the_kernel(tmp_path, mode):
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = tmp_path / "f.bin"
    with open(path, "wb") as f:
        f.write(np.random.default_rng(0).integers(0, 255, PAGES * 4096, dtype=np.uint8).tobytes())
    live = live_folios(str(path), mode, tmp_path)
    emu = emulated(mode, read_ahead_kb(str(path)))
    assert emu[1] == live[1] == PAGES
    assert emu[0] == live[0]
