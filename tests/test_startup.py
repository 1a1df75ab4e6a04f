"""Start-up (issue 39): the CLI imports only what the chosen command needs. Commands are named in one
table (kmemsim/cli/__init__.py) and imported when used, as click's lazy groups do; `--help`, `trace
info --help`, `model synth --help` load no numpy, pandas, pyarrow, matplotlib, dask, bcc or C core,
and `replay --json` of a libCacheSim trace loads no pandas, pyarrow or matplotlib. Checked in a fresh
interpreter: this process has already imported everything."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kmemsim.cli import main
from kmemsim.workload.libcachesim_io import write_oracle_general

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("numpy", "pandas", "pyarrow", "matplotlib", "dask", "bcc", "kmemsim._core", "scipy", "jinja2")

PROBE = """
import json, sys
from kmemsim.cli import main
try:
    main(sys.argv[1:], prog_name="kmemsim")
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _modules(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    out = json.loads(p.stderr.strip().splitlines()[-1])
    assert out["code"] in (0, None), p.stderr
    return p.stdout, set(out["modules"])


def _loaded(mods, names):
    return sorted(m for m in mods for n in names if m == n or m.startswith(n + "."))


@pytest.mark.parametrize("args", [["--help"], ["trace", "info", "--help"], ["model", "synth", "--help"]])
def test_help_loads_nothing_heavy(args):
    out, mods = _modules(*args)
    assert "Usage:" in out
    assert _loaded(mods, HEAVY) == []


# Helps that list a registry's names (issue 43: choices in --help): the policies are the C core's
# (policy_lookup), the KV managers the engine's modules; still no pandas, pyarrow, matplotlib, dask or bcc
CHOICES_HEAVY = tuple(n for n in HEAVY if n not in ("numpy", "kmemsim._core", "scipy"))


@pytest.mark.parametrize("args", [["replay", "--help"], ["workload", "scenario", "--help"], ["compare", "--help"]])
def test_help_listing_a_registry_loads_no_tables_or_plots(args):
    out, mods = _modules(*args)
    assert "Usage:" in out
    assert _loaded(mods, CHOICES_HEAVY) == []


def test_top_help_lists_every_command_without_loading_the_others():
    out, mods = _modules("--help")
    for name in main.lazy:
        assert f"  {name} " in out, name


def test_replay_json_loads_no_pandas(tmp_path):
    path = str(tmp_path / "t.oracleGeneral.bin")
    write_oracle_general(path, np.random.default_rng(1).integers(0, 300, 1000))
    out, mods = _modules("replay", path, "--policy", "lru", "--mem", "400K", "--json")
    assert json.loads(out)["counters"]["accesses_pages"] == 1000
    assert _loaded(mods, ("pandas", "pyarrow", "matplotlib", "dask", "bcc", "scipy")) == []


@pytest.mark.parametrize("name", sorted(main.lazy))
def test_every_registered_command_loads(name):
    """A table entry that names a missing module or attribute fails here, not in a user's hands."""
    import click
    ctx = click.Context(main)
    cmd = main.get_command(ctx, name)
    assert cmd is not None and cmd.name == name
