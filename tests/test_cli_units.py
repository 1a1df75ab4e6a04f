"""Units everywhere (issue 43, item 2): every number a person reads in the text output of the README's
commands carries its unit, beside it (`4,096 pages`, `18.3 ms`, `1G`, `+0.5%`) or in its column's
header (`major_faults`), except numbers that name something (a pid, a phase such as `decode token 3`,
a swappiness); the emulator's counters each have a unit and a meaning (kmemsim/report/counters.py);
replay's --json names every counter's unit and carries the trace and the configuration; the zram
gauges are explained rather than read as 0 beside a large pswpout."""
import json
import os
import re

import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.report import counters

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = os.path.join(ROOT, "workloads", "scenarios", "small.toml")

# what may follow a number as its unit (sizes, times, ratios, and what a count counts)
UNITS = {"B", "KiB", "MiB", "GiB", "TiB", "bytes", "s", "ms", "us", "ns", "%", "pages", "folios", "events",
         "tokens", "steps", "threads", "processes", "requests", "slots", "points", "rows", "ubatches",
         "tensors", "directories", "layers", "cells", "seqs", "policies", "runs", "CPUs"} | set(counters.UNIT.values())
# words after which a number names something rather than measures it
NAMES = {"pid", "token", "ubatch", "request", "swappiness", "seed", "layer", "blk", "step"}
_NUM = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?$")
_GLUED = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?(%|[KMGT]i?B?|ms|us|ns|s|x)$")


def unitless(text: str) -> list[str]:
    """The numbers in text that have no unit, each with its line."""
    bad, header = [], None
    for line in text.splitlines():
        toks = [(m.start(), m.group()) for m in re.finditer(r"\S+", line)]
        nums = 0
        for i, (at, tok) in enumerate(toks):
            t = tok.strip(",;:()[]")
            if _GLUED.match(t) or not _NUM.match(t):
                continue
            nums += 1
            nxt = toks[i + 1][1].strip(",;:()[]") if i + 1 < len(toks) else ""
            prev = toks[i - 1][1].strip(",;:()[]").lower() if i else ""
            if nxt in UNITS or prev in NAMES or tok.startswith("["):      # [3]: a mapping's id
                continue
            if header is not None and _header_unit(header, at, at + len(tok)):
                continue
            bad.append(f"{t!r} in {line.strip()!r}")
        if not nums:
            header = line                   # a line of words heads the table below it
    return bad


def _header_unit(header, a, b):
    """The header word over columns [a, b) names a unit or what its column counts (major_faults)."""
    for m in re.finditer(r"\S+", header):
        if m.start() < b and a < m.end():
            last = m.group().split("_")[-1]
            return last in UNITS or last in {"faults", "kills", "misses", "page", "elements"}
    return False


def test_the_checker_fails_a_bare_number():
    assert unitless("pswpout 45222") and unitless("peak 12.5")
    assert not unitless("pswpout 45,222 pages (177 MiB)\nttft 18.3 ms\nmem 1G, +0.5%\npid 1000  llama")
    assert not unitless("policy  major_faults\nstock              5")
    assert unitless("policy  peak_memory\nstock           5")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("units")
    os.symlink(os.path.join(ROOT, "workloads"), d / "workloads")
    return d


def run(work, *args):
    old = os.getcwd()
    os.chdir(work)
    try:
        r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code == 0, r.output
    return r.stdout


# the README's commands, with the values its lines leave to the reader, in an order where each
# finds what an earlier one wrote
README = [
    ("model synth", ["model", "synth", "tiny.gguf", "--preset", "Qwen3-0.6B", "--layers", "4", "--type", "q4_0"]),
    ("model synth --dry-run", ["model", "synth", "x.gguf", "--preset", "Qwen3-0.6B", "--layers", "1", "--dry-run"]),
    ("workload llama", ["workload", "llama", "tiny.gguf", "--prompt", "64", "--decode", "8", "--ctx", "1024",
                        "-o", "tiny.parquet"]),
    ("workload scenario", ["workload", "scenario", SMALL, "-o", "small.parquet"]),
    ("trace info", ["trace", "info", "tiny.parquet"]),
    ("replay --mem-limit", ["replay", "tiny.parquet", "--mem-limit", "64M", "--zram", "lz4:1G"]),
    ("replay --mem", ["replay", "small.parquet", "--mem", "512M", "--zram", "lz4:256M", "--policy", "stock"]),
    ("compare", ["compare", SMALL, "--policy", "stock,is", "--mem", "1G", "-o", "cmp"]),
    ("sweep", ["sweep", "workloads/sweeps/small.toml", "--scheduler", "serial", "-o", "sw"]),
    ("export perfetto", ["export", "perfetto", "cmp", "-o", "cmp.pftrace"]),
]


