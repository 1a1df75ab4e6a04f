"""The emulator's counters as a person reads them: each one's group, unit and meaning (the one home
of those facts; names as in include/linux/vm_event_item.h, mmzone.h and zram's mm_stat, kmemsim's own
described in c_ext/mm.h), the text table `kmemsim replay` prints and the unit-named keys of its
--json.

Two rules the numbers follow, said where they are printed:
- zram_* and nr_swapped are gauges, what the pool holds now (zram's mm_stat), while pswpout and
  pswpin count every page ever swapped. A process that exits frees its swap slots (exit_mmap ->
  free_swap_and_cache -> zram_slot_free_notify), so after a trace whose processes end the pool is
  empty, zram_* read 0 at the end beside a large pswpout: the table shows each gauge's peak over
  the run (the timeline's largest sample) beside its value at the end.
- nr_free_pages and the watermarks describe a node's RAM (--mem); under a memory cgroup alone
  there is no node to run out of (the core keeps free pages at an unreachable sentinel, 2^61 - 1),
  so they are left out.
"""
from __future__ import annotations

import math

from ..core.units import PAGE_SIZE, human_bytes, human_seconds  # noqa: F401  (re-exported)

# group title -> [(counter, unit, meaning)], in the order printed. Units: pages (4 KiB), bytes, ns
# (printed in seconds), folios, and what else a counter counts (faults, kills, ...: `_count` in keys).
GROUPS = {
    "accesses": [
        ("accesses", "pages", "pages referenced by the trace's reads and writes"),
        ("misses", "pages", "of those, not resident: read from storage or swapped in"),
    ],
    "faults": [
        ("pgfault", "faults", "page faults"),
        ("pgmajfault", "faults", "major faults (waited for storage or swap)"),
        ("filemap_fault", "faults", "faults on file mappings (filemap_fault)"),
        ("fault_failed", "faults", "faults that found no memory (VM_FAULT_OOM)"),
        ("minor_fault_pages", "pages", "pages mapped by minor faults"),
        ("fault_around_pages", "pages", "pages mapped by fault-around (do_fault_around)"),
        ("zero_page_maps", "pages", "reads of untouched anonymous memory mapped to the zero page"),
    ],
    "page cache and storage": [
        ("pgpgin", "pages", "pages read from storage"),
        ("readahead_pages", "pages", "of those, by readahead"),
        ("file_pages_added", "pages", "pages added to the page cache"),
        ("file_pages_added_order0", "pages", "of those, in single-page folios"),
        ("file_folios_added", "folios", "folios added to the page cache"),
        ("file_pages_deleted", "pages", "page-cache pages evicted"),
        ("pgpgout", "pages", "pages written out (to swap)"),
        ("bio_reads", "bios", "read bios completed"),
        ("bio_read_ns", "ns", "their time from submit_bio to completion, summed"),
    ],
    "swap": [
        ("pswpout", "pages", "pages swapped out to zram"),
        ("pswpin", "pages", "pages swapped in from zram"),
        ("swpout_zero", "pages", "zero-filled pages swapped out (no zram data)"),
        ("swpin_zero", "pages", "zero-filled pages swapped in"),
        ("kv_swapout_pages", "pages", "the KV cache's share of swap-out"),
        ("kv_swapin_pages", "pages", "the KV cache's share of swap-in"),
        ("zram_same_reads", "pages", "same-filled pages read back from zram"),
    ],
    # gauges: the pool now (mm_stat); printed as their peak over the run and at the end
    "zram pool": [
        ("zram_orig_data_size", "bytes", "data stored, uncompressed"),
        ("zram_compr_data_size", "bytes", "data stored, compressed"),
        ("zram_mem_used_total", "bytes", "memory the pool takes"),
        ("zram_huge_pages", "pages", "pages stored uncompressed (incompressible)"),
        ("zram_same_pages", "pages", "same-filled pages (no data stored)"),
        ("nr_swapped", "pages", "swap slots in use"),
    ],
    "reclaim": [
        ("pgscan_kswapd", "pages", "scanned by kswapd"),
        ("pgscan_direct", "pages", "scanned by direct reclaim"),
        ("pgscan_memcg", "pages", "scanned by memcg reclaim"),
        ("pgscan_anon", "pages", "scanned, anonymous"),
        ("pgscan_file", "pages", "scanned, file"),
        ("pgsteal_kswapd", "pages", "reclaimed by kswapd"),
        ("pgsteal_direct", "pages", "reclaimed by direct reclaim"),
        ("pgsteal_memcg", "pages", "reclaimed by memcg reclaim"),
        ("pgsteal_anon", "pages", "reclaimed, anonymous"),
        ("pgsteal_file", "pages", "reclaimed, file"),
        ("pgactivate", "pages", "moved to an active list"),
        ("pgdeactivate", "pages", "moved to an inactive list"),
        ("pgrefill", "pages", "scanned on the active lists (shrink_active_list)"),
        ("pgrotated", "pages", "rotated to the inactive list's tail"),
        ("file_scan_busy", "pages", "file pages scanned but busy (under read or referenced elsewhere)"),
        ("reclaim_runs", "passes", "reclaim passes"),
        ("allocstall", "stalls", "allocations that entered direct reclaim"),
        ("kswapd_wake", "wake-ups", "kswapd wake-ups"),
    ],
    "workingset": [
        ("workingset_refault_file", "pages", "evicted file pages faulted back in"),
        ("workingset_refault_anon", "pages", "swapped-out anonymous pages faulted back in"),
        ("workingset_activate_file", "pages", "refaults activated (file)"),
        ("workingset_activate_anon", "pages", "refaults activated (anonymous)"),
        ("workingset_restore_file", "pages", "refaults of once-active pages (file)"),
        ("workingset_restore_anon", "pages", "refaults of once-active pages (anonymous)"),
        ("workingset_nodereclaim", "nodes", "shadow-entry nodes reclaimed"),
    ],
    "the task's own stalls": [
        ("stall_read_ios", "reads", "storage reads the task waited for"),
        ("stall_read_pages", "pages", "pages of those reads"),
        ("stall_swapin_pages", "pages", "pages swapped in while the task waited"),
        ("stall_reclaim_scanned", "pages", "pages its own reclaim scanned"),
        ("stall_reclaim_swapout", "pages", "pages its own reclaim swapped out"),
        ("stall_reclaim_file_folios", "folios", "file folios its own reclaim freed"),
        ("stall_reclaim_file_pages", "pages", "pages of those folios"),
        ("stall_reclaim_lists", "calls", "shrink_inactive_list calls of its own reclaim"),
        ("stall_reclaim_ns", "ns", "time its own reclaim took"),
        ("io_waits", "waits", "waits for I/O in flight"),
        ("io_wait_ns", "ns", "time of those waits"),
    ],
    "memory at the end": [
        ("nr_active_file", "pages", "active file LRU"),
        ("nr_inactive_file", "pages", "inactive file LRU"),
        ("nr_active_anon", "pages", "active anonymous LRU"),
        ("nr_inactive_anon", "pages", "inactive anonymous LRU"),
        ("nr_unevictable", "pages", "unevictable (mlocked)"),
        ("nr_file_pages", "pages", "page cache"),
        ("nr_anon_pages", "pages", "anonymous"),
        ("nr_weight_file_pages", "pages", "model weights in the page cache"),
        ("nr_weight_anon_pages", "pages", "model weights in anonymous memory (repacked)"),
        ("nr_kv_anon_pages", "pages", "the KV cache"),
        ("nr_page_table_pages", "pages", "page tables"),
        ("nr_kernel_pages", "pages", "kernel memory charged (page tables, xarray nodes, slab)"),
        ("nr_xa_nodes", "nodes", "page-cache xarray nodes"),
        ("memcg_usage", "pages", "charged to the memory cgroup"),
        ("nr_free_pages", "pages", "free RAM"),
        ("wmark_min", "pages", "min watermark"),
        ("wmark_low", "pages", "low watermark (kswapd wakes below it)"),
        ("wmark_high", "pages", "high watermark (kswapd sleeps above it)"),
    ],
    "peaks": [
        ("peak_resident_bytes", "bytes", "most memory resident at once (RAM, not zram)"),
        ("peak_memory_bytes", "bytes", "most memory used at once, the zram pool's included"),
    ],
    "allocation": [
        ("pgalloc", "pages", "pages allocated"),
        ("pgfree", "pages", "pages freed"),
    ],
    "kills": [
        ("oom_kill", "kills", "processes the OOM killer killed"),
        ("lmk_kill", "kills", "processes lmkd killed"),
    ],
}
UNIT = {k: u for rows in GROUPS.values() for k, u, _ in rows}
MEANING = {k: m for rows in GROUPS.values() for k, _, m in rows}
POOL_GAUGES = [k for k, _, _ in GROUPS["zram pool"]]
NODE_ONLY = ("nr_free_pages", "wmark_min", "wmark_low", "wmark_high")   # a node's RAM: --mem only
_SUFFIX = {"pages": "_pages", "bytes": "_bytes", "ns": "_s", "folios": "_folios"}    # else _count


