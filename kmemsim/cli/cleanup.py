"""`kmemsim cleanup`: put right what a recorder killed with SIGKILL left on the machine
(kmemsim/live/leftovers.py); `kmemsim run` does the same before it starts."""
import click


@click.command(epilog="""
\b
Example (as root; says so when nothing was left):
  kmemsim cleanup
""")
def cleanup():
    """Undo what a killed `kmemsim run` left: its zram swap, its memory cgroup (and the command
    still running in it), the settings it changed. Touches nothing another program made."""
    from ..live import recorder       # here: `kmemsim --help` loads no pandas
    recorder.require_root()
    if not recorder.put_right_leftovers():
        click.echo("kmemsim: nothing left by a killed run", err=True)
