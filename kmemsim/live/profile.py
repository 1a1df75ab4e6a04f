"""`kmemsim profile`: measure this machine into a device profile (workloads/devices/this-machine.toml).

- storage: O_DIRECT preads at queue depth 1 of a temp file of random data (random_file(); random
  aligned offsets, the sizes of IO_KB in turns; without O_DIRECT, e.g. tmpfs,
  posix_fadvise(DONTNEED) then pread), the QD1 table; then, with fio, random O_DIRECT reads at I/O
  sizes FIO_KB and queue depths FIO_QD (fio_sweep(): one short job per point, the points in a new
  order each round, the median of the rounds per point): the throughput table by size and queue
  depth ([storage] throughput_io_kb, qd, throughput_gbps: Device.flash_throughput, the rate of reads
  kept in flight: engines' O_DIRECT reads), its largest value (max_gbps) and the block device's
  queue depth (queue_depth). The validation's per-boot profile measures the QD1 table alone
  (`kmemsim profile --no-fio`: the kernel's reads are timed by it). From the queue depth 1 times:
  per-I/O latency = the 4 KiB time (the fastest size's, if a larger read was faster) less its
  transfer at the best bandwidth seen; per size, the table keeps the bandwidth that reproduces the
  measured median time:
  t(S) = latency + S / bandwidth(S). Then the size readahead reads in, max_sectors_kb, as readahead
  reads it: a cold file of random data mapped with MAP_POPULATE (readahead_bandwidth()); the
  emulator's reads run at that size's bandwidth (device.task_costs).
- zram: as root, a real zram device (hot_add, disksize, O_DIRECT writes = compress, reads =
  decompress, then hot_remove) for each algorithm the kernel offers; otherwise, and for algorithms
  the kernel lacks, the python lz4 / zstandard packages, one call per 4 KiB page as zram
  does, on pages of realistic content (fp16 activations, int8 weights, heap-like structs). The file says which was used per algorithm.
- compute: llama.cpp (llama-cpp-python) prefill and decode speed on a small synthetic q8_0 model
  (kmemsim.workload.synth.write_model), expressed per weight byte (the roofline kmemsim.engine.time.serial uses).
- reclaim: as root, the time memcg reclaim takes per file folio it drops and per anonymous page it
  swaps out to zram: a process scans a mapped file four times its cgroup (no swap), then one writes
  an anonymous buffer three times its cgroup (zram); each runs recorded (kmemsim.live.recorder: the
  folios and pages) and again unrecorded (the time: the memory stall PSI counts, as the recorder's
  probes slow reclaim); each cost is the median of three such runs.
"""
from __future__ import annotations

import json
import mmap
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import lz4.block
import numpy as np
import pandas as pd
import zstandard

from ..core.errors import InputError
from ..core.trace import TraceBuilder
from ..core.units import PAGE_SIZE
from ..engine.kernel_release import release_config
from ..engine.time.compute import MUL_MAT_ID, TimeModel
from ..workload import llama as lw, synth
from ..workload.llama.cb_eval import quiet as quiet_llama
from .recorder import run_command

IO_KB = [4, 16, 64, 128, 512, 2048]   # the queue depth 1 table's I/O sizes (KiB): pread's
FIO_KB = [4, 16, 64, 256, 1024]        # the flash table's I/O sizes (KiB): fio's
FIO_QD = [1, 2, 4, 8, 16, 32]          # the queue depths fio keeps in flight (UFS 4.0's command queue: 32)


# ------------------------------------------------------------------------------------------------
# storage

def _aligned(n):
    return mmap.mmap(-1, n)


@contextmanager
def random_file(dir, file_mb):
    """A temp file of file_mb MiB of random data in dir (written and fsynced; removed afterwards): the
    storage measurements' file, and tests/test_flash_live.py's. Random data, so no layer on the way
    can compress it or skip it as zeros."""
    fd, path = tempfile.mkstemp(dir=dir, prefix=".kmemsim-profile-")
    try:
        chunk = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
        with os.fdopen(fd, "wb") as f:
            for i in range(file_mb):
                f.write(chunk[i % 4096:] + chunk[:i % 4096])
            f.flush()
            os.fsync(f.fileno())
        yield path
    finally:
        if os.path.exists(path):
            os.unlink(path)


class FioError(RuntimeError):
    """fio is missing or could not measure (why, in one line)."""


