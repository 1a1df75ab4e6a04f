"""Progress and predict's cache (issue 43, item 3): bars on a terminal, none in a pipe or with
--quiet; a measurement is cached under what it depends on and not when other programs kept the
machine busy while it was taken."""
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time


from kmemsim.validate import measure

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = os.path.join(ROOT, "workloads", "scenarios", "small.toml")


def _stderr_on_a_terminal(args, cwd):
    """Run `kmemsim ARGS` with its stderr on a pseudo-terminal (stdout piped); what it wrote there."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))   # a terminal's size
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.Popen([sys.executable, "-m", "kmemsim.cli", *args], stdout=subprocess.PIPE, stderr=slave,
                         cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 4096)
        except OSError:             # EIO: the child closed the terminal
            break
        if not b:
            break
        chunks.append(b)
    p.communicate(timeout=300)
    os.close(master)
    assert p.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_compare_shows_a_bar_on_a_terminal_only(tmp_path):
    args = ["compare", SMALL, "--policy", "stock,is", "--mem", "1G"]
    shown = _stderr_on_a_terminal([*args, "-o", str(tmp_path / "a")], tmp_path)
    assert "compare" in shown and "policy" in shown           # tqdm's bar: desc and unit
    assert _stderr_on_a_terminal([*args, "--quiet", "-o", str(tmp_path / "b")], tmp_path).strip() == ""
    piped = subprocess.run([sys.executable, "-m", "kmemsim.cli", *args, "-o", str(tmp_path / "c")],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=300)
    assert piped.returncode == 0 and piped.stderr == ""


def test_a_measurement_taken_beside_busy_programs_is_not_cached(tmp_path):
    """Two programs spinning on this machine's CPUs (not this process's: still running, not reaped)
    while a measurement waits: /proc/stat's busy time less this process's own is theirs, over the
    limit, and the measurement is used but not kept."""
    n = os.cpu_count() or 1
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        time.sleep(0.3)
        with measure.Busy() as busy:
            time.sleep(1.5)
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert busy.reason and "other programs used" in busy.reason
    path = tmp_path / "probe.json"
    assert measure.keep(str(path), {"x": 1}, busy, "it") == {"x": 1}
    assert not path.exists()


def test_the_cache_is_keyed_on_what_the_measurements_depend_on():
    env = measure.environment()
    assert env["kernel"] == os.uname().release
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    try:
        import importlib.metadata
        assert env["llama_cpp_python"] == importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        assert env["llama_cpp_python"] == "none"
    assert measure._env_tag() in measure.baseline_cache_path()
