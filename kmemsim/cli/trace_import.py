"""`kmemsim trace import ftrace CAPTURE.txt -o RUNDIR` and `kmemsim trace import perfetto TRACE.pftrace
-o RUNDIR`: a phone's (or this machine's) capture of the kernel's mm tracepoints as a run directory,
the live ground truth `validate --reuse`, `compare` and `export perfetto` read (kmemsim/live/ftrace.py)."""
from __future__ import annotations

import click

from . import options


def _options(f):
    f = click.option("--allow-lost", is_flag=True,
                     help="import a capture whose ring buffer dropped events (its counts are then low)")(f)
    f = click.option("--file", "files", multiple=True, metavar="INO=PATH",
                     help="name a file by its inode (hex, as ftrace prints it, or 0x.. / decimal): the run "
                          "directory lists it under PATH (repeatable)")(f)
    f = click.option("--comm", "comms", multiple=True, metavar="NAME",
                     help="track the tasks of this name and their descendants (repeatable)")(f)
    f = click.option("--pid", "pids", multiple=True, type=int,
                     help="track this process and its descendants, as `kmemsim run` tracks its command "
                          "(repeatable; with neither --pid nor --comm every task is tracked)")(f)
    f = options.out(kind="dir", dest="out_dir", help="the run directory to write (new or empty)")(f)
    return f


@click.group("import", epilog="""
\b
Example (each command's --help has its own):
  kmemsim trace import ftrace capture.txt --comm llama -o phone-run
""")
def trace_import():
    """Import a kernel trace captured elsewhere as a kmemsim run directory."""


@trace_import.command("ftrace", epilog="""
\b
Example (capture.txt: /sys/kernel/tracing/trace after enabling the mm_filemap, vmscan and
pagemap tracepoints, on a phone `atrace` or `adb shell cat /sys/kernel/tracing/trace`):
  kmemsim trace import ftrace capture.txt --comm llama -o phone-run
""")
@click.argument("capture", type=click.Path(dir_okay=False))
@_options
def ftrace_cmd(capture, out_dir, pids, comms, files, allow_lost):
    """The text tracefs writes (`cat trace`, `trace_pipe`) and Android's atrace/systrace."""
    # here, not at the top: `kmemsim --help` loads no pandas or pyarrow
    from ..live import ftrace
    s = ftrace.import_capture(capture, out_dir, "ftrace", pids=pids, comms=comms, files=files, allow_lost=allow_lost)
    click.echo(ftrace.describe(s, out_dir))


@trace_import.command("perfetto", epilog="""
\b
Example (a Perfetto trace recorded with ftrace's mm events, e.g. record_android_trace):
  kmemsim trace import perfetto capture.pftrace --comm llama -o phone-run2
""")
@click.argument("capture", type=click.Path(dir_okay=False))
@_options
def perfetto_cmd(capture, out_dir, pids, comms, files, allow_lost):
    """A Perfetto protobuf trace with ftrace events (record_android_trace, the Perfetto UI)."""
    # here: as above, and protobuf
    from ..live import ftrace
    s = ftrace.import_capture(capture, out_dir, "perfetto", pids=pids, comms=comms, files=files, allow_lost=allow_lost)
    click.echo(ftrace.describe(s, out_dir))
