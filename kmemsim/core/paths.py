"""Files at the door: an input must be a regular file kmemsim can read (a FIFO, a device such as
/dev/zero or a socket would hang or never end), and an output must be writable where it is named,
checked before any work starts (a probe file made and removed beside it), so a run never fails at
its last step. Each check raises one InputError naming the option and the path."""
from __future__ import annotations

import os
import stat
import tempfile

from .errors import InputError

# The atomic writes (core/atomic.py) name their temp file ".NAME.XXXXXXXX.tmp" beside the target:
# the file system's NAME_MAX (255 on ext4, tmpfs, xfs) must hold that too.
_TEMP_EXTRA = 16


def _label(what: str, path) -> str:
    return f"{what} {path}" if what else f"{path}"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def input_file(path, what: str = "", expected: str = "file") -> str:
    """`path` as a str, if it names a regular file this process can read."""
    p = os.fspath(path) if path is not None else ""
    if not p:
        raise InputError(f"{what or 'input'}: empty path; give a {expected}")
    label = _label(what, p)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except NotADirectoryError:
        raise InputError(f"{label}: no such file (a part of the path is not a directory)") from None
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{label}: is a directory, expected a {expected}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{label}: is {_kind(st.st_mode)}, not a regular file; give a {expected}")
    if not os.access(p, os.R_OK):
        raise InputError(f"{label}: cannot read (permission denied)")
    return p


def _name_max(d: str) -> int:
    try:
        return os.pathconf(d, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _probe(d: str, label: str) -> None:
    """Make and remove a file in directory d: any file system refusal shows now, not at the end."""
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".kmemsim-probe-")
    except OSError as e:
        raise InputError(f"{label}: cannot write in {d or '.'} ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def _existing_dir(d: str, label: str) -> str:
    """The directory d ("." when empty), which must exist."""
    d = d or "."
    if not os.path.exists(d):
        raise InputError(f"{label}: directory {d} does not exist")
    if not os.path.isdir(d):
        raise InputError(f"{label}: {d} is not a directory")
    return d


def _check_length(p: str, label: str, d: str, extra: int = 0) -> None:
    """The path within PATH_MAX, each name within the file system's NAME_MAX (the last less `extra`,
    what the temp file's name adds to it)."""
    if len(os.fsencode(p)) >= 4096:
        raise InputError(f"{_short(label)}: path of {len(p)} characters, longer than PATH_MAX (4096)")
    parts = p.rstrip(os.sep).split(os.sep)
    for i, part in enumerate(parts):
        limit = _name_max(d) - (extra if i == len(parts) - 1 else 0)
        if len(os.fsencode(part)) > limit:
            raise InputError(f"{_short(label)}: a name of {len(part)} characters, longer than the "
                             f"file system takes ({limit})")


def _short(label: str) -> str:
    return label if len(label) <= 80 else label[:60] + "..."


def output_file(path, what: str = "-o") -> str:
    """`path` as a str, if a file can be written there: not a directory or a device, in a directory
    that exists and takes a new file."""
    p = os.fspath(path) if path is not None else ""
    if not p:
        raise InputError(f"{what}: empty path; give a file name")
    label = _label(what, p)
    d = os.path.dirname(p)
    _check_length(p, label, d if d and os.path.isdir(d) else ".", _TEMP_EXTRA)
    if p.endswith(os.sep):
        raise InputError(f"{_short(label)}: names a directory, expected a file")
    if os.path.lexists(p):
        try:
            st = os.stat(p)
        except OSError as e:
            raise InputError(f"{_short(label)}: cannot write ({e.strerror})") from None
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{_short(label)}: is {_kind(st.st_mode)}; give a file name to write")
    _probe(_existing_dir(d, _short(label)), _short(label))
    return p


def output_dir(path, what: str = "-o", empty: bool = False) -> str:
    """`path` as a str, if files can be written in it: an existing directory (empty, with `empty`)
    or a new one whose nearest existing parent takes it. Nothing is created."""
    p = os.fspath(path) if path is not None else ""
    if not p:
        raise InputError(f"{what}: empty path; give a directory")
    label = _short(_label(what, p))
    _check_length(p, label, ".")
    if os.path.exists(p):
        if not os.path.isdir(p):
            raise InputError(f"{label}: exists and is not a directory")
        if empty and os.listdir(p):
            raise InputError(f"{label}: exists and is not empty; choose a new one or remove it")
        _probe(p, label)
        return p
    if os.path.lexists(p):
        raise InputError(f"{label}: a dangling symbolic link")
    parent = os.path.dirname(os.path.abspath(p))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{label}: {parent} is not a directory")
    _probe(parent, label)
    return p