def fio_engine() -> str:
    """fio's asynchronous engine on this machine: io_uring where fio has it and the kernel allows it,
    else libaio. FioError without fio."""
    exe = shutil.which("fio")
    if not exe:
        raise FioError("fio is not installed (`make setup` installs it: apt-get install fio)")
    try:
        out = subprocess.run([exe, "--enghelp"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise FioError(f"fio --enghelp: {e}")
    engines = set(out.split())
    try:
        uring_off = int(Path("/proc/sys/kernel/io_uring_disabled").read_text()) != 0
    except (OSError, ValueError):
        uring_off = False
    for e in (["io_uring"] if not uring_off else []) + ["libaio"]:
        if e in engines:
            return e
    raise FioError("fio has neither io_uring nor libaio")


def fio_version() -> str:
    try:
        return subprocess.run(["fio", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "fio"


def fio_run(path, jobs, seconds, engine, extra=()) -> dict:
    """One fio process: the jobs (name, io_kb, queue_depth) one after another (stonewall), each
    `seconds` of random O_DIRECT reads of path at aligned offsets (fio's default: the I/O size),
    JSON output. {name: bytes per second} (the job's bytes read over its run time)."""
    cmd = ["fio", "--output-format=json", f"--filename={path}", "--direct=1", "--rw=randread",
           f"--ioengine={engine}", "--time_based", f"--runtime={max(1, round(seconds * 1000))}ms",
           "--norandommap", "--randrepeat=0", "--invalidate=0", *extra]
    for name, kb, q in jobs:
        cmd += [f"--name={name}", f"--bs={kb}k", f"--iodepth={q}", "--stonewall"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + len(jobs) * (seconds + 5))
    except (OSError, subprocess.SubprocessError) as e:
        raise FioError(f"fio: {e}")
    if r.returncode != 0 or "{" not in r.stdout:
        msg = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
        raise FioError(f"fio on {path} ({engine}): {msg}")
    try:
        out = json.loads(r.stdout[r.stdout.index("{"):])
        got = {}
        for j in out["jobs"]:
            rd = j["read"]
            if j.get("error") or rd["runtime"] <= 0 or rd["io_bytes"] <= 0:
                raise FioError(f"fio job {j['jobname']} on {path}: error {j.get('error')}, "
                               f"{rd['io_bytes']} bytes in {rd['runtime']} ms")
            got[j["jobname"]] = rd["io_bytes"] / (rd["runtime"] / 1e3)
    except (ValueError, KeyError, TypeError) as e:
        raise FioError(f"fio's JSON output: {e}")
    if set(got) != {n for n, _, _ in jobs}:
        raise FioError(f"fio reported jobs {sorted(got)}, not the {len(jobs)} run")
    return got


def fio_sweep(path, io_kb=FIO_KB, qds=FIO_QD, seconds=0.25, rounds=5, progress=None, seed=0) -> dict:
    """fio's random O_DIRECT reads of path at every I/O size (KiB) and queue depth: `rounds` fio
    processes, each with one `seconds` job per point, the points in a new (seeded) order each round,
    so a slow spell of a shared disk lands on other points each round; the median of the rounds per
    point. (On this project's shared 2-CPU VM the large reads ran from 2.8 to 10.5 GB/s in spells of
    seconds to minutes, and small reads at deep queues by 2x as the scheduler placed fio beside the
    disk's interrupts or not: tests/test_flash_live.py. Rounds spread each point over the whole run.
    fio spends ~0.25 s between jobs, whatever their length.) First a discarded warm-up (the
    file read once, then a short random pass): a freshly written file's first reads paid for the
    write still settling below (1.5 ms per 4 KiB read for 0.3 s after writing 2 GiB here). FioError
    if fio is missing or fails.

    {"gbps": rows per size of GB/s per queue depth, "samples": the same with each round's, "engine",
    "version", "seconds", "rounds", "elapsed_s"}."""
    t0 = time.perf_counter()
    engine = fio_engine()
    try:
        fio_run(path, [("warm", 1024, 8)], 0.2, engine, extra=["--rw=read", "--time_based=0"])
    except FioError:
        if engine != "io_uring":
            raise
        engine = "libaio"                  # io_uring listed but refused (seccomp, a container's policy)
        fio_run(path, [("warm", 1024, 8)], 0.2, engine, extra=["--rw=read", "--time_based=0"])
    fio_run(path, [("warm-4k", 4, 1), ("warm-1m", 1024, 32)], 0.1, engine)
    points = [(kb, q) for kb in io_kb for q in qds]
    samples = {p: [] for p in points}
    rng = np.random.default_rng(seed)
    for r in range(rounds):
        order = [points[i] for i in rng.permutation(len(points))]
        got = fio_run(path, [(f"r{r}-{kb}k-qd{q}", kb, q) for kb, q in order], seconds, engine)
        for kb, q in order:
            samples[(kb, q)].append(got[f"r{r}-{kb}k-qd{q}"] / 1e9)
        if progress:
            progress(f"flash: fio round {r + 1}/{rounds} ({len(points)} jobs of {seconds:g} s)")
    gbps = [[float(np.median(samples[(kb, q)])) for q in qds] for kb in io_kb]
    return {"engine": engine, "version": fio_version(), "io_kb": list(io_kb), "qd": list(qds), "gbps": gbps,
            "samples": [[samples[(kb, q)] for q in qds] for kb in io_kb], "seconds": seconds,
            "rounds": rounds, "elapsed_s": time.perf_counter() - t0}


def _block_queue_depth(d) -> int | None:
    """The queue depth of the block device under directory d: its hardware queues' tag count
    (/sys/block/DEV/mq/*/nr_tags: how many requests the host keeps at the device; UFS: 32); None
    where there is none (tmpfs, device-mapper)."""
    try:
        dev = os.stat(d).st_dev
        p = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
        for b in (p, p.resolve().parent):
            tags = [int(t.read_text()) for t in (b / "mq").glob("*/nr_tags")]
            if tags:
                return min(tags)
    except (OSError, ValueError):
        pass
    return None


def _pread_times(path, size, seconds_per_size, rounds):
    """O_DIRECT pread at queue depth 1 (posix_fadvise(DONTNEED) + pread where O_DIRECT is refused):
    the median seconds per read of each size of IO_KB, and how it was measured."""
    method = "O_DIRECT pread, queue depth 1"
    try:
        rfd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        direct = True
    except OSError:
        rfd = os.open(path, os.O_RDONLY)
        direct = False
        method = "posix_fadvise(DONTNEED) + pread, queue depth 1 (no O_DIRECT here)"
    rng = np.random.default_rng(1)
    # the sizes take turns, `rounds` times over, so a slow spell of a shared disk (a VM's) lands
    # on every size and not on the one measured then
    samples = {kb: [] for kb in IO_KB}
    try:
        for _ in range(rounds):
            for kb in IO_KB:
                n = kb << 10
                buf = _aligned(n)
                ts = samples[kb]
                t_end, first = time.perf_counter() + seconds_per_size / rounds, len(ts)
                while time.perf_counter() < t_end or len(ts) - first < 8:
                    off = int(rng.integers(0, size // n)) * n
                    if not direct:
                        os.posix_fadvise(rfd, off, n, os.POSIX_FADV_DONTNEED)
                    t0 = time.perf_counter()
                    try:
                        got = os.preadv(rfd, [buf], off)
                    except OSError:
                        if not direct:
                            raise
                        os.close(rfd)
                        rfd = os.open(path, os.O_RDONLY)
                        direct = False
                        method = "posix_fadvise(DONTNEED) + pread, queue depth 1 (O_DIRECT refused)"
                        continue
                    ts.append(time.perf_counter() - t0)
                    if got != n:
                        raise InputError(f"profile: short read on {path}")
                    if len(ts) - first > 20000:
                        break
    finally:
        os.close(rfd)
    return [float(np.median(samples[kb])) for kb in IO_KB], method


def storage_table(times, sweep=None, queue_depth=None) -> dict:
    """The [storage] tables: from the median seconds per queue depth 1 read of each size of IO_KB
    (times), the QD1 table; from a fio_sweep(), the table by size and queue depth, its largest value
    as max_gbps, and queue_depth: the block device's, default the deepest measured."""
    kb = list(IO_KB)
    S = np.array(kb, float) * 1024
    t = np.array(times, float)
    # per-I/O latency: the 4 KiB time less its transfer at the best bandwidth seen at any size; the
    # fastest size's where a larger read was faster (a fixed cost no read beats: every size keeps a
    # positive transfer time, so a bandwidth)
    f = int(np.argmin(t))
    a = float(max(0.0, t[f] - S[f] / float((S / t).max())))
    bw = S / np.maximum(t - a, 1e-9)
    out = {"io_kb": kb, "measured_us": [round(x * 1e6, 2) for x in t],
           "latency_us": [round(a * 1e6, 2)] * len(kb), "bandwidth_gbps": [round(x / 1e9, 4) for x in bw],
           "fio": sweep}
    if sweep is not None:
        out["throughput_io_kb"] = list(sweep["io_kb"])
        out["qd"] = list(sweep["qd"])
        out["throughput_gbps"] = [[round(x, 4) for x in row] for row in sweep["gbps"]]
        out["max_gbps"] = max(max(row) for row in out["throughput_gbps"])
        out["queue_depth"] = int(queue_depth or max(sweep["qd"]))
        out["queue_depth_nr_tags"] = bool(queue_depth)
    return out


def storage(dir=None, file_mb=256, seconds_per_size=0.4, progress=None, rounds=4, fio=False,
            fio_seconds=0.25, fio_rounds=5) -> dict:
    """The [storage] table (the module's doc): pread at queue depth 1 (the QD1 table), and with fio
    the flash with reads in flight (fio_sweep(): the table by size and queue depth); where fio is
    missing or fails, the QD1 table alone (the reason in "fio_error")."""
    d = dir or os.environ.get("TMPDIR") or "/var/tmp"
    sweep, fio_error = None, None
    with random_file(d, file_mb) as path:
        times, method = _pread_times(path, file_mb << 20, seconds_per_size, rounds)
        if progress:
            progress("storage: " + ", ".join(f"{kb} KiB {t * 1e6:.0f} us" for kb, t in zip(IO_KB, times)))
        if fio:
            try:
                sweep = fio_sweep(path, seconds=fio_seconds, rounds=fio_rounds, progress=progress)
            except FioError as e:
                fio_error = str(e)
                if progress:
                    progress(f"flash: {e}; the queue depth 1 table alone")
        out = storage_table(times, sweep, _block_queue_depth(d) if sweep else None) | {"method": method}
        if sweep:
            out["fio_method"] = (f"{sweep['version']} ({sweep['engine']}) random O_DIRECT reads, "
                                 f"queue depth 1-{max(sweep['qd'])}")
        ra = readahead_bandwidth(path, file_mb, rounds)      # the same file, dropped again
    out |= {"dir": d, "fio_error": fio_error}
    max_kb = _read_ahead_kb(d)[1]
    # the requests only readahead issues, max_sectors_kb: "readahead" is the point in the table
    # (None where there is none, e.g. no block queue)
    out["readahead"] = ra if ra and max_kb > out["io_kb"][-1] else None
    if out["readahead"]:
        out["io_kb"].append(max_kb)
        out["latency_us"].append(out["latency_us"][0])
        out["bandwidth_gbps"].append(round(ra["gbps"], 4))
    return out


def readahead_bandwidth(path, file_mb, rounds=4) -> dict | None:
    """The storage as the kernel's readahead reads it: storage()'s file of random data mapped
    with MAP_POPULATE, as llama.cpp loads a model. Its large folios go out as max_sectors_kb requests,
    which O_DIRECT from a user buffer does not issue (its bios are cut at the buffer's pages: 1-1.6
    MiB requests on virtio here, and slower). The file's pages are dropped first
    (POSIX_FADV_DONTNEED); the median of `rounds` (the first round can pay the guest's first touch
    of the memory). The readahead ramp's first windows are small: 256 MiB (the profile's file)
    keeps them a small part, where 32 MiB reads at half the rate here. None where the file cannot
    be dropped or mapped."""
    size = file_mb << 20
    ts = []
    try:
        for _ in range(rounds):
            rfd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(rfd, 0, 0, os.POSIX_FADV_DONTNEED)
                t0 = time.perf_counter()
                m = mmap.mmap(rfd, size, mmap.MAP_SHARED | mmap.MAP_POPULATE, mmap.PROT_READ)
                ts.append(time.perf_counter() - t0)
                m.close()
            finally:
                os.close(rfd)
    except (OSError, ValueError):
        return None
    t = float(np.median(ts))
    return {"gbps": size / t / 1e9, "seconds": [round(x, 4) for x in ts], "file_mb": file_mb}


# ------------------------------------------------------------------------------------------------
# zram

def sample_pages(n_pages=2048, seed=0) -> bytes:
    """4 KiB pages of realistic anonymous content: fp16 activations, int8 weights, heap-like structs
    (no zero pages: zram stores those without compressing)."""
    rng = np.random.default_rng(seed)
    k = n_pages // 3
    fp16 = rng.normal(0, 1, k * 2048).astype(np.float16).tobytes()
    q8 = np.clip(rng.normal(0, 30, k * PAGE_SIZE), -127, 127).astype(np.int8).tobytes()
    m = n_pages - 2 * k
    rec = np.zeros((m * PAGE_SIZE // 32, 4), np.int64)         # 32-byte structs: pointer, small ints, flags
    rec[:, 0] = 0x7f0000000000 + rng.integers(0, 1 << 24, len(rec)) * 16
    rec[:, 1] = rng.integers(0, 100, len(rec))
    rec[:, 2] = rng.integers(0, 4, len(rec))
    rec[:, 3] = rng.choice([0, 1, -1], len(rec))
    return fp16 + q8 + rec.tobytes()


def _py_codec(algo):
    if algo == "lz4":
        lb = lz4.block
        return (lambda p: lb.compress(p, store_size=False)), (lambda c: lb.decompress(c, uncompressed_size=PAGE_SIZE))
    if algo == "zstd":
        cc, dc = zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()   # zram's zstd default level is 1... 3
        return cc.compress, (lambda c: dc.decompress(c, max_output_size=PAGE_SIZE))
    return None


def zram_python(algo, pages: bytes, rounds=3) -> dict | None:
    codec = _py_codec(algo)
    if codec is None:
        return None
    comp, decomp = codec
    n = len(pages) // PAGE_SIZE
    views = [pages[i * PAGE_SIZE:(i + 1) * PAGE_SIZE] for i in range(n)]
    best_c, best_d = 1e9, 1e9
    for _ in range(rounds):
        t0 = time.perf_counter()
        cs = [comp(v) for v in views]
        t1 = time.perf_counter()
        for c in cs:
            decomp(c)
        t2 = time.perf_counter()
        best_c, best_d = min(best_c, t1 - t0), min(best_d, t2 - t1)
    ratio = len(pages) / sum(len(c) for c in cs)
    return {"compress_gbps": len(pages) / best_c / 1e9, "decompress_gbps": len(pages) / best_d / 1e9,
            "ratio": ratio, "method": f"python {algo} package, one 4 KiB page per call (includes call overhead)"}


def zram_kernel_algos() -> list[str]:
    p = Path("/sys/block/zram0/comp_algorithm")
    if p.exists():
        return [a.strip("[]") for a in p.read_text().split()]
    return []


def zram_real(algo, pages: bytes) -> dict | None:
    """Compress/decompress through a real zram block device (root). Leaves no device behind."""
    ctl = Path("/sys/class/zram-control")
    if os.geteuid() != 0 or not (ctl / "hot_add").exists():
        return None
    try:
        idx = int((ctl / "hot_add").read_text().strip())
    except OSError:
        return None
    sysd = Path(f"/sys/block/zram{idx}")
    dev = f"/dev/zram{idx}"
    try:
        (sysd / "comp_algorithm").write_text(algo)
        size = len(pages)
        (sysd / "disksize").write_text(str(size * 2))
        for _ in range(50):
            if os.path.exists(dev):
                break
            time.sleep(0.02)
        buf = _aligned(size)
        buf.write(pages)
        best_c, best_d = 1e9, 1e9
        for _ in range(3):
            fd = os.open(dev, os.O_RDWR | os.O_DIRECT)
            try:
                t0 = time.perf_counter()
                os.pwritev(fd, [buf], 0)
                t1 = time.perf_counter()
                rb = _aligned(size)
                os.preadv(fd, [rb], 0)
                t2 = time.perf_counter()
            finally:
                os.close(fd)
            best_c, best_d = min(best_c, t1 - t0), min(best_d, t2 - t1)
        mm = (sysd / "mm_stat").read_text().split()
        ratio = int(mm[0]) / max(1, int(mm[1]))
        return {"compress_gbps": size / best_c / 1e9, "decompress_gbps": size / best_d / 1e9, "ratio": ratio,
                "method": f"real zram device (/dev/zram{idx}, {algo}), O_DIRECT write/read of {size >> 20} MiB"}
    except OSError:
        return None
    finally:
        try:
            (sysd / "reset").write_text("1")
        except OSError:
            pass
        try:
            (ctl / "hot_remove").write_text(str(idx))
        except OSError:
            pass


def zram(progress=None, real=True) -> dict:
    pages = sample_pages()
    kernel = set(zram_kernel_algos()) if real else set()
    out = {}
    for algo in ("lz4", "zstd", "lzo", "lzo-rle"):
        r = zram_real(algo, pages) if algo in kernel else None
        if r is None:
            r = zram_python(algo, pages)
        if r is None:
            continue
        out[algo] = r
        if progress:
            progress(f"zram {algo}: compress {r['compress_gbps']:.2f} GB/s, decompress "
                     f"{r['decompress_gbps']:.2f} GB/s ({r['method'].split(',')[0]})")
    return out


# ------------------------------------------------------------------------------------------------
# compute (llama.cpp)

def step_cost(path: str) -> tuple[int, int, int]:
    """(weight bytes, MACs per token row, MACs per output row) of a llama_decode step of the model at
    path, as kmemsim.engine.time.compute.TimeModel counts them."""
    s = lw.LlamaSession(path, TraceBuilder(source="profile"), time_model=TimeModel(1.0, 1.0))
    return s.step_weight_bytes, *s.step_macs


# The weight types measured apart ([compute.TYPE], TimeModel.by_type): the three the synthetic models
# and most GGUFs users run are made of; the first is also the device's pair ([compute] itself).
TYPES = ("q8_0", "f16", "q4_0")
# The shapes the per-type rates and the per-layer costs are fitted over: a 1B model's wide layers (60 M
# MACs per token each, the matmuls outweigh the rest) and narrow ones (3 M: the nodes without weights
# weigh), so that neither the rates nor the per-layer terms carry the other's share; and an MoE whose
# experts (mul_mat_id) do most of its MACs (wide experts, a small vocabulary), which gives them their
# own MAC rate from what the dense costs leave of its time
SHAPES = (("Llama-3.2-1B x4", dict(preset="Llama-3.2-1B", layers=4)),
          ("llama 512-wide x8", dict(arch="llama", n_layer=8, n_embd=512, n_ff=1536, n_head=8, n_head_kv=4,
                                     n_vocab=32000)),
          ("qwen3moe 8 experts x4", dict(arch="qwen3moe", n_layer=4, n_embd=1024, n_ff=2048, n_head=16,
                                         n_head_kv=4, head_dim=64, n_expert=8, n_expert_used=2, n_vocab=8000)))


def step_times(path, prompts=(32, 128), decode=32, rounds=5, threads=2) -> dict | None:
    """llama.cpp's own llama_decode on the GGUF at path, after a warm-up: per round, a prefill of
    each size in `prompts` (one output row) from an empty cache, then `decode` single-token steps
    (their median). Each figure is the median over the rounds: on a shared 2-CPU machine one round in a
    few is slowed (steal). None without llama-cpp-python."""
    try:
        import llama_cpp                 # an optional dependency (make setup installs it)
    except ImportError:
        return None
    quiet_llama(llama_cpp)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    if not model:
        return None
    n_max = max(prompts)
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = n_max + decode + 16
    cp.n_batch = cp.n_ubatch = n_max
    cp.n_threads = cp.n_threads_batch = int(threads)
    lctx = llama_cpp.llama_init_from_model(model, cp)
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        nv = llama_cpp.llama_vocab_n_tokens(vocab)
        toks = [int(x) for x in np.random.default_rng(0).integers(300, nv, n_max)]
        mem = llama_cpp.llama_get_memory(lctx)

        def run(n):
            arr = (llama_cpp.llama_token * n)(*toks[:n])
            t0 = time.perf_counter()
            if llama_cpp.llama_decode(lctx, llama_cpp.llama_batch_get_one(arr, n)) != 0:
                raise RuntimeError("llama_decode failed")
            return time.perf_counter() - t0

        run(n_max)                                           # warm-up
        pre, dec = {n: [] for n in prompts}, []
        for _ in range(rounds):
            for n in prompts:
                llama_cpp.llama_memory_clear(mem, True)
                pre[n].append(run(n))
            dec.append(float(np.median([run(1) for _ in range(decode)])))   # after the prefill's cells
    except RuntimeError:
        return None
    finally:
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(model)
    return {"prefill_s": {int(n): float(np.median(v)) for n, v in pre.items()},
            "decode_s": float(np.median(dec)), "rounds": int(rounds),
            "llama_cpp": getattr(llama_cpp, "__version__", "?")}


def compute(prompts=(32, 128), decode=32, rounds=5, progress=None, threads=2, path=None,
            qtype="q8_0") -> dict | None:
    """One model's speed as TimeModel's two rates (the GGUF at path, or a synthetic Llama-3.2-1B
    shape of type qtype): step_times(), and t = W / weight_gbps + MACs / matmul_gmac_s fitted through
    its points (W is the same for all, so the line's slope gives the MAC rate and its intercept the
    streaming time)."""
    with tempfile.TemporaryDirectory(prefix="kmemsim-profile-") as d:
        if path is None:
            path = synth.write_model(os.path.join(d, "m.gguf"), "Llama-3.2-1B", qtype, layers=4, progress=False)
            name = f"synthetic Llama-3.2-1B shape, 4 layers, {qtype} (kmemsim.workload.synth.write_model)"
        else:
            name = os.path.basename(path)
        wbytes, m_tok, m_out = step_cost(path)
        st = step_times(path, prompts, decode, rounds, threads)
    if st is None:
        return None
    macs = np.array([m_tok + m_out] + [n * m_tok + m_out for n in prompts], float)
    slope, icpt = np.polyfit(macs, [st["decode_s"]] + [st["prefill_s"][n] for n in prompts], 1)
    if slope <= 0 or icpt <= 0:
        return None
    r = dict(st, model=name, weight_bytes_per_step=int(wbytes), macs_per_token=int(m_tok),
             macs_per_output=int(m_out), weight_gbps=float(wbytes / icpt / 1e9),
             matmul_gmac_s=float(1.0 / slope / 1e9))
    if progress:
        progress(f"llama.cpp, {qtype}: {r['matmul_gmac_s']:.1f} GMAC/s, weights streamed at {r['weight_gbps']:.1f} GB/s")
    return r


def _design_rows(path, st, prompts) -> tuple[list, list]:
    """The points of one model's step_times as rows of the joint fit: per type, weight bytes read,
    MACs, and MACs of experts (mul_mat_id); then layers, and layers x token rows x n_embd; and the
    seconds measured. An MoE step reads the experts its tokens route to: of E experts, k a token, n
    tokens touch E (1 - (1 - k/E)^n) of them under uniform routing."""
    s = lw.LlamaSession(path, TraceBuilder(source="profile"), time_model=TimeModel(1.0, 1.0))
    cost = s.step_cost
    hp = s.hp
    L, d = hp["n_layer"], hp["n_embd"]
    exps = sum(t.n_bytes for t in s.L.tensors if "_exps." in t.name)
    rows, secs = [], []
    for n, t in [(1, st["decode_s"])] + [(n, st["prefill_s"][n]) for n in prompts]:
        row = []
        for qt in TYPES:
            b, mt, mo = cost.get(qt.upper(), (0, 0, 0))
            if exps and b:
                b -= exps * (1 - hp["n_expert_used"] / hp["n_expert"]) ** n
            _, it, io = cost.get(qt.upper() + MUL_MAT_ID, (0, 0, 0))
            row += [b, n * mt + mo, n * it + io]
        rows.append(row + [L, L * n * d])
        secs.append(t)
    return rows, secs


def fit_compute(X, y) -> np.ndarray:
    """Least squares in relative error over the points (rows of X, seconds y) of the cost per weight
    byte, per MAC and per expert MAC of each type, per layer and per layer x token row x embedding
    element, all >= 0."""
    from scipy.optimize import least_squares   # here: scipy.optimize takes 0.3 s to import, only the fit needs it
    X, y = np.asarray(X, float), np.asarray(y, float)
    scale = 1.0 / np.maximum(X.max(axis=0), 1.0)          # unknowns of order one
    used = X.max(axis=0) > 0
    sol = least_squares(lambda q: (X[:, used] @ (q * scale[used]) - y) / y, np.full(used.sum(), 0.01),
                        bounds=(0, np.inf))
    p = np.zeros(X.shape[1])
    p[used] = sol.x * scale[used]
    return p


def compute_model(prompts=(32, 128), decode=32, rounds=5, progress=None, threads=2, shapes=SHAPES,
                  types=TYPES) -> dict | None:
    """llama.cpp's compute on this machine as a TimeModel: step_times() of synthetic models of each
    shape in `shapes` and each type in `types` (a round of each in turn, the medians over `rounds`),
    and one fit (fit_compute) through the dense models' points of each type's two rates and the
    per-layer costs shared by all (TimeModel.ns_per_layer, ns_per_activation), then the experts' MAC
    rates from the MoE's. The result's own figures are the first type's (the device's pair)."""
    X, y, models = [], [], []
    with tempfile.TemporaryDirectory(prefix="kmemsim-profile-") as d:
        todo = [(f"{label} {qt}", shape, synth.write_model(os.path.join(d, f"{i}-{qt}.gguf"), type=qt,
                                                           progress=False, **shape))
                for i, (label, shape) in enumerate(shapes) for qt in types]
        # the models in turn, a round of each at a time: the machine's speed drifts over the minute
        # this takes, and timing each model's rounds back to back let a drift tilt one type or shape
        # against another
        per = {name: [] for name, _, _ in todo}
        for _ in range(rounds):
            for name, shape, path in todo:
                if name not in per:
                    continue                 # not run in an earlier round
                st = step_times(path, prompts, decode, 1, threads)
                if st is None and "n_expert" in shape:
                    del per[name]            # a llama.cpp without the MoE: its experts take the dense rates
                    continue
                if st is None:
                    return None
                per[name].append(st)
        for name, shape, path in todo:
            if not per.get(name):
                continue
            rs = per[name]
            st = {"prefill_s": {n: float(np.median([r["prefill_s"][n] for r in rs])) for n in prompts},
                  "decode_s": float(np.median([r["decode_s"] for r in rs])), "rounds": len(rs),
                  "llama_cpp": rs[0]["llama_cpp"]}
            rows, secs = _design_rows(path, st, prompts)
            X += rows
            y += secs
            models.append(dict(st, model=name))
            if progress:
                progress(f"llama.cpp, {name}: decode {st['decode_s'] * 1e3:.1f} ms, prefill "
                         + ", ".join(f"{n} tokens {v * 1e3:.1f} ms" for n, v in st["prefill_s"].items()))
    # the dense shapes fit every cost but the experts'; the MoE's points then give the experts' MAC
    # rates from what the dense costs leave of their time (so an MoE cannot tilt the dense rates)
    X, y = np.asarray(X, float), np.asarray(y, float)
    ids = [3 * i + 2 for i in range(len(TYPES))]
    moe = X[:, ids].sum(axis=1) > 0
    p = fit_compute(X[~moe], y[~moe])
    if moe.any():
        # in absolute seconds: the prefills, where the experts' MACs are most of the time, weigh most
        from scipy.optimize import nnls   # here: as in fit_compute
        rest = np.maximum(y[moe] - X[moe] @ p, 0.0)
        scale = 1.0 / np.maximum(X[moe][:, ids].max(axis=0), 1.0)
        p[ids] = nnls(X[moe][:, ids] * scale, rest)[0] * scale
    err = X @ p / y - 1
    rate = lambda c: float(1.0 / c / 1e9) if c > 0 else 1e6      # a cost the fit put at 0: free
    by = {}
    for i, qt in enumerate(TYPES):
        if qt in types:
            by[qt.upper()] = {"weight_gbps": rate(p[3 * i]), "matmul_gmac_s": rate(p[3 * i + 1])}
            if X[:, 3 * i + 2].any():          # experts measured: their MACs at their own rate
                by[qt.upper() + MUL_MAT_ID] = {"weight_gbps": rate(p[3 * i]), "matmul_gmac_s": rate(p[3 * i + 2])}
    first = by[types[0].upper()]
    r = {"weight_gbps": first["weight_gbps"], "matmul_gmac_s": first["matmul_gmac_s"], "by_type": by,
         "layer_us": float(p[-2] * 1e6), "activation_ps": float(p[-1] * 1e12), "models": models,
         "fit_error_max": float(np.abs(err).max()), "fit_error_median": float(np.median(np.abs(err))),
         "threads": int(threads), "llama_cpp": models[0]["llama_cpp"]}
    if progress:
        rates = ", ".join(f"{k} {v['matmul_gmac_s']:.0f} GMAC/s" for k, v in by.items())
        progress(f"llama.cpp: {rates}; "
                 f"{r['layer_us']:.1f} us a layer; fit within {r['fit_error_max']:.0%} of its {len(y)} points")
    return r


# ------------------------------------------------------------------------------------------------
# reclaim

# How the profile is measured, for the caches of measured profiles (validate.boot_profile_path):
# 2 since session 15, which times reclaim unrecorded (its recorded time was 2-7 times as long); 3
# since the recorder drains ring buffers in bulk (session 16), which changed the recorded costs; 5
# since the reclaim costs are the median of three benchmark runs and the storage sizes take turns
# (session 20; 4 was branch reclaim-call-cost's); 6 since the storage table ends with readahead's
# max_sectors_kb requests, a cold file's MAP_POPULATE (session 23); 7 since fio measures the flash by
# I/O size and queue depth (the QD1 table from its queue depth 1, sizes 4 KiB-1 MiB); 8 since
# llama.cpp's compute is measured per weight type ([compute.TYPE]) with per-layer costs over two
# shapes (layer_us, activation_ps), and reclaim by a cost model per list, folio, page and swapped page
# fitted on the calls of three recorded benchmarks, llama.cpp's among them (issue 45).
METHOD = 8

RECLAIM_FILE = textwrap.dedent("""
    import mmap, os, sys
    fd = os.open(sys.argv[1], os.O_RDONLY)
    size = os.fstat(fd).st_size
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    total = sum(m[off] for _ in range(2) for off in range(0, size, 4096))
""")
RECLAIM_ANON = textwrap.dedent("""
    import sys
    src = open(sys.argv[1], "rb").read()
    buf = bytearray(int(sys.argv[2]))
    for _ in range(2):
        for off in range(0, len(buf), len(src)):
            buf[off:off + len(src)] = src[:len(buf) - off]
""")
# llama.cpp itself under a limit of 40% of its model (synthetic, LLAMA_BENCH_SHAPE): a prompt and
# decode steps that stream the weights through the cgroup. Its reclaim meets what the two above do
# not: referenced folios of a two-thread process, large folios from readahead beside small ones
# from thrashing reads, and it shrinks more lists per folio freed; so the fit (fit_reclaim) can tell
# a list's cost from a folio's and a page's
RECLAIM_LLAMA = textwrap.dedent("""
    import sys, llama_cpp
    llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_batch=64, n_ubatch=64, n_threads=2,
                          n_threads_batch=2, verbose=False)
    llm.eval([1] + [(i * 7919) % 30000 + 100 for i in range(31)])
    for t in range(8):
        llm.eval([500 + t])
""")
LLAMA_BENCH_SHAPE = dict(arch="llama", n_layer=12, n_embd=1024, n_ff=2816, n_head=8, n_head_kv=4, n_vocab=32000)
RECLAIM_FEATURES = ("lists", "folios", "folio_pages", "anon_pages")


def reclaim_calls(run_dir) -> pd.DataFrame:
    """The memcg reclaim calls of a recorded run: per call its duration (ns, mm_vmscan_memcg_reclaim_
    begin to end), the inactive lists it shrank (mm_vmscan_lru_shrink_inactive), the anonymous pages
    those freed (their nr_reclaimed), and the file folios it dropped with their pages
    (mm_filemap_delete_from_page_cache records of its thread inside the call)."""
    v = pd.read_parquet(os.path.join(run_dir, "raw", "vmscan.parquet"), columns=["t", "tid", "kind", "a", "b", "flags"])
    v = v[v["kind"].isin(["shrink_inactive", "memcg_reclaim"])]
    f = pd.read_parquet(os.path.join(run_dir, "raw", "filemap.parquet"), columns=["t", "tid", "kind", "order"])
    f = f[f["kind"] == "delete"]
    out = []
    for tid, g in v.groupby("tid"):
        ends = g[g["kind"] == "memcg_reclaim"]
        n = len(ends)
        if not n:
            continue
        t_end = ends["t"].to_numpy(np.int64)
        dur = ends["a"].to_numpy(np.int64)
        ins = g[g["kind"] == "shrink_inactive"]
        i = np.searchsorted(t_end, ins["t"].to_numpy(np.int64))         # the call each shrink ends in
        ok = i < n
        anon = (ins["flags"].to_numpy(np.int64) & 2) == 0              # not RECLAIM_WB_FILE
        fd = f[f["tid"] == tid]
        ft = fd["t"].to_numpy(np.int64)
        j = np.searchsorted(t_end, ft)
        inside = (j < n) & (ft >= (t_end - dur)[np.minimum(j, n - 1)])
        pages = np.left_shift(1, fd["order"].to_numpy(np.int64))
        out.append(pd.DataFrame({
            "ns": dur.astype(float), "lists": np.bincount(i[ok], minlength=n).astype(float),
            "folios": np.bincount(j[inside], minlength=n).astype(float),
            "folio_pages": np.bincount(j[inside], weights=pages[inside], minlength=n),
            "anon_pages": np.bincount(i[ok], weights=np.where(anon, ins["b"].to_numpy(float), 0.0)[ok], minlength=n)}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["ns", *RECLAIM_FEATURES])


def fit_reclaim(calls: pd.DataFrame) -> dict:
    """What a memcg reclaim call costs by the work it does: least squares (non-negative) of the calls'
    durations on RECLAIM_FEATURES, as us per list shrunk, per file folio dropped and per page of it,
    per anonymous page swapped out; with the share of the calls' time the fit gives back."""
    from scipy.optimize import nnls            # here: as in fit_compute, only the fit needs it
    X = calls[list(RECLAIM_FEATURES)].to_numpy(float)
    y = calls["ns"].to_numpy(float)
    c, _ = nnls(X / 1e3, y / 1e3)                         # ns, on numbers of order one
    us = c / 1e3
    return {"list_us": float(us[0]), "file_folio_us": float(us[1]), "file_page_us": float(us[2]),
            "swap_page_us": float(us[3]), "calls": int(len(y)), "calls_s": float(y.sum() * 1e-9),
            "explained": float((X @ c).sum() / max(y.sum(), 1.0))}


def _memory_stall_us():
    """The machine's memory stall time so far (/proc/pressure/memory, `some` total, us), or None
    without PSI."""
    try:
        with open("/proc/pressure/memory") as f:
            return next(int(line.rsplit("total=", 1)[1]) for line in f if line.startswith("some "))
    except (OSError, StopIteration, ValueError):
        return None


def _reclaim_run(script, args, d, limit, zram):
    """Run script under the recorder in a cgroup of `limit` bytes, then again unrecorded; returns
    (the unrecorded run's reclaim seconds or None without PSI, file folios dropped
    (mm_filemap_delete_from_page_cache records), their pages, pages swapped out, the recorded run's
    reclaim seconds). The recorder's probes fire inside reclaim (a page-cache delete per folio
    dropped, a bio per page swapped) and slow it, so the unobserved seconds are the unrecorded run's
    memory stall (PSI, psi_memstall_enter() around try_to_free_mem_cgroup_pages()); PSI averages
    the stall over the CPUs busy at the time, so it is the benchmark's own while the rest of the
    machine idles."""
    path = os.path.join(d, "child.py")
    Path(path).write_text(script)
    argv = [sys.executable, path, *map(str, args)]
    out = os.path.join(d, "run")
    rc = run_command(argv, out, mem_limit=str(limit), zram=zram, swappiness=60, drop_caches=True,
                     smaps_interval=0)
    if rc != 0:
        raise InputError(f"kmemsim profile: the reclaim benchmark's child failed (exit {rc}); see {out}")
    s = json.loads(Path(out, "summary.json").read_text())
    f = pd.read_parquet(os.path.join(out, "raw", "filemap.parquet"), columns=["kind", "order"])
    # the filemap records are adds, deletes and mm_filemap_fault: only a delete is a folio dropped
    de = f[f["kind"] == "delete"]
    recorded = s["reclaim"]["memcg_reclaim_ns"] * 1e-9
    before = _memory_stall_us()
    quiet = os.path.join(d, "unrecorded")
    rc = run_command(argv, quiet, mem_limit=str(limit), zram=zram, swappiness=60, drop_caches=True,
                     record=False)
    after = _memory_stall_us()
    if rc != 0:
        raise InputError(f"kmemsim profile: the reclaim benchmark's child failed unrecorded (exit {rc}); see {quiet}")
    stall = (after - before) * 1e-6 if before is not None and after is not None else None
    return (stall, len(de), int(np.left_shift(1, de["order"].to_numpy(np.int64)).sum()), int(s["swap_out_pages"]),
            recorded, reclaim_calls(out))


def reclaim(dir=None, progress=None, rounds=3) -> dict | None:
    """Memcg reclaim's own time per file folio it drops and per anonymous page it swaps out. What it
    does per folio: folio_referenced() and try_to_unmap() walk the rmap and flush the TLB,
    __remove_mapping() deletes the folio from the page cache; per swapped page also add_to_swap() and
    zram's compression. Each cost is the median over `rounds` runs of the benchmark: one run's
    recorded cost per folio moved 2.1-13.8 us on this project's shared 2-CPU VM. Root only (cgroups,
    zram, tracepoints); None otherwise."""
    if os.geteuid() != 0:
        if progress:
            progress("reclaim: needs root (cgroup, zram, tracepoints); [estimate] left in the profile")
        return None
    limit = 64 << 20
    base = dir or os.environ.get("TMPDIR") or "/var/tmp"
    runs, done = [], []
    with tempfile.TemporaryDirectory(dir=base, prefix=".kmemsim-reclaim-") as d:
        path = os.path.join(d, "file")
        chunk = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
        with open(path, "wb") as f:
            for i in range(4 * (limit >> 20)):
                f.write(chunk[i % 4096:] + chunk[:i % 4096])
        src = os.path.join(d, "pages")
        Path(src).write_bytes(sample_pages(2048))
        for i in range(rounds):
            os.makedirs(os.path.join(d, f"f{i}"))
            file_run = _reclaim_run(RECLAIM_FILE, [path], os.path.join(d, f"f{i}"), limit, None)
            os.makedirs(os.path.join(d, f"a{i}"))
            anon_run = _reclaim_run(RECLAIM_ANON, [src, 3 * limit], os.path.join(d, f"a{i}"), limit, "lz4:1G")
            runs.append(_reclaim_costs(file_run, anon_run, limit))
            done += [file_run, anon_run]
        llama = _llama_reclaim_run(d)
        if llama is not None:
            done.append(llama)
    # per figure, the median over the rounds; the counts and seconds are the median round's
    med = sorted(runs, key=lambda r: r["file_folio_us"])[len(runs) // 2]
    r = dict(med, rounds=len(runs),
             **{k: float(np.median([x[k] for x in runs])) for k in ("file_folio_us", "swap_page_us")})
    if all("recorded" in x for x in runs):
        r["recorded"] = {k: float(np.median([x["recorded"][k] for x in runs])) for k in ("file_folio_us", "swap_page_us")}
    r["file_folio_us_rounds"] = [round(x["file_folio_us"], 2) for x in runs]
    if llama is not None:
        r.update(_reclaim_model(done))
    if progress and "model" in r:
        m = r["model"]
        progress(f"reclaim: {m['list_us']:.1f} us per list shrunk, {m['file_folio_us']:.2f} us per file folio dropped "
                 f"+ {m['file_page_us']:.2f} per page of it, {m['swap_page_us']:.1f} us per page swapped out "
                 f"(recorded; {m['calls']} calls of the file, anonymous and llama.cpp runs, {m['explained']:.0%} of "
                 f"their time given back); unrecorded x {m['unrecorded_factor']:.2f}")
    elif progress:
        progress(f"reclaim: {r['file_folio_us']:.1f} us per file folio dropped ({r['file_folios']} folios), "
                 f"{r['swap_page_us']:.1f} us per page swapped out ({r['swapped_pages']} pages, lz4); "
                 f"median of {len(runs)} runs")
    return r


def _llama_reclaim_run(d):
    """RECLAIM_LLAMA's run (a _reclaim_run) on a synthetic model of LLAMA_BENCH_SHAPE, in a cgroup of
    40% of its file; None without llama-cpp-python."""
    try:
        import llama_cpp  # noqa: F401  (an optional dependency: make setup installs it)
    except ImportError:
        return None
    path = synth.write_model(os.path.join(d, "llama.gguf"), type="q8_0", progress=False, **LLAMA_BENCH_SHAPE)
    os.makedirs(os.path.join(d, "llama"))
    return _reclaim_run(RECLAIM_LLAMA, [path], os.path.join(d, "llama"), int(os.path.getsize(path) * 0.4), "lz4:1G")


def _reclaim_model(done) -> dict:
    """The reclaim cost model from the recorded calls of all the benchmark's runs (fit_reclaim) as the
    device's costs: "recorded", as they were; unrecorded, scaled by the runs' memory stall run again
    unrecorded (PSI) over their recorded reclaim time, the share of it that was the recorder's own
    probes (a page-cache delete record per folio). Without PSI both are the recorded ones."""
    fit = fit_reclaim(pd.concat([x[5] for x in done], ignore_index=True))
    stall = [x[0] for x in done]
    factor = (min(1.0, sum(stall) / max(sum(x[4] for x in done), 1e-9))
              if all(x is not None for x in stall) else 1.0)
    keys = ("list_us", "file_folio_us", "file_page_us", "swap_page_us")
    return {"model": dict(fit, unrecorded_factor=factor), **{k: fit[k] * factor for k in keys},
            "recorded": {k: fit[k] for k in keys}}


def _reclaim_costs(file_run, anon_run, limit) -> dict:
    """One round of the reclaim benchmark (two _reclaim_run results): per file folio dropped, then
    per page swapped (the rest of the anonymous run's time); unrecorded (PSI) where the machine has
    it, and as recorded."""
    sec, folios, pages, _, sec_rec, _ = file_run
    sec2, folios2, _, swapped, sec2_rec, _ = anon_run

    def costs(file_s, anon_s):
        file_us = file_s * 1e6 / max(folios, 1)
        return file_us, max(0.0, anon_s * 1e6 - folios2 * file_us) / max(swapped, 1)
    psi = sec is not None and sec2 is not None
    file_us, swap_us = costs(sec, sec2) if psi else costs(sec_rec, sec2_rec)
    r = {"file_folio_us": file_us, "swap_page_us": swap_us, "file_folios": folios, "file_pages": pages,
         "file_s": sec if psi else sec_rec, "swapped_pages": swapped, "anon_s": sec2 if psi else sec2_rec,
         "limit": limit, "time": "psi" if psi else "recorded", "file_s_recorded": sec_rec,
         "anon_s_recorded": sec2_rec}
    if psi:                             # what a recorded run pays (validate predicts its runs so)
        r["recorded"] = dict(zip(("file_folio_us", "swap_page_us"), costs(sec_rec, sec2_rec)))
    return r


# ------------------------------------------------------------------------------------------------

def minor_fault(pages=16384, rounds=3) -> dict:
    """A first touch of an anonymous page (do_anonymous_page(): a folio allocated, charged, cleared
    and mapped): `pages` pages of a fresh private mapping written one byte each, the median over
    `rounds`."""
    per = []
    for _ in range(rounds):
        m = mmap.mmap(-1, pages * PAGE_SIZE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        a = np.frombuffer(m, np.uint8)
        t = time.perf_counter()
        a[::PAGE_SIZE] = 1
        per.append((time.perf_counter() - t) * 1e6 / pages)
        del a
        m.close()
    return {"minor_us": float(np.median(per)), "pages": int(pages), "rounds": int(rounds)}


def measure(progress=None, storage_dir=None, quick=False, fio=True) -> dict:
    st = storage(storage_dir, file_mb=64 if quick else 256, seconds_per_size=0.15 if quick else 0.4,
                 progress=progress, fio=fio, fio_seconds=0.1 if quick else 0.25, fio_rounds=1 if quick else 5)
    zr = zram(progress)
    cp = compute_model(prompts=(16, 64) if quick else (32, 128), decode=8 if quick else 32,
                       rounds=2 if quick else 5, progress=progress)
    rc = reclaim(storage_dir, progress)
    mf = minor_fault()
    if progress:
        progress(f"faults: {mf['minor_us']:.2f} us per first touch of an anonymous page")
    return {"storage": st, "zram": zr, "compute": cp, "reclaim": rc, "faults": mf}


def _mem_total():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _read_ahead_kb(d):
    try:
        dev = os.stat(d).st_dev
        maj, mn = os.major(dev), os.minor(dev)
        p = Path(f"/sys/dev/block/{maj}:{mn}")
        for q in (p / "queue", p.resolve().parent / "queue"):
            if (q / "read_ahead_kb").exists():
                return int((q / "read_ahead_kb").read_text()), int((q / "max_sectors_kb").read_text())
    except (OSError, ValueError):
        pass
    return 128, 512


def compute_toml(cp: dict | None) -> str:
    """The [compute] section's body for a compute_model() result (or compute()'s, one model's pair)."""
    if not cp:
        return "# llama-cpp-python missing: [estimate] placeholders\nweight_gbps = 10.0\nmatmul_gmac_s = 50.0"
    if "by_type" not in cp:
        pre = ", ".join(f"{n} tokens {v * 1e3:.1f} ms" for n, v in cp["prefill_s"].items())
        return (f"# measured: {cp['model']}, llama-cpp-python {cp['llama_cpp']}, 2 threads: decode "
                f"{cp['decode_s'] * 1e3:.1f} ms, prefill {pre} (medians of {cp['rounds']} rounds)\n"
                f"weight_gbps = {cp['weight_gbps']:.3f}\nmatmul_gmac_s = {cp['matmul_gmac_s']:.3f}")
    lines = [f"# measured with llama-cpp-python {cp['llama_cpp']}, {cp['threads']} threads, on synthetic models "
             "(kmemsim.workload.synth), medians of rounds:"]
    for m in cp["models"]:
        pre = ", ".join(f"{n} tokens {v * 1e3:.1f} ms" for n, v in m["prefill_s"].items())
        lines.append(f"#   {m['model']}: decode {m['decode_s'] * 1e3:.1f} ms, prefill {pre}")
    lines += ["# a step = per type, bytes / weight_gbps + MACs / matmul_gmac_s, + per layer layer_us + token",
              "# rows x n_embd x activation_ps (kmemsim.engine.time.compute.TimeModel), one least-squares fit",
              f"# in relative error over all the points: median |error| {cp['fit_error_median']:.1%}, "
              f"largest {cp['fit_error_max']:.1%}",
              f"weight_gbps = {cp['weight_gbps']:.3f}", f"matmul_gmac_s = {cp['matmul_gmac_s']:.3f}",
              f"layer_us = {cp['layer_us']:.3f}", f"activation_ps = {cp['activation_ps']:.1f}"]
    for qt, r in cp["by_type"].items():
        lines += ["", f'[compute."{qt}"]' if " " in qt else f"[compute.{qt}]", f"weight_gbps = {r['weight_gbps']:.3f}",
                  f"matmul_gmac_s = {r['matmul_gmac_s']:.3f}"]
    return "\n".join(lines)


def _reclaim_model_toml(rc) -> str:
    m = rc["model"]
    return (f"# the cost model: {m['calls']} memcg reclaim calls of those runs and of llama.cpp under a limit "
            f"(a synthetic\n# {LLAMA_BENCH_SHAPE['n_layer']}-layer, {LLAMA_BENCH_SHAPE['n_embd']}-wide q8_0 model "
            "at 40% of its file), each call's duration against its shrink_inactive\n# lists, file folios and their "
            "pages, and pages swapped (non-negative least squares; "
            f"{m['explained']:.0%} of their {m['calls_s']:.2f} s\n# given back), then x {m['unrecorded_factor']:.2f} "
            "for the recorder's probes (the runs' memory stall again unrecorded, PSI)\n"
            f"list_us = {rc['list_us']:.3f}\nfile_folio_us = {rc['file_folio_us']:.3f}\n"
            f"file_page_us = {rc['file_page_us']:.3f}\nswap_page_us = {rc['swap_page_us']:.3f}\n")


def lru_gen(root: str = "/sys/kernel/mm/lru_gen") -> tuple[str, int, str]:
    """Which LRU this kernel reclaims with, for the profile's kernel.lru (kmemsim.engine.kernel.Config.lru):
    "mglru" when /sys/kernel/mm/lru_gen/enabled has LRU_GEN_CORE (bit 0) set, else "classic"; its
    min_ttl_ms; and what was read, for the comment."""
    try:
        caps = int(Path(root, "enabled").read_text().strip(), 16)
    except (OSError, ValueError):
        return "classic", 0, f"no {root}/enabled (CONFIG_LRU_GEN off)"
    try:
        ttl = int(Path(root, "min_ttl_ms").read_text().strip())
    except (OSError, ValueError):
        ttl = 0
    return ("mglru" if caps & 1 else "classic"), ttl, f"{root}/enabled = 0x{caps:04x}"


def to_toml(m: dict) -> str:
    st, zr, cp = m["storage"], m["zram"], m["compute"]
    ram = _mem_total()
    ra, ms = _read_ahead_kb(st["dir"])
    try:
        fa = int(Path("/sys/kernel/mm/transparent_hugepage/../../debug/fault_around_bytes").read_text())
    except (OSError, ValueError):
        fa = 65536
    algo = "lz4" if "lz4" in zr else (sorted(zr)[0] if zr else "lz4")
    q = lambda xs: "[" + ", ".join(f"{x:g}" for x in xs) + "]"
    key = lambda a: '"lzo-rle"' if a == "lzo-rle" else a
    comp = ", ".join(f"{key(a)} = {r['compress_gbps']:.3f}" for a, r in zr.items())
    dec = ", ".join(f"{key(a)} = {r['decompress_gbps']:.3f}" for a, r in zr.items())
    zlines = "\n".join(f"#   {a}: {r['method']}; ratio {r['ratio']:.2f}" for a, r in zr.items())
    comp_txt = compute_toml(cp)
    r = st.get("readahead")
    ra_note = (f"\n# The last size, {st['io_kb'][-1]} KiB (max_sectors_kb), is readahead's: a cold "
               f"{r['file_mb']} MiB file mapped with\n# MAP_POPULATE, median of "
               f"{', '.join(f'{x:g}' for x in r['seconds'])} s" if r else "")
    sw = st.get("fio")
    f = int(np.argmin(st["measured_us"]))
    fastest = "4 KiB" if f == 0 else f"{st['io_kb'][f]} KiB (the fastest size's)"
    how_st = "median per size (the sizes in turns)"
    if st.get("fio_error"):
        how_st += f"\n# (no fio: {st['fio_error']})"
    table_txt = ""
    if sw:
        rows = "\n".join(f"  {q(r)},{' ' * max(1, 50 - len(q(r)))}# {kb} KiB" for kb, r in
                         zip(st["throughput_io_kb"], st["throughput_gbps"]))
        qd_src = ("the block device's queue depth (its hardware queues' nr_tags)" if st.get("queue_depth_nr_tags")
                  else "the deepest queue measured (no block queue's nr_tags)")
        table_txt = (f"\n# The flash with reads in flight: {sw['version']} ({sw['engine']}), random O_DIRECT reads of the same file,"
                     f"\n# one {sw['seconds']:g} s job per I/O size and queue depth, the points in a new order each of "
                     f"{sw['rounds']} rounds ({sw['elapsed_s']:.0f} s),"
                     "\n# the median per point: GB/s, a row per throughput_io_kb size, a column per qd (flash_throughput"
                     "\n# interpolates it in log size and log queue depth: engines' O_DIRECT reads; the kernel's reads"
                     "\n# are timed by the QD1 table above)"
                     f"\nthroughput_io_kb = {q(st['throughput_io_kb'])}\nqd = {q(st['qd'])}"
                     f"\nthroughput_gbps = [\n{rows}\n]"
                     f"\nmax_gbps = {st['max_gbps']:g}                   # the highest throughput seen"
                     f"\nqueue_depth = {st['queue_depth']}                 # {qd_src}")
    rc = m.get("reclaim")
    if rc:
        how = ("the memory stall (PSI) of the benchmark run again unrecorded; recorded, "
               f"mm_vmscan_memcg_reclaim_begin/end said {rc['file_s_recorded']:.2f} s and {rc['anon_s_recorded']:.2f} s"
               if rc.get("time") == "psi" else "mm_vmscan_memcg_reclaim_begin/end, recorded")
        rec = rc.get("recorded")
        rec_txt = ("\n# as a run under kmemsim's recorder pays them (validate predicts its recorded runs with these)\n"
                   "recorded = { " + ", ".join(f"{k} = {v:.3f}" for k, v in rec.items()) + " }" if rec else "")
        rounds = (f"# each cost the median of {rc['rounds']} runs (per file folio: "
                  f"{', '.join(f'{x:.2f}' for x in rc['file_folio_us_rounds'])} us); the median run:\n"
                  if rc.get("rounds", 1) > 1 else "")
        rc_txt = (rounds + f"# measured: memcg reclaim time in a {rc['limit'] >> 20} MiB "
                  f"cgroup: {rc['file_s']:.2f} s for {rc['file_folios']} file folios ({rc.get('file_pages', 0)} pages) dropped\n"
                  f"# (a mapped file scanned, no swap), {rc['anon_s']:.2f} s for {rc['swapped_pages']} pages "
                  f"swapped out (anonymous, lz4 zram)\n# ({how})\n"
                  + (_reclaim_model_toml(rc) if "model" in rc else
                     f"file_folio_us = {rc['file_folio_us']:.2f}\nswap_page_us = {rc['swap_page_us']:.2f}\n")
                  + "scan_us_per_page = 0.0             # in the costs above" + rec_txt)
    else:
        rc_txt = "scan_us_per_page = 0.15           # [estimate] not measured (kmemsim profile as root measures it)"
    mf = m.get("faults")
    faults_txt = ("\n[faults]\n# measured: the first touch of an anonymous page (do_anonymous_page()), "
                  f"{mf['pages']} pages, median of {mf['rounds']}\nminor_us = {mf['minor_us']:.3f}\n" if mf else "")
    exec_order = release_config(platform.release(), platform.machine())["exec_folio_order"]
    lru, min_ttl, lru_seen = lru_gen()
    lru_txt = f'lru = "{lru}"                  # {lru_seen}' + (f"\nmin_ttl_ms = {min_ttl}" if lru == "mglru" and min_ttl else "")
    return f"""# This machine, measured by `kmemsim profile` on {time.strftime('%Y-%m-%d %H:%M')} ({platform.node()},
# {platform.machine()}, kernel {platform.release()}). Re-run it to refresh; edit freely.
name = "this-machine"
description = "this machine ({platform.machine()}, {os.cpu_count()} CPUs, {ram / 2**30:.1f} GiB), measured"
source = "measured by kmemsim profile (storage: {st['method']}; zram: see [zram]; compute: llama.cpp)"

[memory]
ram = {ram}
available = {ram // 2}           # half of RAM for what a trace models [estimate]

[kernel]
read_ahead_kb = {ra}              # this machine's block queue setting
max_sectors_kb = {ms}
fault_around_bytes = {fa}
prefault_young = {'true' if platform.machine() in ('x86_64', 'AMD64') else 'false'}   # x86 prefaults young PTEs, arm64 old
swappiness = 60
zram = "{algo}:4G"
lmk = false
exec_folio_order = {exec_order}    # 6.17+: exec faults read forward within the vma (x86 order 0, arm64 4); -1 before
{lru_txt}

[storage]
# {st['method']} on a temp file of random data
# in {st['dir']}; {how_st}:
# measured_us = {q(st['measured_us'])}
# t(S) = latency + S / bandwidth(S): latency = the {fastest} time less its transfer
# at the best bandwidth seen; bandwidth(S) reproduces the measured median time at each size.{ra_note}
io_kb = {q(st['io_kb'])}
latency_us = {q(st['latency_us'])}
bandwidth_gbps = {q(st['bandwidth_gbps'])}{table_txt}

[zram]
# per algorithm (one core):
{zlines}
compress_gbps = {{ {comp} }}
decompress_gbps = {{ {dec} }}
zero_page_us = 0.5                # [estimate] fault + clear of a same-filled page

[reclaim]
{rc_txt}
{faults_txt}
[compute]
{comp_txt}
"""
