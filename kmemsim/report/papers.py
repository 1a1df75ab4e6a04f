"""What a paper reports for a setting a bundled scenario reproduces, beside kmemsim's figure for the
same setting (compare's report). One entry per scenario name; each claim names compare's column it
is read against, so the report puts the two side by side without interpretation beyond that."""
from __future__ import annotations

import pandas as pd

from .tables import header

THESIS = ("the Korean thesis \"Memory-efficient page management techniques for LLM inference in mobile "
          "system\" (abstract; docs/policies.md)")
# scenario name -> (source, [(policy, compare's column, the paper's value in that column's unit, what it says)])
CLAIMS = {
    "kv-prealloc": (THESIS, [
        ("is", "peak_memory_vs_stock_pct", -31.0, "IS+DW reduce memory usage by up to 31% against the baseline kernel "
                                                  "(journal version: 27%)"),
        ("is+dw", "peak_memory_vs_stock_pct", -31.0, "as above, both techniques")]),
    "kv-prealloc-small": (THESIS + "; this scenario is the setting in miniature (a 4-layer model)", [
        ("is", "peak_memory_vs_stock_pct", -31.0, "up to 31% less memory (journal: 27%)")]),
    "contention": (THESIS, [
        ("is+dw", "tpot_vs_stock_pct", -7.0, "7% faster under memory contention (read here as time per token)")]),
}


def beside(cmp) -> tuple[str, pd.DataFrame] | None:
    """(source, table) of the paper's figures beside ours for the comparison's scenario, or None."""
    entry = CLAIMS.get(cmp.workload.name)
    if entry is None:
        return None
    source, claims = entry
    t = cmp.table.set_index("policy")
    rows = []
    for pol, col, paper, says in claims:
        ours = float(t.loc[pol, col]) if pol in t.index else float("nan")
        rows.append({"policy": pol, "metric": header(col)[0], "paper": paper, "kmemsim": ours, "the paper says": says})
    return source, pd.DataFrame(rows)
