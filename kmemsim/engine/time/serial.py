"""The time model: seconds = counts x device profile, per phase.

Counts come from the emulator (per-phase counters of kmemsim.engine.kernel.Result); seconds come from a
kmemsim.engine.time.device.Device. The two stay apart: nothing here changes what the emulator counts.

Stall time of a phase (what the waiting task pays; kswapd's work is not charged to anyone):

    stall_read_ios x latency(S) + stall_read_pages x 4096 / bandwidth(S)      S = pages/ios x 4096
        (or, for a replay that timed its reads with the same profile (Device.task_costs, as
        kmemsim.validate.predict runs it), io_wait_ns: what its clock waited for reads, a bio queued behind
        others and a folio still under async readahead included, which the formula cannot see)
  + (stall_swapin_pages - zram_same_reads) x 4096 / zram decompress speed
  + (zram_same_reads + swpin_zero) x zero_page_us    (a zero page from zram or the swap zeromap:
                                                      a fault and a clear)
  + stall_reclaim_swapout x swap_page_us (measured; else 4096 / zram compress speed)
  + stall_reclaim_file_folios x file_folio_us + stall_reclaim_file_pages x file_page_us
  + stall_reclaim_lists x list_us             (shrink_inactive_list() calls of the task's reclaim)
  + stall_reclaim_scanned x scan_us_per_page
  + (pgfault - pgmajfault) x minor_fault_us   (the task's minor faults: first touches of anonymous
                                               pages, mappings of cached file pages)

Compute time of a llama_decode step (a prefill ubatch of n tokens, or a decode step of n = paths
tokens) that reads W weight bytes: the device's kmemsim.engine.time.compute.TimeModel, as the trace's own
clock, W / weight_gbps + MACs / matmul_gmac_s, with MACs = n x (MACs per token) + outputs x (MACs
per output row): the last layer's FFN and the output head work on the output rows only (one per
sequence in the prompt's last ubatch, every token in decode). MACs per token and per output come
from the session that made the trace (its meta["llama"], by pid); a trace without them is charged
W / weight_gbps. Attention over the KV cache and the sampling are not charged (small next to the
weights at the context lengths used here).

Phases: the trace's PHASE marks carry names shared by every request ("decode token 3" happens in
each request) and the core keeps one current phase for all processes. `split_phases` rewrites a
copy of the trace so that every mark is its own phase and each event is charged to the latest mark
of its own process (it re-marks where processes interleave; a `foreground X` mark ends each
`switch to X` burst). The emulator then counts
per occurrence, and per process.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...core.units import PAGE_SIZE

from ...core.trace import CLASS_SHIFT, MapFlag, Op, PageClass, Trace

STALL_COUNTERS = ["stall_read_ios", "stall_read_pages", "stall_swapin_pages", "zram_same_reads", "swpin_zero",
                  "stall_reclaim_swapout", "stall_reclaim_scanned", "stall_reclaim_file_folios", "stall_reclaim_file_pages",
                  "stall_reclaim_lists"]
_REQ = re.compile(r"^(request \d+)( session .*)?$")


# ------------------------------------------------------------------------------------------------
# Phase occurrences

def _kind(name: str) -> str:
    if name.endswith(" end"):
        return "end"
    if name.startswith("prefill ubatch"):
        return "prefill"
    if name.startswith("decode token"):
        return "decode"
    if _REQ.match(name):
        return "request"
    if name.startswith("switch to "):
        return "switch"
    if name.startswith("foreground "):
        return "foreground"
    if name.startswith("create session"):
        return "create"
    if name.startswith("launch "):
        return "launch"
    if name == "load":
        return "load"
    return "other"


def split_phases(tr: Trace) -> tuple[Trace, pd.DataFrame]:
    """A copy of `tr` whose phases are occurrences charged per process, and the occurrence table
    (index = phase id in the copy): t, pid, name, kind, request (label of the enclosing request, or
    ""), ubatch (index of a prefill ubatch inside its request), weight_bytes (weight pages read),
    macs_per_token and macs_per_output (of the llama session of that pid, 0 if none)."""
    c = tr.cols
    names = list(tr.meta.get("phases", []))
    op, pid, t, arg = c["op"], c["pid"], c["t"], c["arg"]
    cols = {k: v.copy() for k, v in c.items()}
    is_ph = op == Op.PHASE

    # "foreground X": the first event of X's process after its switch-in burst (same timestamp)
    ph_idx = np.flatnonzero(is_ph)
    ins_pos, ins_t, ins_pid, ins_name = [], [], [], []
    if len(ph_idx):
        ph_names = [names[int(a)] for a in arg[ph_idx]]
        by_pid = {}
        for i, n in zip(ph_idx, ph_names):
            if not n.startswith("switch to "):
                continue
            p = int(pid[i])
            if p not in by_pid:
                by_pid[p] = (np.flatnonzero(pid == p), np.flatnonzero(is_ph & (pid == p)))
            rows, marks = by_pid[p]
            nxt_mark = marks[np.searchsorted(marks, i, side="right")] if (marks > i).any() else len(op)
            cand = rows[(rows > i) & (rows < nxt_mark)]
            cand = cand[t[cand] > t[i]]
            if len(cand):
                ins_pos.append(int(cand[0])); ins_t.append(int(t[cand[0]])); ins_pid.append(p)
                ins_name.append("foreground " + n[len("switch to "):])
    # new phase table: original marks in order, inserted ones where they go
    occ_src = np.concatenate([ph_idx, np.asarray(ins_pos, np.int64)]).astype(np.float64)
    occ_src[len(ph_idx):] -= 0.5        # an inserted mark precedes the row it is inserted at
    occ_names = [names[int(a)] for a in arg[ph_idx]] + ins_name
    order = np.argsort(occ_src, kind="stable")
    new_id = np.empty(len(order), np.int64)
    new_id[order] = np.arange(len(order))
    occ_names = [occ_names[i] for i in order]
    arg = arg.copy()
    arg[ph_idx] = new_id[:len(ph_idx)]
    if ins_pos:
        ins = np.asarray(ins_pos)
        row = {k: v[ins].copy() for k, v in cols.items()}
        row["op"][:] = Op.PHASE
        row["map"][:] = -1
        row["page"][:] = 0
        row["npages"][:] = 0
        row["flags"][:] = 0
        row["arg"] = new_id[len(ph_idx):]
        cols = {k: np.insert(v if k != "arg" else arg, ins, row[k]) for k, v in cols.items()}
    else:
        cols["arg"] = arg
    cols = _attribute(cols)
    meta = dict(tr.meta)
    meta["phases"] = [f"#{i} {n}" for i, n in enumerate(occ_names)]
    out = Trace(cols, meta)

    # occurrence table
    op, pid, t, arg = cols["op"], cols["pid"], cols["t"], cols["arg"]
    is_ph = op == Op.PHASE
    first = {}
    for i in np.flatnonzero(is_ph):          # one row per phase mark (few): first mark of each id
        first.setdefault(int(arg[i]), i)
    rows = np.array([first[k] for k in range(len(occ_names))], np.int64)
    occ = pd.DataFrame({"t": t[rows], "pid": pid[rows], "name": occ_names})
    occ["kind"] = [_kind(n) for n in occ_names]
    req, cur, ub, k = [], {}, [], {}
    for p, n, kd in zip(occ["pid"], occ["name"], occ["kind"]):
        p = int(p)
        if kd in ("request", "create"):
            cur[p] = n
            k[p] = 0
        elif kd in ("end", "load", "switch", "launch"):
            cur[p] = ""
        r = cur.get(p, "") if kd in ("request", "create", "prefill", "decode") else ""
        req.append(r)
        if kd == "prefill" and r:
            ub.append(k[p]); k[p] += 1
        else:
            ub.append(-1)
    occ["request"] = req
    occ["ubatch"] = ub
    occ["weight_bytes"] = weight_read_bytes(out, len(occ_names))
    sess = {int(m["pid"]): m for m in tr.meta.get("llama", []) if "pid" in m}
    for k in ("macs_per_token", "macs_per_output"):
        occ[k] = [float(sess.get(int(p), {}).get(k, 0)) for p in occ["pid"]]
    occ["step_cost"] = [sess.get(int(p), {}).get("step_cost") for p in occ["pid"]]
    for k in ("n_layer", "n_embd"):
        occ[k] = [int(sess.get(int(p), {}).get(k, 0)) for p in occ["pid"]]
    occ.index.name = "phase_id"
    return out, occ


def _attribute(cols: dict) -> dict:
    """Insert PHASE re-marks so that each event runs in the latest phase of its own process."""
    op, pid, arg = cols["op"], cols["pid"], cols["arg"]
    is_ph = op == Op.PHASE
    s = pd.Series(np.where(is_ph, arg, np.nan))
    eff = s.groupby(pid).ffill().ffill().fillna(-1).to_numpy().astype(np.int64)
    prev = np.concatenate([[-1], eff[:-1]])
    need = np.flatnonzero(~is_ph & (eff != prev) & (eff >= 0))
    if not len(need):
        return cols
    row = {k: v[need].copy() for k, v in cols.items()}
    row["op"][:] = Op.PHASE
    row["map"][:] = -1
    row["page"][:] = 0
    row["npages"][:] = 0
    row["flags"][:] = 0
    row["arg"] = eff[need]
    return {k: np.insert(v, need, row[k]) for k, v in cols.items()}


def weight_read_bytes(tr: Trace, n_phases: int) -> np.ndarray:
    """Bytes of model weights read (READ events on weight mappings) per phase id."""
    c = tr.cols
    mm = c["op"] == Op.MMAP
    cls = (c["flags"][mm] >> CLASS_SHIFT) & 0xFF
    is_w = ((c["flags"][mm] & MapFlag.WEIGHTS) != 0) | np.isin(cls, [PageClass.WEIGHTS_Q, PageClass.WEIGHTS_F16])
    ids = c["map"][mm]
    wmap = np.zeros(int(ids.max(initial=-1)) + 2, bool)
    wmap[ids[is_w]] = True
    is_ph = c["op"] == Op.PHASE
    cur = pd.Series(np.where(is_ph, c["arg"], np.nan)).ffill().fillna(-1).to_numpy().astype(np.int64)
    sel = (c["op"] == Op.READ) & (c["map"] >= 0) & (cur >= 0)
    sel[sel] = wmap[c["map"][sel]]
    return np.bincount(cur[sel], weights=c["npages"][sel].astype(float) * PAGE_SIZE,
                       minlength=n_phases)[:n_phases]


# ------------------------------------------------------------------------------------------------
# Seconds

def stall_seconds(counts: pd.DataFrame, device, zram_algo: str, read_waits: bool = False) -> pd.DataFrame:
    """Per row of counts (columns named as the core's counters): the stall seconds by cause.
    read_waits: the replay timed its reads (Config costs from device.task_costs): its own waits
    (io_wait_ns) are the read stall."""
    g = lambda k: counts[k].to_numpy(dtype=float) if k in counts else np.zeros(len(counts))
    if read_waits:
        read = g("io_wait_ns") * 1e-9
    else:
        ios, pages = g("stall_read_ios"), g("stall_read_pages")
        io_bytes = np.where(ios > 0, pages * PAGE_SIZE / np.maximum(ios, 1), PAGE_SIZE)
        read = ios * device.read_latency_s(io_bytes) + pages * PAGE_SIZE / device.read_bandwidth(io_bytes)
    us = device.task_costs(zram_algo)
    same = np.minimum(g("zram_same_reads"), g("stall_swapin_pages"))
    swapin = ((g("stall_swapin_pages") - same) * us["swapin_us"] + (same + g("swpin_zero")) * us["zero_page_us"]) * 1e-6
    reclaim = (g("stall_reclaim_swapout") * us["swapout_us"] + g("stall_reclaim_file_folios") * us["file_folio_us"]
               + g("stall_reclaim_file_pages") * us["file_page_us"] + g("stall_reclaim_lists") * us["list_us"]
               + g("stall_reclaim_scanned") * us["scan_us"]) * 1e-6
    fault = np.maximum(g("pgfault") - g("pgmajfault"), 0) * device.minor_fault_us * 1e-6
    out = pd.DataFrame({"read_s": read, "swapin_s": swapin, "reclaim_s": reclaim, "fault_s": fault},
                       index=counts.index)
    out["stall_s"] = out["read_s"] + out["swapin_s"] + out["reclaim_s"] + out["fault_s"]
    return out


def kswapd_seconds(counts: pd.DataFrame, device, zram_algo: str) -> np.ndarray:
    """Per row of counts: kswapd's own reclaim work in seconds of one core (its pages swapped out,
    the rest of what it stole dropped from the page cache, the pages it scanned), at the costs a
    task's own reclaim pays. The emulator's kswapd reclaims at once and moves no clock; this is the
    work a real kswapd would spend on its core meanwhile (kswapd_overlap)."""
    g = lambda k: counts[k].to_numpy(dtype=float) if k in counts else np.zeros(len(counts))
    us = device.task_costs(zram_algo)
    swapout = np.clip(g("pswpout") - g("stall_reclaim_swapout"), 0, g("pgsteal_kswapd"))
    dropped = g("pgsteal_kswapd") - swapout
    return (swapout * us["swapout_us"] + dropped * us["file_folio_us"] + g("pgscan_kswapd") * us["scan_us"]) * 1e-6


def kswapd_overlap(task_s, kswapd_s):
    """A stretch of a task's work (task_s) whose allocations kswapd makes room for with kswapd_s of
    reclaim (kswapd_seconds) on its own core: the critical path of the two streams. The task's
    allocations need kswapd's pages (the headroom above the min watermark is small beside the
    reclaim), so kswapd behind makes the task wait; below the min watermark the task reclaims
    itself, sharing the reclaim: max(task, (task + kswapd) / 2). kswapd ahead costs nothing."""
    task_s, kswapd_s = np.asarray(task_s, float), np.asarray(kswapd_s, float)
    return np.maximum(task_s, (task_s + kswapd_s) / 2)


def compute_seconds(weight_bytes, tokens, outputs, macs_per_token, macs_per_output, device,
                    step_cost=None, layers=0, n_embd=0) -> np.ndarray:
    """Compute time of llama_decode steps (tokens > 0; 0 elsewhere): the device's TimeModel, at each
    weight type's rates where the step's session gives its costs by type (step_cost: per step, a
    LlamaSession.step_cost or None), with its layers' nodes without weights (layers, n_embd: per
    step, the session's; 0 where unknown)."""
    n = np.asarray(tokens, float)
    o = np.asarray(outputs, float)
    wb = np.asarray(weight_bytes, float)
    tm = device.time_model()
    macs = n * np.asarray(macs_per_token, float) + o * np.asarray(macs_per_output, float)
    ns = np.asarray(tm.ns(wb, macs), float) + tm.layers_ns(np.asarray(layers, float), n, np.asarray(n_embd, float))
    if step_cost is not None and tm.by_type:
        ly, em = np.broadcast_to(layers, n.shape), np.broadcast_to(n_embd, n.shape)
        ns = np.array([tm.step_ns(c, w, k, u, l, e) if c else x
                       for c, w, k, u, l, e, x in zip(step_cost, wb, n, o, ly, em, ns)], float)
    return np.where(n > 0, ns * 1e-9, 0.0)


