"""One vocabulary on the command line (issue 43, item 1): walking every command's options by click's
introspection, one flag name per concept across all commands, one concept per name, the old names
kept as hidden aliases that still work, choices listed in --help, errors naming the flag as typed."""
import re

import click
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.cli.options import VOCABULARY, Opt, Size, Zram


def commands(group=main, path=("kmemsim",)):
    """Every leaf command, with its path (`kmemsim trace import ftrace`)."""
    ctx = click.Context(group)                    # commands load lazily: ask the group for each
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        p = (*path, name)
        if isinstance(cmd, click.Group):
            yield from commands(cmd, p)
        else:
            yield " ".join(p), cmd


ALL = list(commands())


def visible_flags():
    """{long flag: [(command, option)]} over every option --help shows."""
    out = {}
    for path, cmd in ALL:
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                for f in (*p.opts, *p.secondary_opts):
                    if f.startswith("--"):
                        out.setdefault(f, []).append((path, p))
    return out


def _stem(flag):
    """A concept's spelling with the ways two names for it have differed here taken off: a plural,
    an -override suffix, memcg- for mem-."""
    f = flag.lstrip("-").replace("memcg-", "mem-")
    f = re.sub(r"-override$", "", f)
    return re.sub(r"(ies|s)$", lambda m: "y" if m.group(1) == "ies" else "", f)


def test_the_walk_sees_every_command():
    names = {p for p, _ in ALL}
    assert {"kmemsim replay", "kmemsim predict", "kmemsim compare", "kmemsim workload llama",
            "kmemsim model synth", "kmemsim trace import ftrace", "kmemsim vm run"} <= names
    assert len(ALL) >= 20


def test_no_visible_flag_is_an_old_name():
    old = {o: new for new, olds in VOCABULARY.items() for o in olds}
    bad = [(f, [c for c, _ in uses], old[f]) for f, uses in visible_flags().items() if f in old]
    assert not bad, f"flags shown under their old names (use the new one): {bad}"


def test_two_names_for_one_concept_fail():
    """Two visible flags are one concept when one is the other plus a plural, -override or memcg-,
    or one is the other cut short inside its last word (--out / --output, --mem / --memory; not
    --mem / --mem-limit)."""
    flags = sorted(visible_flags())
    clashes = []
    for i, a in enumerate(flags):
        for b in flags[i + 1:]:
            sa, sb = _stem(a), _stem(b)
            short, long_ = (a, b) if len(a) < len(b) else (b, a)
            cut = long_.startswith(short) and "-" not in long_[len(short):]    # inside its last word
            if sa == sb or cut:
                clashes.append((a, b))
    assert not clashes, f"two names for one concept: {clashes}"


def test_one_concept_per_name():
    """A flag means one thing everywhere: the same kind of value (a size is a size, a choice a
    choice of the same registry) under the same destination name wherever it appears."""
    for f, uses in visible_flags().items():
        kinds = {_kind(p) for _, p in uses}
        assert len(kinds) == 1, f"{f} takes different kinds of value: {[(c, _kind(p)) for c, p in uses]}"


def _kind(p):
    """What a value of option p is: a flag, a size, a choice of some registry, a number, a path, text."""
    if p.is_flag:
        return "flag"
    for t in (Size, Zram, click.Choice, click.types.FloatParamType, click.types.IntParamType, click.Path):
        if isinstance(p.type, t):
            return t.__name__


@pytest.mark.parametrize("flag", ["--mem", "--mem-limit", "--zram", "--policy", "--out", "--device",
                                  "--swappiness"])
def test_shared_concepts_are_defined_once(flag):
    """The shared concepts come from kmemsim/cli/options.py (Opt), so their old names work everywhere."""
    for path, p in visible_flags().get(flag, []):
        assert isinstance(p, Opt), f"{path}: {flag} is not options.py's"


def test_choices_are_listed_in_help():
    for path, args in [("replay", ["replay", "--help"]), ("predict", ["predict", "--help"]),
                       ("compare", ["compare", "--help"]), ("model synth", ["model", "synth", "--help"])]:
        out = CliRunner().invoke(main, args).output
        if path == "model synth":
            assert "Qwen3-0.6B|" in out
        else:
            assert "[stock|lru|is|" in out, out          # the core's registry (policy_lookup)
        assert "%%" not in out


def test_help_shows_no_doubled_percent():
    for path, cmd in ALL:
        with click.Context(cmd, info_name=path) as ctx:
            assert "%%" not in cmd.get_help(ctx), path


@pytest.mark.parametrize("args,typed,not_named", [
    # predict --mem-limit 150: a limit below a page, named as typed (it once said --memcg-limit)
    (["predict", "{model}", "--prompt", "4", "--decode", "1", "--ctx", "64", "--mem-limit", "150"],
     "--mem-limit 150", "--memcg-limit"),
    (["replay", "{trace}", "--memcg-limit", "100"], "--memcg-limit 100", "--mem-limit"),
    (["replay", "{trace}", "--mem-limit", "lots"], "--mem-limit", "--memcg-limit"),
    (["compare", "{trace}", "--memcg-limit", "1x", "-o", "{tmp}/c"], "--memcg-limit", "--mem-limit:"),
    (["replay", "{trace}", "--mem", "1G", "--zram", "lz4:1"], "--zram size 1", "memcg"),
])
def test_errors_name_the_flag_as_typed(tmp_path, small_files, args, typed, not_named):
    args = [a.format(tmp=tmp_path, **small_files) for a in args]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert typed in r.output and not_named not in r.output, r.output


def test_old_names_still_work(tmp_path, small_files):
    new = CliRunner().invoke(main, ["replay", small_files["trace"], "--mem-limit", "64M", "--json"])
    old = CliRunner().invoke(main, ["replay", small_files["trace"], "--memcg-limit", "64M", "--json"])
    assert new.exit_code == old.exit_code == 0, (new.output, old.output)
    assert new.stdout == old.stdout
    r = CliRunner().invoke(main, ["replay", small_files["trace"], "--mem-limit", "64M", "--memcg-limit", "64M"])
    assert r.exit_code == 2 and "give it once" in r.output
    r = CliRunner().invoke(main, ["model", "synth", str(tmp_path / "m.gguf"), "--preset", "Qwen3-0.6B",
                                  "--layers-override", "2", "--layout-only"])
    assert r.exit_code == 0 and "blk.1." in r.output and "blk.2." not in r.output, r.output
    r = CliRunner().invoke(main, ["workload", "llama", "--layout-only", "Qwen3-0.6B", "--layers", "2",
                                  "--prompt", "8", "--decode", "2", "--ctx", "64", "--output", str(tmp_path / "t.parquet")])
    assert r.exit_code == 0 and (tmp_path / "t.parquet").exists(), r.output


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    model, trace = str(d / "m.gguf"), str(d / "t.parquet")
    r = CliRunner().invoke(main, ["model", "synth", model, "--preset", "Qwen3-0.6B", "--layers", "2"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["workload", "llama", model, "--prompt", "8", "--decode", "2", "--ctx", "64",
                                  "-o", trace])
    assert r.exit_code == 0, r.output
    return {"model": model, "trace": trace}