@pytest.mark.parametrize("name,args", README, ids=[n for n, _ in README])
def test_readme_command_output_has_units(work, name, args):
    out = run(work, *args)
    assert out.strip()
    bad = unitless(out)
    assert not bad, f"kmemsim {' '.join(args)}: numbers without a unit:\n" + "\n".join(bad)


@pytest.mark.llama
def test_predict_output_has_units(work):
    pytest.importorskip("llama_cpp", reason="llama test: needs llama-cpp-python (make setup installs it)")
    if not (work / "tiny.gguf").exists():
        run(work, *README[0][1])
    out = run(work, "predict", "tiny.gguf", "--prompt", "16", "--decode", "2", "--ctx", "256", "--mem-limit", "60%",
              "--device", "galaxy-s25plus", "--quiet")
    bad = unitless(out)
    assert not bad, "\n".join(bad)
    assert "MiB" in out and " ms" in out


def test_every_counter_has_a_unit_and_a_meaning(work):
    """A counter added to the core (c_ext/mm.h KM_COUNTERS / KM_GAUGES) without its line in
    report/counters.py fails here."""
    from kmemsim.engine.kernel import COUNTERS, GAUGES
    names = [k for k in COUNTERS + GAUGES if k not in ("peak_resident", "peak_memory")]
    names += ["peak_resident_bytes", "peak_memory_bytes"]
    assert sorted(set(names) - set(counters.UNIT)) == []


def test_replay_json_keys_carry_units_and_the_run(work):
    if not (work / "tiny.parquet").exists():
        for _, args in README[:3]:
            run(work, *args)
    d = json.loads(run(work, "replay", "tiny.parquet", "--mem-limit", "64M", "--zram", "lz4:1G", "--json"))
    assert d["trace"]["events"] > 0 and d["trace"]["duration_s"] > 0 and d["trace"]["source"]
    assert d["config"]["mem_limit_bytes"] == 64 << 20 and d["config"]["zram_bytes"] == 1 << 30
    units = {"pages", "bytes", "s", "folios", "count"}
    assert all(units & set(k.split("_")) for k in d["counters"]), [k for k in d["counters"] if not units & set(k.split("_"))]
    c = d["counters"]
    # the cgroup alone has no node RAM: no free-page sentinel (2^61 - 1) nor watermarks
    assert "nr_free_pages" not in c and not any(k.startswith("wmark") for k in c)
    # the llama trace's process exits and frees its swap slots (exit_mmap -> free_swap_and_cache ->
    # zram_slot_free_notify): the pool is empty at the end, though pages were swapped out; the peak shows it
    assert c["pswpout_pages"] > 0 and c["zram_orig_data_size_bytes"] == 0
    assert c["zram_orig_data_size_peak_bytes"] > 0 and c["nr_swapped_peak_pages"] > 0
    assert c["zram_orig_data_size_peak_bytes"] <= c["pswpout_pages"] * 4096


def test_replay_text_explains_the_zram_gauges(work):
    if not (work / "tiny.parquet").exists():
        for _, args in README[:3]:
            run(work, *args)
    out = run(work, "replay", "tiny.parquet", "--mem-limit", "64M", "--zram", "lz4:1G")
    assert "peak over the run / at the end" in out
    assert "  nr_free_pages " not in out and "2,305,843,009,213,693,951" not in out
    with_node = run(work, "replay", "tiny.parquet", "--mem", "128M", "--zram", "lz4:1G")
    assert "  nr_free_pages " in with_node


def test_trace_info_names_a_file_mapping_a_file(work):
    if not (work / "tiny.parquet").exists():
        for _, args in README[:3]:
            run(work, *args)
    out = run(work, "trace", "info", "tiny.parquet")
    weights = next(line for line in out.splitlines() if "weights (mmap)" in line)
    assert "file tiny.gguf" in weights and "HEAP" not in weights


def test_workload_llama_says_which_time_is_which(work):
    out = run(work, "workload", "llama", "tiny.gguf", "--prompt", "16", "--decode", "2", "--ctx", "256",
              "-o", "t2.parquet") if (work / "tiny.gguf").exists() else None
    if out is None:
        run(work, *README[0][1])
        out = run(work, "workload", "llama", "tiny.gguf", "--prompt", "16", "--decode", "2", "--ctx", "256",
                  "-o", "t2.parquet")
    assert "s of trace time" in out and "generated in" in out