def shown(summary: dict, has_node: bool) -> list[str]:
    """The counters worth printing for this configuration: without a node's RAM (a cgroup limit
    alone) the node's free pages and watermarks mean nothing."""
    return [k for k in UNIT if k in summary and (has_node or k not in NODE_ONLY)]


def key(name: str) -> str:
    """The counter's name with its unit, for machine output: pswpout -> pswpout_pages, io_wait_ns
    -> io_wait_s (seconds), peak_memory_bytes stays."""
    u = UNIT[name]
    base = name[:-3] if u == "ns" and name.endswith("_ns") else name
    suf = _SUFFIX.get(u, "_count")
    return base if suf[1:] in base.split("_") else base + suf


def value(name: str, v):
    """The value in the unit key() names (ns -> s)."""
    return v / 1e9 if UNIT[name] == "ns" else v


def peaks(timeline) -> dict:
    """The zram pool's gauges at their largest sample over the run: TIMELINE a Result (its core's
    array, no pandas) or a timeline DataFrame."""
    if timeline is None:
        return {}
    if hasattr(timeline, "column_max"):
        return timeline.column_max(POOL_GAUGES)
    if not len(timeline):
        return {}
    return {k: int(timeline[k].max()) for k in POOL_GAUGES if k in timeline}


def _cell(name: str, v) -> str:
    """A counter's value with its unit, and in bytes or seconds where that helps: '567,680 pages
    (2.17 GiB)'."""
    u = UNIT[name]
    if u == "ns":
        return human_seconds(v / 1e9)
    if u == "bytes":
        return f"{human_bytes(v)}" if v else "0 B"
    s = f"{int(v):,} {u}"
    if u == "pages" and v:
        s += f" ({human_bytes(v * PAGE_SIZE)})"
    return s