def phase_times(per_phase: pd.DataFrame, occ: pd.DataFrame, device, zram_algo: str,
                tokens: np.ndarray | None = None, outputs: np.ndarray | None = None,
                read_waits: bool = False) -> pd.DataFrame:
    """occ (from split_phases) + the per-occurrence counters of a replay -> seconds per occurrence.
    tokens, outputs: tokens and output rows of each occurrence's llama_decode step (step_rows);
    None: 1 token per prefill/decode phase, an output per decode token. read_waits: as in
    stall_seconds."""
    counts = per_phase.reset_index(drop=True).iloc[:len(occ)]
    counts.index = occ.index
    st = stall_seconds(counts, device, zram_algo, read_waits)
    if tokens is None:
        tokens = occ["kind"].isin(["prefill", "decode"]).to_numpy(int)
    out = occ.copy()
    out["tokens"] = np.asarray(tokens)
    if outputs is None:
        outputs = np.where(occ["kind"].to_numpy() == "decode", out["tokens"], 0)
    out["outputs"] = np.asarray(outputs)
    out["compute_s"] = compute_seconds(out["weight_bytes"], out["tokens"], out["outputs"],
                                       occ["macs_per_token"], occ["macs_per_output"], device,
                                       occ["step_cost"] if "step_cost" in occ else None,
                                       occ["n_layer"] if "n_layer" in occ else 0,
                                       occ["n_embd"] if "n_embd" in occ else 0)
    for k in st:
        out[k] = st[k].to_numpy()
    for k in STALL_COUNTERS + ["io_wait_ns", "pgmajfault", "pgpgin", "pswpin"]:
        if k in counts:
            out[k] = counts[k].to_numpy()
    out["time_s"] = out["compute_s"] + out["stall_s"]
    return out


