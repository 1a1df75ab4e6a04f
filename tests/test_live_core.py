"""The core against the live kernel. First the simplest case that exercises readahead: one process
mmaps a 256 MiB file and touches it page by page, with and without POSIX_FADV_SEQUENTIAL. Folios
added to the page cache (trace_mm_filemap_add_to_page_cache, one event per folio) are counted by
bpftrace; the emulator must give the same count: the read-around window (do_sync_mmap_readahead),
the async window (page_cache_async_ra) and its folio orders growing by two per round
(page_cache_ra_order, 6.16+) decide it. Then llama.cpp's way of reading a model bigger than its
memory cgroup, without llama.cpp: pages re-read and refaults activated must agree with the kernel's."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kmemsim.engine.kernel import Config, Emulator
from kmemsim.core.trace import Advice, MapFlag, Op, TraceBuilder

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


def random_file(path, pages, seed):
    """A file of `pages` pages of random bytes (nothing for zram or the page cache to share)."""
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        for lo in range(0, pages, 8192):
            f.write(rng.integers(0, 255, min(8192, pages - lo) * 4096, dtype=np.uint8).tobytes())
    return path


def recorded_run(program, run, args, mem_limit, zram):
    """Python source `program` run with args under the recorder (kmemsim.live.recorder.run_command): a
    fresh memory cgroup of mem_limit bytes, page cache dropped first. Returns its summary.json."""
    from kmemsim.live.recorder import run_command
    script = run.parent / f"{run.name}.py"
    script.write_text(program)
    rc = run_command([sys.executable, str(script), *map(str, args)], str(run), mem_limit=str(mem_limit),
                     zram=zram, swappiness=60, drop_caches=True, smaps_interval=0)
    assert rc == 0
    return json.load(open(run / "summary.json"))


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
    path = random_file(tmp_path / "f.bin", PAGES, seed=0)
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
    path = random_file(tmp_path / "lib.bin", EXEC_FILE, seed=1)
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
    # The live activation count varies between runs (40%: 17.9 k, 32.8 k, 36.8 k; session 19's six:
    # 17.9, 17.9, 26.4, 29.9, 50.2 and, in CI, 65.6 k), so at 40% it is the median of three runs,
    # compared within a factor of two (the emulator: 31.2 k); from 60% up the refault distance sits
    # at the size of the active list and the live count swings further (60%: 12.5 k, 39 k; 80%:
    # 325 k, 402 k).
    # The pages read are held to the storage bound (10%). At 60% the kernel recorded by the
    # light recorder (session 16) takes two states, 1.154 M pages (12 k activations) and 1.195 M
    # (25 k), two runs of four each; the old recorder's four runs all read 1.152-1.154 M. The
    # emulator reads 1.103 M: 4.4% and 7.7% below (docs/validation-notes.md, item 12).
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = random_file(tmp_path / "f.bin", SCAN_PAGES, seed=1)
    limit = SCAN_PAGES * 4096 * pct // 100
    runs = [recorded_run(SCAN, tmp_path / f"run{i}", [path, SCAN_PASSES], limit, "lz4:1G")
            for i in range(3 if pct == 40 else 1)]
    live_added = np.median([s["files"][str(path)]["pages_added"] for s in runs])
    emu = emulated_scan(limit, read_ahead_kb(str(path)))
    assert abs(emu["file_pages_added"] - live_added) <= 0.10 * live_added, (emu["file_pages_added"], live_added)
    if pct == 40:
        live = np.median([s["vmstat_delta"]["workingset_activate_file"] for s in runs])
        assert 1 / 2 <= emu["workingset_activate_file"] / max(1, live) <= 2, (emu["workingset_activate_file"], live)


# A decode step's weight cycle without llama.cpp: a file mapped as llama.cpp maps a model, a heap of
# which 1 page in `stride` is written after each pass, and passes over a part of the file larger
# than what the cgroup leaves it (tiny-f16's output head and blocks: 95 MiB, 114 MiB cgroup).
DECODE = textwrap.dedent("""
    import json, mmap, os, sys
    path, lo, hi, passes, heap_pages, stride, out = sys.argv[1], *map(int, sys.argv[2:7]), sys.argv[7]
    status = dict(l.split(":", 1) for l in open("/proc/self/status"))
    json.dump({"anon_kb": int(status["RssAnon"].split()[0])}, open(out, "w"))
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
    m.madvise(mmap.MADV_WILLNEED)
    heap = bytearray(heap_pages * 4096)
    for i in range(0, len(heap), 4096):
        heap[i] = 1
    s = 0
    for k in range(passes):
        s += sum(m[off] for off in range(lo * 4096, hi * 4096, 4096))
        for i in range(0, len(heap), stride * 4096):
            heap[i] = k & 255
    print(s)
