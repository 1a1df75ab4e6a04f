"""The core against the live kernel. First the simplest case that exercises readahead: one process
mmaps a 256 MiB file and touches it page by page, with and without POSIX_FADV_SEQUENTIAL. Folios
added to the page cache (trace_mm_filemap_add_to_page_cache, one event per folio) are counted by
bpftrace; the emulator must give the same count: the read-around window (do_sync_mmap_readahead),
the async window (page_cache_async_ra) and its folio orders growing by two per round
(page_cache_ra_order, 6.16+) decide it. Then llama.cpp's way of reading a model bigger than its
memory cgroup, without llama.cpp: pages re-read and refaults activated must agree with the kernel's."""
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


def live_folios(path, mode, tmp_path, program=TOUCH):
    if not shutil.which("bpftrace"):
        pytest.fail("bpftrace missing: make setup installs it")
    ino = os.stat(path).st_ino
    script = tmp_path / "count.bt"
    script.write_text(
        f"tracepoint:filemap:mm_filemap_add_to_page_cache /args->i_ino == {ino}/ "
        "{ @folios = count(); @pages = sum(1 << args->order); }\n")
    touch = tmp_path / "touch.py"
    touch.write_text(program)
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
    return folios_added(b, ra_kb)


def folios_added(b, ra_kb):
    """Folios and pages the emulator adds to the page cache for trace builder b, memory ample."""
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


# One fault on a window of a file mapped as ld.so maps a library (MAP_PRIVATE), with and without
# PROT_EXEC. do_sync_mmap_readahead(): a data mapping reads ra_pages around the fault, wherever the
# vma ends; since 6.17 an executable one reads from the fault forward and stops at the vma's end.
EXEC_TOUCH = textwrap.dedent("""
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    mode, rest = sys.argv[2].split(":", 1)
    off, length, page = (int(x) for x in rest.split(":"))
    prot = mmap.PROT_READ | (mmap.PROT_EXEC if mode == "exec" else 0)
    m = mmap.mmap(fd, length, mmap.MAP_PRIVATE, prot, offset=off)
    print(m[page * 4096])
""")
EXEC_FILE, EXEC_VMA, EXEC_LEN, EXEC_PAGE = 16384, 4096, 1024, 512   # pages: file, vma start, vma, fault


def emulated_one_fault(exec_, ra_kb):
    b = TraceBuilder("fault")
    f = b.file("/lib", EXEC_FILE)
    b.process(0, 1, "ld.so")
    flags = MapFlag.READ | (MapFlag.EXEC if exec_ else 0)
    m = b.mmap(1, 1, "lib", EXEC_LEN, file=f, pgoff=EXEC_VMA, flags=flags)
    b.event(2, 1, Op.READ, m, EXEC_PAGE, 1)
    return folios_added(b, ra_kb)


@pytest.mark.parametrize("mode", ["exec", "data"])
def test_exec_mapping_reads_forward_within_its_vma(tmp_path, mode):
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = tmp_path / "lib.bin"
    with open(path, "wb") as f:
        f.write(np.random.default_rng(1).integers(0, 255, EXEC_FILE * 4096, dtype=np.uint8).tobytes())
    ra_pages = read_ahead_kb(str(path)) // 4
    arg = f"{mode}:{EXEC_VMA * 4096}:{EXEC_LEN * 4096}:{EXEC_PAGE}"
    live = live_folios(str(path), arg, tmp_path, program=EXEC_TOUCH)
    emu = emulated_one_fault(mode == "exec", read_ahead_kb(str(path)))
    if mode == "exec":      # from the fault to the vma's end (ra_pages is larger here)
        expect = min(ra_pages, EXEC_LEN - EXEC_PAGE)
    else:                   # ra_pages centred on the fault, inside the file
        expect = min(ra_pages, EXEC_FILE)
    assert emu[1] == live[1] == expect
    assert emu[0] == live[0]


