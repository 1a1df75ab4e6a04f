"""`make bench-record` (python -m kmemsim.bench.record): what the recorder costs real llama.cpp.

Decode tokens per second of llama-cpp-python on a synthetic GGUF (kmemsim/workload/synth.py), measured inside
one long-lived inference process, alternately bare and with the recorder attached to it (every probe,
counters sampled every 10 ms, as `kmemsim record --pid`), `--rounds` pairs with alternating order;
the median of the paired ratios is the result. Target (issue 4): the
recorder slows decoding by at most 3%. Needs root (the recorder does) and llama-cpp-python.

`--pressure PCT` (`make bench-record-pressure`): what the recorder costs a run under reclaim, where
every probe fires. `kmemsim validate`'s reference run of a small model in a cgroup limited to PCT% of
its size, recorded and then again unrecorded (validate.reference.live_run), `--rounds` pairs; prints the
recorded/unrecorded ratios of TTFT and TPOT and what the kernel did in each (major faults, swap-out).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

# A small llama: 8 layers of Llama-3.2-1B width, ~0.4 GB in q8_0; big enough that decode is memory-
# bound like real inference, small enough to write in seconds.
SHAPE = dict(arch="llama", n_layer=8, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8, n_vocab=32000)
# --pressure: the live validation test's model (tests/test_validate.py), 0.15 GB in f16
PRESSURE_SHAPE = dict(type="f16", n_layer=4, n_embd=768, n_ff=2048, n_head=12, n_head_kv=4, n_vocab=32000)


def worker(model, threads):
    """The measured process: load and warm up once, then for each line N on stdin decode N tokens and
    print tokens per second (timed inside this process, so the driver's own work is not counted)."""
    from llama_cpp import Llama        # the optional dependency, in the measured process alone
    llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, verbose=False)
    prompt = [1] + list(range(300, 316))
    llm.eval(prompt)                                            # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        llm.reset()
        llm.eval(prompt)
        t, c = time.perf_counter(), time.process_time()
        for i in range(n):
            llm.eval([400 + i % 1000])
        print(n / (time.perf_counter() - t), (time.process_time() - c) / n, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32, help="decode steps per measurement")
    ap.add_argument("--rounds", type=int, default=6, help="bare/recorded pairs (order alternates)")
    # one core left for the rest of the system (as llama.cpp is run on phones): with every core
    # decoding, any other runnable thread stalls ggml's thread barrier, recorder or not
    ap.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--model", help="GGUF to use (default: a synthetic one, written to a temp dir)")
    ap.add_argument("--out", help="keep the last recorded round's run directory here")
    ap.add_argument("--pressure", type=float, metavar="PCT",
                    help="instead: reference runs under a memory limit of PCT%% of the model, recorded and not")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker(a.model, a.threads)
    if os.geteuid() != 0:
        sys.exit("bench-record: needs root (the recorder attaches BPF programs); run it with sudo")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        sys.exit("bench-record: llama-cpp-python is not installed; run `make setup`")
    if a.pressure:
        return pressure(a)
    from ..live.recorder import Recording  # here: the --worker process imports this module and stays llama.cpp alone
    from ..live.rundir import RunDir, environment
    with tempfile.TemporaryDirectory(prefix="kmemsim-bench-", dir="/var/tmp") as tmp:
        model = a.model
        if not model:
            from ..workload.synth import write_model   # not in the --worker process
            model = write_model(os.path.join(tmp, "bench.gguf"), progress=False, **SHAPE)
        w = subprocess.Popen([sys.executable, "-m", "kmemsim.bench.record", "--worker", "--model", model,
                              "--threads", str(a.threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
        try:
            if w.stdout.readline().strip() != "ready":
                sys.exit("bench-record: the llama.cpp worker did not start")

            def decode():
                w.stdin.write(f"{a.tokens}\n")
                w.stdin.flush()
                tok_s, cpu_tok = map(float, w.stdout.readline().split())
                return tok_s, cpu_tok

            def recorded(i):
                # what `kmemsim record --pid` does: every probe attached, counters sampled
                rec = Recording(a.interval)
                c0 = resource.getrusage(resource.RUSAGE_SELF)
                try:
                    rec.track(w.pid, seed_inodes=True)
                    rec.snapshot_maps()
                    rec.start(w.pid)
                    v = decode()
                    rec.stop()
                    c1 = resource.getrusage(resource.RUSAGE_SELF)
                    # the recorder's own CPU (poll + sampler threads) per decoded token
                    v = v + ((c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / a.tokens,)
                    out = a.out if a.out and i == a.rounds - 1 else os.path.join(tmp, f"run{i}")
                    RunDir.create(out).write_all(rec, {"complete": True, "exit_code": None},
                                                 env=environment(pid=w.pid), pid=w.pid)
                    with open(os.path.join(out, "summary.json")) as f:
                        s = json.load(f)
                    return v, s
                finally:
                    rec.close()

            bare, rec = [], []
            for i in range(a.rounds):
                if i % 2:                   # alternate the order: drift in the machine's load cancels
                    r, s = recorded(i)
                    b = decode()
                else:
                    b = decode()
                    r, s = recorded(i)
                bare.append(b)
                rec.append(r)
                print(f"round {i + 1}: bare {b[0]:.3f} tok/s ({b[1] * 1e3:.0f} ms CPU/token), recorded "
                      f"{r[0]:.3f} tok/s ({r[1] * 1e3:.0f} ms CPU/token + recorder {r[2] * 1e3:.1f} ms), "
                      f"ratio {r[0] / b[0]:.3f}; {s['fault_events']} faults, {s['lost_events']} lost events",
                      flush=True)
        finally:
            w.stdin.close()
            w.wait()
    med = statistics.median
    ratio = med(r[0] / b[0] for r, b in zip(rec, bare))
    # CPU view, robust to a busy machine: extra CPU per token in the inference process (BPF programs
    # run there) plus the recorder's own CPU per token, relative to the bare CPU per token.
    cpu_ratio = med((r[1] + r[2]) / b[1] for r, b in zip(rec, bare))
    print(json.dumps({"bare_tok_s": round(med(b[0] for b in bare), 3),
                      "recorded_tok_s": round(med(r[0] for r in rec), 3), "ratio": round(ratio, 4),
                      "slowdown_pct": round(100 * (1 - ratio), 2),
                      "cpu_per_token_ratio": round(cpu_ratio, 4),
                      "cpu_overhead_pct": round(100 * (cpu_ratio - 1), 2),
                      "recorder_cpu_ms_per_token": round(1e3 * med(r[2] for r in rec), 2),
                      "target_pct": 3.0, "threads": a.threads, "tokens": a.tokens, "rounds": a.rounds,
                      "load_avg": os.getloadavg()[0]}))
    print(f"recorder slowdown (median of paired tok/s ratios): {100 * (1 - ratio):.2f}%; CPU overhead per "
          f"token: {100 * (cpu_ratio - 1):.2f}% (target <= 3%)")


def pressure(a):
    from ..workload.synth import write_model  # here: the --worker process imports this module and stays llama.cpp alone
    from ..validate.reference import UNRECORDED, live_run
    med = statistics.median
    rows = []
    with tempfile.TemporaryDirectory(prefix="kmemsim-bench-", dir="/var/tmp") as tmp:
        model = a.model or write_model(os.path.join(tmp, "bench.gguf"), progress=False, **PRESSURE_SHAPE)
        limit = int(os.path.getsize(model) * a.pressure / 100)
        for i in range(a.rounds):
            m = live_run(model, 64, 8, 512, limit, os.path.join(tmp, f"pair{i}"))
            q = m.get(UNRECORDED) or {}
            if not m["complete"] or "tpot_s" not in m or not q:
                sys.exit(f"bench-record: pair {i + 1} did not complete (out of memory at {a.pressure:g}%?)")
            r = dict(ttft=m["ttft_recorded_s"] / m["ttft_s"], tpot=m["tpot_recorded_s"] / m["tpot_s"],
                     majflt=(m["major_faults"], q["major_faults"]),
                     swap_mb=(m["swap_out_bytes"] / 1e6, q["swap_out_bytes"] / 1e6), lost=m["lost_events"])
            rows.append(r)
            print(f"pair {i + 1}: TTFT {m['ttft_recorded_s']:.3f} s recorded / {m['ttft_s']:.3f} s unrecorded "
                  f"= {r['ttft']:.2f}, TPOT {m['tpot_recorded_s']:.3f} / {m['tpot_s']:.3f} = {r['tpot']:.2f}; "
                  f"major faults {r['majflt'][0]} / {r['majflt'][1]}, swap-out {r['swap_mb'][0]:.1f} / "
                  f"{r['swap_mb'][1]:.1f} MB; {r['lost']} lost events", flush=True)
    print(json.dumps({"limit_pct": a.pressure, "rounds": a.rounds,
                      "ttft_ratio": round(med(r["ttft"] for r in rows), 3),
                      "tpot_ratio": round(med(r["tpot"] for r in rows), 3),
                      "major_faults_ratio": round(med(r["majflt"][0] / max(1, r["majflt"][1]) for r in rows), 3),
                      "swap_out_ratio": round(med(r["swap_mb"][0] / max(1e-6, r["swap_mb"][1]) for r in rows), 3),
                      "load_avg": os.getloadavg()[0]}))
    print(f"under reclaim at {a.pressure:g}%: the recorded run's TPOT is {med(r['tpot'] for r in rows):.2f}x the "
          f"unrecorded one's (median of {a.rounds} pairs)")


if __name__ == "__main__":
    main()
