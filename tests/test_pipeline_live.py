"""The pipeline model's overlap on this machine: a reader thread and a compute thread, measured against
the model's critical path (kmemsim.engine.time.pipeline), within 15%.

A file of random data under /var/tmp is read in blocks with O_DIRECT (its page cache dropped first, so
no block comes from RAM) by a reader thread, and each block is then worked on by a compute thread
(sha256, which releases the GIL); the reader runs ahead through a ring of DEPTH buffers, so read k
waits for the compute of block k - DEPTH to free its buffer. Each round measures the two alone, per
block, then the two overlapped, and builds the same pipeline in the model from the solo per-block
times: the measured overlapped wall time must be within 15% of the model's makespan, and clearly
below the sum of the solo times (it would be the sum if nothing overlapped). No root needed.

On this machine (a 2-CPU VM) the overlapped run came out 0-10% over the model in most rounds, up to
23% in a few: the reads slow a little while the other CPU is busy, which the model has no term for,
and the disk's speed drifts between passes (hence passes of ~0.4 s, the solo read on both sides of
the overlapped run, and the median of five rounds).
"""
import hashlib
import mmap
import os
import queue
import statistics
import tempfile
import threading
import time

import pytest

from kmemsim.engine.time.pipeline import Pipeline

FILE_MB = 384
BLOCK = 4 << 20
DEPTH = 4                      # buffers in the ring: how far the reader may run ahead
RATIO = 0.6                    # compute per block, as a share of the block's read: comparable to it
SLICE = 32 << 10               # the compute hashes a cache-resident 32 KiB of its block, again and again
FILE_BLOCKS = (FILE_MB << 20) // BLOCK
PASS_S = 0.4                   # a solo read pass reads for about this long (the file several times over)
ROUNDS = 5                     # the median of five: two rounds near 16% in one CI run (the reads slowed
                               # by the busy other CPU, no term in the model) moved a median of three
OTHERS_MAX = 0.2               # a round in which other processes kept more of a CPU busy is run again
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
MAX_ROUNDS_S = 60 if IN_CI else 14
# ... until then; after it, a skip saying the machine is busy (in CI, a failure: it must run)
TOLERANCE = 0.15


