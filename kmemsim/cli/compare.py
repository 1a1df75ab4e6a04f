"""`kmemsim compare MODEL.gguf|SCENARIO.toml|RUNDIR --policies stock,is,dw,is+dw -o DIR`: every policy on
the same trace (built once; a run directory's events.parquet, its measured totals in live.csv);
summary.csv/.parquet (tidy: one row per policy, its scenario, device, memory and zram as columns),
summary.md, phases.csv, timeline.parquet, each figure as PNG (200 dpi), SVG and PDF beside the table it
draws, and a self-contained report.html in DIR; the table on stdout. Options are checked before the trace is built."""
from __future__ import annotations

import click

from ..core.data import DEFAULT_DEVICE
from ..core.errors import InputError
from ..core.limits import MAX_PATHS, MAX_POLICY_PARAM, MAX_TOKENS, MIN_DEVICE_MEM_BYTES, check_int, check_mem
from ..core.paths import output_dir
from ..core.units import parse_size
from . import options


@click.command(epilog="""
\b
Example (the bundled small scenario on the default phone with 1 GiB of RAM; writes cmp/):
  kmemsim compare workloads/scenarios/small.toml --policy stock,is,dw,is+dw --mem 1G -o cmp
""")
@click.argument("workload", type=click.Path())
@options.policy(many=True, default="stock,is,dw,is+dw", show_default=True)
@options.device(default=DEFAULT_DEVICE, show_default=True)
@options.mem(lo=MIN_DEVICE_MEM_BYTES, default=None, help="device RAM for the trace [default: the device's memory.available]")
@options.mem_limit(lo=MIN_DEVICE_MEM_BYTES, default=None, help="memory cgroup limit (memory.max) instead of --mem")
@options.zram(default=None, help="zram swap device, e.g. zstd:2G [default: the device's kernel.zram]")
@options.swappiness(default=None, help="vm.swappiness, 0..200 [default: the device's]")
@click.option("--policy-param", type=int, default=None, help="policy strength (DW: 0 = defer until last resort)")
@options.lru
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="scenario override (repeatable)")
@click.option("--prompt", type=int, default=256, show_default=True, help="MODEL.gguf: prompt tokens")
@click.option("--decode", type=int, default=32, show_default=True, help="MODEL.gguf: generated tokens")
@click.option("--ctx", type=int, default=4096, show_default=True, help="MODEL.gguf: context size in tokens (n_ctx) per path")
@click.option("--paths", type=int, default=1, show_default=True, help="MODEL.gguf: speculative paths (KV sequences)")
@click.option("--requests", type=int, default=1, show_default=True, help="MODEL.gguf: requests")
@options.kv_manager
@click.option("--load-mode", "load_modes", cls=options.Opt, old=options.VOCABULARY["--load-mode"], default=None,
              metavar="MODE[,MODE...]",
              help="MODEL.gguf: load modes side by side, e.g. an MoE model's page-cache,willneed,direct:16,"
                   "pin-hot:64,cold:8 (docs/workloads.md)")
@click.option("--moe-routing", default="uniform", show_default=True,
              help="MODEL.gguf: uniform | zipf[:S] [,stick=P,corr=C] | recorded:PATH")
@options.out(kind="dir", dest="out_dir", help="output directory")
@options.quiet
def compare(workload, policy, device_name, mem, mem_limit, zram, swappiness, policy_param, lru, overrides,
            prompt, decode, ctx, paths, requests, kv_manager, load_modes, moe_routing, out_dir):
    """Compare memory policies on one workload: memory, storage reads, TTFT, time per token."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..engine.time import device as devmod
    from ..report import compare as cmpmod
    from ..report import explain
    from ..report.tables import describe, table_text
    from ..workload.llama import check_request, experts, routing
    from ..workload.gguf_layout import read_layout
    output_dir(out_dir)
    pols = cmpmod.parse_policies(policy)
    mem_flag, limit_flag = options.flag("mem", "--mem"), options.flag("mem_limit", "--mem-limit")
    if mem is not None and mem_limit is not None:
        raise InputError(f"give {mem_flag} or {limit_flag}, not both")
    for name, v in ((mem_flag, mem), (limit_flag, mem_limit)):
        if v is not None:
            check_mem(parse_size(v, name), name, v, MIN_DEVICE_MEM_BYTES)
    check_int(paths, "--paths", 1, MAX_PATHS)
    check_int(decode, "--decode", 1, MAX_TOKENS)
    check_request(prompt, decode, ctx, requests=requests)
    check_int(ctx * paths, "--ctx x --paths (the context's cells)", 1, MAX_TOKENS)
    if policy_param is not None:
        check_int(policy_param, "--policy-param", -MAX_POLICY_PARAM, MAX_POLICY_PARAM)
    dev = devmod.load(options.device_arg(device_name))
    cfg = cmpmod.base_config(dev, mem=mem, memcg_limit=mem_limit, zram=zram, swappiness=swappiness,
                             policy_param=policy_param, lru=lru)
    dev.zram_algo(cfg.get("zram"))
    routing.parse(moe_routing)
    if load_modes is not None:
        modes = [m.strip() for m in load_modes.split(",") if m.strip()]
        if not str(workload).endswith(".gguf") or not modes:
            raise InputError("--load-mode: give modes (comma-separated) and a model (.gguf)")
        if len(set(modes)) != len(modes):
            raise InputError("--load-mode: a mode is listed twice")
        hp = read_layout(str(workload)).hparams
        for m in modes:                  # each mode checked against the model before any trace is built
            if experts.is_moe_mode(m):
                experts.parse(m, hp)
        cmp = cmpmod.run_load_modes(workload, modes, pols, dev, cfg, kv_manager=kv_manager, prompt=prompt,
                                    decode=decode, ctx=ctx, paths=paths, requests=requests, moe_routing=moe_routing)
    else:
        wl = cmpmod.load_workload(workload, overrides, kv_manager, prompt=prompt, decode=decode, ctx=ctx,
                                  paths=paths, requests=requests, moe_routing=moe_routing)
        cmp = cmpmod.run(wl, pols, dev, cfg)
    cmpmod.write(cmp, out_dir)
    click.echo(describe(cmp))
    click.echo(table_text(cmp.table))
    click.echo("\n".join(explain.lines(cmp)))
    click.echo(f"\nwrote {out_dir}/: report.html; summary.csv and .parquet (one row per policy with its keys); "
               "each figure (memory, storage_reads, token_latency, memory_per_process, process_traffic) as "
               ".png .svg .pdf beside its data as .csv .parquet")
