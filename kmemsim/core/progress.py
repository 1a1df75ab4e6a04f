"""Progress for a person at a terminal: tqdm bars and status lines on stderr, off when stderr is not
a terminal (tqdm's disable=None) or after `--quiet` (set_quiet). The one place commands get them."""
from __future__ import annotations

import os
import sys

_quiet = False


def set_quiet(on: bool) -> None:
    """`--quiet`: no bars or status lines in this process, nor in the processes it starts (tqdm reads
    TQDM_DISABLE from the environment)."""
    global _quiet
    if on:
        os.environ["TQDM_DISABLE"] = "1"
    elif _quiet:                        # a later command in the same process (tests) is not quiet
        os.environ.pop("TQDM_DISABLE", None)
    _quiet = bool(on)


def quiet() -> bool:
    return _quiet


def bar(iterable=None, **kw):
    """A tqdm bar on stderr (leave=False: the result, not the bar, stays on the screen)."""
    from tqdm import tqdm          # here: `kmemsim --help` loads no tqdm
    kw.setdefault("leave", False)
    kw.setdefault("dynamic_ncols", True)
    return tqdm(iterable, disable=True if _quiet else None, file=sys.stderr, **kw)


def note(msg: str) -> None:
    """A long command's report of its steps on stderr (validate's live runs, a sweep's cluster),
    unless quiet: kept in a log too, unlike the bars."""
    if not _quiet:
        print(msg, file=sys.stderr, flush=True)


def say(msg: str) -> None:
    """A status line on stderr (what a long step is doing), on a terminal and unless quiet: like the
    bars, not in a log or a pipe, where a command's stderr is its one error line."""
    if _quiet or not sys.stderr.isatty():
        return
    if "tqdm" in sys.modules:           # above a bar that is showing, not through it
        sys.modules["tqdm"].tqdm.write(msg, file=sys.stderr)
    else:
        print(msg, file=sys.stderr, flush=True)
