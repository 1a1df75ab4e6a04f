"""The C core never trusts its caller (issue 44): hypothesis feeds km_new() and km_replay() configs,
file sizes and event columns straight through cffi, past every Python check, with values at and
beyond every edge (negative, past KM_MAX_PAGES, INT64_MAX, unknown ops and ids, time going back).
Each call must come back: a working emulator, or one that says why it refuses (km_failed(),
km_error()); km_replay() returns 0 or -1 with a message. `make asan` runs this file against the
core built with AddressSanitizer and UBSan, so an overflow or a stray read anywhere fails it."""
import numpy as np
from hypothesis import HealthCheck, event, given, settings, strategies as st

from kmemsim.engine.kernel import POLICIES, ffi, lib

KM_MAX_PAGES = 1 << 40
I64 = (1 << 63) - 1
# values past the edges, and small ones the core can run: never a size in between, which would
# make the core (rightly) allocate gigabytes
EDGE = [-(1 << 63), -(1 << 40), -1, KM_MAX_PAGES, KM_MAX_PAGES + 1, 1 << 62, I64]


class Dice:
    """Choices from a numpy generator hypothesis seeds: each field takes one of its good values, or
    with probability `wild` one of its bad ones. (Hypothesis's own draws lean to the edge values it
    likes to try, which would leave no run reaching the core's depths.)"""

    def __init__(self, seed, wild):
        self.rng, self.wild = np.random.default_rng(seed), wild

    def __call__(self, good, bad=()):
        if len(bad) and self.rng.random() < self.wild:
            return bad[self.rng.integers(len(bad))]
        return good[self.rng.integers(len(good))]


def config(pick: Dice):
    c = ffi.new("struct km_config *")
    c.mem_pages = pick([0, 300, 2000, 5000, KM_MAX_PAGES], [-1, KM_MAX_PAGES + 1, I64])
    c.memcg_limit_pages = pick([0, 0, 64, 1000, 3000], [-5, I64])
    if not c.mem_pages and not c.memcg_limit_pages:
        c.mem_pages = 2000
    c.swappiness = pick([0, 60, 100, 200], [-1, 201, 2**31 - 1])
    c.zram_pages = pick([0, 16, 4096, 2**31 - 1], [-1, 2**31, 1 << 52, I64])
    c.zram_algo = pick([0, 1, 2, 3], [-1, 4, 2**31 - 1])
    c.min_free_kbytes = pick([0, -1, 128, 4096], [-2, I64])
    c.watermark_scale_factor = pick([0, 10, 3000], [-1, 3001])
    c.ra_pages = pick([0, 32, 2048], [-1, KM_MAX_PAGES + 1])
    c.io_pages = pick([0, 1, 256, 1024], [-1, I64])
    c.fault_around_pages = pick([0, 1, 16, 512], [-1, 513, 2**31 - 1])
    c.prefault_young = pick([0, 1])
    c.max_folio_order = pick(list(range(10)), [-1, 10, 63])
    c.lmk = pick([0, 1])
    c.swap_zeromap = pick([0, 1])
    c.exec_folio_order = pick(list(range(-1, 10)), [-2, 10])
    c.io_latency_ns = pick([0, 100_000], [-1])
    c.io_ns_per_page = pick([0, 2000], [-1])
    c.nr_threads = pick([0, 1, 2, 4, 64], [-1, 65, 2**31 - 1])
    for f in ("swapin_ns", "zero_ns", "swapout_ns", "file_folio_ns", "scan_ns"):
        setattr(c, f, pick([0, 1000], [-1]))
    c.sample_ns = pick([0, 10_000_000], [-1])
    c.stats_flush_ns = pick([0, 2_000_000_000], [-1])
    c.stats_flush_phase_ns = pick([0, 1000], [-1])
    name = pick(POLICIES, [b"", b"nope", b"x" * 32])
    c.policy = name.encode() if isinstance(name, str) else name
    c.policy_param = pick([0, 1, -1, I64])
    return c


