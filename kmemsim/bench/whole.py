"""`make bench`'s whole-process rows (issue 39): what a user meets, timed from outside each process.

  (e) `kmemsim replay TRACE --policy lru --mem SIZE --json` against libCacheSim's Python API
      (`TraceReader` + `LRU(capacity).process_trace`) on the same oracleGeneral file and capacity: a
      200 k-object loop mixed with Zipf 1.3 over the same objects, 150 k objects of cache. The two
      run in turn, A B A B ..., and each pair gives a ratio (the machine's speed drifts; pairs
      share it). Misses must be identical.
  (f) start-up: `kmemsim --help`, and `replay --json` of a 1,000-event trace.
  (h) (with --billion N) N requests of (e)'s stream made on the fly, never stored, replayed in batches
      (Emulator.replay_batches) under `lru`, against libCacheSim's exact LRU fed the same stream in
      chunks (one cache object across them): misses equal, peak RSS bounded.
  (g) the Llama-2-7B Q4_0 workload (2048 prompt + 256 decode tokens) generated and replayed under a
      3 GiB memcg with lz4 zram, as two commands, whole processes.

Peak RSS is each finished process's own (wait4's ru_maxrss); per trace event and per emulated page
it is the replay's peak less that of the same command on the 1,000-event trace (the interpreter,
numpy and the C core), so it counts what grows with the trace and the emulated memory.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from ..workload.libcachesim_io import write_oracle_general

LOOP_OBJECTS = 200_000
CACHE_OBJECTS = 150_000
ZIPF_S = 1.3
PY = sys.executable
LIBCACHESIM = """
import sys
import libcachesim as lcs
r = lcs.TraceReader(sys.argv[1], lcs.TraceType.ORACLE_GENERAL_TRACE)
n = r.get_num_of_req()
mr, _ = lcs.LRU(int(sys.argv[2])).process_trace(r)
print(n, round(mr * n))
"""
TARGETS = {"lru_ratio": 3.0, "help_s": 0.15, "small_replay_s": 0.3, "llama7b_s": 20.0,
           "rss_per_file_byte": 2.0, "core_bytes_per_page": 24.0}


def loop_zipf_ids(n: int, seed: int, start: int = 0) -> np.ndarray:
    """Requests start.. start+n of a stream: half walk a loop over LOOP_OBJECTS objects in turn, half
    draw Zipf(ZIPF_S) ranks over the same objects, interleaved at random (a chunk's draws are seeded
    by the seed and where it starts, so a stream made chunk by chunk is the same every time)."""
    rng = np.random.default_rng([seed, start])
    ids = np.arange(start, start + n, dtype=np.uint64) % LOOP_OBJECTS
    z = rng.random(n) < 0.5
    ids[z] = (rng.zipf(ZIPF_S, int(z.sum())) - 1).astype(np.uint64) % LOOP_OBJECTS
    return ids


CHUNK = 4 << 20
STREAM_KMEMSIM = """
import sys, json
import numpy as np
from kmemsim.bench.whole import CHUNK, LOOP_OBJECTS, loop_zipf_ids
from kmemsim.core.trace import MapFlag, Op, TraceBuilder
from kmemsim.engine.kernel import Config, Emulator
n, cache, seed = map(int, sys.argv[1:4])
tb = TraceBuilder(source="stream")
fid = tb.file("objects", LOOP_OBJECTS)
tb.process(0, 1, "stream")
mid = tb.mmap(0, 1, "objects", LOOP_OBJECTS, file=fid, flags=MapFlag.SHARED | MapFlag.READ)
head = tb.build()
def batches():
    for a in range(0, n, CHUNK):
        k = min(CHUNK, n - a)
        yield {"t": np.arange(a, a + k, dtype=np.int64) * 1000, "pid": np.ones(k, np.int64),
               "op": np.full(k, Op.READ, np.uint8), "map": np.full(k, mid, np.int32),
               "page": loop_zipf_ids(k, seed, a).astype(np.int64), "npages": np.ones(k, np.int64)}
s = Emulator(Config(mem=cache * 4096, policy="lru", sample_ms=0)).replay_batches(head, batches()).summary
print(s["accesses"], s["misses"])
"""
STREAM_LIBCACHESIM = """
import os, sys, tempfile
import libcachesim as lcs
from kmemsim.bench.whole import CHUNK, loop_zipf_ids
from kmemsim.workload.libcachesim_io import write_oracle_general
n, cache, seed = map(int, sys.argv[1:4])
lru, total, misses = lcs.LRU(cache), 0, 0
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "chunk.oracleGeneral")
    for a in range(0, n, CHUNK):
        write_oracle_general(path, loop_zipf_ids(min(CHUNK, n - a), seed, a))
        r = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
        k = r.get_num_of_req()
        mr, _ = lru.process_trace(r)
        total, misses = total + k, misses + round(mr * k)
        del r
