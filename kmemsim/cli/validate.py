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
from ..live.samplers import INTERVAL_S
from .options import number_ok


@click.command()
@click.argument("models", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--prompt", type=int, default=64, show_default=True)
@click.option("--decode", type=int, default=8, show_default=True)
@click.option("--ctx", type=int, default=512, show_default=True)
@click.option("--batch", type=int, default=512, show_default=True)
@click.option("--ubatch", type=int, default=512, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--mem-limit", "limits", default="40%,60%,80%,100%,120%", show_default=True,
              help="comma-separated limits: N%% of the model file, or sizes")
@click.option("--zram", default="lz4:4G", show_default=True)
@click.option("--swappiness", type=int, default=60, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="live runs per limit; measured is their median (the kernel moves between runs)")
@click.option("--reuse", is_flag=True, help="reuse live runs already in DIR (re-predict only)")
@click.option("--memcg-interval", type=click.FloatRange(min=0), default=INTERVAL_S, show_default=True,
              help="how often the recorder reads the cgroup's memory.stat, seconds; each read makes the "
                   "statistics reclaim decides by fresh (0: at the start and end only, the kernel as it "
                   "runs unobserved; predicted so)")
@click.option("--device-profile", "device", type=click.Path(dir_okay=False),
              help="predict with this device profile (a `kmemsim profile` file) instead of measuring this "
                   "machine: a 6.1 guest under TCG (`make validate-grid-6.1`) takes its host's")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False))
def validate(models, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness, repeat, reuse,
             memcg_interval, device, out_dir):
    """Validate the emulator against the live kernel on real llama.cpp (one model or several)."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    import pandas as pd
    from ..validate import run as V
    from ..validate.markdown import grid_markdown, markdown, score_markdown
    from ..validate.reference import check_args
    output_dir(out_dir)
    if device is not None:
        from ..core.paths import input_file
        from ..engine.time.device import load
        load(input_file(device, "--device-profile"))       # a bad profile refused before any run
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
                              reuse=reuse, progress=lambda s, stem=stem: click.echo(f"{stem} {s}", err=True),
                              repeat=repeat, memcg_interval=memcg_interval, device=device))
    if len(models) == 1:
        click.echo(score_markdown(dfs[0]) + markdown(dfs[0]))
        click.echo(f"wrote {out_dir}/: validation.csv validation.md plots/")
        return
    df = pd.concat(dfs, ignore_index=True)
    V.write_summary(out_dir, df)
    click.echo(score_markdown(df) + grid_markdown(df))
    click.echo(f"wrote {out_dir}/: summary.md validation.csv, and per model {', '.join(stems)}/")
