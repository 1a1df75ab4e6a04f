"""The `kmemsim` click group and its one-line errors. Each command lives in a module of its own in this
folder and is registered in __init__.py's table with one line; a command's module is imported only
when that command runs or its help is shown (click's lazy group: docs "Advanced Groups"), so
`kmemsim replay` does not pay for pandas, matplotlib, dask or bcc.

Errors: kmemsim.core.errors.InputError and click's usage errors print one line, `kmemsim: <what is
wrong>`, on stderr and exit 2, with no traceback and nothing on stdout.
"""
from __future__ import annotations

import errno
from importlib import import_module

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
    """A click group whose commands are named in a table, {name: "module:attr"}, and imported on use.
    A table's value may also be ("module:attr", {subname: "module:attr"}) for a group that gains
    subcommands registered outside its own module."""

    def __init__(self, *args, lazy: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy:
            spec = self.lazy[name]
            where, children = (spec, {}) if isinstance(spec, str) else spec
            cmd = _load(where)
            for sub, sub_where in children.items():
                cmd.add_command(_load(sub_where), sub)
            self.add_command(cmd, name)
        return super().get_command(ctx, name)

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


def _load(where: str) -> click.Command:
    module, _, attr = where.partition(":")
    return getattr(import_module(module), attr)


@click.group(cls=KmemsimGroup)
@click.version_option(package_name="kmemsim")
def main():
    """kmemsim: what Linux memory management does to on-device LLM inference."""
