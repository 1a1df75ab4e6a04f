"""Sizes as people write them: "512M", "2GiB", "4096", "1.5G". Binary units throughout (K = KiB =
1024 bytes), as the kernel's memparse() reads `mem=` and cgroup's memory.max reads its values. And
the page: its size, and byte ranges as the page ranges trace events carry."""
from __future__ import annotations

import re

from .errors import InputError
from .limits import MAX_MEM_BYTES

PAGE_SIZE = 4096         # the one page size (x86_64, arm64 Android: 4 KiB)

_UNITS = {"": 1, "B": 1,
          "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
          "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}

_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([A-Za-z]*)\s*$")


def parse_size(value, what: str = "size", allow_zero: bool = False, hi: int = MAX_MEM_BYTES) -> int:
    """Bytes from an int or a string with an optional K/M/G/T (or KiB/MiB/GiB/TiB, KB/MB/...) suffix.

    Fractions are allowed when they come to whole bytes ("1.5K" = 1536). Raises InputError naming
    `what` for garbage, negative values, fractional bytes, zero unless allow_zero, and sizes above
    `hi` (by default the most memory a machine can have: kmemsim.core.limits).
    """
    if isinstance(value, bool):
        raise InputError(f"{what}: expected a size such as 512M or 2G, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        if not isinstance(value, str):
            raise InputError(f"{what}: expected a size such as 512M or 2G, got {value!r}")
        m = _SIZE_RE.match(value) if len(value) <= 64 else None
        if not m or m.group(2).upper() not in _UNITS:
            shown = value if len(value) <= 64 else value[:40] + "..."
            raise InputError(f"{what}: cannot read {shown!r} as a size; "
                             "write bytes or a number with K, M, G or T (e.g. 512M, 2GiB)")
        num, unit = m.group(1), _UNITS[m.group(2).upper()]
        if "." in num:
            whole, _, frac = num.lstrip("+-").partition(".")
            # exact: scale numerator and denominator as integers
            numer = int(whole or "0") * 10 ** len(frac) + int(frac or "0")
            numer *= unit
            den = 10 ** len(frac)
            if numer % den:
                raise InputError(f"{what}: {value!r} is not a whole number of bytes")
            n = numer // den
            if num.startswith("-"):
                n = -n
        else:
            n = int(num) * unit
    if n < 0:
        raise InputError(f"{what}: {value!r} is negative; sizes must be positive")
    if n == 0 and not allow_zero:
        raise InputError(f"{what}: {value!r} is zero; give a positive size")
    if hi is not None and n > hi:
        raise InputError(f"{what}: {value!r} is more than {format_size(hi)}, the most "
                         + ("memory a machine can have (x86-64 addresses 64 TiB)" if hi == MAX_MEM_BYTES
                            else "kmemsim takes here"))
    return n


def size_to_pages(value, what: str = "size", allow_zero: bool = False) -> int:
    """Whole 4 KiB pages in a size (rounded down, as the kernel counts memory in pages); a nonzero
    size below one page is an error rather than silently zero pages."""
    n = parse_size(value, what, allow_zero)
    pages = n // PAGE_SIZE
    if pages == 0 and n > 0:
        raise InputError(f"{what}: {value!r} is less than one 4 KiB page")
    return pages


def format_size(n: int) -> str:
    """Short human form: 536870912 -> '512M', 1536 -> '1.5K'."""
    for suffix, unit in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit:
            v = n / unit
            return f"{v:.0f}{suffix}" if v == int(v) else f"{v:.3g}{suffix}"
    return f"{n}"


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 2.3e9 -> '2.14 GiB' (binary units, three significant figures)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def human_seconds(s: float) -> str:
    """Seconds as a person reads them: 0.000012 -> '12 us', 0.25 -> '250 ms', 75 -> '75.0 s'."""
    if s != s:
        return "n/a"
    if s == 0:
        return "0 s"
    for unit, f in (("s", 1), ("ms", 1e3), ("us", 1e6)):
        if abs(s) * f >= 1:
            return f"{s * f:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


# ------------------------------------------------------------------------------------------------
# Pages of byte ranges

def pad(x, n):
    """x rounded up to a multiple of n (ggml's GGML_PAD)."""
    return -(-x // n) * n


def pages(nbytes) -> int:
    """Pages that hold nbytes (rounded up)."""
    return -(-int(nbytes) // PAGE_SIZE)


def page_span(off, nbytes):
    """First page and page count of byte range [off, off + nbytes) (at least one page)."""
    a = off // PAGE_SIZE
    return a, max(1, -(-(off + nbytes) // PAGE_SIZE) - a)


def page_runs(starts, ends):
    """Coalesce byte ranges (arrays, sorted by start) into page runs: (first pages, page counts)."""
    import numpy as np          # here: parse_size is on every command's start-up path
    starts = np.asarray(starts, np.int64)
    ends = np.asarray(ends, np.int64)
    ps = starts // PAGE_SIZE
    pe = -(-ends // PAGE_SIZE)
    pe = np.maximum.accumulate(pe)
    brk = np.ones(len(ps), bool)
    brk[1:] = ps[1:] > pe[:-1]
    idx = np.flatnonzero(brk)
    last = np.append(idx[1:] - 1, len(ps) - 1)
    return ps[idx], pe[last] - ps[idx]


def spread(n, total):
    """n of `total` pages spread evenly over them, as runs: (first pages, run lengths)."""
    import numpy as np  # here: parse_size is on every start-up path
    if n <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    idx = np.arange(n, dtype=np.int64) * total // n
    starts = np.flatnonzero(np.diff(idx, prepend=-2) != 1)
    return idx[starts], np.diff(np.append(starts, n))
