"""`kmemsim profile -o workloads/devices/this-machine.toml`: measure this machine (storage reads by
I/O size, zram compression per algorithm, llama.cpp prefill/decode speed) into a device profile."""
from __future__ import annotations

import tomllib
from pathlib import Path

import click

from ..core.atomic import atomic_write
from ..core.errors import InputError
from ..core.paths import output_dir, output_file
from ..core.progress import note
from . import options


@click.command(epilog="""
\b
Example (the short measurement, without fio; a minute or so, as root):
  kmemsim profile --quick --no-fio -o this-machine.toml
""")
@options.out(default="workloads/devices/this-machine.toml", show_default=True, help="profile to write (TOML)")
@click.option("--dir", "storage_dir", default=None, type=click.Path(file_okay=False),
              help="where the storage test file goes (default $TMPDIR or /var/tmp)")
@click.option("--quick", is_flag=True, help="smaller and shorter measurements (less accurate)")
@click.option("--fio/--no-fio", default=True, show_default=True,
              help="also measure the flash with reads in flight (fio: I/O size x queue depth, ~80 s)")
@options.quiet
def profile(out, storage_dir, quick, fio):
    """Measure this machine into a device profile (kmemsim compare --device this-machine)."""
    # here, not at the top: `kmemsim --help` loads no pandas, matplotlib or C core
    from ..engine.time import device
    from ..live import profile as prof
    p = Path(output_file(out))       # writable now, not after a minute of measuring
    if storage_dir is not None:
        if not Path(storage_dir).is_dir():
            raise InputError(f"--dir {storage_dir}: not a directory")
        output_dir(storage_dir, "--dir")
    m = prof.measure(progress=lambda s: note(f"  {s}"), storage_dir=storage_dir, quick=quick,
                     fio=fio)
    text = prof.to_toml(m)
    device.parse(tomllib.loads(text), str(p))        # what we write must load
    atomic_write(p, text)
    click.echo(f"wrote {out}")
