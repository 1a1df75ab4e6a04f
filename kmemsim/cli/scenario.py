"""`kmemsim workload scenario FILE.toml -o TRACE`: a multitasking scenario (apps switching beside LLM
sessions) as one trace. The format is in docs/scenarios.md; bundled files in kmemsim/data/scenarios/.

The whole file is parsed and validated before anything is generated, and the trace is written
atomically, so bad input leaves one `kmemsim: ...` line on stderr (exit 2) and no output file.
"""
from __future__ import annotations

import json

import click

from ..core.progress import say
from . import options


@click.command("scenario", epilog="""
\b
Example (apps switching beside two LLM requests, 120 s of scenario time):
  kmemsim workload scenario workloads/scenarios/small.toml -o small.parquet
""")
@click.argument("file", type=click.Path(dir_okay=False))
@options.out(required=False, help="the trace to write (Parquet); required unless --plan")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a key of the file, e.g. --set llm.paths=8 --set seed=2 (repeatable).")
@click.option("--plan", "plan_only", is_flag=True,
              help="Print the timeline (switches, requests) as JSON instead of writing a trace.")
@options.device(default=None, help="device profile that times an mzCache or LLMS engine (llm.engine) "
                "[default: the bundled default device]")
@options.kv_manager
def scenario(file, out, overrides, plan_only, kv_manager, device_name):
    """Put the apps, switches, kills and LLM requests of FILE.toml on one timeline."""
    # here, not at the top: `kmemsim --help` loads no pandas or C core
    from ..core.paths import output_file
    from ..core.trace import save
    from ..workload import scenario as sc
    if not plan_only:
        if out is None:
            raise click.UsageError("missing option '-o' / '--out' (or give --plan)")
        output_file(out)
    options.device_arg(device_name)
    if kv_manager is not None:          # the file's llm.kv_manager, as --set would set it
        overrides = (*overrides, f"llm.kv_manager={kv_manager}")
    s = sc.load(file, overrides)
    if plan_only:
        p = sc.plan(s)
        click.echo(json.dumps(sc.plan_dict(s, p), indent=1))
        return
    from ..engine.time import device as devmod      # here too: the C core and pandas load late
    say(f"building the scenario's trace: {s.duration:g} s of scenario time")
    tr = sc.build(s, device=devmod.load(device_name) if device_name else None)
    save(tr, out)
    p = sc.plan(s)
    n_sw = sum(1 for x in p.slots)
    click.echo(f"{out}: {len(tr):,} events, {len(tr.meta['processes'])} processes, "
               f"{n_sw} slots in the foreground, {len(p.requests)} requests to the LLM, "
               f"covering {s.duration:g} s of scenario time")
