"""`kmemsim run` and `kmemsim record`: the recorder's command line (kmemsim/live/recorder.py does the
work; imported by the commands themselves: `kmemsim --help` loads no pandas)."""
import sys

import click

from ..core.errors import InputError
from ..core.limits import MAX_PERIOD_S, MAX_PID, MAX_SECONDS, check_int
from ..core.paths import output_dir
from ..live.samplers import INTERVAL_S
from . import options
from .options import number_ok


def check_periods(interval, smaps_interval, memcg_interval, out):
    """What `run` and `record` share, checked before anything on the machine changes: the periods
    (finite; click's float lets nan and inf through) and RUNDIR (new or empty, and writable)."""
    number_ok(interval, "--interval", 0, MAX_PERIOD_S)
    if interval <= 0:
        raise InputError(f"--interval {interval}: expected a positive number of seconds")
    number_ok(smaps_interval, "--smaps-interval", 0, MAX_PERIOD_S)
    number_ok(memcg_interval, "--memcg-interval", 0, MAX_PERIOD_S)
    output_dir(out, "-o", empty=True)


def sampling_options(f):
    """The sampler's periods, shared by `run` and `record`."""
    for opt in reversed([
        click.option("--interval", default=INTERVAL_S, show_default=True, type=float,
                     help="sampling period, seconds"),
        click.option("--smaps-interval", default=5.0, show_default=True, type=float,
                     help="smaps_rollup period, seconds (it walks page tables; 0: never)"),
        click.option("--memcg-interval", default=INTERVAL_S, show_default=True, type=float,
                     help="how often the cgroup's memory.stat is read, seconds; each read makes the "
                          "statistics reclaim decides by fresh, which the kernel alone does every 2 s "
                          "(0: at the start and end only)")]):
        f = opt(f)
    return f


@click.command(context_settings={"ignore_unknown_options": False}, epilog="""
\b
Example (as root: 300 MiB written under a 256 MiB limit with 1 GiB of zram):
  kmemsim run --mem-limit 256M --zram lz4:1G -o run1 -- python3 -c "b = bytearray(300 << 20)"
""")
@options.mem_limit(help="memory cgroup limit (memory.max), e.g. 512M [default: none]")
@options.zram(live=True, help="zram swap for the run, e.g. lz4:1G (refused if swap is on)")
@options.swappiness(help="vm.swappiness for the run's cgroup, 0..200")
@click.option("--drop-caches", is_flag=True, help="sync and drop the page cache before starting")
@sampling_options
@options.out(kind="dir", metavar="RUNDIR", help="run directory to create")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(mem_limit, zram, swappiness, drop_caches, interval, smaps_interval, memcg_interval, out, command):
    """Run COMMAND in a fresh memory cgroup (limit, zram swap) and record it into RUNDIR.

    Everything set up for the run is undone afterwards, also on failure or Ctrl-C.
    Exits with COMMAND's status (130 if interrupted)."""
    from ..live import recorder       # here: `kmemsim --help` loads no pandas
    check_periods(interval, smaps_interval, memcg_interval, out)
    sys.exit(recorder.run_command(list(command), out, mem_limit=mem_limit, zram=zram, swappiness=swappiness,
                                  drop_caches=drop_caches, interval=interval, smaps_interval=smaps_interval,
                                  memcg_interval=memcg_interval))


@click.command(epilog="""
\b
Example (as root: 5 s of the shell it is typed in, changing nothing):
  kmemsim record --pid $$ --duration 5 -o rec1
""")
@click.option("--pid", required=True, type=int, help="process to attach to (its children are followed)")
@click.option("--duration", type=float, help="seconds to record (default: until it exits or Ctrl-C)")
@sampling_options
@options.out(kind="dir", metavar="RUNDIR", help="run directory to create")
def record(pid, duration, interval, smaps_interval, memcg_interval, out):
    """Attach to a running process and record it into RUNDIR; changes nothing on the machine."""
    from ..live import recorder       # here: `kmemsim --help` loads no pandas
    check_periods(interval, smaps_interval, memcg_interval, out)
    check_int(pid, "--pid", 1, MAX_PID)
    if duration is not None:
        number_ok(duration, "--duration", 0, MAX_SECONDS)
        if duration <= 0:
            raise InputError(f"--duration {duration}: expected a positive number of seconds")
    sys.exit(recorder.record_pid(pid, out, duration=duration, interval=interval, smaps_interval=smaps_interval,
                                 memcg_interval=memcg_interval))
