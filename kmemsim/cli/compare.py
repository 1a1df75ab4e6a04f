"""`kmemsim compare MODEL.gguf|SCENARIO.toml|RUNDIR --policies stock,is,dw,is+dw -o DIR`: every policy on
the same trace (built once; a run directory's events.parquet, its measured totals in live.csv);
summary.csv, summary.md, phases.csv, timeline.parquet, PNG plots and a self-contained report.html in
DIR; the table on stdout. Options are checked before the trace is built."""
from __future__ import annotations

import click

from ..core.data import DEFAULT_DEVICE
from ..core.errors import InputError
from ..core.limits import MAX_PATHS, MAX_POLICY_PARAM, MAX_TOKENS, MIN_DEVICE_MEM_BYTES, check_int, check_mem
from ..core.paths import output_dir
from ..core.units import parse_size
from . import options


@click.command()
@click.argument("workload", type=click.Path())
@click.option("--policies", default="stock,is,dw,is+dw", show_default=True, help="comma-separated policies")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True,
              help="device profile: a name under workloads/devices/ or a .toml path")
@click.option("--mem", default=None, help="device RAM for the trace (default: the device's memory.available)")
@click.option("--memcg-limit", default=None, help="memory cgroup limit instead of --mem")
@click.option("--zram", default=None, help="ALGO:SIZE (default: the device's kernel.zram)")
@click.option("--swappiness", type=int, default=None, help="default: the device's")
@click.option("--policy-param", type=int, default=None, help="policy strength (DW: 0 = defer until last resort)")
@options.lru
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="scenario override (repeatable)")
@click.option("--prompt", type=int, default=256, show_default=True, help="MODEL.gguf: prompt tokens")
@click.option("--decode", type=int, default=32, show_default=True, help="MODEL.gguf: generated tokens")
@click.option("--ctx", type=int, default=4096, show_default=True, help="MODEL.gguf: n_ctx per path")
@click.option("--paths", type=int, default=1, show_default=True, help="MODEL.gguf: speculative paths (KV sequences)")
@click.option("--requests", type=int, default=1, show_default=True, help="MODEL.gguf: requests")
@options.kv_manager
@click.option("--load-modes", default=None, metavar="MODE,...",
              help="MODEL.gguf: load modes side by side, e.g. an MoE model's page-cache,willneed,direct:16,"
                   "pin-hot:64,cold:8 (docs/workloads.md)")
@click.option("--moe-routing", default="uniform", show_default=True,
              help="MODEL.gguf: uniform | zipf[:S] [,stick=P,corr=C] | recorded:PATH")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="output directory")
def compare(workload, policies, device_name, mem, memcg_limit, zram, swappiness, policy_param, lru, overrides,
            prompt, decode, ctx, paths, requests, kv_manager, load_modes, moe_routing, out_dir):
    """Compare memory policies on one workload: memory, storage reads, TTFT, time per token."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..engine.time import device as devmod
    from ..report import compare as cmpmod
    from ..report.tables import describe, table_text
    from ..workload.llama import check_request, experts, routing
    from ..workload.gguf_layout import read_layout
    output_dir(out_dir)
    pols = cmpmod.parse_policies(policies)
    if mem is not None and memcg_limit is not None:
        raise InputError("give --mem or --memcg-limit, not both")
    for name, v in (("--mem", mem), ("--memcg-limit", memcg_limit)):
        if v is not None:
            check_mem(parse_size(v, name), name, v, MIN_DEVICE_MEM_BYTES)
    check_int(paths, "--paths", 1, MAX_PATHS)
    check_int(decode, "--decode", 1, MAX_TOKENS)
    check_request(prompt, decode, ctx, requests=requests)
    check_int(ctx * paths, "--ctx x --paths (the context's cells)", 1, MAX_TOKENS)
    options.swappiness_ok(swappiness)
    if policy_param is not None:
        check_int(policy_param, "--policy-param", -MAX_POLICY_PARAM, MAX_POLICY_PARAM)
    dev = devmod.load(options.device_arg(device_name))
    cfg = cmpmod.base_config(dev, mem=mem, memcg_limit=memcg_limit, zram=zram, swappiness=swappiness,
                             policy_param=policy_param, lru=lru)
    dev.zram_algo(cfg.get("zram"))
    routing.parse(moe_routing)
    if load_modes is not None:
        modes = [m.strip() for m in load_modes.split(",") if m.strip()]
        if not str(workload).endswith(".gguf") or not modes:
            raise InputError("--load-modes: give modes (comma-separated) and a model (.gguf)")
        if len(set(modes)) != len(modes):
            raise InputError("--load-modes: a mode is listed twice")
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
    click.echo(f"\nwrote {out_dir}/: summary.csv summary.md phases.csv memory.png storage_reads.png "
               "token_latency.png report.html")
