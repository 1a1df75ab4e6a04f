"""Click commands: `kmemsim model synth`, `kmemsim workload llama`, `kmemsim trace llama|info`."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

import click

from ..core.data import DEFAULT_DEVICE
from ..core.errors import InputError
from ..core.limits import MAX_U32, check_int
from ..core.paths import output_file
from ..workload.presets import PRESETS
from ..core.progress import quiet, say
from ..core.units import human_bytes
from . import options


@click.group(epilog="""
\b
Example (each command's --help has its own):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
""")
def model():
    """Synthetic GGUF models."""


@model.command("synth", epilog="""
\b
Example (a 4-layer Qwen3-0.6B, 121 MiB, that llama.cpp loads):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
""")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--preset", type=click.Choice(list(PRESETS)), help="a published model's shape")
@click.option("--layers", cls=options.Opt, old=options.VOCABULARY["--layers"], type=int,
              help="number of layers (with --preset: the preset's replaced)")
@click.option("--dim", type=int, help="Embedding length")
@click.option("--ffn", type=int, help="Feed-forward length (expert FFN length for MoE with arch llama)")
@click.option("--heads", type=int)
@click.option("--kv-heads", type=int)
@click.option("--vocab", type=int)
@click.option("--head-dim", type=int)
@click.option("--arch", type=click.Choice(["llama", "qwen2", "qwen3", "qwen3moe"]))
@click.option("--type", "wtype", type=click.Choice(["f16", "q8_0", "q4_0"]), default="q8_0", show_default=True)
@click.option("--experts", type=int, help="MoE: expert count")
@click.option("--experts-used", type=int, help="MoE: experts used per token")
@click.option("--tied/--untied", default=None, help="Share token_embd as the output head")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dry-run", "layout_only", cls=options.Opt, old=options.VOCABULARY["--dry-run"], is_flag=True,
              help="print the tensor layout and the file's size; write no file")
def synth_cmd(out, preset, layers, dim, ffn, heads, kv_heads, vocab, head_dim, arch, wtype,
              experts, experts_used, tied, seed, layout_only):
    """Write a random-weight GGUF that llama.cpp loads and generates with."""
    # here, not at the top: `kmemsim --help` loads no gguf (0.2 s)
    from ..workload import synth
    if not layout_only:
        output_file(out)
    check_int(seed, "--seed", 0, (1 << 63) - 1)
    shape = dict(n_embd=dim, n_ff=ffn, n_head=heads, n_head_kv=kv_heads, n_vocab=vocab, head_dim=head_dim,
                 arch=arch, n_expert=experts, n_expert_used=experts_used, tied=tied)
    lay = layers
    if not preset and layers is None:
        raise InputError("give --preset NAME or a full shape (--layers --dim --ffn --heads --vocab)")
    if layout_only:
        L = synth.layout_from_preset(preset, wtype, lay, **shape)
        click.echo(L.table().rename(columns={"shape": "shape_elements", "n_bytes": "size_bytes", "data_offset": "offset_bytes",
                                             "npages": "pages"}).to_string(index=False))
        click.echo(f"file size {L.file_size:,} bytes ({human_bytes(L.file_size)}), {len(L.tensors)} tensors")
        return
    L = synth.layout_from_preset(preset, wtype, lay, **shape)     # the shape checked, the size known
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(out))).free
    if L.file_size > free:
        raise InputError(f"{out}: the model is {human_bytes(L.file_size)}, more than the {human_bytes(free)} free there")
    t = time.time()
    synth.write_model(out, preset, wtype, lay, seed=seed, progress=sys.stderr.isatty() and not quiet(), **shape)
    click.echo(f"{out}: {human_bytes(os.path.getsize(out))} ({os.path.getsize(out):,} bytes), "
               f"written in {time.time() - t:.1f} s")


@click.group(epilog="""
\b
Example (each command's --help has its own):
  kmemsim workload scenario workloads/scenarios/small.toml -o small.parquet
""")
def workload():
    """Workload traces."""


def _repacks():
    from ..workload.llama.buffers import REPACK_TYPES      # here: the workload package loads numpy
    return ["auto", *REPACK_TYPES]


def _llama_options(f):
    opts = [
        click.option("--prompt", type=int, required=True, help="prompt tokens, e.g. 256"),
        click.option("--decode", type=int, required=True, help="generated tokens, e.g. 32"),
        click.option("--ctx", type=int, required=True, help="context size in tokens (n_ctx), e.g. 4096"),
        click.option("--batch", type=int, default=512, show_default=True),
        click.option("--ubatch", type=int, default=512, show_default=True),
        click.option("--kv-type", type=click.Choice(["f16", "q8_0"]), default="f16", show_default=True),
        click.option("--load-mode", default="mmap", show_default=True,
                     help="mmap | mmap+mlock | none | mlock; an MoE model's experts also: page-cache | willneed | "
                          "direct:SLOTS | pin-hot:N | cold:T (docs/workloads.md)"),
        click.option("--prefetch/--no-prefetch", default=True, show_default=True,
                     help="MAP_POPULATE + MADV_WILLNEED (llama.cpp 0.3.36 always prefetches)"),
        click.option("--flash-attn/--no-flash-attn", default=None,
                     help="Default: off (llama-cpp-python's Llama default), on for a q8_0 KV cache"),
        click.option("--repack", default="auto", show_default=True, type=options.LazyChoice(_repacks),
                     help="CPU weight repacking: auto (this CPU's), or as on a CPU with these features"),
        click.option("--seed", type=int, default=0, show_default=True),
        options.out(help="the trace to write (Parquet)"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@workload.command("llama", epilog="""
\b
Example (a model written by `kmemsim model synth`, then its trace for 256 prompt and 32
generated tokens in a 4096-token context):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
  kmemsim workload llama tiny.gguf --prompt 256 --decode 32 --ctx 4096 -o tiny.parquet
""")
@click.argument("model_path", required=False)
@_llama_options
@click.option("--seqs", type=int, default=1, show_default=True, help="Parallel sequences (KV streams)")
@click.option("--preset", "layout_preset", cls=options.Opt, old=options.VOCABULARY["--preset"],
              type=click.Choice(list(PRESETS)), help="a preset's tensor layout instead of MODEL.gguf (no file needed)")
@click.option("--type", "wtype", type=click.Choice(["f16", "q8_0", "q4_0"]), default="q4_0", show_default=True,
              help="weight type with --preset")
@click.option("--layers", cls=options.Opt, old=options.VOCABULARY["--layers"], type=int,
              help="number of layers with --preset (the preset's replaced)")
@click.option("--moe-routing", default="uniform", show_default=True,
              help="uniform | zipf | zipf:S, then ,stick=P ,corr=C; or recorded:PATH (trace llama --routing-out)")
@click.option("--requests", type=int, default=1, show_default=True)
@click.option("--pid", type=int, default=1000, show_default=True)
@options.device(default=DEFAULT_DEVICE, show_default=True,
                help="device profile whose compute speed times the trace (a name under workloads/devices/ "
                     "or a .toml path)")
@options.kv_manager
def workload_llama(model_path, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch, flash_attn,
                   repack, seed, out, seqs, layout_preset, wtype, layers, moe_routing, requests, pid,
                   device_name, kv_manager):
    """Trace of llama.cpp inference on MODEL.gguf (or a preset layout), from its tensor offsets."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..engine.time import device
    from ..core import trace as tr_mod      # here: the trace schema loads numpy (start-up)
    from ..workload import llama as lw
    from ..workload.llama import routing
    output_file(out)
    lw.check_request(prompt, decode, ctx, batch, ubatch, seqs, requests, pid)
    routing.parse(moe_routing)
    check_int(seed, "--seed", 0, (1 << 63) - 1)
    tm = device.load(options.device_arg(device_name)).time_model()
    if layout_preset:
        from ..workload.synth import layout_from_preset   # gguf: 0.2 s, only for a preset
        model_obj = layout_from_preset(layout_preset, wtype, layers)
    elif model_path:
        model_obj = model_path
    else:
        raise InputError("give MODEL.gguf or --preset NAME")
    t = time.time()
    say(f"generating llama.cpp's accesses: {prompt:,} prompt and {decode:,} decode tokens")
    tr = lw.generate(model_obj, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch, seqs,
                     pid=pid, flash_attn=flash_attn, repack=repack, moe_routing=moe_routing, seed=seed,
                     requests=requests, time_model=tm, kv_manager=kv_manager)
    tr_mod.save(tr, out)
    t_tr = (float(tr.cols["t"][-1] - tr.cols["t"][0]) / 1e9) if len(tr) else 0.0
    click.echo(f"{out}: {len(tr):,} events covering {t_tr:.3f} s of trace time (the device's clock); "
               f"generated in {time.time() - t:.2f} s")


@click.group(epilog="""
\b
Example (each command's --help has its own):
  kmemsim trace info small.parquet
""")
def trace():
    """Record and inspect traces."""


@trace.command("llama", epilog="""
\b
Example (real llama.cpp on a model from `kmemsim model synth`; needs llama-cpp-python):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
  kmemsim trace llama tiny.gguf --prompt 16 --decode 4 --ctx 256 -o real.parquet
""")
@click.argument("model_path")
@_llama_options
@click.option("--routing-out", type=click.Path(dir_okay=False),
              help="MoE: also write the experts llama.cpp routed each token to (ffn_moe_topk), for "
                   "--moe-routing recorded:PATH")
def trace_llama(model_path, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch, flash_attn,
                repack, seed, out, routing_out):
    """Run real llama.cpp (llama-cpp-python) with cb_eval and record the weights each graph node reads."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..core import trace as tr_mod      # here: the trace schema loads numpy (start-up)
    from ..workload import llama as lw
    from ..workload.llama import cb_eval as llama_trace
    from ..core.atomic import atomic_write
    from ..workload.gguf_layout import read_layout
    from ..workload.llama.routing import save_recording
    output_file(out)
    lw.check_request(prompt, decode, ctx, batch, ubatch)
    check_int(seed, "--seed", 0, MAX_U32)
    if routing_out:
        output_file(routing_out)
        if not read_layout(model_path).hparams.get("n_expert"):
            raise InputError(f"--routing-out: {model_path} has no experts (expert_count is 0); drop --routing-out")
    say(f"running llama.cpp on {model_path} with cb_eval: {prompt:,} prompt and {decode:,} decode tokens")
    tr, rec = llama_trace.trace(model_path, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch,
                                flash_attn, repack not in ("none", "off"), seed, routing=bool(routing_out))
    if routing_out:
        atomic_write(routing_out, lambda tmp: save_recording(tmp, rec["routing"], rec["n_expert"]))
    tr_mod.save(tr, out)
    click.echo(f"{out}: {len(tr):,} events, {len(rec['ubatches']):,} ubatches recorded; "
               f"token ids generated: {rec['generated'][:8]}")


@trace.command("info", epilog="""
\b
Example:
  kmemsim workload scenario workloads/scenarios/small.toml -o small.parquet
  kmemsim trace info small.parquet
""")
@click.argument("trace_path")
@click.option("--json", "as_json", is_flag=True, help="everything, as JSON (sizes in *_bytes, times in *_ns)")
def trace_info_cmd(trace_path, as_json):
    """Processes, mappings, bytes read and written per phase, distinct pages."""
    from ..core import trace as tr_mod  # here: the trace schema loads numpy (start-up)
    from ..report.trace_info import format_text, info   # here: `kmemsim --help` loads no pandas
    d = info(tr_mod.load(trace_path))
    click.echo(json.dumps(d, indent=1) if as_json else format_text(d))