def text_table(summary: dict, timeline=None, has_node: bool = True) -> str:
    """The counters grouped, each value with its unit, pages also in bytes."""
    keep = set(shown(summary, has_node))
    pk = peaks(timeline)
    lines = []
    for group, rows in GROUPS.items():
        rows = [(k, m) for k, _, m in rows if k in keep]
        if not rows:
            continue
        pool = group == "zram pool"
        head = f"{group}" + ("  (gauges: peak over the run / at the end; a process's exit frees its slots)"
                             if pool else "")
        lines.append(("", head, "", ""))
        for k, m in rows:
            v = summary[k]
            cell = f"{_cell(k, pk.get(k, v))} / {_cell(k, v)}" if pool else _cell(k, v)
            lines.append((k, cell, m, ""))
            if k == "misses" and summary.get("accesses"):
                lines.append(("miss ratio", f"{100 * summary['misses'] / summary['accesses']:.2f} %",
                              "misses / accesses", ""))
    w = max(len(k) for k, *_ in lines)
    wv = max(len(c) for k, c, *_ in lines if k)
    out = []
    for k, c, m, _ in lines:
        out.append(c if not k else f"  {k:<{w}}  {c:>{wv}}  {m}")
    return "\n".join(out)


def json_counters(summary: dict, timeline=None, has_node: bool = True) -> dict:
    """{name_with_unit: value} for every counter shown, the pool's peaks as *_peak_*."""
    d = {key(k): value(k, summary[k]) for k in shown(summary, has_node)}
    for k, v in peaks(timeline).items():
        base, unit = key(k).rsplit("_", 1)
        d[f"{base}_peak_{unit}"] = v
    return d


def missing(summary: dict) -> list[str]:
    """Scalars of the summary this table does not describe (a counter added to the core without a
    line here: tests/test_cli_units.py fails on it)."""
    return [k for k, v in summary.items() if k not in UNIT and isinstance(v, (int, float))
            and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))]
