"""The limits every input is checked against, in one place, each with why: what a real model and a
real device can have, and what the emulator can hold. A value outside them is refused at the door
(InputError: one line naming the input and the value), before any work starts.

The checks here are for numbers; kmemsim/core/paths.py checks files."""
from __future__ import annotations

import math
import os

from .errors import InputError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

# ---- memory ------------------------------------------------------------------------------------
# Device RAM and memory cgroup limits: x86-64's 4-level page tables address 64 TiB of physical
# memory (46 bits), more than any machine kmemsim models (phones: 24 GiB); the C core counts pages
# in int64 and sizes its watermarks from RAM.
MAX_MEM_BYTES = 64 * TiB
# A device (`compare`, `demo`) below this runs nothing: the kernel's own reserves (min_free_kbytes'
# 128 KiB floor and the watermarks above it) and one process's page tables and code leave no room,
# so every policy reports the same OOM-killed nothing.
MIN_DEVICE_MEM_BYTES = 16 * MiB
# zram's disksize: the core numbers swap slots with 32-bit integers (2^31 pages = 8 TiB); a real
# zram device is at most a few times RAM, so 4 TiB is beyond any.
MAX_ZRAM_BYTES = 4 * TiB
# zram compressors the live kernel's zram offers (drivers/block/zram/backend_*.c); the emulator
# models a subset (kmemsim.engine.kernel.ZRAM_ALGOS).
LIVE_ZRAM_ALGOS = ("lzo", "lzo-rle", "lz4", "lz4hc", "zstd", "deflate", "842")
# A size the kernel takes as a knob in KiB (read_ahead_kb, max_sectors_kb, min_free_kbytes): the
# block layer caps a request at 32 MiB-ish (max_hw_sectors), and min_free_kbytes at 1 GiB+.
MAX_KNOB_KB = 1 << 22
# vm.watermark_scale_factor's own range in the kernel (sysctl: 1..3000, 0 here meaning the default).
MAX_WATERMARK_SCALE_FACTOR = 3000
# fault_around_bytes: the kernel caps it at a PTE table's reach (PTRS_PER_PTE pages, 2 MiB).
MAX_FAULT_AROUND_BYTES = 2 * MiB
# A policy's strength (Config.policy_param): the policies read it as a C int.
MAX_POLICY_PARAM = (1 << 31) - 1

# ---- models (GGUF metadata, presets, `model synth`) ----------------------------------------------
# The largest released models stay well inside these (Llama 3.1 405B: 126 layers, 16384 wide,
# 53248 FFN, 128 heads; Gemma 3: a 262144-token vocabulary; DeepSeek-V3: 256 experts; heads of at
# most 256 dimensions, MLA's 576); anything beyond is a corrupt or hostile header.
MAX_LAYERS = 1024
MAX_EMBD = 1 << 17
MAX_FF = 1 << 19
MAX_HEADS = 1024
MAX_HEAD_DIM = 4096
MAX_VOCAB = 1 << 21
MAX_EXPERTS = 1024
# GGUF's general.alignment: a power of two (ggml's GGML_PAD); llama.cpp's default 32, and no file
# aligns beyond a huge page.
MAX_ALIGNMENT = 1 << 21
# GGUF fields llama.cpp keeps as uint32 (context_length, token ids), and llama.cpp's seed.
MAX_U32 = (1 << 32) - 1
# Metadata keys and tensors a GGUF header may declare: a 150k-token vocabulary is one key; the
# largest MoE files have some 50,000 tensors.
MAX_GGUF_KEYS = 1 << 16
MAX_GGUF_TENSORS = 1 << 20

# ---- requests ---------------------------------------------------------------------------------
# Tokens in a prompt, a decode or a context: llama.cpp's n_ctx is a uint32 and no released model
# trains beyond 10M tokens (Llama 4 Scout), so 2^24 = 16,777,216.
MAX_TOKENS = 1 << 24
# Parallel sequences (KV streams): llama.cpp's LLAMA_MAX_SEQ.
MAX_SEQS = 256
# Speculative candidate paths (`compare --paths`, a scenario's llm.paths): a drafter proposes a
# handful to tens of them; each is a whole KV sequence.
MAX_PATHS = 64
# A scenario's LLM contexts (`sessions = N`): LLMS's service holds tens.
MAX_SESSIONS = 1 << 16
# MoE routing's Zipf exponent (`--moe-routing zipf:S`): at S = 10 the hottest expert already takes
# all but a millionth of the tokens; beyond is the same routing.
MAX_ZIPF_S = 10.0
# Threads sharing a graph node: the C core's thread table holds 64 (c_ext/mm.h, struct mm_threads).
MAX_THREADS = 64
# Requests of one generated session (`--requests`): each is a whole prompt + decode; the event
# budget below bounds their work too.
MAX_REQUESTS = 1 << 16
# Linux's PID_MAX_LIMIT (4,194,304): pids are at most this.
MAX_PID = 1 << 22

# ---- time ---------------------------------------------------------------------------------------
# A scenario's timeline, in seconds: trace time is int64 nanoseconds (292 years), and a phone's
# day of use is 86,400 s; 30 days covers any scenario anyone writes.
MAX_SECONDS = 30 * 86400.0
# An app definition's `scale` (its regions' sizes multiplied): from a sliver to a million times.
MAX_APP_SCALE = 1e6
# A scenario file: a few KiB by hand; anything past 16 MiB is not one.
MAX_SCENARIO_BYTES = 16 * MiB
# Sampling periods of the recorder (--interval, --memcg-interval, --smaps-interval) and the
# emulator (ms): beyond a day nothing is sampled in any run.
MAX_PERIOD_S = 86400.0

