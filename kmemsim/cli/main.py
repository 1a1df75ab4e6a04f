"""The `kmemsim` click group and its one-line errors. Each command lives in a module of its own in this
folder and is registered in __init__.py with one line.

Errors: kmemsim.core.errors.InputError and click's usage errors print one line, `kmemsim: <what is
wrong>`, on stderr and exit 2, with no traceback and nothing on stdout.
"""
from __future__ import annotations

import errno

import click

from ..core.errors import InputError

# OSErrors that say the machine refused a write or a read the door's checks could not foresee (a
# disk that fills up during the run, a file system turned read-only): one line too, no traceback.
# Outputs are written whole or not at all (core/atomic.py), so nothing half-written stays.
_IO_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG,
              errno.EFBIG, errno.EIO, errno.ENOENT, errno.ENOTDIR, errno.EISDIR}


class OneLineError(click.ClickException):
    """Shown as a single `kmemsim: ...` line on stderr; exit code 2."""
    exit_code = 2

    def show(self, file=None):
        click.echo(f"kmemsim: {self.format_message()}", err=True)


def _one_line(msg: str) -> str:
    return "; ".join(part.strip() for part in str(msg).splitlines() if part.strip())


def _usage(e: click.UsageError) -> OneLineError:
    path = e.ctx.command_path if e.ctx is not None else "kmemsim"
    return OneLineError(f"{_one_line(e.format_message())} (see '{path} --help')")


class KmemsimGroup(click.Group):
    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as e:
            raise _usage(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except InputError as e:
            raise OneLineError(_one_line(str(e))) from None
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as e:
            raise _usage(e) from None
        except OSError as e:
            if e.errno not in _IO_ERRNOS:
                raise
            where = f"{e.filename}: " if e.filename else ""
            raise OneLineError(f"{where}{e.strerror}") from None
        except MemoryError:
            raise OneLineError("out of memory: the input asks for more than this machine has; "
                               "give smaller sizes or counts") from None


@click.group(cls=KmemsimGroup)
@click.version_option(package_name="kmemsim")
def main():
    """kmemsim: what Linux memory management does to on-device LLM inference."""
