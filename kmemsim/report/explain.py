"""What each policy's difference from the stock kernel means, in two lines a person reads (`kmemsim
demo`): the first the numbers (memory, storage reads, TTFT against stock), the second the mechanism
behind them, chosen from the run's own counters: whether reclaim ran at all, how much IS swapped
out, whether weights were re-read. docs/policies.md gives the long form."""
from __future__ import annotations

from ..core.units import PAGE_SIZE

MiB = 2**20


def _pct(a, b):
    return f"{(a / b - 1) * 100:+.1f}%" if b else "n/a"


def _scanned(summary) -> int:
    """Pages reclaim looked at (kswapd, direct and memcg): 0 means no memory pressure at all."""
    return sum(int(summary.get(k, 0)) for k in ("pgscan_kswapd", "pgscan_direct", "pgscan_memcg"))


def _same(a, b) -> bool:
    keys = ("peak_memory_bytes", "mean_memory_bytes", "storage_read_bytes", "swap_out_bytes", "ttft_s", "tpot_s")
    return all(a[k] == b[k] for k in keys)


def lines(cmp) -> list[str]:
    """Two lines per policy other than stock (nothing when stock is not among them)."""
    rows = {r["policy"]: r for r in cmp.table.to_dict("records")}
    runs = {r.policy: r for r in cmp.runs}
    if "stock" not in rows:
        return []
    s, ss = rows["stock"], runs["stock"].summary
    out = []
    for pol, r in rows.items():
        if pol == "stock":
            continue
        summ = runs[pol].summary
        out.append(f"{pol} vs stock: memory peak {_pct(r['peak_memory_bytes'], s['peak_memory_bytes'])}, "
                   f"mean {_pct(r['mean_memory_bytes'], s['mean_memory_bytes'])}; storage reads "
                   f"{r['storage_read_bytes'] / MiB:,.0f} MiB vs {s['storage_read_bytes'] / MiB:,.0f} MiB; "
                   f"TTFT {r['ttft_s'] * 1e3:,.1f} ms vs {s['ttft_s'] * 1e3:,.1f} ms")
        twin = next((q for q in rows if q != pol and list(rows).index(q) < list(rows).index(pol)
                     and _same(rows[q], r)), None)
        has_is, has_dw = pol in ("is", "is-tail", "is+dw"), pol in ("dw", "is+dw")
        why = []
        if twin and has_dw and _scanned(summ) == 0:
            why.append(f"the same as {twin}: nothing was reclaimed at this size (0 pages scanned), and DW only "
                       "changes which pages reclaim takes, so without memory pressure it changes nothing")
        elif twin and has_dw:
            why.append(f"the same as {twin}: reclaim ran ({_scanned(summ):,} pages scanned) but never reached the "
                       "weights DW defers, so deferring them changed nothing")
        if has_is and not (twin and twin in ("is", "is-tail", "is+dw")):
            why.append(f"IS swapped the cleared, unused KV cells to zram at once "
                       f"({summ['pswpout'] * PAGE_SIZE / MiB:,.0f} MiB out, zero pages cost zram nothing): less memory; prompts fault their cells back "
                       f"({summ['pswpin'] * PAGE_SIZE / MiB:,.0f} MiB in): slower TTFT"
                       + (", and the room it made left reclaim fewer pages to re-read" if _scanned(ss) and
                          r["storage_read_bytes"] < s["storage_read_bytes"] else ""))
        if has_dw and not twin:
            why.append(f"DW had reclaim take other pages before the model's weights ({_scanned(summ):,} pages "
                       "scanned), so fewer weights were re-read from storage")
        if not why:
            why.append("no mechanism of this policy is described here; docs/policies.md has them all")
        out.append("  " + "; ".join(why))
    return out
