"""`make bench`'s whole-process rows (kmemsim/bench/whole.py) run as they are, on a small trace: row
(e)'s two processes, `kmemsim replay --policy lru --json` and libCacheSim's own LRU, read each
other's output and must miss identically (libCacheSim's LRU and the core's `lru` policy are the same
algorithm over the same requests: docs/trace-format.md). No figure is timed here."""
from kmemsim.bench import whole


def test_lru_row_runs_and_misses_as_libcachesim(tmp_path, monkeypatch):
    monkeypatch.setattr(whole, "CACHE_OBJECTS", 3000)
    monkeypatch.setattr(whole, "LOOP_OBJECTS", 4000)
    row, = whole.lru_rows([50_000], 1, seed=7, d=str(tmp_path))
    assert row["identical"], row
    assert row["accesses"][0] == 50_000
    assert 0 < row["misses"][0] < 50_000


def test_startup_row_runs(tmp_path):
    st = whole.startup_rows(1, seed=7, d=str(tmp_path))
    assert st["help_s"] > 0 and st["small_replay_s"] > 0
