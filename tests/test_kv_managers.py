"""The KV-cache seam (kmemsim.engine.managers): a manager written outside the package, registered from
here, runs through `kmemsim compare` beside llama.cpp's own cache, and the kernel emulation does to its
pages what Linux does (mm/mlock.c: mlocked pages are unevictable, never swapped)."""
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core.trace import MapFlag, Op, PageClass
from kmemsim.core.units import page_span, pages
from kmemsim.engine import Config, Emulator, managers
from kmemsim.workload import llama
from kmemsim.workload.synth import write_model


@managers.register
class MlockedArena(managers.KVCache):
    """KV in one mlocked arena: per layer and stream, K's cells then V's, in order (no V^T)."""
    name = "test-mlocked-arena"
    description = "one mlocked arena, cells in order"

    def __init__(self, geometry, events):
        super().__init__(geometry, events)
        self.cell = geometry.cell_bytes                       # one cell's K (or V) in one layer
        self.stream = 2 * self.cell * geometry.kv_size        # K and V of one stream of one layer
        self.bytes = self.stream * geometry.n_stream * geometry.n_layer

    def create(self, t):
        n = pages(self.bytes)
        self.map = self.events.mmap(t, "KV arena (mlocked)", n, flags=MapFlag.READ | MapFlag.WRITE,
                                    cls=PageClass.KV_F16)
        self.events.event(t, Op.MLOCK, self.map, 0, n)        # mlock(2) faults it in, unevictable

    def update(self, t, layer, pos0, n, n_kv, streams):
        for s in streams:
            for half in (0, 1):                               # K, then V
                off = (layer * self.g.n_stream + s) * self.stream + half * self.stream // 2
                self.events.event(t, Op.WRITE, self.map, *page_span(off + pos0 * self.cell, n * self.cell))
                self.events.event(t, Op.READ, self.map, *page_span(off, n_kv * self.cell))


SHAPE = dict(arch="llama", n_layer=2, n_embd=512, n_ff=1024, n_head=8, n_head_kv=8, n_vocab=4096)
ARGS = ["--prompt", "512", "--decode", "8", "--ctx", "8192", "--mem", "56M", "--zram", "lz4:64M",
        "--policy", "stock"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("kvm") / "m.gguf", type="f16", progress=False, **SHAPE)


def compare(model, out, *extra):
    r = CliRunner().invoke(main, ["compare", str(model), *ARGS, *extra, "-o", str(out)])
    assert r.exit_code == 0, r.output
    return pd.read_csv(out / "summary.csv").set_index("policy").loc["stock"]


def test_a_manager_from_outside_runs_through_compare(model, tmp_path):
    # 32 MiB of KV (2 layers x 8192 cells x 1 KiB, K and V) in 56 MiB of RAM beside 18 MiB of weights:
    # llama.cpp's unlocked buffer is anonymous memory reclaim may swap (shrink_folio_list ->
    # add_to_swap; its cleared cells as zero pages to the swap zeromap), while the mlocked arena sits on
    # the unevictable list (mlock_folio; folio_evictable() is false): none of it is swapped, and reclaim,
    # left with the weights' file pages, drops and reads them again instead
    own = compare(model, tmp_path / "llamacpp")
    arena = compare(model, tmp_path / "arena", "--kv-manager", MlockedArena.name)
    assert (tmp_path / "arena" / "report.html").stat().st_size > 0
    assert own["oom_kill"] == 0 and arena["oom_kill"] == 0
    assert arena["storage_read_bytes"] > own["storage_read_bytes"]
    cfg = Config(mem="56M", zram="lz4:64M")
    for name, swapped in (("llamacpp", lambda n: n > 0), (MlockedArena.name, lambda n: n == 0)):
        tr = llama.generate(str(model), 512, 8, 8192, kv_manager=name)
        assert tr.meta["llama"][0]["kv_manager"] == name
        assert tr.meta["llama"][0]["kv_bytes"] == 32 << 20
        r = Emulator(cfg).replay(tr)
        assert swapped(r.summary["kv_swapout_pages"]), (name, r.summary["kv_swapout_pages"])


def test_an_unknown_manager_is_one_line(model, tmp_path):
    r = CliRunner().invoke(main, ["compare", str(model), *ARGS, "--kv-manager", "nope", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2
    assert "'nope' is not one of 'llamacpp'" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()