# The access pattern of a model whose weights do not fit: llama_mmap's FADV_SEQUENTIAL, MAP_POPULATE
# and MADV_WILLNEED, then whole-file passes, in a memory cgroup below the file size.
SCAN = textwrap.dedent("""
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_WILLNEED)
    print(sum(m[off] for _ in range(int(sys.argv[2])) for off in range(0, size, 4096)))
""")
SCAN_PAGES, SCAN_PASSES = 262144, 4          # 1 GiB: the 16 MiB readahead window is a small part


def emulated_scan(limit, ra_kb):
    b = TraceBuilder("scan")
    f = b.file("/f", SCAN_PAGES)
    b.process(0, 1, "scan")
    b.event(1, 1, Op.FADVISE, -1, 0, SCAN_PAGES, Advice.SEQUENTIAL, f)
    m = b.mmap(2, 1, "m", SCAN_PAGES, file=f, flags=MapFlag.SHARED | MapFlag.READ | MapFlag.POPULATE)
    b.event(3, 1, Op.MADVISE, m, 0, SCAN_PAGES, Advice.WILLNEED)
    starts = np.tile(np.arange(0, SCAN_PAGES, 64, dtype=np.int64), SCAN_PASSES)
    b.ranges(np.arange(4, 4 + starts.size), 1, Op.READ, m, starts, 64)
    r = Emulator(Config(memcg_limit=limit, zram="lz4:1G", read_ahead_kb=ra_kb, sample_ms=0)).replay(b.build())
    return r.summary


@pytest.mark.parametrize("pct", [40, 60])
def test_cyclic_scan_under_a_memcg_limit_matches_the_kernel(tmp_path, pct):
    # Each pass re-reads what reclaim dropped behind it, and some refaults are activated. What the
    # counts depend on:
    # - populate_vma_page_range() -> __get_user_pages(FOLL_TOUCH) marks PTE-mapped pages accessed as
    #   it goes (follow_page_pte()) but PMD-mapped folios not (follow_huge_pmd() -> touch_pmd());
    #   marking every populated page, as the emulator once did, left a large active list and
    #   activated 3,857 refaults at 40% where the kernel activates 33-37 k;
    # - workingset_test_recent(): a refault activates if its distance (about file minus cache) is
    #   within the active file list (plus anon, none here): WORKINGSET_ACTIVATE_FILE.
    # The live activation count varies between runs (40%: 17.9 k, 32.8 k, 36.8 k), so it is compared
    # within a factor of two, at 40% only: from 60% up the refault distance sits at the size of the
    # active list and the live count swings further (60%: 12.5 k, 39 k; 80%: 325 k, 402 k).
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    import json
    from kmemsim.recorder import run_command
    path = tmp_path / "f.bin"
    with open(path, "wb") as f:
        rng = np.random.default_rng(1)
        for _ in range(SCAN_PAGES // 16384):
            f.write(rng.integers(0, 255, 16384 * 4096, dtype=np.uint8).tobytes())
    script = tmp_path / "scan.py"
    script.write_text(SCAN)
    limit = SCAN_PAGES * 4096 * pct // 100
    rc = run_command([sys.executable, str(script), str(path), str(SCAN_PASSES)], str(tmp_path / "run"),
                     mem_limit=str(limit), zram="lz4:1G", swappiness=60, drop_caches=True, smaps_interval=0)
    assert rc == 0
    s = json.load(open(tmp_path / "run" / "summary.json"))
    live_added = s["files"][str(path)]["pages_added"]
    live = s["vmstat_delta"]
    emu = emulated_scan(limit, read_ahead_kb(str(path)))
    assert abs(emu["file_pages_added"] - live_added) <= 0.05 * live_added, (emu["file_pages_added"], live_added)
    if pct == 40:
        ratio = emu["workingset_activate_file"] / max(1, live["workingset_activate_file"])
        assert 1 / 2 <= ratio <= 2, (emu["workingset_activate_file"], live["workingset_activate_file"])