def metrics(pt: pd.DataFrame) -> dict:
    """TTFT, time per output token, request latency, app-switch latency from phase_times().
    TTFT of a request = its prompt phases (the request mark + its prefill ubatches; the model load
    excluded); TPOT = median decode step; request latency = all its phases until its end mark."""
    llm = pt[pt["request"].str.startswith("request ")]
    per_req = llm.groupby("request", sort=False).agg(
        t=("t", "min"),
        ttft_s=("time_s", lambda s: s[llm.loc[s.index, "kind"].isin(["request", "prefill"])].sum()),
        latency_s=("time_s", "sum"),
        decode_steps=("kind", lambda s: int((s == "decode").sum())),
    )
    dec = llm[llm["kind"] == "decode"]
    sw = pt[pt["kind"] == "switch"]
    return {
        "requests": per_req,
        "ttft_s": float(per_req["ttft_s"].mean()) if len(per_req) else float("nan"),
        "ttft_max_s": float(per_req["ttft_s"].max()) if len(per_req) else float("nan"),
        "tpot_s": float(dec["time_s"].median()) if len(dec) else float("nan"),
        "tpot_p90_s": float(dec["time_s"].quantile(0.9)) if len(dec) else float("nan"),
        "request_latency_s": float(per_req["latency_s"].mean()) if len(per_req) else float("nan"),
        "switch_latency_s": float(sw["time_s"].mean()) if len(sw) else float("nan"),
        "switch_latency_max_s": float(sw["time_s"].max()) if len(sw) else float("nan"),
        "llm_stall_s": float(llm["stall_s"].sum()),
        "decode_steps": dec,
    }
