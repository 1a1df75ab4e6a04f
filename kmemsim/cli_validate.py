"""`kmemsim validate MODEL.gguf --prompt N --decode M --ctx C --mem-limit 40%,60%,80%,100%,120% -o DIR`:
the reference live run under the recorder at each limit, beside `kmemsim predict`; validation.csv,
validation.md and plots/ in DIR. Needs root."""
from __future__ import annotations

import click

from .samplers import INTERVAL_S


@click.command()
@click.argument("model", type=click.Path(dir_okay=False))
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
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False))
def validate(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness, repeat, reuse,
             memcg_interval, out_dir):
    """Validate the emulator against the live kernel on real llama.cpp."""
    from . import validate as V
    V.check_args(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness)
    df = V.validate(model, prompt, decode, ctx, limits, out_dir, batch, ubatch, threads, zram, swappiness,
                    reuse=reuse, progress=lambda m: click.echo(m, err=True), repeat=repeat,
                    memcg_interval=memcg_interval)
    click.echo(V.markdown(df))
    click.echo(f"wrote {out_dir}/: validation.csv validation.md plots/")
