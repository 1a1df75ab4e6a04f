"""Live runs on this machine's kernel: the recorder (recorder.py) runs a command in a memory cgroup
(cgroup.py) with zram swap (swap_setup.py), attaches the BPF programs in bpf/ (probes.py, drained
through ringbuf.py), samples counters (samplers.py) and writes a run directory (rundir.py); profile.py
measures this machine's device profile. The face imports nothing: the CLI reads samplers' defaults at
start-up, and a recording's machinery loads when one starts."""
__all__ = ["cgroup", "probes", "profile", "recorder", "ringbuf", "rundir", "samplers", "swap_setup"]