""")
DEC_FILE, DEC_LO, DEC_HI, DEC_PASSES, DEC_HEAP, DEC_LIMIT = 36488, 12193, 36488, 9, 7680, 114 << 20


def interpreter_started(name, file_pages, interp):
    """A trace builder with the file f of file_pages and the Python interpreter's own start-up: its
    page cache read once and its anonymous memory written once, (file pages, anon pages) as
    measured in the live run (measured_interpreter)."""
    b = TraceBuilder(name)
    f = b.file("/f", file_pages)
    lib = b.file("/interpreter", max(1, interp[0]))
    b.process(0, 1, "python")
    b.event(1, 1, Op.FREAD, -1, 0, interp[0], 0, lib)
    a = b.mmap(2, 1, "interpreter heap", max(1, interp[1]), flags=MapFlag.READ | MapFlag.WRITE)
    b.event(3, 1, Op.WRITE, a, 0, max(1, interp[1]))
    return b, f


def measured_interpreter(run, path, out):
    """(file pages, anon pages) of the live run's interpreter: what it added to the page cache besides
    the test file, and the RssAnon its script recorded in `out` at start."""
    import pandas as pd
    fm = pd.read_parquet(os.path.join(run, "raw", "filemap.parquet"))
    other = fm[(fm.kind == "add") & (fm.ino != os.stat(path).st_ino)]
    return (int((1 << other.order.to_numpy().astype(np.int64)).sum()),
            -(-json.load(open(out))["anon_kb"] // 4))


def emulated_cycle(cfg, interp, file_pages, lo, hi, passes, heap_pages, stride):
    """DECODE's accesses after the interpreter's own start-up, replayed with cfg: (pages of the file
    added to the page cache, the summary)."""
    b, f = interpreter_started("decode cycle", file_pages, interp)
    b.event(4, 1, Op.FADVISE, -1, 0, file_pages, Advice.SEQUENTIAL, f)
    m = b.mmap(5, 1, "m", file_pages, file=f, flags=MapFlag.SHARED | MapFlag.READ | MapFlag.POPULATE)
    b.event(6, 1, Op.MADVISE, m, 0, file_pages, Advice.WILLNEED)
    h = b.mmap(7, 1, "heap", heap_pages, flags=MapFlag.READ | MapFlag.WRITE)
    b.event(8, 1, Op.WRITE, h, 0, heap_pages)
    t = 9
    starts = np.arange(lo, hi, 64, dtype=np.int64)
    sparse = np.arange(0, heap_pages, stride, dtype=np.int64)
    for _ in range(passes):
        b.ranges(np.arange(t, t + starts.size), 1, Op.READ, m, starts, np.minimum(64, hi - starts))
        t += starts.size
        b.ranges(np.arange(t, t + sparse.size), 1, Op.WRITE, h, sparse, 1)
        t += sparse.size
    r = Emulator(cfg).replay(b.build())
    return int(r.files.set_index("path").loc["/f", "pages_added"]), r.summary


def emulated_decode_cycle(zram, ra_kb, interp):
    cfg = Config(memcg_limit=DEC_LIMIT, zram=zram, read_ahead_kb=ra_kb, sample_ms=0)
    return emulated_cycle(cfg, interp, DEC_FILE, DEC_LO, DEC_HI, DEC_PASSES, DEC_HEAP, 16)


@pytest.mark.parametrize("zram", ["lz4:4G", None], ids=["zram", "no-swap"])
def test_decode_cycle_with_a_cold_heap_matches_the_kernel(tmp_path, zram):
    # With swap, get_scan_count() turns part of reclaim onto the heap's cold pages (folio_check_
    # references(): no young PTE since the last scan), swap_writepage() sends them to zram, and the
    # room they leave keeps more of the file cycle cached (workingset_refault() activating what
    # comes back within the active list plus anon); without swap the cycle thrashes. Live runs with
    # zram read 375-494 MiB of the file (the emulator 360-373), without swap 981-1,145 MiB (the
    # emulator 996-1,017); pages swapped out 4.9-6.8 k live, 5.6 k emulated. One live run alone
    # moves by up to a third (with zram 375-494 MiB; without swap a CI run read 850 MiB, and on
    # session 14's machine eight runs read 798-994 MiB, a CI pair's mean 821 MiB against the
    # emulator's 1,020). Session 16's light recorder: with zram six runs read 95.5-125.8 k pages
    # (the old recorder's six 95.1-125.7 k), but inside the suite two pairs read 151.4-151.6 k and
    # 124.8-176.0 k, where the emulator reads 96 k. So three runs, and pages read within 30% of at
    # least one of them (validate's within_some_run: a figure the kernel made; the emulator at the
    # low end with zram, at the high end without swap on that machine); swap-out within 2x of
    # their mean.
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = random_file(tmp_path / "f.bin", DEC_FILE, seed=2)
    live, emulated, live_swap, emu_swap = [], [], [], []
    for k in range(3):
        run, out = tmp_path / f"run{k}", tmp_path / f"interp{k}.json"
        s = recorded_run(DECODE, run, [path, DEC_LO, DEC_HI, DEC_PASSES, DEC_HEAP, 16, out], DEC_LIMIT, zram)
        live.append(s["files"][str(path)]["pages_added"])
        live_swap.append(s["vmstat_delta"]["pswpout"])
        emu_added, emu = emulated_decode_cycle(zram, read_ahead_kb(str(path)), measured_interpreter(str(run), path, out))
        emulated.append(emu_added)
        emu_swap.append(emu["pswpout"])
    assert any(abs(e - x) <= 0.3 * x for e, x in zip(emulated, live)), (emulated, live)
    if zram:
        assert min(live_swap) > 0 and 1 / 2 <= np.mean(emu_swap) / np.mean(live_swap) <= 2, (emu_swap, live_swap)


# A sequential scan of a file much larger than its cgroup, page by page, as a reader with
# POSIX_FADV_SEQUENTIAL does (16 MiB windows here): how often the kernel reads the file over decides
# what a model larger than its memory costs.
SEQ_SCAN = textwrap.dedent("""
    import json, mmap, os, sys, time
    path, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    status = dict(l.split(":", 1) for l in open("/proc/self/status"))
    # the reader's own time per page: the scan's loop over a resident 64 KiB mapping
    a = mmap.mmap(-1, 1 << 16)
    t = time.perf_counter()
    for _ in range(256):
        sum(a[off] for off in range(0, len(a), 4096))
    pace_ns = (time.perf_counter() - t) * 1e9 / (256 * 16)
    json.dump({"anon_kb": int(status["RssAnon"].split()[0]), "pace_ns": pace_ns}, open(out, "w"))
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    flags = mmap.MAP_SHARED | (mmap.MAP_POPULATE if mode == "populate" else 0)
    m = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ)
    print(sum(m[off] for off in range(0, size, 4096)))
