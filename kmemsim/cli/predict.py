"""`kmemsim predict MODEL.gguf --prompt N --decode M --ctx C --mem-limit SIZE [...] --json`: the
workload generator + the emulator, predicting the reference live run (docs/validation.md)."""
from __future__ import annotations

import json

import click

from ..core.errors import InputError
from ..core.limits import MAX_PERIOD_S, MAX_THREADS, check_int, check_zram_size
from ..core.units import parse_size
from . import options


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--prompt", type=int, required=True, help="prompt tokens (the first is BOS)")
@click.option("--decode", type=int, required=True, help="greedy decode steps")
@click.option("--ctx", type=int, required=True, help="n_ctx")
@click.option("--batch", type=int, default=512, show_default=True)
@click.option("--ubatch", type=int, default=512, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--mem-limit", required=True, help="memory cgroup limit (size, or N%% of the model file)")
@click.option("--zram", default="lz4:4G", show_default=True, help="ALGO:SIZE")
@click.option("--swappiness", type=int, default=60, show_default=True)
@click.option("--policy", default="stock", show_default=True)
@click.option("--stats-flush-ms", type=float, default=None,
              help="memcg statistics reclaim reads are this old [default: 2000, the kernel's own flush; "
                   "10: as under kmemsim's recorder; 0: always current]")
@click.option("--stats-flush-phase-ms", type=float, default=0.0, show_default=True,
              help="when the first of those flushes falls after the start (0..--stats-flush-ms): the "
                   "kernel's timer is not the run's, so any phase is as likely (validate shows the range)")
@options.kv_manager
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def predict(model, prompt, decode, ctx, batch, ubatch, threads, mem_limit, zram, swappiness, policy,
            stats_flush_ms, stats_flush_phase_ms, kv_manager, as_json):
    """Predict storage reads, evictions, faults, swap and peak memory of a llama.cpp run."""
    # here, not at the top: `kmemsim --help` loads no pandas or C core
    from ..engine.kernel import POLICIES, ZRAM_ALGOS
    from ..validate import predict as P
    from ..validate.reference import METRICS, model_size, parse_limits
    from ..workload.gguf_layout import read_layout
    from ..workload.llama import check_request
    check_request(prompt, decode, ctx, batch, ubatch)
    check_int(threads, "--threads", 1, MAX_THREADS)
    options.swappiness_ok(swappiness)
    if policy not in POLICIES:
        raise InputError(f"--policy {policy!r}: unknown; known: {', '.join(POLICIES)}")
    algo, sep, size = zram.partition(":")
    if not sep or algo not in ZRAM_ALGOS:
        raise InputError(f"--zram {zram!r}: expected ALGO:SIZE with ALGO one of {', '.join(ZRAM_ALGOS)} (e.g. lz4:4G)")
    check_zram_size(parse_size(size, "--zram size"), "--zram size", size)
    lims = parse_limits(mem_limit, model_size(model))
    if len(lims) != 1:
        raise InputError("--mem-limit: give one limit")
    if stats_flush_ms is not None:
        options.number_ok(stats_flush_ms, "--stats-flush-ms", 0, MAX_PERIOD_S * 1e3)
    options.number_ok(stats_flush_phase_ms, "--stats-flush-phase-ms", 0, MAX_PERIOD_S * 1e3)
    flush = P.FLUSH_TIME_MS if stats_flush_ms is None else stats_flush_ms
    if not 0 <= stats_flush_phase_ms <= flush:
        raise InputError(f"--stats-flush-phase-ms {stats_flush_phase_ms:g}: expected 0..{flush:g} (the flush period)")
    read_layout(model)
    out = P.predict(model, prompt, decode, ctx, lims[0][1], batch, ubatch, threads, zram, swappiness, policy,
                    stats_flush_ms=flush, stats_flush_phase_ms=stats_flush_phase_ms, kv_manager=kv_manager)
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
        return
    for k in METRICS:
        click.echo(f"{k:22s} {out[k]}")
    for n in out["notes"]:
        click.echo(f"note: {n}")
