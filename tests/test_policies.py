"""The thesis's policies (seeds/001): IS (Initial KV cache Swap) and DW (Deferred Weight
Reclamation), on scenarios whose outcome follows from their definition."""
import numpy as np

from kmemsim.engine.kernel import Config, Emulator, PageState
from kmemsim.core.trace import MapFlag, Op, PageClass, TraceBuilder, WriteFlag

RW = MapFlag.READ | MapFlag.WRITE


def kv_trace(kv_pages=100, used=10, reads=False):
    b = TraceBuilder("kv")
    b.process(0, 1, "llm")
    kv = b.mmap(1, 1, "kv", kv_pages, flags=RW, cls=PageClass.KV_F16)
    b.event(2, 1, Op.WRITE, kv, 0, kv_pages, 0, WriteFlag.ZERO)     # ggml_backend_buffer_clear(buf, 0)
    for t in range(used):                                             # one token's cells per page
        b.event(3 + 2 * t, 1, Op.WRITE, kv, t, 1)
        if reads:
            b.event(4 + 2 * t, 1, Op.READ, kv, 0, 20)                 # attention reads a padded n_kv
    return b.build()


def test_is_swaps_exactly_the_untouched_kv_pages():
    # IS: the clear's zero pages are swapped out at once; the 10 pages tokens write come back by
    # do_swap_page, the other 90 stay out. Before Linux 6.12 zram stores them as same-filled pages
    # (zram_same_page_write: no pool memory); from 6.12 swap_writepage() puts zero folios in the swap
    # device's zeromap (SWPOUT_ZERO) and zram never sees them.
    res = Emulator(Config(memcg_limit="1G", zram="lz4:64M", policy="is", swap_zeromap=False,
                          sample_ms=0)).replay(kv_trace(), check_invariants=True)
    s = res.summary
    assert s["pswpout"] == 100
    assert s["pswpin"] == 10
    assert s["nr_swapped"] == 90 and s["zram_same_pages"] == 90
    assert s["zram_mem_used_total"] == 0
    assert s["nr_anon_pages"] == 10
    s = Emulator(Config(memcg_limit="1G", zram="lz4:64M", policy="is", sample_ms=0)).replay(
        kv_trace(), check_invariants=True).summary
    assert (s["swpout_zero"], s["pswpout"], s["swpin_zero"], s["pswpin"]) == (100, 0, 10, 0)
    assert s["nr_swapped"] == 90 and s["zram_same_pages"] == 0 and s["zram_mem_used_total"] == 0
    assert s["nr_anon_pages"] == 10
    stock = Emulator(Config(memcg_limit="1G", zram="lz4:64M", sample_ms=0)).replay(kv_trace()).summary
    assert stock["pswpout"] == 0 and stock["nr_anon_pages"] == 100


def test_is_tail_keeps_the_unused_tail_swapped():
    # Attention reads cells up to a padded n_kv: stock IS lets those zero pages back in; is-tail
    # pages them out again after each read, so only written pages stay resident.
    plain = Emulator(Config(memcg_limit="1G", zram="lz4:64M", policy="is", sample_ms=0)).replay(
        kv_trace(reads=True)).summary
    tail = Emulator(Config(memcg_limit="1G", zram="lz4:64M", policy="is-tail", sample_ms=0)).replay(
        kv_trace(reads=True), check_invariants=True).summary
    assert plain["nr_anon_pages"] == 20
    assert tail["nr_anon_pages"] == 10


def weights_trace(weight_pages=200, other_pages=1000, passes=2):
    b = TraceBuilder("dw")
    w = b.file("/model.gguf", weight_pages)
    o = b.file("/other", other_pages)
    b.process(0, 1, "llm")
    m = b.mmap(1, 1, "weights", weight_pages, file=w, flags=MapFlag.SHARED | MapFlag.READ | MapFlag.WEIGHTS)
    t = 2
    for _ in range(passes):
        b.event(t, 1, Op.READ, m, 0, weight_pages); t += 1
        for p in range(other_pages):                 # a streaming reader beside the model
            b.event(t, 1, Op.FREAD, -1, p, 1, 0, o); t += 1
    return b.build()


def test_dw_never_reclaims_weights_while_other_pages_are_reclaimable():
    # DW: flagged folios are put back while unflagged ones can be reclaimed at that priority.
    cfg = dict(memcg_limit=400 * 4096, read_ahead_kb=0, fault_around_bytes=4096, sample_ms=0)
    dw = Emulator(Config(policy="dw", **cfg)).replay(weights_trace(), check_invariants=True)
    files = dw.files.set_index("path")
    assert files.loc["/model.gguf", "pages_deleted"] == 0
    assert files.loc["/other", "pages_deleted"] > 0
    assert (dw.page_states["/model.gguf"] & PageState.RESIDENT).all()
    stock = Emulator(Config(**cfg)).replay(weights_trace()).files.set_index("path")
    assert stock.loc["/model.gguf", "pages_deleted"] > 0


def test_dw_yields_when_only_weights_remain():
    # Last resort: with nothing else to reclaim, weights go rather than the task being OOM-killed.
    cfg = dict(memcg_limit=100 * 4096, read_ahead_kb=0, fault_around_bytes=4096, sample_ms=0)
    res = Emulator(Config(policy="dw", **cfg)).replay(weights_trace(300, 10, 1), check_invariants=True)
    assert res.summary["oom_kill"] == 0
    assert res.files.set_index("path").loc["/model.gguf", "pages_deleted"] > 0


def test_dw_strength_bounds_the_deferral():
    # policy_param N > 0: a flagged folio is put back at most N times.
    cfg = dict(memcg_limit=400 * 4096, read_ahead_kb=0, fault_around_bytes=4096, sample_ms=0)
    weak = Emulator(Config(policy="dw", policy_param=1, **cfg)).replay(weights_trace(passes=3)).files
    strict = Emulator(Config(policy="dw", **cfg)).replay(weights_trace(passes=3)).files
    w = lambda f: int(f.set_index("path").loc["/model.gguf", "pages_deleted"])
    assert w(weak) > w(strict) == 0
