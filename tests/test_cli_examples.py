"""Every command's `--help` shows a worked example, and the example works (issue 43, item 1): each
`kmemsim ...` line of each command's Example runs, in order, in a fresh directory beside the
checkout's workloads/, as the real command in a process of its own, and exits 0.

Examples whose header says "as root" change the machine (cgroups, zram, drop_caches, a VM) or take
minutes: they are marked live and run as root only under CI=true or KMEMSIM_LIVE_EXAMPLES=1, so that a
test run beside other users of this machine does not touch their runs (`kmemsim cleanup` would).
Examples that run llama.cpp need llama-cpp-python (marked llama)."""
import os
import shlex
import subprocess
import sys

import click
import pytest

from kmemsim.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def leaves(group=main, path=("kmemsim",)):
    ctx = click.Context(group)                    # commands load lazily: ask the group for each
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from leaves(cmd, (*path, name))
        else:
            yield " ".join((*path, name)), cmd


def example(cmd):
    """(header, [command lines]) of the command's Example, from the help as printed: the header runs
    from "Example" to the first `kmemsim` line, the commands are the `kmemsim` lines after it."""
    with click.Context(cmd, info_name="kmemsim") as ctx:
        text = cmd.get_help(ctx)
    at = text.find("Example")
    assert at >= 0, f"no Example in its --help:\n{text}"
    header, lines = [], []
    for line in text[at:].splitlines():
        if line.strip().startswith("kmemsim "):
            lines.append(line.strip())
        elif lines:
            break
        else:
            header.append(line.strip())
    assert lines, f"an Example without a command:\n{text}"
    return " ".join(header), lines


ALL = list(leaves())
LLAMA = {"kmemsim predict", "kmemsim trace llama"}


def _marks(path, cmd):
    header, _ = example(cmd)
    marks = []
    if "as root" in header:
        marks.append(pytest.mark.live)
    if path in LLAMA or "as root" in header and ("llama" in header or "model synth" in header):
        marks.append(pytest.mark.llama)
    return marks


@pytest.mark.parametrize("path,cmd", [pytest.param(p, c, id=p.removeprefix("kmemsim "), marks=_marks(p, c))
                                      for p, c in ALL])
def test_help_example_runs(tmp_path, path, cmd):
    header, lines = example(cmd)
    assert lines[-1].startswith(path), f"{path}: its example ends with another command: {lines}"
    if "as root" in header:
        if os.geteuid() != 0:
            pytest.skip("live example: needs root (runs in CI)")
        if not (IN_CI or os.environ.get("KMEMSIM_LIVE_EXAMPLES")):
            pytest.skip("live example: changes this machine; runs under CI=true or KMEMSIM_LIVE_EXAMPLES=1")
    if path in LLAMA:
        pytest.importorskip("llama_cpp", reason="llama test: needs llama-cpp-python (make setup installs it)")
    os.symlink(os.path.join(ROOT, "workloads"), tmp_path / "workloads")
    _inputs(path, tmp_path)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               KMEMSIM_CACHE=os.environ.get("KMEMSIM_CACHE", os.path.expanduser("~/.cache/kmemsim")))
    for line in lines:
        # as a shell runs it (quotes, $$), with this checkout's kmemsim
        cmd = f"{shlex.quote(sys.executable)} -m kmemsim.cli {line.removeprefix('kmemsim ')}"
        p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"{line}\nexit {p.returncode}\n{p.stderr[-3000:]}"
        assert "Traceback" not in p.stderr, p.stderr


def _inputs(path, d):
    """What an example reads that no earlier line of it makes: a phone's capture for trace import
    (the events tests/test_ftrace.py checks the import with)."""
    if path.startswith("kmemsim trace import"):
        sys.path.insert(0, os.path.dirname(__file__))
        import test_ftrace as ft
        (d / "capture.txt").write_text(ft.text_capture(ft.scenario()))
        (d / "capture.pftrace").write_bytes(ft.perfetto_capture(ft.scenario()))


def test_every_command_has_an_example():
    missing = []
    for path, cmd in ALL:
        try:
            example(cmd)
        except AssertionError:
            missing.append(path)
    assert not missing, f"commands without an Example in --help: {missing}"