print(total, misses)
"""


def stream_row(n: int, seed: int) -> dict:
    """(h): n requests made on the fly, kmemsim in batches against libCacheSim in chunks."""
    a = timed([PY, "-c", STREAM_KMEMSIM, str(n), str(CACHE_OBJECTS), str(seed)])
    b = timed([PY, "-c", STREAM_LIBCACHESIM, str(n), str(CACHE_OBJECTS), str(seed)])
    (ka, km), (la, lm) = (tuple(map(int, r["out"].split())) for r in (a, b))
    return {"requests": n, "kmemsim_s": a["wall"], "libcachesim_s": b["wall"], "kmemsim_rss": a["rss"],
            "libcachesim_rss": b["rss"], "misses": (km, lm), "accesses": (ka, la),
            "identical": km == lm and ka == la == n}


# Each command is started by this small launcher, which forks and times it: Linux counts in a process's
# peak RSS the memory of the process it was forked from (exec_mmap() keeps the old mm's high-water
# mark), so a child forked straight from the bench, which holds the earlier cases' arrays, would show
# the bench's size; the launcher is small when it forks.
LAUNCH = """
import json, os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(json.dumps([os.waitstatus_to_exitcode(status), wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024]),
      file=sys.stderr)
"""


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """One whole process: wall seconds, its own CPU seconds (user + sys) and peak RSS (bytes), from
    wait4() on it (in the launcher above), and its stdout."""
    p = subprocess.run([PY, "-c", LAUNCH, *cmd], capture_output=True, env=env)
    err = p.stderr.decode()
    code, wall, cpu, rss = json.loads(err.strip().splitlines()[-1])
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {code}: {err[-400:]}")
    return {"wall": wall, "cpu": cpu, "rss": rss, "out": p.stdout.decode()}


def kmemsim(*args) -> list[str]:
    return [PY, "-m", "kmemsim.cli", *map(str, args)]


def in_turn(a: list[str], b: list[str], rounds: int) -> tuple[list[dict], list[dict]]:
    ra, rb = [], []
    for _ in range(rounds):
        ra.append(timed(a))
        rb.append(timed(b))
    return ra, rb


def med(rows, k):
    return statistics.median(r[k] for r in rows)


def lru_rows(sizes: list[int], rounds: int, seed: int, d: str) -> list[dict]:
    small = os.path.join(d, "small.oracleGeneral")
    write_oracle_general(small, loop_zipf_ids(1000, seed))
    base = min(timed(kmemsim("replay", small, "--policy", "lru", "--mem", f"{CACHE_OBJECTS * 4}K",
                              "--json"))["rss"] for _ in range(2))
    out = []
    for n in sizes:
        path = os.path.join(d, f"loop-zipf-{n}.oracleGeneral")
        write_oracle_general(path, loop_zipf_ids(n, seed))
        a = kmemsim("replay", path, "--policy", "lru", "--mem", f"{CACHE_OBJECTS * 4}K", "--json")
        b = [PY, "-c", LIBCACHESIM, path, str(CACHE_OBJECTS)]
        ra, rb = in_turn(a, b, rounds)
        k = json.loads(ra[-1]["out"])["counters"]
        ln, lm = map(int, rb[-1]["out"].split())
        ratios = [y["wall"] / x["wall"] for x, y in zip(ra, rb)]
        cpu_ratios = [y["cpu"] / x["cpu"] for x, y in zip(ra, rb)]     # steadier where the CPUs are shared
        rss = med(ra, "rss")
        out.append({"requests": n, "file_bytes": os.path.getsize(path), "kmemsim_s": med(ra, "wall"),
                    "libcachesim_s": med(rb, "wall"), "speedup": statistics.median(ratios),
                    "speedup_min": min(ratios), "speedup_max": max(ratios),
                    "cpu_speedup": statistics.median(cpu_ratios),
                    "kmemsim_rss": rss, "libcachesim_rss": med(rb, "rss"),
                    "rss_per_event": (rss - base) / n, "rss_per_page": (rss - base) / CACHE_OBJECTS,
                    "rss_per_file_byte": rss / os.path.getsize(path),
                    "misses": (k["misses_pages"], lm), "accesses": (k["accesses_pages"], ln),
                    "identical": k["misses_pages"] == lm and k["accesses_pages"] == ln})
        os.unlink(path)
    return out


def startup_rows(rounds: int, seed: int, d: str) -> dict:
    small = os.path.join(d, "small.oracleGeneral")
    write_oracle_general(small, loop_zipf_ids(1000, seed))
    help_s = [timed(kmemsim("--help"))["wall"] for _ in range(rounds)]
    rep_s = [timed(kmemsim("replay", small, "--policy", "lru", "--mem", "400K", "--json"))["wall"]
             for _ in range(rounds)]
    return {"help_s": statistics.median(help_s), "small_replay_s": statistics.median(rep_s)}


def llama7b_row(decode: int, d: str) -> dict:
    tr = os.path.join(d, "llama2-7b-q4_0.parquet")
    gen = timed(kmemsim("workload", "llama", "--layout-only", "Llama-2-7B", "--type", "q4_0", "--prompt", 2048,
                        "--decode", decode, "--ctx", 4096, "-o", tr))
    rep = timed(kmemsim("replay", tr, "--mem-limit", "3G", "--zram", "lz4:4G", "--json"))
    s = json.loads(rep["out"])["counters"]
    return {"decode": decode, "generate_s": gen["wall"], "replay_s": rep["wall"], "replay_cpu_s": rep["cpu"],
            "total_s": gen["wall"] + rep["wall"], "page_refs": s["accesses_pages"], "misses": s["misses_pages"],
            "pgscan_memcg": s.get("pgscan_memcg_pages"), "replay_rss": rep["rss"]}


def report(lru: list[dict], start: dict | None, llama: dict | None, stream: dict | None = None) -> list[str]:
    ok = lambda b: "ok" if b else "MISSED"  # noqa: E731
    t = TARGETS
    lines = ["whole processes (each command timed from outside; A and B in turn, median of pairs):"]
    for r in lru:
        lines.append(f"  (e) {r['requests']:>11,} requests: kmemsim lru {r['kmemsim_s']:.2f} s, libCacheSim "
                     f"{r['libcachesim_s']:.2f} s: {r['speedup']:.2f}x ({r['speedup_min']:.2f}-{r['speedup_max']:.2f}; "
                     f"target >= {t['lru_ratio']:.0f}x) {ok(r['speedup'] >= t['lru_ratio'])}; by CPU time "
                     f"{r['cpu_speedup']:.2f}x; misses "
                     f"{'identical' if r['identical'] else 'DIFFER'} ({r['misses'][0]:,} / {r['misses'][1]:,})")
        lines.append(f"      peak RSS {r['kmemsim_rss'] / 2**20:,.0f} MiB (libCacheSim {r['libcachesim_rss'] / 2**20:,.0f}"
                     f" MiB) = {r['rss_per_file_byte']:.2f}x the trace file (target <= {t['rss_per_file_byte']:.0f}x) "
                     f"{ok(r['rss_per_file_byte'] <= t['rss_per_file_byte'])}; above a 1,000-event replay: "
                     f"{r['rss_per_event']:.1f} B per trace event, {r['rss_per_page']:.0f} B per emulated page")
    if start:
        lines.append(f"  (f) kmemsim --help {start['help_s']:.3f} s (target < {t['help_s']} s) "
                     f"{ok(start['help_s'] < t['help_s'])}; replay --json of 1,000 events "
                     f"{start['small_replay_s']:.3f} s (target < {t['small_replay_s']} s) "
                     f"{ok(start['small_replay_s'] < t['small_replay_s'])}")
    if stream:
        lines.append(f"  (h) {stream['requests']:,} requests made on the fly, in batches: kmemsim lru "
                     f"{stream['kmemsim_s']:.1f} s, peak RSS {stream['kmemsim_rss'] / 2**30:.2f} GiB (target < 2 GiB) "
                     f"{ok(stream['kmemsim_rss'] < 2 * 2**30)}; libCacheSim in chunks {stream['libcachesim_s']:.1f} s; "
                     f"misses {'identical' if stream['identical'] else 'DIFFER'} "
                     f"({stream['misses'][0]:,} / {stream['misses'][1]:,})")
    if llama:
        lines.append(f"  (g) Llama-2-7B Q4_0 2048+{llama['decode']} under a 3 GiB memcg, lz4 zram: generation "
                     f"{llama['generate_s']:.1f} s + replay {llama['replay_s']:.1f} s = {llama['total_s']:.1f} s "
                     f"(target < {t['llama7b_s']:.0f} s at 256 decode tokens) "
                     f"{ok(llama['total_s'] < t['llama7b_s'])}; {llama['page_refs']:,} page refs, "
                     f"{llama['page_refs'] / llama['replay_cpu_s'] / 1e6:.1f} M refs per CPU second")
    return lines


def main(sizes=(1 << 20, 4 << 20), rounds=3, seed=20240601, llama_decode=256, startup=True, billion=0):
    with tempfile.TemporaryDirectory(prefix="kmemsim-bench-") as d:
        lru = lru_rows(list(sizes), rounds, seed, d)
        start = startup_rows(max(rounds, 5), seed, d) if startup else None
        stream = stream_row(billion, seed) if billion else None
        llama = llama7b_row(llama_decode, d) if llama_decode else None
    return ({"lru": lru, "startup": start, "llama7b": llama, "stream": stream},
            report(lru, start, llama, stream))