def cpu_seconds():
    """(CPU seconds all of this machine's CPUs were busy, of them this process's), from /proc/stat
    (user, nice, system, irq, softirq, steal: all but idle and iowait) and os.times()."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    t = os.times()
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK"), t.user + t.system


def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_direct(fd, buf, k):
    """Block k of a pass: the file again and again, as long as the pass is."""
    n = os.preadv(fd, [buf], k % FILE_BLOCKS * BLOCK)
    assert n == BLOCK


def compute(buf, n):
    # Why not hash the whole block: streamed from memory beside the reads' DMA it slowed the reads
    # by 20-35% here (overlapped 25-35% over the model), an interference the model has no term for.
    # A 32 KiB slice stays in cache: CPU-bound, and hashlib releases the GIL for it.
    mv = memoryview(buf)[:SLICE]
    for _ in range(n):
        hashlib.sha256(mv).digest()


def solo_read(path, bufs, blocks):
    """Per-block seconds of the reader alone (block ends stamped, so the loop's own time is in)."""
    drop_cache(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        ts = [time.perf_counter()]
        for k in range(blocks):
            read_direct(fd, bufs[k % DEPTH], k)
            ts.append(time.perf_counter())
    finally:
        os.close(fd)
    return [b - a for a, b in zip(ts, ts[1:])]


def solo_compute(bufs, blocks, n):
    ts = [time.perf_counter()]
    for k in range(blocks):
        compute(bufs[k % DEPTH], n)
        ts.append(time.perf_counter())
    return [b - a for a, b in zip(ts, ts[1:])]


def overlapped(path, bufs, blocks, n):
    """Wall seconds of the reader and the compute thread as a 2-stage pipeline."""
    drop_cache(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    filled, free = queue.SimpleQueue(), queue.SimpleQueue()
    for i in range(DEPTH):
        free.put(i)
    errors = []

    def reader():
        try:
            for k in range(blocks):
                i = free.get()              # the buffer of block k - DEPTH, once its compute ended
                read_direct(fd, bufs[i], k)
                filled.put(i)
        except BaseException as e:          # the compute thread would wait for ever: unblock it
            errors.append(e)
            filled.put(None)

    def computer():
        for k in range(blocks):
            i = filled.get()
            if i is None:
                return
            compute(bufs[i], n)
            free.put(i)

    threads = [threading.Thread(target=reader), threading.Thread(target=computer)]
    try:
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
    finally:
        os.close(fd)
    if errors:
        raise errors[0]
    return wall


def model(read_s, compute_s):
    """The same pipeline in the model: read k after read k-1 (one reader) and after compute k - DEPTH
    (its buffer); compute k after compute k-1 and read k."""
    p = Pipeline()
    r = p.stream("read", p.resource("disk", 1))
    c = p.stream("compute", p.cores("cpu", 1))
    done = []
    for k, (rs, cs) in enumerate(zip(read_s, compute_s)):
        a = r.work(f"read {k}", rs, after=[done[k - DEPTH]] if k >= DEPTH else [])
        done.append(c.work(f"compute {k}", cs, after=[a]))
    return p.run()


@pytest.fixture
def data_file():
    try:
        fd, path = tempfile.mkstemp(dir="/var/tmp", prefix="kmemsim-pipeline-")
    except OSError as e:
        pytest.skip(f"no temp file under /var/tmp: {e}")
    try:
        with os.fdopen(fd, "wb") as f:
            for _ in range(FILE_MB // 16):
                f.write(os.urandom(16 << 20))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        except OSError as e:
            pytest.skip(f"/var/tmp's filesystem takes no O_DIRECT: {e}")
        yield path
    finally:
        os.unlink(path)


def test_a_reader_and_a_compute_thread_overlap_as_the_model_says(data_file):
    bufs = [mmap.mmap(-1, BLOCK) for _ in range(DEPTH)]       # page-aligned, as O_DIRECT needs
    # calibration: the read per block, and the compute's slices to take RATIO of it
    per_read = statistics.median(solo_read(data_file, bufs, FILE_BLOCKS))
    blocks = max(16, min(int(PASS_S / per_read), 20 * FILE_BLOCKS))
    per_slice = statistics.median(sum(solo_compute(bufs, 1, 32)) / 32 for _ in range(9))
    n = max(1, round(RATIO * per_read / per_slice))

    rounds, busy, t_end = [], [], time.monotonic() + MAX_ROUNDS_S
    while len(rounds) < ROUNDS:
        if time.monotonic() > t_end:
            why = (f"this machine is busy: other processes kept a CPU busy in {len(busy)} of "
                   f"{len(busy) + len(rounds)} rounds (" + ", ".join(f"{x:.0%}" for x in busy)
                   + " of one), and the overlapped run needs its 2 CPUs")
            if IN_CI:                  # CI runs the suite alone: a busy machine there is a failure
                pytest.fail(why)
            pytest.skip(why)
        cpu0, own0, w0 = *cpu_seconds(), time.monotonic()
        before = solo_read(data_file, bufs, blocks)
        comp = solo_compute(bufs, blocks, n)
        wall = overlapped(data_file, bufs, blocks, n)
        after = solo_read(data_file, bufs, blocks)
        cpu1, own1, w1 = *cpu_seconds(), time.monotonic()
        # another process on a CPU (this machine is shared) takes it from the overlapped run's two
        # threads, not from the solo runs' one: such a round measures the neighbour, not the model
        others = ((cpu1 - cpu0) - (own1 - own0)) / (w1 - w0)
        if others > OTHERS_MAX:
            busy.append(others)
            continue
        # the reader's solo time on both sides of the overlapped run: the disk's speed drifts
        # (from 3.6 to 7 GB/s between runs here), so the model takes the two's mean per block
        read = [(a + b) / 2 for a, b in zip(before, after)]
        s = model(read, comp)
        rounds.append(dict(read=sum(read), compute=sum(comp), wall=wall, model=s.makespan,
                           error=wall / s.makespan - 1, others=others))
    # the median round by error: one noisy round (a shared machine) moves nothing
    r = sorted(rounds, key=lambda x: x["error"])[len(rounds) // 2]
    figures = (f"{blocks} blocks of {BLOCK >> 20} MiB, compute {n} x sha256({SLICE >> 10} KiB): solo read "
               f"{r['read']:.3f} s, solo compute {r['compute']:.3f} s, overlapped {r['wall']:.3f} s, model "
               f"{r['model']:.3f} s, error {r['error']:+.1%} (rounds: "
               + ", ".join(f"{x['error']:+.1%}" for x in rounds) + "; other processes' CPU: "
               + ", ".join(f"{x['others']:.0%}" for x in rounds) + f"; {len(busy)} busy rounds run again)")
    print(figures)
    assert abs(r["error"]) <= TOLERANCE, figures
    # overlap: the sum of the solo times is the serial model's; the pipeline takes about the read alone
    assert r["wall"] < 0.8 * (r["read"] + r["compute"]), figures
    assert r["model"] < 0.8 * (r["read"] + r["compute"]), figures
