"""An installed kmemsim works outside the checkout: `pip install .` (a wheel, not editable) into a fresh
venv, then `kmemsim demo` from another directory finds its bundled scenario, apps and device profiles
(package data), and the wheel carries the recorder's BPF programs."""
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    d = tmp_path_factory.mktemp("install")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    # the wheel, built from the checkout as pip builds it for `pip install .`
    wheels = d / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    wheel = next(wheels.glob("kmemsim-*.whl"))
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # kmemsim itself into the fresh venv; its dependencies are this environment's (already checked
    # by pip here), seen through a .pth file rather than downloaded again
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return venv, wheel, env


def test_the_wheel_carries_its_data(installed):
    _, wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("kmemsim/data/devices/galaxy-s25plus.toml", "kmemsim/data/apps/chrome.toml",
              "kmemsim/data/scenarios/kv-prealloc-small.toml", "kmemsim/live/bpf/vmscan.c",
              "kmemsim/live/bpf/common.h", "kmemsim/validate/child.py"):
        assert f in names, f
    assert any(n.startswith("kmemsim/_core") and n.endswith(".so") for n in names)


def test_demo_runs_from_another_directory(installed, tmp_path):
    venv, _, env = installed
    r = subprocess.run([str(venv / "bin" / "kmemsim"), "demo"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "is+dw" in r.stdout and "galaxy-s25plus" in r.stdout
    # the installed package, not the checkout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import kmemsim; print(kmemsim.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, env=env).stdout
    assert str(venv) in where and str(ROOT) not in where
