"""Live runs on this machine's kernel: the recorder (recorder.py) runs a command in a memory cgroup
(cgroup.py) with zram swap (swap_setup.py), attaches the BPF programs in bpf/ (probes.py, drained
through ringbuf.py), samples counters (samplers.py) and writes a run directory (rundir.py); profile.py
measures this machine's device profile; ftrace.py reads a capture made elsewhere (tracefs, atrace,
Perfetto; parsed by capture.py) into a run directory; vm.py boots Debian's 6.1 kernel under qemu to
run them in. The face imports nothing: the CLI reads samplers' defaults at start-up, and a recording's machinery loads when one starts."""
__all__ = ["capture", "cgroup", "ftrace", "probes", "profile", "recorder", "ringbuf", "rundir", "samplers", "swap_setup", "vm"]
