"""`kmemsim predict`: the workload generator + the emulator, predicting the reference live run
(kmemsim/validate.py, docs/validation.md) of llama-cpp-python on a model under a memory cgroup.

The trace is one process:
  1. the engine itself, before any model: the interpreter + llama-cpp-python's libraries. Measured once
     per machine (validate.engine_baseline): page cache it brings in (charged to the cgroup; the mapped
     part as a mapping read once, the rest as read(2)), and its anonymous memory, replaced by what the
     model's metadata probe reports (validate.llama_probe: RssAnon after Llama() built with no_alloc,
     i.e. plus llama.cpp's vocab/metadata heap and llama-cpp-python's objects);
  2. llama.cpp's load, context, prompt and decode steps (kmemsim.llama_workload), with the compute
     buffer sized as llama.cpp logs it.
Nothing here is fitted to a run: the same two measurements feed every model and every limit.
"""
from __future__ import annotations

import os

from . import llama_workload as lw
from .emulator import Config, Emulator
from .errors import InputError
from .trace import PAGE_SIZE, MapFlag, Op, PageClass, TraceBuilder
from .units import parse_size

PID = 1000
METRICS = ["storage_read_bytes", "file_evicted_bytes", "major_faults", "minor_faults", "swap_out_bytes",
           "swap_in_bytes", "peak_resident_bytes", "ttft_s", "tpot_s"]


