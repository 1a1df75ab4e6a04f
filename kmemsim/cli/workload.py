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
from . import options


@click.group()
def model():
    """Synthetic GGUF models."""


@model.command("synth")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--preset", help="Model shape: " + ", ".join(PRESETS))
@click.option("--layers", type=int, help="Number of layers (with --preset: overrides the preset's)")
@click.option("--layers-override", type=int, help="Reduce a preset to N layers")
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
@click.option("--layout-only", is_flag=True, help="Print the tensor layout; write no file")
def synth_cmd(out, preset, layers, layers_override, dim, ffn, heads, kv_heads, vocab, head_dim, arch, wtype,
              experts, experts_used, tied, seed, layout_only):
    """Write a random-weight GGUF that llama.cpp loads and generates with."""
    # here, not at the top: `kmemsim --help` loads no gguf (0.2 s)
    from ..workload import synth
    if not layout_only:
        output_file(out)
    check_int(seed, "--seed", 0, (1 << 63) - 1)
    shape = dict(n_embd=dim, n_ff=ffn, n_head=heads, n_head_kv=kv_heads, n_vocab=vocab, head_dim=head_dim,
                 arch=arch, n_expert=experts, n_expert_used=experts_used, tied=tied)
    lay = layers_override if layers_override is not None else layers
    if not preset and layers is None:
        raise InputError("give --preset NAME or a full shape (--layers --dim --ffn --heads --vocab)")
    if layout_only:
        L = synth.layout_from_preset(preset, wtype, lay, **shape)
        click.echo(L.table().to_string(index=False))
        click.echo(f"file size {L.file_size:,} bytes, {len(L.tensors)} tensors")
        return
    L = synth.layout_from_preset(preset, wtype, lay, **shape)     # the shape checked, the size known
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(out))).free
    if L.file_size > free:
        raise InputError(f"{out}: the model is {L.file_size:,} bytes, more than the {free:,} bytes free there")
    t = time.time()
    synth.write_model(out, preset, wtype, lay, seed=seed, progress=sys.stderr.isatty(), **shape)
    click.echo(f"{out}: {os.path.getsize(out):,} bytes in {time.time() - t:.1f} s")


@click.group()
def workload():
    """Workload traces."""


def _llama_options(f):
    opts = [
        click.option("--prompt", type=int, required=True, help="Prompt tokens"),
        click.option("--decode", type=int, required=True, help="Generated tokens"),
        click.option("--ctx", type=int, required=True, help="Context size (n_ctx)"),
        click.option("--batch", type=int, default=512, show_default=True),
        click.option("--ubatch", type=int, default=512, show_default=True),
        click.option("--kv-type", type=click.Choice(["f16", "q8_0"]), default="f16", show_default=True),
        click.option("--load-mode", type=click.Choice(["mmap", "mmap+mlock", "none", "mlock"]), default="mmap",
                     show_default=True),
        click.option("--prefetch/--no-prefetch", default=True, show_default=True,
                     help="MAP_POPULATE + MADV_WILLNEED (llama.cpp 0.3.36 always prefetches)"),
        click.option("--flash-attn/--no-flash-attn", default=None,
                     help="Default: off (llama-cpp-python's Llama default), on for a q8_0 KV cache"),
        click.option("--repack", default="auto", show_default=True,
                     help="CPU weight repacking: auto (this CPU), none, avx2, avx512, neon-i8mm"),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False)),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@workload.command("llama")
@click.argument("model_path", required=False)
@_llama_options
@click.option("--seqs", type=int, default=1, show_default=True, help="Parallel sequences (KV streams)")
@click.option("--layout-only", "layout_preset", metavar="PRESET", help="Use a preset's layout; no file needed")
@click.option("--type", "wtype", type=click.Choice(["f16", "q8_0", "q4_0"]), default="q4_0", show_default=True,
              help="Weight type with --layout-only")
@click.option("--layers", type=int, help="Layers with --layout-only")
@click.option("--moe-routing", default="uniform", show_default=True, help="uniform | zipf | zipf:S")
@click.option("--requests", type=int, default=1, show_default=True)
@click.option("--pid", type=int, default=1000, show_default=True)
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True,
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
    from ..workload.llama.routing import zipf_exponent
    output_file(out)
    lw.check_request(prompt, decode, ctx, batch, ubatch, seqs, requests, pid)
    zipf_exponent(moe_routing)
    check_int(seed, "--seed", 0, (1 << 63) - 1)
    tm = device.load(options.device_arg(device_name)).time_model()
    if layout_preset:
        from ..workload.synth import layout_from_preset   # gguf: 0.2 s, only for a preset
        model_obj = layout_from_preset(layout_preset, wtype, layers)
    elif model_path:
        model_obj = model_path
    else:
        raise InputError("give MODEL.gguf or --layout-only PRESET")
    t = time.time()
    tr = lw.generate(model_obj, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch, seqs,
                     pid=pid, flash_attn=flash_attn, repack=repack, moe_routing=moe_routing, seed=seed,
                     requests=requests, time_model=tm, kv_manager=kv_manager)
    tr_mod.save(tr, out)
    click.echo(f"{out}: {len(tr):,} events in {time.time() - t:.2f} s")


@click.group()
def trace():
    """Record and inspect traces."""


@trace.command("llama")
@click.argument("model_path")
@_llama_options
def trace_llama(model_path, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch, flash_attn,
                repack, seed, out):
    """Run real llama.cpp (llama-cpp-python) with cb_eval and record the weights each graph node reads."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..core import trace as tr_mod      # here: the trace schema loads numpy (start-up)
    from ..workload import llama as lw
    from ..workload.llama import cb_eval as llama_trace
    output_file(out)
    lw.check_request(prompt, decode, ctx, batch, ubatch)
    check_int(seed, "--seed", 0, MAX_U32)
    tr, rec = llama_trace.trace(model_path, prompt, decode, ctx, batch, ubatch, kv_type, load_mode, prefetch,
                                flash_attn, repack not in ("none", "off"), seed)
    tr_mod.save(tr, out)
    click.echo(f"{out}: {len(tr):,} events, {len(rec['ubatches'])} ubatches recorded, "
               f"generated {rec['generated'][:8]}")


@trace.command("info")
@click.argument("trace_path")
@click.option("--json", "as_json", is_flag=True)
def trace_info_cmd(trace_path, as_json):
    """Processes, mappings, bytes read and written per phase, distinct pages."""
    from ..core import trace as tr_mod  # here: the trace schema loads numpy (start-up)
    from ..report.trace_info import format_text, info   # here: `kmemsim --help` loads no pandas
    d = info(tr_mod.load(trace_path))
    click.echo(json.dumps(d, indent=1) if as_json else format_text(d))