""")
SEQ_FILE = 36488                              # the tiny-f16 model's size in pages (143 MiB)


def emulated_seq_scan(mode, limit, ra_kb, interp, pace_ns, timed):
    """The same scan after the interpreter's own start-up, a page every pace_ns; timed: with this
    machine's storage and reclaim times as `kmemsim predict` runs the core (whether reclaim meets a
    readahead window before the reader does is a race between the two), else reads complete as
    the readahead call returns."""
    from kmemsim.validate.measure import this_machine
    b, f = interpreter_started("sequential scan", SEQ_FILE, interp)
    b.event(4, 1, Op.FADVISE, -1, 0, SEQ_FILE, Advice.SEQUENTIAL, f)
    flags = MapFlag.SHARED | MapFlag.READ | (MapFlag.POPULATE if mode == "populate" else 0)
    m = b.mmap(5, 1, "m", SEQ_FILE, file=f, flags=flags)
    b.ranges(6 + np.arange(SEQ_FILE) * max(1, round(pace_ns)), 1, Op.READ, m, np.arange(SEQ_FILE), 1)
    costs = this_machine().task_costs("lz4:1G") if timed else {}
    r = Emulator(Config(memcg_limit=limit, zram="lz4:1G", read_ahead_kb=ra_kb, sample_ms=0, **costs)).replay(b.build())
    return int(r.files.set_index("path").loc["/f", "pages_added"])


@pytest.mark.parametrize("mode,mib", [("touch", 64), ("populate", 64)])
def test_sequential_scan_through_a_small_cgroup_matches_the_kernel(tmp_path, mode, mib):
    # Each async window (page_cache_async_ra) is charged while the last is still being read; with
    # the window a quarter to half of the cgroup, reclaim takes readahead folios before the reader
    # reaches them (a folio under read is kept: shrink_folio_list()'s folio_trylock()), and the
    # read-around of the miss re-reads the 8 MiB behind it. With MAP_POPULATE first, the populate
    # pass and the scan each read the file. Live on the machine of sessions 14-24: 183 MiB (touch)
    # and 493 MiB (populate); the emulator 182 and 501 MiB. Not asserted, and in
    # docs/validation-notes.md: a 48 MiB cgroup, where the emulator reads 21% less (53 k pages against
    # 64-69 k), and 32 MiB, where the interpreter (~12 MiB) is so large a part of the cgroup that the
    # emulated figure moves by 20% with a few of its pages.
    # The kernel moves between runs: with session 16's light recorder the populate case read
    # 107-127 k pages over nine runs (the old recorder's eight: 122-129 k), the emulator 125.7 k.
    # The touch case is a race between the reader and reclaim: session 25's machine read 36,488,
    # 41,336-41,576 or 44,083-45,683 pages (reclaim took the window just ahead of the reader, a
    # read-around re-read it in order-0 folios and the order ramp began again, once or twice),
    # where the machine before read ~46.8 k in every run. The emulator with the storage and reclaim
    # times and the reader's measured pace (80-170 ns a page) makes 41,576; at 0.75 us or more,
    # 45,656; with reads that take no time, 48.6-48.9 k. The populate case runs with reads that
    # take no time: with the device's times the emulator's populate pass reads 45.2 k pages where
    # the kernel's reads 60-61 k (both drop a file folio in 2.5-3.1 us and scan 45-52 k pages under
    # read), which is not yet found (docs/validation-notes.md, "Where and why it misses", item 16). So
    # five runs, and the emulator within 10% of at least one of them (validate's within_some_run:
    # a figure the kernel made).
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = random_file(tmp_path / "f.bin", SEQ_FILE, seed=5)
    limit = mib << 20
    pairs = []
    for i in range(5):
        out, run = tmp_path / f"interp{i}.json", tmp_path / f"run{i}"
        s = recorded_run(SEQ_SCAN, run, [path, mode, out], limit, "lz4:1G")
        live_added = s["files"][str(path)]["pages_added"]
        interp = measured_interpreter(str(run), path, out)
        pace = json.load(open(out))["pace_ns"]
        pairs.append((emulated_seq_scan(mode, limit, read_ahead_kb(str(path)), interp, pace, mode == "touch"),
                      live_added))
    # the mechanism, readahead against reclaim: in a run the kernel read a window (16 MiB) over again
    assert max(live for _, live in pairs) > SEQ_FILE + (16 << 20) // 4096, pairs
    assert any(abs(e - live) <= 0.1 * live for e, live in pairs), pairs


# llama-1B at 100% without llama.cpp: the decode cycle's program over a whole file of 1.25 GiB,
# a little larger than what its cgroup leaves it, beside a heap written whole after every pass.
HOT_FILE, HOT_PASSES, HOT_HEAP_PAGES, HOT_LIMIT, HOT_ZRAM = 327680, 4, 38400, 1280 << 20, "lz4:2G"


def emulated_hot_heap(ra_kb, interp, stats_flush_ms, stats_flush_phase_ms=0.0):
    """With this machine's storage and reclaim times as `kmemsim predict` runs the core
    (workloads/devices/this-machine.toml): the clock the statistics flushes follow."""
    from kmemsim.validate.measure import this_machine
    cfg = Config(memcg_limit=HOT_LIMIT, zram=HOT_ZRAM, read_ahead_kb=ra_kb, sample_ms=0,
                 stats_flush_ms=stats_flush_ms, stats_flush_phase_ms=stats_flush_phase_ms,
                 **this_machine().task_costs(HOT_ZRAM))
    return emulated_cycle(cfg, interp, HOT_FILE, 0, HOT_FILE, HOT_PASSES, HOT_HEAP_PAGES, 1)


def test_file_cycle_beside_a_hot_heap_matches_the_kernel(tmp_path):
    # workingset_test_recent(): with swap available, a file refault's distance is held against the
    # active file list and both anonymous lists, and the heap (written every pass, never reclaimed)
    # makes nearly every refault recent. The refaults go to the active list, which
    # shrink_active_list() drains when prepare_scan_control() sees new refault activations or
    # inactive_is_low() (the file LRU is over 1 GiB: ratio 3). Both read the memcg's statistics as
    # of their last flush (lruvec_page_state()), and the recorder flushes them every 10 ms (reading
    # memory.stat), so the emulator flushes as often. Live: 1,623,040 pages read in each of three
    # runs (the whole file each pass after the first), every refault activated; the emulator
    # 1,623,544, 99.8% activated. Reading the statistics as they are instead it reads 1,390,926
    # (-14%), and 1.54 M without the interpreter's 10 MiB: the cycle sits on a knife edge there, not
    # in the kernel. Unrecorded (sampling every 100 s) the kernel reads 1,275,030: the recorder
    # changes the run (docs/validation-notes.md, item 12). Where the flushes fall against the run is the
    # run's chance (Config.stats_flush_phase_ms), and the emulated cycle is sensitive to it: with
    # one CI run's interpreter (2,675 file pages) the flushes at 0 ms swapped out 250 pages
    # and read 1,587,152 pages, at 2.5, 5 and 7.5 ms none and 1,583,616-1,621,500. So the emulator's
    # figures are the median over five phases across the flush period.
    from kmemsim.live.samplers import INTERVAL_S
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    path = random_file(tmp_path / "f.bin", HOT_FILE, seed=3)
    run, out = tmp_path / "run", tmp_path / "interp.json"
    s = recorded_run(DECODE, run, [path, 0, HOT_FILE, HOT_PASSES, HOT_HEAP_PAGES, 1, out], HOT_LIMIT, HOT_ZRAM)
    live_added, live = s["files"][str(path)]["pages_added"], s["vmstat_delta"]
    interp = measured_interpreter(str(run), path, out)
    period, ra_kb = 1e3 * INTERVAL_S, read_ahead_kb(str(path))
    runs = [emulated_hot_heap(ra_kb, interp, period, k * period / 5) for k in range(5)]
    emu_added = float(np.median([a for a, _ in runs]))
    assert abs(emu_added - live_added) <= 0.05 * live_added, (emu_added, live_added)
    assert live["workingset_activate_file"] >= 0.85 * live["workingset_refault_file"], live
    ratio = np.median([e["workingset_activate_file"] / max(e["workingset_refault_file"], 1) for _, e in runs])
    assert ratio >= 0.85, ratio
    # the heap is never reclaimed: none of it swapped in the emulator; live at most one batch of
    # isolated pages (SWAP_CLUSTER_MAX, shrink_inactive_list()): a CI run on session 14's machine
    # swapped out 1 page
    emu_out = float(np.median([e["pswpout"] for _, e in runs]))
    assert emu_out == 0 and live["pswpout"] <= 32, (live["pswpout"], [e["pswpout"] for _, e in runs])
