"""`kmemsim compare` and `kmemsim demo`: every policy on one trace, the outputs (tidy tables with their
keys, each figure in PNG, SVG and PDF with the table it draws), the report in a browser."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from kmemsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "workloads" / "scenarios" / "kv-prealloc-small.toml"
FIGURES = ["memory", "storage_reads", "token_latency", "memory_per_process", "process_traffic"]
OUTPUTS = ["summary.csv", "summary.parquet", "summary.md", "phases.csv", "timeline.parquet", "events.csv",
           "report.html"] + [f"{f}.{x}" for f in FIGURES for x in ("png", "svg", "pdf", "csv", "parquet")]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp") / "out"
    r = CliRunner().invoke(main, ["compare", str(SMALL), "--policy", "stock,is,dw,is+dw", "--mem", "2G",
                                  "--zram", "zstd:1G", "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out, r.output


def test_compare_writes_every_output(compared):
    out, stdout = compared
    for f in OUTPUTS:
        assert (out / f).stat().st_size > 0, f
    assert not [p for p in out.iterdir() if p.name.startswith(".")]        # no temp files left behind
    df = pd.read_csv(out / "summary.csv")
    for col in ["policy", "peak_memory_bytes", "storage_read_bytes", "major_faults", "swap_out_bytes",
                "ttft_s", "tpot_s"]:
        assert col in df.columns
    assert df["policy"].tolist() == ["stock", "is", "dw", "is+dw"]
    assert (df["ttft_s"] > 0).all() and (df["tpot_s"] > 0).all()
    assert "policy" in stdout and "is+dw" in stdout
    html = (out / "report.html").read_text()
    assert html.count("<svg") == len(FIGURES) and "galaxy-s25plus" in html
    assert "peak_memory_bytes" not in html and "peak memory (MiB)" in html     # units in the headers
    assert "<pre>" not in html                   # configuration and device as tables, not JSON dumps
    # at 2G nothing is reclaimed: the report and the command's output say why DW equals stock
    assert "What the differences mean" in html and "without memory pressure it changes nothing" in html
    assert "dw vs stock:" in stdout


def test_summary_is_tidy_with_its_keys(compared):
    # issue 43, item 5: one row per (scenario, device, memory, zram, policy), those as columns, units
    # in the column names; Parquet and CSV the same table
    out = compared[0]
    df = pd.read_parquet(out / "summary.parquet")
    pd.testing.assert_frame_equal(df, pd.read_csv(out / "summary.csv"), check_dtype=False)
    keys = ["scenario", "device", "mem_bytes", "zram_algo", "zram_bytes", "policy"]
    assert not df.duplicated(keys).any()
    row = df.iloc[0]
    assert (row.scenario, row.device, row.mem_bytes, row.zram_algo, row.zram_bytes) == \
        ("kv-prealloc-small", "galaxy-s25plus", 2 << 30, "zstd", 1 << 30)
    for c in df.columns:
        assert c in ("scenario", "device", "zram_algo", "lru", "policy", "workload", "swappiness", "memcg_limit_bytes",
                     "major_faults", "oom_kill", "lmk_kill") or c.endswith(("_bytes", "_s", "_pct")), c


def test_every_figure_has_its_data(compared):
    out = compared[0]
    summ = pd.read_csv(out / "summary.csv").set_index("policy")
    mem = pd.read_parquet(out / "memory.parquet")
    classes = [c for c in mem.columns if c.endswith("_bytes") and c not in
               ("memory_bytes", "free_bytes", "swapped_bytes", "limit_bytes") and not c.startswith("wmark")]
    assert (mem[classes].sum(axis=1) == mem.memory_bytes).all()
    assert (mem.limit_bytes == 2 << 30).all()
    # the peak the figure draws is the summary's (the core's peak is sampled at every event, the
    # timeline every 10 ms: never above it)
    for p, d in mem.groupby("policy"):
        assert 0 < d.memory_bytes.max() <= summ.loc[p, "peak_memory_bytes"]
    reads = pd.read_parquet(out / "storage_reads.parquet")
    for p, d in reads.groupby("policy"):
        assert d.storage_read_bytes.iloc[-1] <= summ.loc[p, "storage_read_bytes"]
    ev = pd.read_csv(out / "events.csv")
    # kv-prealloc-small: two LLM requests (its [[llm.session]]) and the apps' launches and switches
    assert (ev.kind == "request").sum() == 2 and (ev.kind == "switch").sum() >= 2
    rss = pd.read_parquet(out / "memory_per_process.parquet")
    assert set(rss.process) == {"llm", "Gallery", "Messenger"}
    # kv-prealloc-small: the LLM maps its 256 MiB KV buffer (16k cells) and clears it at creation: under
    # stock, at 2G, all of it stays resident (ggml_backend_buffer_clear writes every page)
    llm = rss[(rss.policy == "stock") & (rss.process == "llm")]
    assert llm.rss_bytes.max() >= 256 << 20
    pp = pd.read_csv(out / "process_traffic.csv")
    assert set(pp.process) == {"llm", "Gallery", "Messenger"}
    # each process's counters add up to the run's (vmstat.c counts per task and in total)
    by = pp.groupby("policy")[["storage_read_bytes", "swap_out_bytes"]].sum().reindex(summ.index)
    assert (by.storage_read_bytes == summ.storage_read_bytes).all() and (by.swap_out_bytes == summ.swap_out_bytes).all()


def test_kills_are_markers(tmp_path):
    # at 350M with a 16M zram the stock kernel runs out of memory when the LLM's request comes (its
    # weights and the apps' pages beside the 256 MiB KV buffer): out_of_memory() kills the app with the
    # highest badness (oom_badness(): rss + swap + page tables, scaled by oom_score_adj), Gallery
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["compare", str(SMALL), "--policies", "stock", "--mem", "350M", "--zram", "zstd:16M",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    ev = pd.read_csv(out / "events.csv")
    kills = ev[ev.kind == "kill"]
    assert len(kills) == pd.read_csv(out / "summary.csv").oom_kill.iloc[0] >= 1
    assert (kills.label == "Gallery killed by the OOM killer").all() and (kills.policy == "stock").all()
    assert 'id="markers-kill"' in (out / "memory.svg").read_text()
    assert "Gallery killed by the OOM killer" in (out / "report.html").read_text()


def test_memcg_limit_line_and_no_node_sentinels(tmp_path):
    # under a memory cgroup limit the group reclaims at memory.max (mem_cgroup_charge -> try_charge ->
    # try_to_free_mem_cgroup_pages), not at the node's watermarks: the figure draws the limit and no
    # watermark, and the data has no node free memory (the emulator's gauge is a sentinel there)
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["compare", str(SMALL), "--policies", "stock", "--memcg-limit", "600M",
                                  "--zram", "zstd:1G", "-o", str(out)])
    assert r.exit_code == 0, r.output
    mem = pd.read_parquet(out / "memory.parquet")
    assert (mem.limit_bytes == 600 << 20).all() and mem.free_bytes.isna().all() and mem.wmark_low_bytes.isna().all()
    assert 0 < mem.memcg_usage_bytes.max() <= 600 << 20
    svg = (out / "memory.svg").read_text()
    assert "memory limit: memcg limit" in svg and 'id="memory-limit"' in svg and "watermark-low" not in svg
    assert pd.read_csv(out / "summary.csv").memcg_limit_bytes.iloc[0] == 600 << 20


def test_processes_sharing_a_name_stay_apart(tmp_path):
    # small.toml's random switching runs two Gallery processes (pids 10001 and 10003): each keeps its own
    # series, named with its pid
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["compare", str(ROOT / "workloads" / "scenarios" / "small.toml"), "--policies", "stock",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    names = set(pd.read_parquet(out / "memory_per_process.parquet").process)
    assert {"Gallery (10001)", "Gallery (10003)", "Music", "llm"} <= names
    assert set(pd.read_csv(out / "process_traffic.csv").process) == names


def test_coinciding_policies_both_show(compared):
    # at 2G nothing is reclaimed: DW defers reclaim of weights, so without reclaim it changes nothing
    # (docs/policies.md) and dw's storage reads equal stock's. Its line is drawn dashed and the legend
    # says which policy it coincides with.
    out = compared[0]
    reads = pd.read_parquet(out / "storage_reads.parquet")
    a, b = (reads[reads.policy == p].storage_read_bytes.to_numpy() for p in ("stock", "dw"))
    assert np.array_equal(a, b)
    svg = (out / "storage_reads.svg").read_text()
    assert "dw (same as stock: drawn dashed)" in svg
    assert 'id="line-dw"' in svg and 'id="line-stock"' in svg


def test_is_uses_less_memory_than_stock_on_kv_prealloc(compared):
    # The thesis (seeds/001, "Memory-efficient page management techniques for LLM inference in mobile
    # system"): Initial KV cache Swap sends the KV cells not yet used to zram, where the zero pages
    # cost almost nothing, so memory (resident + zram pool) drops against the stock kernel.
    df = pd.read_csv(compared[0] / "summary.csv").set_index("policy")
    assert df.loc["is", "peak_memory_bytes"] < df.loc["stock", "peak_memory_bytes"]
    assert df.loc["is", "mean_memory_bytes"] < df.loc["stock", "mean_memory_bytes"]
    assert df.loc["is+dw", "peak_memory_bytes"] < df.loc["stock", "peak_memory_bytes"]
    assert df.loc["is", "swap_out_bytes"] > 0 and df.loc["stock", "swap_out_bytes"] == 0


@pytest.mark.parametrize("args,msg", [
    (["--policies", "stock,nope"], "'--policies': 'nope' is not one of 'stock'"),   # the old name, as typed
    (["--device", "nokia-3310"], "unknown device"),
    (["--mem", "lots"], "cannot read"),
    (["--zram", "brotli:1G"], "--zram"),
    (["--mem", "1G", "--memcg-limit", "1G"], "not both"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["compare", str(SMALL), "-o", str(tmp_path / "o"), *args])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("kmemsim: ") and msg in lines[0], r.output
    assert not (tmp_path / "o").exists()


def test_missing_workload_is_input_error(tmp_path):
    r = CliRunner().invoke(main, ["compare", str(tmp_path / "none.toml"), "-o", str(tmp_path / "o")])
    assert r.exit_code == 2 and "no such file" in r.output


def _chromium():
    for n in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(n)
        if p:
            return p
    return None


def test_report_renders_in_headless_chromium(compared, tmp_path):
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium missing in CI (.ci/setup-system.sh installs it)")
        pytest.skip(reason="chromium not installed (apt-get install chromium); CI installs it and must not skip")
    shot = tmp_path / "shot.png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1200,2400",
           f"--screenshot={shot}", (compared[0] / "report.html").as_uri()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert shot.exists(), r.stderr[-2000:]
    import matplotlib.image as mpimg
    img = mpimg.imread(str(shot))[..., :3]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1100
    nonwhite = (img < 0.9).any(axis=2)
    colored = (img.max(axis=2) - img.min(axis=2)) > 0.25        # plot colours, not black text
    assert nonwhite.mean() > 0.05, nonwhite.mean()
    assert colored.mean() > 0.01, colored.mean()
    # the plots sit below the summary table: the lower half of the page is not blank
    assert nonwhite[img.shape[0] // 3:].mean() > 0.03

    # the SVG's elements as Chromium lays them out (issue 43): in every figure the legend lies outside
    # every axes; the memory figure has a limit line in each policy's panel and the request and
    # app-switch markers; the tables' headers carry their units
    page = tmp_path / "check.html"
    page.write_text((compared[0] / "report.html").read_text().replace("</body>", CHECK + "</body>"))
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--no-first-run", f"--user-data-dir={tmp_path / 'profile2'}", "--window-size=1200,2400",
                        "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=90)
    found = json.loads(r.stdout.split('<pre id="kmemsim-check">')[1].split("</pre>")[0])
    assert set(found["figures"]) == {f"figure-{f}" for f in FIGURES}, found
    for name, f in found["figures"].items():
        assert f["legend"] is not None and f["axes"], (name, f)
        for ax in f["axes"]:
            assert not _overlap(f["legend"], ax), (name, f["legend"], ax)
    mem = found["figures"]["figure-memory"]
    assert mem["limit_lines"] == 4 and mem["axes_count"] == 4            # one per policy's panel
    assert mem["markers-request"] >= 4 and mem["markers-switch"] >= 4
    for a, line in zip(mem["axes"], mem["limit_boxes"]):
        assert a[0] - 1 <= line[0] and line[2] <= a[2] + 1 and a[1] <= line[1] <= a[3]   # inside its panel
    assert "peak memory (MiB)" in found["headers"] and "ttft (ms)" in found["headers"]


# Run in the page once it has laid out: each figure's boxes (left, top, right, bottom) in CSS pixels.
CHECK = """<pre id="kmemsim-check"></pre><script>
addEventListener('load', () => {
  const box = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const out = {figures: {}, headers: [...document.querySelectorAll('th')].map(t => t.textContent.trim())};
  for (const fig of document.querySelectorAll('figure')) {
    const all = s => [...fig.querySelectorAll(s)];
    const leg = all('[id="legend"]');
    const axes = all('[id^="axes-"]');
    const f = {legend: leg.length ? box(leg[0]) : null, axes: axes.map(box), axes_count: axes.length,
               limit_lines: all('[id="memory-limit"]').length, limit_boxes: all('[id="memory-limit"]').map(box)};
    for (const k of ['request', 'switch', 'kill'])
      f['markers-' + k] = all('[id="markers-' + k + '"] use, [id="markers-' + k + '"] path').length;
    out.figures[fig.id] = f;
  }
  document.getElementById('kmemsim-check').textContent = JSON.stringify(out);
});
</script>"""


def _overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_demo_prints_the_comparison():
    r = CliRunner().invoke(main, ["demo", "--mem", "2G"])
    assert r.exit_code == 0, r.output
    for p in ("stock", "is", "dw", "is+dw"):
        assert any(line.startswith(p + " ") for line in r.output.splitlines())
    assert "kv-prealloc-small" in r.output


def _tables(out):
    """Each table the demo prints: {policy: the row's figures}."""
    tables, cur = [], None
    for line in out.splitlines():
        if line.startswith("policy "):
            cur = {}
            tables.append(cur)
        elif cur is not None and line and not line.startswith(" ") and " vs stock:" not in line:
            name, _, rest = line.partition(" ")
            if name in ("stock", "is", "dw", "is+dw"):
                cur[name] = rest.split()
    return tables


def test_demo_picks_sizes_where_policies_differ_and_says_why(tmp_path):
    # issue 43, item 6: at the first size (no pressure) IS saves memory and DW changes nothing, and
    # the demo says why (nothing was reclaimed); at the second every policy differs from every other
    r = CliRunner().invoke(main, ["demo"])
    assert r.exit_code == 0, r.output
    roomy, tight = _tables(r.output)
    assert roomy["dw"] == roomy["stock"] and roomy["is+dw"] == roomy["is"] and roomy["is"] != roomy["stock"]
    rows = list(tight.values())
    assert len(rows) == 4 and all(a != b for i, a in enumerate(rows) for b in rows[i + 1:]), tight
    text = r.output
    assert "dw vs stock:" in text and "nothing was reclaimed at this size (0 pages scanned)" in text
    assert "DW had reclaim take other pages" in text and "IS swapped" in text
    # two lines per policy besides stock, at each size
    assert text.count(" vs stock: memory peak") == 6
    # the closing hint runs as printed from any directory
    hint = [x for x in text.splitlines() if x.startswith("full report: ")][0].removeprefix("full report: ")
    args = hint.split()[1:]
    args[args.index("DIR")] = str(tmp_path / "report")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "kmemsim.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "report" / "report.html").exists()
