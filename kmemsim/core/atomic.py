"""Output that is whole or absent: write beside the target, then replace it in one rename."""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager


@contextmanager
def atomic_path(path, suffix=".tmp"):
    """A temp file's path beside `path`. On success the temp file replaces `path` (with the mode a
    new file would get); on any failure, Ctrl-C included, it is removed and `path` is untouched."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{os.path.basename(path)}.", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write(path, what) -> None:
    """Write bytes or text to `path` atomically; or call what(tmp_path) to fill the file."""
    with atomic_path(path) as tmp:
        if callable(what):
            what(tmp)
        else:
            with open(tmp, "wb" if isinstance(what, bytes) else "w") as f:
                f.write(what)


def atomic_json(path, obj) -> None:
    """obj as JSON (indented by one, anything else as its str) to `path` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, default=str)
