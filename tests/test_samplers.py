"""The sampler's schedule: which counter files it reads at which tick (real /proc and cgroup files)."""
import os

import pytest

from kmemsim.live import rundir
from kmemsim.live.samplers import PROC_STAT, Sampler, proc_faults


def reads(sampler, name):
    """How many times the sampler read the file `name`."""
    return sum(len(seg[1]) for s in sampler.sources if os.path.basename(s.path) == name for seg in s.segments)


@pytest.mark.live
@pytest.mark.parametrize("memcg_interval,expected", [(0.01, 6), (0.02, 4), (0, 2)])
def test_memory_stat_read_every_memcg_interval(memcg_interval, expected):
    # each read of memory.stat flushes the memcg's statistics (mem_cgroup_flush_stats() in
    # memory_stat_show()), which reclaim decides by: --memcg-interval 0 reads it at the first and
    # last tick only, as the kernel's own flush leaves them (docs/recorder.md)
    stat = rundir.memcg_stat_of(os.getpid())
    if stat is None:
        pytest.skip("this process is in no memory cgroup with a memory.stat")
    s = Sampler(0.01, stat, None, os.getpid(), smaps=False, memcg_interval=memcg_interval)
    for _ in range(5):
        s.sample()
    s.stop()                                    # a last tick
    assert reads(s, "memory.stat") == expected
    if os.path.exists(os.path.join(os.path.dirname(stat), "memory.kmem.usage_in_bytes")):
        # v1's kernel-memory charge: reading it every 10 ms changed reclaim as much (measured)
        assert reads(s, "memory.kmem.usage_in_bytes") == expected
    assert reads(s, "vmstat") == 6 and reads(s, "stat") == 6
    t = s.table()
    assert t["memcg_cache"].notna().all() if "memcg_cache" in t else t["memcg_file"].notna().all()


def test_process_faults_sampled_from_proc_stat():
    # /proc/PID/stat's minflt and majflt (proc(5) fields 10 and 12), the same as proc_faults()
    s = Sampler(0.01, None, None, os.getpid(), smaps=False)
    s.sample()
    s.stop()
    row = s.table().iloc[-1]
    minflt, majflt = proc_faults(os.getpid())
    assert set(PROC_STAT) == {"minflt", "majflt"}
    assert 0 < row["stat_minflt"] <= minflt and row["stat_majflt"] <= majflt
