"""`kmemsim trace import ftrace CAPTURE.txt -o RUNDIR` and `kmemsim trace import perfetto TRACE.pftrace
-o RUNDIR`: a phone's (or this machine's) capture of the kernel's mm tracepoints as a run directory,
the live ground truth `validate --reuse`, `compare` and `export perfetto` read (kmemsim/live/ftrace.py)."""
from __future__ import annotations

import click


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
    f = click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
                     help="the run directory to write (new or empty)")(f)
    return f


@click.group("import")
def trace_import():
    """Import a kernel trace captured elsewhere as a kmemsim run directory."""


@trace_import.command("ftrace")
@click.argument("capture", type=click.Path(dir_okay=False))
@_options
def ftrace_cmd(capture, out_dir, pids, comms, files, allow_lost):
    """The text tracefs writes (`cat trace`, `trace_pipe`) and Android's atrace/systrace."""
    # here, not at the top: `kmemsim --help` loads no pandas or pyarrow
    from ..live import ftrace
    s = ftrace.import_capture(capture, out_dir, "ftrace", pids=pids, comms=comms, files=files, allow_lost=allow_lost)
    click.echo(ftrace.describe(s, out_dir))


@trace_import.command("perfetto")
@click.argument("capture", type=click.Path(dir_okay=False))
@_options
def perfetto_cmd(capture, out_dir, pids, comms, files, allow_lost):
    """A Perfetto protobuf trace with ftrace events (record_android_trace, the Perfetto UI)."""
    # here: as above, and protobuf
    from ..live import ftrace
    s = ftrace.import_capture(capture, out_dir, "perfetto", pids=pids, comms=comms, files=files, allow_lost=allow_lost)
    click.echo(ftrace.describe(s, out_dir))
