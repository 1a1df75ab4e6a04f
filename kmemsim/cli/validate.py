"""`kmemsim validate MODEL.gguf [MODEL.gguf ...] --prompt N --decode M --ctx C --mem-limit 40%,60%,80%,100%,120% -o DIR`:
the reference live run under the recorder at each limit, beside `kmemsim predict`; validation.csv,
validation.md and plots/ in DIR (with several models, in DIR/<model>/, and DIR/summary.md over them
all). Needs root."""
from __future__ import annotations

import os

import click

from ..core.errors import InputError
from ..core.limits import MAX_PERIOD_S
from ..core.paths import output_dir
from ..core.progress import note
from ..live.samplers import INTERVAL_S
from . import options
from .options import number_ok


@click.command(epilog="""
\b
Example (as root: five live runs of real llama.cpp, minutes; a model from `kmemsim model synth`):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
  kmemsim validate tiny.gguf --prompt 64 --decode 8 --ctx 512 --mem-limit 60%,100% -o val
""")
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--prompt", type=int, default=64, show_default=True)
@click.option("--decode", type=int, default=8, show_default=True)
@click.option("--ctx", type=int, default=512, show_default=True)
@click.option("--batch", type=int, default=512, show_default=True)
@click.option("--ubatch", type=int, default=512, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--mem-limit", "limits", cls=options.Opt, old=options.VOCABULARY["--mem-limit"],
              type=options.Size(percent=True, many=True), default="40%,60%,80%,100%,120%", show_default=True,
              help="memory cgroup limits, comma-separated: N% of the model file, or sizes")
@options.zram(live=True, default="lz4:4G", show_default=True)
@options.swappiness(default=60, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="live runs per limit; measured is their median (the kernel moves between runs)")
@click.option("--reuse", is_flag=True, help="reuse live runs already in DIR (re-predict only)")
@click.option("--memcg-interval", type=click.FloatRange(min=0), default=INTERVAL_S, show_default=True,
              help="how often the recorder reads the cgroup's memory.stat, seconds; each read makes the "
                   "statistics reclaim decides by fresh (0: at the start and end only, the kernel as it "
                   "runs unobserved; predicted so)")
@options.device(default=None, help="predict with this device profile (a name under workloads/devices/ or a "
                "`kmemsim profile` .toml) instead of measuring this machine: a 6.1 guest under TCG "
                "(`make validate-grid-6.1`) takes its host's")
@options.out(kind="dir", dest="out_dir", help="output directory (validation.csv, validation.md, plots/)")
@options.quiet
def validate(models, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness, repeat, reuse,
             memcg_interval, device_name, out_dir):
    """Validate the emulator against the live kernel on real llama.cpp (one model or several)."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    import pandas as pd
    from ..validate import run as V
    from ..validate.markdown import grid_markdown, markdown, score_markdown
    from ..validate.reference import check_args
    output_dir(out_dir)
    profile = None
    if device_name is not None:          # a bad profile refused before any run
        from ..engine.time.device import load
        profile = load(device_name).path
    number_ok(memcg_interval, "--memcg-interval", 0, MAX_PERIOD_S)
    for m in models:                     # every model checked before the first live run
        check_args(m, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness)
    stems = [os.path.splitext(os.path.basename(m))[0] for m in models]
    if len(set(stems)) < len(stems):
        raise InputError(f"two models share a file name ({', '.join(stems)}): each needs its own DIR/<name>/")
    dfs = []
    for m, stem in zip(models, stems):
        out = out_dir if len(models) == 1 else os.path.join(out_dir, stem)
        dfs.append(V.validate(m, prompt, decode, ctx, limits, out, batch, ubatch, threads, zram, swappiness,
                              reuse=reuse, progress=lambda s, stem=stem: note(f"{stem} {s}"),
                              repeat=repeat, memcg_interval=memcg_interval, device=profile))
    if len(models) == 1:
        click.echo(score_markdown(dfs[0]) + markdown(dfs[0]))
        click.echo(f"wrote {out_dir}/: validation.csv validation.md plots/")
        return
    df = pd.concat(dfs, ignore_index=True)
    V.write_summary(out_dir, df)
    click.echo(score_markdown(df) + grid_markdown(df))
    click.echo(f"wrote {out_dir}/: summary.md validation.csv, and per model {', '.join(stems)}/")
