"""`kmemsim demo`: the bundled default, end to end: a small scenario (an LLM beside three apps)
becomes a trace, the emulator replays it under a memory limit with zram, and a table prints."""
from pathlib import Path

import click

from . import scenario
from .emulator import Config, Emulator

BUNDLED = Path(__file__).resolve().parent.parent / "workloads" / "scenarios" / "small.toml"
SHOWN = ["pgfault", "pgmajfault", "pgpgin", "pswpout", "pswpin", "workingset_refault_file",
         "workingset_refault_anon", "workingset_activate_file", "pgscan_memcg", "pgsteal_memcg",
         "oom_kill", "peak_resident_bytes", "zram_mem_used_total"]


@click.command()
@click.option("--scenario", "path", type=click.Path(dir_okay=False), default=str(BUNDLED),
              show_default=True, help="scenario TOML")
@click.option("--memcg-limit", default="384M", show_default=True)
@click.option("--zram", default="lz4:1G", show_default=True)
def demo(path, memcg_limit, zram):
    """Replay the bundled small scenario and print the kernel counters."""
    tr = scenario.build(scenario.load(path))
    res = Emulator(Config(memcg_limit=memcg_limit, zram=zram)).replay(tr)
    click.echo(f"{Path(path).name}: {len(tr):,} events, memcg limit {memcg_limit}, zram {zram}")
    width = max(map(len, SHOWN))
    for k in SHOWN:
        click.echo(f"  {k:<{width}}  {res.summary[k]:>14,}")
    top = res.per_phase[["pgmajfault", "pgpgin", "pswpout"]]
    top = top[top.sum(axis=1) > 0].head(12)
    if len(top):
        click.echo("\nper phase (first 12 with I/O):")
        click.echo(top.to_string())