def events(pick: Dice, n_files, n_tasks):
    """Columns of a trace that starts sane (a process, an anonymous and a file mapping) and goes
    on, each field now and then going wild: ops beyond the last, ids never made, pages past every
    end, time going back."""
    rng = pick.rng
    rows = [(0, 0, 0, -1, 0, 0, 0, 0), (1, 0, 2, 0, 0, 64, -1, 6 | int(rng.integers(0, 8)) << 8)]
    if n_files > 0:
        rows.append((2, 0, 2, 1, 0, 32, 0, int(rng.choice([2, 3, 18, 34]))))
    nmaps, t = len(rows) - 1, 3
    for _ in range(int(rng.integers(0, 60))):
        t = pick([t, t + 1, t + 1000], [-5, 0])
        ops = [4, 5, 4, 5, 4, 5, 6, 8, 9, 10, 12, 14, 3, 2] + ([11, 13, 15, 16, 7] if n_files > 0 else [])
        op = pick(ops, [17, 99, 255, 1, 7, 11])
        if op == 2:                                            # a new mapping, its id the next
            rows.append((t, 0, 2, pick([nmaps], [nmaps + 1, -1]), 0, pick([32, 64, 600], EDGE), -1, 6))
            nmaps += 1
            continue
        file_op = op in (7, 11, 13, 15, 16)
        rows.append((t, pick([0] * 4 + list(range(max(n_tasks, 1))), [-1, n_tasks, 2**31 - 1]), op,
                     -1 if file_op else pick(list(range(nmaps)), [-2, nmaps + 3, 2**31 - 1]),
                     pick(list(range(16)), EDGE), pick([1, 1, 2, 4, 8, 16], EDGE),
                     pick({10: [0, 1], 12: [0, 100, 900, -1000, 1000], 6: [0, 1, 2, 3, 4, 20, 21],
                           4: [0, 0, 1, 4, 16]}.get(op, [0]), [-1, 5000, I64]),
                     pick([0] if file_op and n_files else [0, 0, 1], [1, 2, 6, 16, 0x106, 0xFFFFFFFF])))
    if rng.random() < 0.3:
        rows.append((t, 0, 1, -1, 0, 0, 0, 0))                # the process exits
    a = np.array(rows, dtype=object)
    cols = {"t": np.int64, "task": np.int32, "op": np.uint8, "map": np.int32, "page": np.int64,
            "npages": np.int64, "arg": np.int64, "flags": np.uint32}
    out = {}
    for i, (k, dt) in enumerate(cols.items()):
        info = np.iinfo(dt)
        out[k] = np.array([min(max(int(v), info.min), info.max) for v in a[:, i]], dt)
    return out


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(st.data())
def test_core_refuses_or_runs(data):
    pick = Dice(data.draw(st.integers(0, 2**32 - 1), label="seed"),
                data.draw(st.sampled_from([0.0, 0.005, 0.02, 0.1]), label="wild"))
    cfg = config(pick)
    n_files = pick([0, 1, 1, 2], [-1])
    pages = np.array([pick([32, 100, 400], EDGE) for _ in range(max(n_files, 0))], np.int64)
    n_tasks = pick([1, 1, 2], [0, -1])
    n_phases = pick([0, 2], [-1])
    emu = lib.km_new(cfg, n_files, ffi.from_buffer("int64_t[]", pages) if len(pages) else ffi.NULL,
                     n_phases, n_tasks)
    assert emu != ffi.NULL
    try:
        if lib.km_failed(emu):
            event("refused at km_new: " + ffi.string(lib.km_error(emu)).decode()[:40])
            assert ffi.string(lib.km_error(emu)), "a refusal says why"
            assert lib.km_replay(emu, 0, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL, ffi.NULL,
                                 ffi.NULL) == -1
            return
        c = events(pick, max(n_files, 0), max(n_tasks, 0))
        rc = lib.km_replay(emu, len(c["t"]), *(ffi.from_buffer(f"{t}[]", c[k]) for k, t in (
            ("t", "int64_t"), ("task", "int32_t"), ("op", "uint8_t"), ("map", "int32_t"), ("page", "int64_t"),
            ("npages", "int64_t"), ("arg", "int64_t"), ("flags", "uint32_t"))))
        assert rc in (0, -1)
        event("replayed" if rc == 0 else "refused at km_replay: " + ffi.string(lib.km_error(emu)).decode()[:50])
        if rc:
            assert ffi.string(lib.km_error(emu))
        else:                                    # a trace it took leaves a consistent machine
            assert lib.km_check_invariants(emu) == 0, ffi.string(lib.km_error(emu))
            if n_files > 0:
                st_ = np.zeros(int(pages[0]), np.uint8)
                lib.km_file_page_states(emu, 0, ffi.from_buffer("uint8_t[]", st_))
                lib.km_file_page_states(emu, n_files, ffi.from_buffer("uint8_t[]", st_))   # no such file
    finally:
        lib.km_free(emu)


def test_core_says_why():
    """Named refusals: each a reason a reader can act on."""
    c = ffi.new("struct km_config *")
    c.mem_pages = 1000
    c.policy = b"stock"
    c.nr_threads = 1
    c.zram_pages = 1 << 40
    emu = lib.km_new(c, 0, ffi.NULL, 0, 1)
    assert lib.km_failed(emu) and b"zram_pages out of range" in ffi.string(lib.km_error(emu))
    lib.km_free(emu)
    c.zram_pages = 0
    pages = np.array([KM_MAX_PAGES + 1], np.int64)
    emu = lib.km_new(c, 1, ffi.from_buffer("int64_t[]", pages), 0, 1)
    assert lib.km_failed(emu) and b"file 0 of 1099511627777 pages" in ffi.string(lib.km_error(emu))
    lib.km_free(emu)
    emu = lib.km_new(c, 0, ffi.NULL, 0, 1)
    assert not lib.km_failed(emu)
    t = np.array([0, 1], np.int64); task = np.zeros(2, np.int32); op = np.array([2, 5], np.uint8)
    mp = np.zeros(2, np.int32); page = np.array([0, I64], np.int64); npg = np.array([8, 8], np.int64)
    arg = np.array([-1, 0], np.int64); fl = np.array([6, 0], np.uint32)
    rc = lib.km_replay(emu, 2, *(ffi.from_buffer(f"{ty}[]", a) for ty, a in (
        ("int64_t", t), ("int32_t", task), ("uint8_t", op), ("int32_t", mp), ("int64_t", page), ("int64_t", npg),
        ("int64_t", arg), ("uint32_t", fl))))
    assert rc == -1 and b"outside mapping 0 of 8 pages" in ffi.string(lib.km_error(emu))
    lib.km_free(emu)
