"""`kmemsim predict` against the live kernel on real llama.cpp (kmemsim/validate.py): a small synthetic
f16 llama (4 layers, 143 MiB) run by llama-cpp-python under the recorder at two memory limits, with
`storage_read_bytes` (model-file pages added to the page cache, readahead included) held to 10%.

200% of the model: the model, the engine and the context all fit; what is read is the GGUF header
through stdio's 4 KiB fread() (gguf_init_from_file), then the whole file through MAP_POPULATE with
FADV_SEQUENTIAL read-around and async readahead. 120%: the cgroup is full during load and prefill; the
prediction misses by ~+30% (docs/validation.md names the mechanism), so that case is an expected failure
until the emulator's model of it is fixed -- it must not silently start passing without the doc changing.

Plus input checks of `kmemsim validate` / `kmemsim predict` (no root needed)."""
import os

import pytest
from click.testing import CliRunner

from kmemsim.cli import main

SHAPE = dict(type="f16", n_layer=4, n_embd=768, n_ff=2048, n_head=12, n_head_kv=4, n_vocab=32000)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    from kmemsim import synth
    p = tmp_path_factory.mktemp("model") / "small-f16.gguf"
    return synth.write_model(str(p), progress=False, **SHAPE)


def _needs_live():
    if os.geteuid() != 0:
        pytest.skip("live test: needs root (runs in CI)")
    pytest.importorskip("llama_cpp")


@pytest.mark.live
@pytest.mark.parametrize("limit", [
    "200%",
    pytest.param("120%", marks=pytest.mark.xfail(
        strict=True, reason="under pressure during load/prefill the emulator re-reads ~30% too much: "
                            "reclaim order of populated large folios (docs/validation.md)")),
])
def test_storage_reads_within_10_percent(small_model, tmp_path, limit):
    _needs_live()
    from kmemsim import validate as V
    df = V.validate(small_model, 32, 4, 256, limit, str(tmp_path / "out"))
    assert (tmp_path / "out" / "validation.csv").exists() and (tmp_path / "out" / "validation.md").exists()
    row = df[df.metric == "storage_read_bytes"].iloc[0]
    assert row.live_complete, "the reference run did not complete"
    assert row.measured >= os.path.getsize(small_model) * 0.9      # the live run read the model
    assert abs(row.rel_error) <= 0.10, (row.predicted, row.measured)


def test_validate_rejects_bad_input(small_model, tmp_path):
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "missing.gguf"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and r.output.startswith("kmemsim: ") and len(r.output.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["validate", small_model, "--mem-limit", "abc%", "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--mem-limit" in r.output
    r = CliRunner().invoke(main, ["validate", small_model, "--prompt", "600", "--ctx", "512",
                                  "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "--ctx" in r.output
    r = CliRunner().invoke(main, ["predict", small_model, "--prompt", "8", "--decode", "-1", "--ctx", "64",
                                  "--mem-limit", "1G"])
    assert r.exit_code == 2 and "--decode" in r.output


def test_parse_limits():
    from kmemsim import validate as V
    assert V.parse_limits("50%,1G", 8192 * 10) == [("50%", 40960), ("1G", 1 << 30)]
    assert V.rel_error(110, 100) == pytest.approx(0.10)
    assert V.within("storage_read_bytes", 109, 100) and not V.within("storage_read_bytes", 111, 100)
    assert V.within("swap_out_bytes", 0, 4096)          # no swapping on either side
