"""Live runs on this machine's kernel: the recorder (recorder.py) runs a command in a memory cgroup
(cgroup.py) with zram swap (swap_setup.py), attaches the BPF programs in bpf/ (probes.py, drained
through ringbuf.py), samples counters (samplers.py) and writes a run directory (rundir.py); profile.py
measures this machine's device profile."""
from .recorder import record_pid, require_root, run_command

__all__ = ["run_command", "record_pid", "require_root"]
