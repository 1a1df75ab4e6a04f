"""The CLI's one vocabulary: one flag name per concept, defined here once and shared by every command
(VOCABULARY lists the old names each keeps as a hidden alias), the value types several commands take
(sizes in the same forms everywhere, choices listed in --help), and the checks of values several
commands take. Errors name the flag as the user typed it (`typed`)."""
import os

import click

from ..core.errors import InputError
from ..core.limits import check_float
from ..core.paths import input_file

# canonical flag -> the names it replaced, still accepted (hidden from --help) for a release;
# tests/test_cli_vocabulary.py fails on a visible flag listed on the right or two visible names for
# one concept
VOCABULARY = {
    "--mem-limit": ("--memcg-limit",),      # a memory cgroup's memory.max (replay, compare had --memcg-limit)
    "--out": ("--output",),                 # -o: what a command writes (workload llama, trace llama, scenario)
    "--layers": ("--layers-override",),     # model synth: the preset's layer count replaced
    "--policy": ("--policies",),            # compare, demo: one or several, comma-separated
    "--preset": ("--layout-only",),         # workload llama: a preset's layout instead of a file
    "--mem": ("--memory",),                 # RAM: the device's (replay, compare, demo), the guest's (vm run)
    "--dry-run": ("--layout-only",),        # model synth: print what would be written, write nothing
    "--load-mode": ("--load-modes",),       # compare: one or several side by side, comma-separated
}

_TYPED = "kmemsim.typed"                    # ctx.meta: option name -> the flag the user typed


class Opt(click.Option):
    """An option whose every name (its own and the `old` ones of VOCABULARY, hidden from --help) is
    its own parser entry, so the flag the user typed is known: errors name it, not another name."""

    def __init__(self, param_decls, old=(), **kw):
        super().__init__(param_decls, **kw)
        self.old = tuple(old)

    def _dest(self, flag):
        return f"{self.name}\0{flag}"

    def add_to_parser(self, parser, ctx):
        if self.is_flag or self.count:
            super().add_to_parser(parser, ctx)
            if self.old:
                parser.add_option(obj=self, opts=list(self.old), dest=self.name, action="store_const",
                                  const=self.flag_activation_value)
            return
        for flag in (*self.opts, *self.old):
            parser.add_option(obj=self, opts=[flag], dest=self._dest(flag),
                              action="append" if self.multiple else "store", nargs=self.nargs)

    def consume_value(self, ctx, opts):
        if self.is_flag or self.count:
            return super().consume_value(ctx, opts)
        given = [(f, opts[self._dest(f)]) for f in (*self.opts, *self.old) if self._dest(f) in opts]
        if len(given) > 1 and not self.multiple:
            raise click.UsageError(f"{given[0][0]} and {given[1][0]} are one option: give it once", ctx)
        opts = dict(opts)
        if given:
            ctx.meta.setdefault(_TYPED, {})[self.name] = given[-1][0]
            opts[self.name] = [v for _, vs in given for v in vs] if self.multiple else given[0][1]
        return super().consume_value(ctx, opts)

    def get_error_hint(self, ctx):
        return f"'{typed(self.name, ctx) or self.opts[-1]}'"


def typed(name, ctx=None):
    """The flag the user typed for option `name` in this command (None: not given, or no command)."""
    ctx = ctx or click.get_current_context(silent=True)
    while ctx is not None:
        if name in ctx.meta.get(_TYPED, {}):
            return ctx.meta[_TYPED][name]
        ctx = ctx.parent
    return None


def flag(name, default):
    """The flag to name in a message about option `name`: as typed, else `default` (its own name)."""
    return typed(name) or default


# ------------------------------------------------------------------------------------------------
# Values

class Size(click.ParamType):
    """A size, the same forms for every size flag: bytes (4096) or a number with K, M, G or T
    (binary: 512M, 1.5G, 2GiB, 2GB all read as multiples of 1024, as memparse() and memory.max do).
    `percent`: also N% (of the model file). Checked as read, the value passed on as written."""
    name = "size"

    def __init__(self, percent=False, many=False, lo=4096):
        self.percent, self.many, self.lo = percent, many, lo

    def get_metavar(self, param, ctx=None):
        one = "SIZE|N%" if self.percent else "SIZE"
        return f"{one}[,{one}...]" if self.many else one

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        from ..core.limits import check_mem  # here: kmemsim --help reads no more than it shows
        from ..core.units import parse_size
        what = typed(param.name, ctx) or param.opts[-1]
        if not self.many and "," in value:
            raise InputError(f"{what} {value!r}: give one limit")
        parts = [p.strip() for p in value.split(",")] if self.many else [value]
        for p in parts:
            if self.percent and p.endswith("%"):
                continue            # a share of the model: the command checks it against the file
            check_mem(parse_size(p, what), what, p, self.lo)
        return value


