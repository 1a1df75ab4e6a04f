"""Traces larger than memory (issue 39): a trace replayed as its first events and then batch after
batch, the core's state carried across (Emulator.replay_batches, km_replay_continues), gives exactly
what one replay of the whole gives: every counter, the timeline, per phase, per process, the files
and every page's state."""
import numpy as np
import pytest

from kmemsim.core.errors import InputError
from kmemsim.core.trace import Op
from kmemsim.engine.kernel import Config, Emulator
from kmemsim.workload.libcachesim_io import ids_to_trace


def _split(tr, cuts):
    """The trace's first cuts[0] events as a trace, the rest as batches of its columns."""
    from kmemsim.core.trace import Trace
    head = Trace({k: v[:cuts[0]] for k, v in tr.cols.items()}, tr.meta, validated=True)
    bounds = list(cuts) + [len(tr)]
    return head, [{k: v[a:b] for k, v in tr.cols.items()} for a, b in zip(bounds, bounds[1:])]


def _same(a, b):
    assert a.summary == b.summary
    for k in ("timeline", "per_phase", "per_process", "files", "kills"):
        x, y = getattr(a, k), getattr(b, k)
        assert x.equals(y), k
    assert a.page_states.keys() == b.page_states.keys()
    for k in a.page_states:
        np.testing.assert_array_equal(a.page_states[k], b.page_states[k])


@pytest.mark.parametrize("cfg", [dict(mem="2M", policy="lru"),
                                 dict(mem="3M", policy="stock", swappiness=60),
                                 dict(memcg_limit="2M", zram="lz4:8M", policy="stock"),
                                 dict(mem="3M", policy="stock", lru="mglru")])
def test_batches_equal_one_replay(cfg):
    ids = np.random.default_rng(7).zipf(1.2, 30000) % 3000
    tr = ids_to_trace(ids, source="batches")
    whole = Emulator(Config(**cfg)).replay(tr)
    head, batches = _split(tr, [2 + 5000, 2 + 5001, 2 + 17000, 2 + 17000])   # an empty batch too
    _same(Emulator(Config(**cfg)).replay_batches(head, batches), whole)


def test_batches_from_a_generator_in_bounded_pieces():
    """Batches may come from a generator (made on the fly, never all in memory)."""
    ids = np.random.default_rng(8).integers(0, 5000, 40000)
    tr = ids_to_trace(ids, source="gen")
    whole = Emulator(Config(mem="8M", policy="lru")).replay(tr)
    head, _ = _split(tr, [2])
    gen = ({k: v[a:a + 7000] for k, v in tr.cols.items()} for a in range(2, len(tr), 7000))
    _same(Emulator(Config(mem="8M", policy="lru")).replay_batches(head, gen), whole)


def test_bad_batches_are_refused():
    tr = ids_to_trace(np.arange(100), source="bad")
    head, (b,) = _split(tr, [52])
    emu = lambda: Emulator(Config(mem="1M", policy="lru"))  # noqa: E731
    with pytest.raises(InputError, match="go backwards"):
        emu().replay_batches(head, [{**b, "t": b["t"][::-1].copy()}])
    with pytest.raises(InputError, match="READ and WRITE"):
        emu().replay_batches(head, [{**b, "op": np.full(len(b["t"]), Op.MMAP, np.uint8)}])
    with pytest.raises(InputError, match="does not create"):
        emu().replay_batches(head, [{**b, "map": b["map"] + 5}])
    with pytest.raises(InputError, match="past the end"):
        emu().replay_batches(head, [{**b, "page": b["page"] + 1000}])
