"""`kmemsim demo`: the bundled default, end to end: a small scenario (an LLM with a pre-allocated KV
cache beside two apps) becomes one trace, the emulator replays it under the stock kernel and the
thesis's policies (IS, DW, IS+DW), the Galaxy S25+ profile turns counts into seconds, and the
comparison prints at two memory sizes the demo picks where the policies differ: the device's available
memory (no pressure: what a policy saves by itself) and three quarters of the stock kernel's peak
there (reclaim runs: which pages it takes), each difference from stock with two lines saying what it
means (kmemsim.report.explain). `kmemsim compare` on the same scenario writes the full report."""
from pathlib import Path

import click

from ..core.data import DEFAULT_DEVICE, SCENARIOS
from ..core.limits import MIN_DEVICE_MEM_BYTES, check_mem
from ..core.paths import input_file, output_dir
from ..core.units import parse_size
from . import options

BUNDLED = SCENARIOS / "kv-prealloc-small.toml"
TIGHT = 0.75      # the tight size: this share of the stock kernel's peak without pressure


@click.command(epilog="""
\b
Example (the bundled scenario at a roomy and a tight size it picks, tables and what they mean):
  kmemsim demo
""")
@click.option("--scenario", "path", type=click.Path(dir_okay=False), default=str(BUNDLED),
              show_default="the bundled kv-prealloc-small.toml", help="scenario TOML")
@options.policy(many=True, default="stock,is,dw,is+dw", show_default=True)
@options.device(default=DEFAULT_DEVICE, show_default=True)
@click.option("--mem", "mems", cls=options.Opt, old=options.VOCABULARY["--mem"], type=options.Size(lo=MIN_DEVICE_MEM_BYTES),
              multiple=True,
              help="device RAM for the trace; repeat for several runs (default: the device's available memory, "
                   "then 3/4 of the stock kernel's peak there)")
@options.zram(default="zstd:1G", show_default=True)
@options.lru
@options.kv_manager
@options.out(required=False, kind="dir", dest="out_dir", default=None,
             help="also write the report (summary.csv, plots, report.html) here")
@options.quiet
def demo(path, policy, device_name, mems, zram, lru, kv_manager, out_dir):
    """Compare stock, IS, DW and IS+DW on the bundled small scenario, at a size without memory pressure
    and one with it, and say what each difference means."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..engine.time import device as devmod
    from ..report import compare as cmpmod, explain
    from ..report.tables import describe, table_text
    if out_dir is not None:
        output_dir(out_dir)
    input_file(path, "--scenario", "scenario .toml file")
    pols = cmpmod.parse_policies(policy)
    for m in mems:
        check_mem(parse_size(m, "--mem"), "--mem", m, MIN_DEVICE_MEM_BYTES)
    dev = devmod.load(options.device_arg(device_name))
    cfgs = [cmpmod.base_config(dev, mem=m, zram=zram, lru=lru) for m in mems]     # all checked before any work
    wl = cmpmod.load_workload(path, kv_manager=kv_manager)
    if not mems:
        roomy = cmpmod.base_config(dev, zram=zram, lru=lru)
        peak = cmpmod.run(wl, ["stock"], dev, roomy, progress=False).runs[0].summary["peak_memory_bytes"]
        tight = max(int(peak * TIGHT) >> 20, MIN_DEVICE_MEM_BYTES >> 20)
        mems = (f"{int(roomy['mem']) >> 20}M", f"{tight}M")
        cfgs = [roomy, cmpmod.base_config(dev, mem=mems[1], zram=zram, lru=lru)]
        click.echo(f"sizes: {mems[0]} ({dev.name}'s available memory: no pressure, what a policy saves by itself) "
                   f"and {mems[1]} (3/4 of stock's peak there, {peak >> 20} MiB: reclaim runs)")
    for i, (mem, cfg) in enumerate(zip(mems, cfgs)):
        cmp = cmpmod.run(wl, pols, dev, cfg)
        click.echo("\n" + describe(cmp))
        click.echo(table_text(cmp.table))
        click.echo("\n".join(explain.lines(cmp)))
        if out_dir:
            d = Path(out_dir) / f"mem-{mem}" if len(mems) > 1 else Path(out_dir)
            cmpmod.write(cmp, d)
            click.echo(f"report: {d}/report.html")
    if not out_dir:
        # the scenario's absolute path: the line works from any directory
        click.echo(f"\nfull report: kmemsim compare {Path(path).resolve()} --mem {mems[-1]} --zram {zram} -o DIR")