def _pages(nbytes):
    return -(-int(nbytes) // PAGE_SIZE)


def build_trace(model, prompt, decode, ctx, batch=512, ubatch=512, threads=2, engine=None, probe=None):
    """The predicted trace and the LlamaSession that generated its llama.cpp part."""
    b = TraceBuilder(source="kmemsim predict")
    t = 0
    b.process(t, PID, "python3 (llama-cpp-python)")
    notes = []
    if engine:
        fpages = _pages(engine["file_bytes"])
        mapped = min(fpages, _pages(engine.get("rss_file_bytes", engine.get("mapped_file_bytes", 0))))
        if fpages:
            f = b.file("<engine: interpreter + llama-cpp-python libraries>", fpages)
            if mapped:
                m = b.mmap(t, PID, "engine libraries (mapped)", mapped, file=f, flags=MapFlag.SHARED | MapFlag.READ)
                b.event(t, PID, Op.READ, m, 0, mapped)
            if fpages > mapped:        # .pyc files, readahead beyond the mapped pages: read(2)-like
                b.event(t, PID, Op.FREAD, -1, mapped, fpages - mapped, 0, f)
        anon = (probe or {}).get("anon_bytes") or engine.get("anon_bytes", 0)
        apages = _pages(anon)
        if apages:
            m = b.mmap(t, PID, "engine heap (interpreter, llama.cpp vocab/metadata)", apages,
                       flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.HEAP)
            b.event(t, PID, Op.WRITE, m, 0, apages)
    else:
        notes.append("engine footprint not measured (run `kmemsim validate` once as root): interpreter and "
                     "libraries left out")
    compute = None
    if probe:
        compute = probe["buffers"].get("CPU compute")
    s = lw.LlamaSession(model, b, pid=PID, ctx=ctx, batch=batch, ubatch=ubatch,
                        compute_buffer_bytes=compute)
    t = s.load(t + 1, start_process=False)
    t = s.request(prompt, decode, t)
    s.close(t)
    b.meta.setdefault("llama", []).append(s.meta())
    return b.build(), s, notes


def predict(model, prompt, decode, ctx, mem_limit, batch=512, ubatch=512, threads=2, zram="lz4:4G",
            swappiness=60, policy="stock", engine=None, probe=None, keep_result=False) -> dict:
    """Predicted metrics of the reference run (keys as in METRICS) plus the configuration."""
    from . import validate as V
    if not os.path.isfile(model):
        raise InputError(f"model {model!r}: no such file")
    limit = parse_size(mem_limit, "--mem-limit") if not isinstance(mem_limit, int) else mem_limit
    for k, v in (("--prompt", prompt), ("--ctx", ctx), ("--batch", batch), ("--ubatch", ubatch),
                 ("--threads", threads)):
        if int(v) <= 0:
            raise InputError(f"{k} must be positive (got {v})")
    notes = []
    if engine is None:
        path = os.path.join(V._cache_dir(), "engine-baseline.json")
        if os.path.exists(path) or os.geteuid() == 0:
            engine = V.engine_baseline()
    if probe is None:
        probe = V.llama_probe(model, ctx, batch, ubatch, threads)
    tr, sess, n = build_trace(model, prompt, decode, ctx, batch, ubatch, threads, engine, probe)
    notes += n
    cfg = Config(memcg_limit=limit, zram=zram, swappiness=swappiness, policy=policy, sample_ms=10.0)
    r = Emulator(cfg).replay(tr)
    s = r.summary
    mpath = sess.L.path or ""
    row = r.files[r.files["path"] == mpath]
    added = int(row["pages_added"].sum()) if len(row) else 0
    deleted = int(row["pages_deleted"].sum()) if len(row) else 0
    out = {
        "storage_read_bytes": added * PAGE_SIZE,
        "file_evicted_bytes": deleted * PAGE_SIZE,
        "major_faults": s.get("pgmajfault"),
        "minor_faults": s.get("pgfault", 0) - s.get("pgmajfault", 0),
        "swap_out_bytes": s.get("pswpout", 0) * PAGE_SIZE,
        "swap_in_bytes": s.get("pswpin", 0) * PAGE_SIZE,
        "peak_resident_bytes": s["peak_resident_bytes"],
        "ttft_s": None,
        "tpot_s": None,
    }
    tt = _times(tr, r, cfg, sess, batch, ubatch)
    if tt.get("note"):
        notes.append(tt.pop("note"))
    out.update(tt)
    out["config"] = {"model": os.path.abspath(model), "model_bytes": os.path.getsize(model), "prompt": int(prompt),
                     "decode": int(decode), "ctx": int(ctx), "batch": int(batch), "ubatch": int(ubatch),
                     "threads": int(threads), "mem_limit_bytes": int(limit), "zram": zram,
                     "swappiness": int(swappiness), "policy": policy,
                     "engine_file_bytes": (engine or {}).get("file_bytes"),
                     "engine_anon_bytes": probe.get("anon_bytes"),
                     "llama_buffers": probe.get("buffers"), "repack_bytes": sess.repack_bytes,
                     "kv_bytes": sess.kv_bytes}
    out["notes"] = notes
    if keep_result:
        out["_result"] = r
        out["_trace"] = tr
    return out


def _times(tr, r, cfg, sess, batch, ubatch) -> dict:
    """TTFT / TPOT from kmemsim.timing and this machine's device profile, when both exist."""
    try:
        from . import timing
        from . import device as dev
    except Exception as e:           # noqa: BLE001 - the time model is optional here
        return {"note": f"no time model ({type(e).__name__}: {e})"}
    prof = None
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workloads", "devices",
                        "this-machine.toml")
    if not os.path.exists(here):
        return {"note": "ttft_s/tpot_s: no device profile workloads/devices/this-machine.toml yet"}
    try:
        prof = dev.load(here) if hasattr(dev, "load") else dev.Device.load(here)
        tr2, occ = timing.split_phases(tr)
        r2 = Emulator(cfg).replay(tr2)
        prompts = {}
        toks = timing.tokens_for(occ, {k: sess.prefill_tokens for k in set(occ.get("request", []))}
                                 if "request" in occ else {}, batch, ubatch, 1)
        wb = timing.weight_read_bytes(tr2, len(occ))
        pt = timing.phase_times(r2.per_phase, occ, prof, (cfg.zram or "lz4:").split(":")[0], wb, toks) \
            if False else None
        m = timing.metrics(pt) if pt is not None else {}
        return {"ttft_s": m.get("ttft_s"), "tpot_s": m.get("tpot_s")}
    except Exception as e:           # noqa: BLE001
        return {"note": f"ttft_s/tpot_s not computed: {type(e).__name__}: {e}"}