# ---- work -------------------------------------------------------------------------------------
# Events a generated trace (a scenario's plan, a llama.cpp session) may hold: each costs some 41
# bytes in its columns and about as much again while it is sorted, so 100 million is 8 GiB or so at
# peak. KMEMSIM_MAX_EVENTS raises (or lowers) it.
DEFAULT_MAX_EVENTS = 100_000_000


def max_events() -> int:
    """The event budget: $KMEMSIM_MAX_EVENTS, else DEFAULT_MAX_EVENTS."""
    v = os.environ.get("KMEMSIM_MAX_EVENTS")
    if v is None or not v.strip():
        return DEFAULT_MAX_EVENTS
    try:
        n = int(v)
    except ValueError:
        raise InputError(f"KMEMSIM_MAX_EVENTS={v!r}: expected a whole number of events") from None
    if n < 1:
        raise InputError(f"KMEMSIM_MAX_EVENTS={v!r}: expected a positive number of events")
    return n


def check_events(n: float, what: str, fix: str) -> None:
    """Refuse work estimated at n events when it exceeds the budget; `fix` says what to shorten."""
    budget = max_events()
    if n > budget:
        raise InputError(f"{what} would make about {_count(n)} events, more than the event budget of "
                         f"{budget:,} (KMEMSIM_MAX_EVENTS): {fix}")


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e15 else f"{n:.3g}"


# The emulator's own memory: at most this share of what the machine has available (MemAvailable)
# may go to one replay's state, leaving room for the trace's columns and the results.
EMULATOR_MEM_SHARE = 0.8


def available_memory() -> int | None:
    """Bytes this process can still get: MemAvailable, or less under a cgroup limit; None unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * KiB
                    break
    except OSError:
        return None
    try:                                  # our own cgroup v2's limit, when one is set
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
        if rel is not None and avail is not None:
            base = "/sys/fs/cgroup" + rel.rstrip("/")
            with open(base + "/memory.max") as f:
                mx = f.read().strip()
            with open(base + "/memory.current") as f:
                cur = int(f.read())
            if mx != "max":
                avail = min(avail, max(0, int(mx) - cur))
    except (OSError, ValueError, IndexError):
        pass
    return avail


def check_memory(need: int, what: str) -> None:
    """Refuse work needing `need` bytes of this machine's memory beyond what it has available."""
    avail = available_memory()
    if avail is not None and need > avail * EMULATOR_MEM_SHARE:
        raise InputError(f"{what} needs {_bytes(need)} of memory to emulate, more than this machine can "
                         f"give ({_bytes(avail)} available); use a smaller trace or a larger machine")


def _bytes(n: float) -> str:
    for unit, name in ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            return f"{n / unit:,.1f} {name}"
    return f"{int(n)} bytes"


# ---- numbers ------------------------------------------------------------------------------------

def check_int(v, what: str, lo: int | None = None, hi: int | None = None, why: str = "") -> int:
    """An integer within [lo, hi], or one InputError naming `what` and the value."""
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            else:
                raise TypeError
        except (TypeError, OverflowError):
            raise InputError(f"{what}: expected a whole number, got {v!r}") from None
    if lo is not None and v < lo:
        raise InputError(f"{what} {v}: must be at least {lo:,}{why}")
    if hi is not None and v > hi:
        raise InputError(f"{what} {v}: must be at most {hi:,}{why}")
    return v


def check_float(v, what: str, lo: float | None = None, hi: float | None = None, *, lo_open=False,
                why: str = "") -> float:
    """A finite number within [lo, hi] ((lo, hi] with lo_open), or one InputError naming it."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{what}: expected a number, got {v!r}")
    try:
        x = float(v)
    except OverflowError:
        raise InputError(f"{what} {v}: too large") from None
    if not math.isfinite(x):
        raise InputError(f"{what} {v}: expected a finite number")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise InputError(f"{what} {v:g}: must be {'more than' if lo_open else 'at least'} {lo:g}{why}")
    if hi is not None and x > hi:
        raise InputError(f"{what} {v:g}: must be at most {hi:g}{why}")
    return x


def check_mem(n: int, what: str, raw=None, lo: int = 4096) -> int:
    """Bytes of RAM or a cgroup limit within [lo, MAX_MEM_BYTES]."""
    r = raw if raw is not None else n
    if n < lo:
        raise InputError(f"{what} {r}: less than {_bytes(lo) if lo > 4096 else 'one 4 KiB page'}"
                         + (" (the kernel's reserves alone need more: every process would be OOM-killed)"
                            if lo > 4096 else ""))
    if n > MAX_MEM_BYTES:
        raise InputError(f"{what} {r}: more than {_bytes(MAX_MEM_BYTES)}, the most physical memory "
                         "x86-64's page tables address")
    return n


def check_zram_size(n: int, what: str = "--zram size", raw=None) -> int:
    r = raw if raw is not None else n
    if n < 4096:
        raise InputError(f"{what} {r}: less than one 4 KiB page")
    if n > MAX_ZRAM_BYTES:
        raise InputError(f"{what} {r}: more than {_bytes(MAX_ZRAM_BYTES)}, beyond any zram device "
                         "(a few times RAM at most)")
    return n
