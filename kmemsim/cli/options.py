"""Options several commands share, defined once, and the checks of values several commands take."""
import os

import click

from ..core.errors import InputError
from ..core.limits import check_float
from ..core.paths import input_file

def _known_kv_manager(ctx, param, name):
    """--kv-manager's value: a registered manager, checked as the command line is read."""
    if name is not None:
        from ..engine import managers     # here: the registry loads the engine (not for --help)
        try:
            managers.get(name)
        except InputError as e:
            raise click.BadParameter(str(e).split(": ", 1)[-1]) from None
    return name


kv_manager = click.option(
    "--kv-manager", default=None, metavar="NAME", callback=_known_kv_manager,
    help="who keeps the KV cache: a manager registered in kmemsim.engine.managers "
         "[default: llamacpp, llama.cpp's own]")


lru = click.option(
    "--lru", type=click.Choice(["classic", "mglru"]), default=None,
    help="the LRU reclaim keeps: the active/inactive lists or the multi-generational LRU (docs/mglru.md) "
         "[default: the device profile's kernel.lru, classic without one]")


def device_arg(name):
    """A --device value: a profile's name, or a .toml path that must be a regular file (a FIFO or a
    device named x.toml would hang the reader)."""
    if name is not None and str(name).endswith(".toml") and os.path.lexists(str(name)):
        input_file(name, "--device", "device profile (.toml)")
    return name


def number_ok(v, name, lo=None, hi=None):
    """A float option's value: finite and within [lo, hi] (click's FloatRange lets nan through)."""
    return check_float(v, name, lo, hi)


def swappiness_ok(v, name="--swappiness"):
    if v is not None and not 0 <= v <= 200:
        raise InputError(f"{name} {v}: expected 0..200 (vm.swappiness)")
    return v
