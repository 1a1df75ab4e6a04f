"""`kmemsim is-live MODEL.gguf --prompt N --decode M --ctx C --mem-limit SIZE --zram ALGO:SIZE
[--variant alloc|tail] -o DIR`: IS on the real kernel (kmemsim/validate/live_is.py): the reference llama.cpp run
stock and with the KV buffer paged out from outside (process_madvise MADV_PAGEOUT through a pidfd),
both under the recorder, beside the emulator's stock and IS. Writes is_live.csv, is_live.md,
is_live.json and stock/, is/ in DIR. Needs root."""
from __future__ import annotations

import click

from ..core.paths import output_dir
from ..core.progress import note
from . import options


@click.command("is-live", epilog="""
\b
Example (as root: two live runs of real llama.cpp; a model from `kmemsim model synth`):
  kmemsim model synth tiny.gguf --preset Qwen3-0.6B --layers 4 --type q4_0
  kmemsim is-live tiny.gguf --prompt 64 --decode 8 --ctx 4096 --mem-limit 256M -o islive
""")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--prompt", type=int, default=64, show_default=True)
@click.option("--decode", type=int, default=8, show_default=True)
@click.option("--ctx", type=int, default=4096, show_default=True)
@click.option("--batch", type=int, default=512, show_default=True)
@click.option("--ubatch", type=int, default=512, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@options.mem_limit(percent=True, default="512M", show_default=True)
@options.zram(live=True, default="lz4:4G", show_default=True)
@options.swappiness(default=60, show_default=True)
@click.option("--variant", type=click.Choice(["alloc", "tail"]), default="alloc", show_default=True,
              help="alloc: page out the whole KV buffer after the clear; tail: only pages of cells beyond "
                   "prompt+decode")
@options.out(kind="dir", dest="out_dir", help="output directory (is_live.csv, is_live.md, stock/, is/)")
@options.quiet
def is_live(model, prompt, decode, ctx, batch, ubatch, threads, mem_limit, zram, swappiness, variant, out_dir):
    """IS (Initial KV cache Swap) on the live kernel against the emulator."""
    from ..validate import live_is as L   # here, not at the top: `kmemsim --help` loads no pandas
    from ..validate.reference import check_args
    output_dir(out_dir)
    check_args(model, prompt, decode, ctx, batch, ubatch, threads, str(mem_limit), zram, swappiness)
    df = L.compare(model, prompt, decode, ctx, mem_limit, out_dir, variant, zram, swappiness, batch, ubatch,
                   threads, progress=note)
    click.echo(L.markdown(df, df.attrs["meta"]))
    click.echo(f"wrote {out_dir}/: is_live.csv is_live.md is_live.json stock/ is/")
