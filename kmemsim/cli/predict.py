"""`kmemsim predict MODEL.gguf --prompt N --decode M --ctx C --mem-limit SIZE|P% [...] --json`: the
workload generator + the emulator, predicting the reference live run (docs/validation.md)."""
from __future__ import annotations

import json

import click

from ..core.errors import InputError
from ..core.limits import MAX_PERIOD_S, MAX_THREADS, check_int
from . import options

EXAMPLE = """
\b
Example (a 4-layer model from `kmemsim model synth`, under a cgroup limit of 60% of its file):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
  kmemsim predict tiny.gguf --prompt 64 --decode 8 --ctx 512 --mem-limit 60%

\b
What it measures (once, then cached in $KMEMSIM_CACHE or ~/.cache/kmemsim, keyed on the model file,
its context, llama-cpp-python's version, the kernel and Python):
  - llama.cpp's buffers and heap for this model and context: Llama() with no_alloc in a child process
  - the pages the engine touches per llama_decode call: the model run unlimited in a child process
  - the engine before any model (as root only): the interpreter importing llama_cpp, under the recorder
A measurement taken while other programs used over 25% of the CPUs' time (/proc/stat less this
process's and its children's own CPU time) is used but not cached. --refresh measures again.
"""

# what each predicted metric is, in the order printed: (key, label, unit)
ROWS = [("storage_read_bytes", "read from storage (the model file)", "bytes"),
        ("file_evicted_bytes", "evicted from the page cache (the model file)", "bytes"),
        ("major_faults", "major faults", "faults"),
        ("minor_faults", "minor faults", "faults"),
        ("swap_out_bytes", "swapped out to zram", "bytes"),
        ("swap_in_bytes", "swapped in from zram", "bytes"),
        ("peak_resident_bytes", "peak resident memory", "bytes"),
        ("kernel_memory_bytes", "peak kernel memory charged", "bytes"),
        ("ttft_s", "time to first token (TTFT)", "s"),
        ("tpot_s", "time per output token (TPOT, median)", "s")]


def text(out: dict) -> str:
    """The prediction as a person reads it: human units, the exact figure in brackets."""
    from ..core.units import human_bytes, human_seconds  # here: the command's own, loaded when it runs
    c = out["config"]
    lines = [f"model     {c['model']} ({human_bytes(c['model_bytes'])})",
             f"run       prompt {c['prompt']:,} tokens, decode {c['decode']:,} steps, context {c['ctx']:,} tokens, "
             f"{c['threads']} threads; cgroup limit {human_bytes(c['mem_limit_bytes'])}, zram {c['zram']}, "
             f"swappiness {c['swappiness']}, policy {c['policy']}",
             f"device    {c['device'] or 'none (no times)'}", ""]
    w = max(len(label) for _, label, _ in ROWS)
    for k, label, unit in ROWS:
        v = out[k]
        if v is None:
            cell = "n/a"
        elif unit == "bytes":
            cell = f"{human_bytes(v)}  ({v:,} bytes)"
        elif unit == "s":
            cell = human_seconds(v)
        else:
            cell = f"{v:,} {unit}"
        lines.append(f"{label:<{w}}  {cell}")
    lines += [f"note: {n}" for n in out["notes"]]
    return "\n".join(lines)


@click.command(epilog=EXAMPLE)
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--prompt", type=int, required=True, help="prompt tokens (the first is BOS), e.g. 64")
@click.option("--decode", type=int, required=True, help="greedy decode steps, e.g. 8")
@click.option("--ctx", type=int, required=True, help="context size in tokens (n_ctx), e.g. 512")
@click.option("--batch", type=int, default=512, show_default=True)
@click.option("--ubatch", type=int, default=512, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@options.mem_limit(percent=True, required=True)
@options.zram(default="lz4:4G", show_default=True)
@options.swappiness(default=60, show_default=True)
@options.policy(default="stock", show_default=True)
@options.device(default=None, help="device profile that gives the times: a name under workloads/devices/ or a "
                "path [default: this machine's, measured by `kmemsim validate` or `kmemsim profile`]")
@click.option("--stats-flush-ms", type=float, default=None,
              help="memcg statistics reclaim reads are this old [default: 2000, the kernel's own flush; "
                   "10: as under kmemsim's recorder; 0: always current]")
@click.option("--stats-flush-phase-ms", type=float, default=0.0, show_default=True,
              help="when the first of those flushes falls after the start (0..--stats-flush-ms): the "
                   "kernel's timer is not the run's, so any phase is as likely (validate shows the range)")
@options.kv_manager
@click.option("--refresh", is_flag=True, help="measure llama.cpp's buffers and the engine's warm set again "
              "instead of reading them from the cache")
@options.quiet
@click.option("--json", "as_json", is_flag=True, help="print JSON (keys with their unit: *_bytes, *_s)")
def predict(model, prompt, decode, ctx, batch, ubatch, threads, mem_limit, zram, swappiness, policy, device_name,
            stats_flush_ms, stats_flush_phase_ms, kv_manager, refresh, as_json):
    """Predict storage reads, evictions, faults, swap, peak memory, TTFT and TPOT of a llama.cpp run
    (llama-cpp-python, as `kmemsim validate` runs it live) under a memory cgroup."""
    # here, not at the top: `kmemsim --help` loads no pandas or C core
    from ..engine.time import device as devmod
    from ..validate import predict as P
    from ..validate.reference import model_size, parse_limits
    from ..workload.gguf_layout import read_layout
    from ..workload.llama import check_request
    check_request(prompt, decode, ctx, batch, ubatch)
    check_int(threads, "--threads", 1, MAX_THREADS)
    lims = parse_limits(mem_limit, model_size(model))
    if len(lims) != 1:
        raise InputError(f"{options.flag('mem_limit', '--mem-limit')}: give one limit")
    if stats_flush_ms is not None:
        options.number_ok(stats_flush_ms, "--stats-flush-ms", 0, MAX_PERIOD_S * 1e3)
    options.number_ok(stats_flush_phase_ms, "--stats-flush-phase-ms", 0, MAX_PERIOD_S * 1e3)
    flush = P.FLUSH_TIME_MS if stats_flush_ms is None else stats_flush_ms
    if not 0 <= stats_flush_phase_ms <= flush:
        raise InputError(f"--stats-flush-phase-ms {stats_flush_phase_ms:g}: expected 0..{flush:g} (the flush period)")
    read_layout(model)
    dev = devmod.load(device_name) if device_name else None
    out = P.predict(model, prompt, decode, ctx, lims[0][1], batch, ubatch, threads, zram, swappiness, policy,
                    stats_flush_ms=flush, stats_flush_phase_ms=stats_flush_phase_ms, kv_manager=kv_manager,
                    device=dev, refresh=refresh)
    if as_json:
        click.echo(json.dumps(out, indent=1, default=str))
        return
    click.echo(text(out))
