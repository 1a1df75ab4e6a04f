"""Invariants after replays of generated traces (hypothesis): each resident page on exactly one
list, list sizes equal their counters, resident + free (+ zram pool) = total, nothing negative
(km_check_invariants in c_ext/replay.c), and the same input gives identical output, also with a
matmul's threads each on its own stack and clock (READ chunks, Config.threads)."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from kmemsim.engine.kernel import Config, Emulator
from kmemsim.core.trace import Advice, MapFlag, Op, PageClass, TraceBuilder

ADVICE = [Advice.NORMAL, Advice.RANDOM, Advice.SEQUENTIAL, Advice.WILLNEED, Advice.DONTNEED,
          Advice.COLD, Advice.PAGEOUT]


@st.composite
def traces(draw):
    b = TraceBuilder("hypothesis")
    f = b.file("/f", 512)
    t = 0
    nproc = draw(st.integers(1, 3))
    maps = []
    for pid in range(1, nproc + 1):
        b.process(t, pid, f"p{pid}", oom_score_adj=draw(st.sampled_from([0, 500, 900])))
        t += 1
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()):
                n = draw(st.integers(1, 256)); off = draw(st.integers(0, 512 - n))
                flags = MapFlag.READ | draw(st.sampled_from([MapFlag.SHARED, MapFlag.WRITE, MapFlag.EXEC | MapFlag.SHARED]))
                maps.append((pid, b.mmap(t, pid, "f", n, file=f, pgoff=off, flags=flags), n))
            else:
                n = draw(st.integers(1, 256))
                cls = draw(st.sampled_from(list(PageClass)))
                maps.append((pid, b.mmap(t, pid, "a", n, flags=MapFlag.READ | MapFlag.WRITE, cls=cls), n))
            t += 1
    for _ in range(draw(st.integers(1, 60))):
        pid, m, n = draw(st.sampled_from(maps))
        p = draw(st.integers(0, n - 1)); k = draw(st.integers(1, n - p))
        op = draw(st.sampled_from([Op.READ, Op.READ, Op.WRITE, Op.MADVISE, Op.MLOCK, Op.MUNLOCK, Op.FREAD]))
        if op == Op.MADVISE:
            b.event(t, pid, op, m, p, k, draw(st.sampled_from(ADVICE)))
        elif op == Op.FREAD:
            b.event(t, pid, op, -1, draw(st.integers(0, 500)), k, 0, f)
        elif op == Op.READ:           # a matmul's chunks for the threads, or one reader
            b.event(t, pid, op, m, p, k, draw(st.sampled_from([0, 0, 1, 4, 16])))
        else:
            b.event(t, pid, op, m, p, k)
        t += 1
    if draw(st.booleans()):
        b.event(t, 1, Op.PROC_EXIT)
    return b.build()


@st.composite
def configs(draw):
    regime = draw(st.sampled_from(["mem", "memcg", "both"]))
    mem = draw(st.integers(300, 2000)) * 4096
    return Config(mem=mem if regime != "memcg" else None,
                  memcg_limit=draw(st.integers(64, 1024)) * 4096 if regime != "mem" else None,
                  swappiness=draw(st.integers(0, 200)),
                  zram=draw(st.sampled_from([None, "lz4:1M", "zstd:4M"])),
                  read_ahead_kb=draw(st.sampled_from([0, 128, 512])),
                  fault_around_bytes=draw(st.sampled_from([4096, 65536])),
                  max_folio_order=draw(st.sampled_from([0, 2, 9])),
                  lmk=draw(st.booleans()),
                  policy=draw(st.sampled_from(["stock", "lru", "is", "is-tail", "dw", "is+dw"])),
                  threads=draw(st.integers(1, 3)),
                  file_folio_us=draw(st.sampled_from([0.0, 10.0])),
                  io_latency_us=draw(st.sampled_from([0.0, 100.0])),
                  io_read_gbps=draw(st.sampled_from([0.0, 2.0])),
                  sample_ms=0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), configs())
def test_invariants_hold(trace, cfg):
    r1 = Emulator(cfg).replay(trace, check_invariants=True)
    s = r1.summary
    assert all(v >= 0 for k, v in s.items() if not isinstance(v, bool)), s
    r2 = Emulator(cfg).replay(trace, check_invariants=True)
    assert r1.summary == r2.summary
    assert r1.timeline.equals(r2.timeline)
    assert all((r1.page_states[k] == r2.page_states[k]).all() for k in r1.page_states)