class Zram(click.ParamType):
    """ALGO:SIZE, a zram device: its compressor and disksize (SIZE in Size's forms)."""
    name = "zram"

    def __init__(self, live=False):
        self.live = live

    def get_metavar(self, param, ctx=None):
        return "ALGO:SIZE"

    def algos(self):
        if self.live:                   # the kernel's zram compressors (crypto API names)
            from ..core.limits import LIVE_ZRAM_ALGOS
            return LIVE_ZRAM_ALGOS
        from ..engine.kernel import ZRAM_ALGOS      # here: the emulator's compressors (loads its core)
        return ZRAM_ALGOS

    def convert(self, value, param, ctx):
        if not isinstance(value, str):
            return value
        from ..core.limits import check_zram_size  # here: kmemsim --help reads no more than it shows
        from ..core.units import parse_size
        what = typed(param.name, ctx) or param.opts[-1]
        algo, sep, size = value.partition(":")
        if not sep or not algo or not size:
            raise InputError(f"{what} {value!r}: expected ALGO:SIZE such as lz4:2G")
        if algo not in self.algos():
            raise InputError(f"{what} {value!r}: unknown compressor {algo!r}; known: {', '.join(self.algos())}")
        check_zram_size(parse_size(size, f"{what} size"), f"{what} size", size)
        return value


class LazyChoice(click.Choice):
    """click.Choice over names a registry holds, read when --help or a value needs them (the
    policies live in the C core: `kmemsim --help` must not load it)."""

    def __init__(self, load, many=False):
        self._load, self.many, self.case_sensitive = load, many, True

    @property
    def choices(self):
        return tuple(self._load())

    def get_metavar(self, param, ctx=None):
        one = "[" + "|".join(self.choices) + "]"
        return f"{one}[,...]" if self.many else one

    def convert(self, value, param, ctx):
        if not self.many or not isinstance(value, str):
            return super().convert(value, param, ctx)
        names = [p.strip() for p in value.split(",") if p.strip()]
        if not names:
            self.fail("no policy given", param, ctx)
        if len(set(names)) != len(names):
            self.fail(f"{value!r}: a name is listed twice", param, ctx)
        return ",".join(super(LazyChoice, self).convert(p, param, ctx) for p in names)


def _policies():
    from ..engine.kernel import POLICIES        # here: the C core's registry (policy_lookup)
    return POLICIES


def _kv_managers():
    from ..engine import managers               # here: the registry loads the engine (not for --help)
    return managers.names()


# ------------------------------------------------------------------------------------------------
# The options themselves

def mem(lo=4096, **kw):
    """--mem SIZE: the RAM emulated (no cgroup); lo: the least a command takes."""
    kw.setdefault("help", "device RAM to emulate (no cgroup), e.g. 8G")
    return click.option("--mem", cls=Opt, old=VOCABULARY["--mem"], type=Size(lo=lo), metavar="SIZE", **kw)


def mem_limit(percent=False, many=False, lo=4096, **kw):
    """--mem-limit SIZE: a memory cgroup's memory.max (percent: or N% of the model file)."""
    kw.setdefault("help", "memory cgroup limit (memory.max), e.g. 512M" + (", or N% of the model file" if percent else ""))
    return click.option("--mem-limit", "mem_limit", cls=Opt, old=VOCABULARY["--mem-limit"],
                        type=Size(percent=percent, many=many, lo=lo), **kw)


def zram(live=False, **kw):
    kw.setdefault("help", "zram swap device: compressor and size, e.g. lz4:2G")
    return click.option("--zram", cls=Opt, type=Zram(live), **kw)


def swappiness(**kw):
    kw.setdefault("help", "vm.swappiness (memory.swappiness of the run's cgroup), 0..200")
    return click.option("--swappiness", cls=Opt, type=click.IntRange(0, 200), **kw)


def out(required=True, kind="file", dest="out", **kw):
    """-o/--out: what the command writes (a file or a directory)."""
    ptype = click.Path(dir_okay=False) if kind == "file" else click.Path(file_okay=False)
    return click.option("-o", "--out", dest, cls=Opt, old=VOCABULARY["--out"], required=required, type=ptype, **kw)


def policy(many=False, **kw):
    kw.setdefault("help", "policies to compare, comma-separated" if many else "the reclaim policy")
    return click.option("--policy", cls=Opt, old=VOCABULARY["--policy"] if many else (),
                        type=LazyChoice(_policies, many), **kw)


def device(**kw):
    kw.setdefault("help", "device profile: a name under workloads/devices/ or a .toml path")
    return click.option("--device", "device_name", cls=Opt, callback=lambda c, p, v: device_arg(v), **kw)


def _quiet(ctx, param, value):
    from ..core import progress  # here: kmemsim --help reads no more than it shows
    progress.set_quiet(value)
    return value


quiet = click.option("--quiet", "-q", is_flag=True, expose_value=False, is_eager=True, callback=_quiet,
                     help="no progress bars or status lines on stderr (bars are off anyway when it is not a terminal)")


kv_manager = click.option(
    "--kv-manager", default=None, type=LazyChoice(_kv_managers),
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
