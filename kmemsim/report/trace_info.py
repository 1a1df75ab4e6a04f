"""`kmemsim trace info`: what a trace contains: processes, mappings, bytes per phase, distinct pages."""
from __future__ import annotations

import re

import numpy as np

from ..core.units import PAGE_SIZE

from ..core.trace import CLASS_SHIFT, MapFlag, Op, PageClass, Trace

_DECODE = re.compile(r"^decode token \d+$")
_PREFILL = re.compile(r"^prefill ubatch \d+$")


def _phase_of_rows(tr: Trace) -> np.ndarray:
    """Index into meta['phases'] of the phase each row belongs to (the last PHASE mark of the same
    pid at or before it), -1 before the first mark."""
    c = tr.cols
    n = len(tr)
    out = np.full(n, -1, np.int64)
    for pid in np.unique(c["pid"]):
        rows = np.flatnonzero(c["pid"] == pid)
        isph = c["op"][rows] == Op.PHASE
        mark = np.where(isph, np.arange(len(rows)), -1)
        last = np.maximum.accumulate(mark)
        ph = np.where(last >= 0, c["arg"][rows][np.maximum(last, 0)], -1)
        out[rows] = ph
    return out


def info(tr: Trace) -> dict:
    c, meta = tr.cols, tr.meta
    op = c["op"]
    phases = meta.get("phases", [])
    maps = {int(m["id"]): m["name"] for m in meta.get("maps", [])}
    mm = np.flatnonzero(op == Op.MMAP)
    map_info = {}
    for i in mm:
        fl, fid = int(c["flags"][i]), int(c["arg"][i])
        map_info[int(c["map"][i])] = {
            "id": int(c["map"][i]), "name": maps.get(int(c["map"][i]), ""), "pid": int(c["pid"][i]),
            "pages": int(c["npages"][i]), "file": fid,
            "flags": "|".join(f.name for f in MapFlag if fl & f) or "PRIVATE",
            # a content class is an anonymous page's (zram compressibility); a file's pages are the file's
            "class": "FILE" if fid >= 0 else PageClass((fl >> CLASS_SHIFT) & 0xFF).name,
            "weights": bool(fl & MapFlag.WEIGHTS)}
    weight_maps = np.array([m for m, v in map_info.items() if v["weights"]], np.int64)
    ph = _phase_of_rows(tr)
    acc = (op == Op.READ) | (op == Op.WRITE)
    nbytes = c["npages"] * PAGE_SIZE
    per_phase = {}
    if acc.any():
        keys = ph[acc]
        for k in np.unique(keys):
            sel = np.flatnonzero(acc)[keys == k]
            r = op[sel] == Op.READ
            name = phases[k] if k >= 0 else "(before first phase)"
            d = per_phase.setdefault(name, {"read_bytes": 0, "write_bytes": 0, "events": 0})
            d["read_bytes"] += int(nbytes[sel][r].sum())
            d["write_bytes"] += int(nbytes[sel][~r].sum())
            d["events"] += int(len(sel))
    # weight bytes per decode step: READs of weight mappings within each "decode token k" phase,
    # counted per (pid, phase occurrence) so that requests and sessions are separate steps
    is_dec = np.array([bool(_DECODE.match(p)) for p in phases] + [False])  # index -1 -> False
    is_pre = np.array([bool(_PREFILL.match(p)) for p in phases] + [False])
    phmarks = op == Op.PHASE
    dec_marks = int(is_dec[c["arg"][phmarks]].sum()) if phmarks.any() else 0
    pre_marks = int(is_pre[c["arg"][phmarks]].sum()) if phmarks.any() else 0
    occ = np.cumsum(phmarks)        # occurrence id of the phase a row belongs to (per trace order)
    wsel = acc & (op == Op.READ) & np.isin(c["map"], weight_maps) & is_dec[ph]
    per_step = np.bincount(occ[wsel], weights=nbytes[wsel]) if wsel.any() else np.zeros(0)
    per_step = per_step[per_step > 0]
    # prefill tokens: token_embd row reads are not distinguishable from other reads, so count from
    # the generator's metadata when present, else the number of prefill phases
    prefill_tokens = sum(int(m.get("prefill_tokens", 0)) for m in meta.get("llama", [])) or pre_marks
    decode_tokens = sum(int(m.get("decode_tokens", 0)) for m in meta.get("llama", [])) or dec_marks
    distinct = {}
    for mid, v in map_info.items():
        sel = acc & (c["map"] == mid)
        if not sel.any():
            distinct[mid] = 0
            continue
        a, n = c["page"][sel], c["npages"][sel]
        order = np.argsort(a, kind="stable")
        a, e = a[order], (a + n)[order]
        e = np.maximum.accumulate(e)
        new = np.empty(len(a), bool)
        new[0] = True
        new[1:] = a[1:] >= e[:-1]
        # union length of intervals
        starts = a[new]
        ends_idx = np.append(np.flatnonzero(new)[1:] - 1, len(a) - 1)
        distinct[mid] = int((e[ends_idx] - starts).sum())
    for mid in map_info:
        map_info[mid]["distinct_pages_touched"] = distinct.get(mid, 0)
    return {
        "rows": int(len(tr)),
        "duration_ns": int(c["t"][-1] - c["t"][0]) if len(tr) else 0,
        "processes": meta.get("processes", []),
        "files": meta.get("files", []),
        "mappings": list(map_info.values()),
        "phases": per_phase,
        "prefill_tokens": int(prefill_tokens),
        "decode_tokens": int(decode_tokens),
        "decode_steps": int(len(per_step)),
        "weight_bytes_per_decode_token": int(np.median(per_step)) if len(per_step) else 0,
        "distinct_pages_touched": int(sum(distinct.values())),
        "read_bytes": int(nbytes[op == Op.READ].sum()),
        "write_bytes": int(nbytes[op == Op.WRITE].sum()),
        "llama": meta.get("llama", []),
    }


def _mib(x):
    return f"{x / 2**20:,.1f} MiB"


def format_text(d: dict, max_phases=12) -> str:
    files = {f["id"]: f["path"] for f in d.get("files", [])}
    out = [f"{d['rows']:,} events   duration {d['duration_ns'] / 1e9:.3f} s (trace time)   "
           f"read {_mib(d['read_bytes'])}   written {_mib(d['write_bytes'])}",
           f"prefill {d['prefill_tokens']:,} tokens   decode {d['decode_tokens']:,} tokens   "
           f"weight bytes per decode token {_mib(d['weight_bytes_per_decode_token'])}",
           "processes:"]
    out += [f"  pid {p['pid']}  {p['name']}" for p in d["processes"]]
    out.append("mappings:")
    for m in d["mappings"]:
        out.append(f"  [{m['id']}] pid {m['pid']} {m['name']}: {m['pages']:,} pages "
                   f"({_mib(m['pages'] * PAGE_SIZE)}), "
                   + (f"file {files.get(m['file'], m['file'])}" if m["file"] >= 0 else f"anonymous {m['class']}")
                   + f", {m['flags']}; touched {m['distinct_pages_touched']:,} pages (distinct)")
    out.append("phases (read / written):")
    items = list(d["phases"].items())
    shown = items if len(items) <= max_phases else items[:max_phases // 2] + [("...", None)] + \
        items[-max_phases // 2:]
    for name, v in shown:
        if v is None:
            out.append(f"  ... {len(items) - max_phases} more (use --json)")
            continue
        out.append(f"  {name}: {_mib(v['read_bytes'])} / {_mib(v['write_bytes'])} in {v['events']:,} events")
    return "\n".join(out)
