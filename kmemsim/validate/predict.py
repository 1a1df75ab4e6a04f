"""`kmemsim predict`: the workload generator + the emulator, predicting the reference live run
(kmemsim/validate/run.py, docs/validation.md) of llama-cpp-python on a model under a memory cgroup.

The trace is one process:
  1. the engine itself, before any model: the interpreter + llama-cpp-python's libraries. Measured once
     per machine (validate.measure.engine_baseline; by validate before each live run): page cache it brings
     in (charged to the cgroup; each library it maps as a file of its own, faulted in once, only the
     pages no other process maps touched, the rest as read(2)), and its anonymous
     memory, replaced by what the model's metadata probe reports (validate.measure.llama_probe: RssAnon after
     Llama() built with no_alloc, i.e. plus llama.cpp's vocab/metadata heap and llama-cpp-python's
     objects);
     The baseline's kernel memory beyond what the core charges itself is one KMEM event;
  2. llama.cpp's load, context, prompt and decode steps (kmemsim.workload.llama), with the compute
     buffer sized as llama.cpp logs it, and the engine's warm set, anonymous growth and decode ids
     measured by the unlimited warm run (validate.measure.engine_warm_set).
Nothing here is fitted to a run: the same measurements feed every limit.
"""
from __future__ import annotations

import os

from ..core.errors import InputError
from ..core.progress import bar
from ..core.trace import MapFlag, Op, PageClass, TraceBuilder
from ..core.units import PAGE_SIZE, pages as _pages, parse_size, spread
from ..engine.kernel import Config, Emulator
from ..engine.time import serial as timing
from ..workload import llama as lw
from .child import reference_prompt
from . import measure
from .measure import baseline_cache_path, engine_baseline, engine_warm_set, llama_probe, this_machine, warm_steps
from .reference import METRICS  # noqa: F401  (the keys predict returns)

PID = 1000

def _engine(b, t, engine, anon_bytes, start_bytes=None):
    """The engine before any model (item 1 of the module doc) into builder b: its libraries and
    files, and a heap of `anon_bytes`, the first `start_bytes` (all by default) written at once.
    Returns (heap map id or -1, heap pages, library maps, notes)."""
    notes = []
    heap, apages, libmaps = -1, 0, {}
    if engine:
        fpages = _pages(engine["file_bytes"])
        mapped = min(fpages, _pages(engine.get("rss_file_bytes", engine.get("mapped_file_bytes", 0))))
        libs = [(name, int(n)) for name, n in engine.get("libraries", []) if int(n) > 0]
        lib_pages = sum(n for _, n in libs)
        if libs and lib_pages <= fpages:
            # each library as ld.so brings it in: its own file, mapped and faulted in (one major fault
            # and readahead per file, as after drop_caches), its own resident pages touched (without
            # that record, its share of the process's mapped pages)
            share = min(1.0, mapped / lib_pages)
            rss, own = engine.get("library_rss", {}), engine.get("library_own")
            for name, n in libs:
                f = b.file(f"<engine library: {name}>", n)
                # ld.so maps a library's text PROT_EXEC (VM_EXEC: reclaim activates it when referenced)
                # and its rodata/relro without: two mappings of the file, split as its resident pages
                # charged to the cgroup are (those another process keeps resident, such as the
                # recorder's libpython text, the child neither reads nor is charged for)
                x, o = rss.get(name, (0, 0))
                xo, oo = own.get(name, (0, 0)) if own is not None else (x, o)
                nx = round(n * xo / (xo + oo)) if xo + oo else 0
                libmaps[name] = {}
                for kind, off, cnt, fl, alone in (("files", 0, n - nx, 0, oo),
                                                  ("exec", n - nx, nx, MapFlag.EXEC, xo)):
                    if cnt > 0:
                        m = b.mmap(t, PID, f"engine library {name} ({'text' if fl else 'data'})", cnt, file=f,
                                   pgoff=off, flags=MapFlag.SHARED | MapFlag.READ | fl)
                        touched = min(cnt, alone) if own is not None else int(cnt * share)
                        b.event(t, PID, Op.READ, m, 0, max(1, touched))
                        libmaps[name][kind] = (m, cnt)
            rest = fpages - lib_pages
            if rest:                   # .pyc files and other reads: read(2)
                f = b.file("<engine: files read, not mapped>", rest)
                b.event(t, PID, Op.FREAD, -1, 0, rest, 0, f)
        elif fpages:                   # a baseline without the per-library record: one pseudo-file
            f = b.file("<engine: interpreter + llama-cpp-python libraries>", fpages)
            if mapped:
                m = b.mmap(t, PID, "engine libraries (mapped)", mapped, file=f, flags=MapFlag.SHARED | MapFlag.READ)
                b.event(t, PID, Op.READ, m, 0, mapped)
            if fpages > mapped:        # .pyc files, readahead beyond the mapped pages: read(2)-like
                b.event(t, PID, Op.FREAD, -1, mapped, fpages - mapped, 0, f)
        apages = _pages(anon_bytes)
        if apages:
            heap = m = b.mmap(t, PID, "engine heap (interpreter, llama.cpp vocab/metadata)", apages,
                       flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.HEAP)
            b.event(t, PID, Op.WRITE, m, 0, apages if start_bytes is None else min(apages, _pages(start_bytes)))
    else:
        notes.append("engine footprint not measured (run `kmemsim validate` once as root): interpreter and "
                     "libraries left out")
    return heap, apages, libmaps, notes


def _engine_kmem_pages(engine):
    """Kernel memory the engine's start-up charged to its cgroup beyond what the emulator charges
    for the same start-up itself (page tables, page-cache xarray nodes): dentries, inodes, task
    structs, kernel stacks, libc's page tables (validate.measure.engine_baseline's `kmem_bytes`, the
    cgroup's kernel memory at the end of the import). 0 for a baseline without that record."""
    if not engine or not engine.get("kmem_bytes"):
        return 0
    b = TraceBuilder(source="kmemsim predict: engine start-up")
    b.process(0, PID, "python3 (llama-cpp-python)")
    _engine(b, 0, engine, engine.get("anon_bytes", 0))
    own = Emulator(Config(memcg_limit=1 << 40, sample_ms=0)).replay(b.build()).summary["nr_kernel_pages"]
    return max(0, _pages(engine["kmem_bytes"]) - own)


def build_trace(model, prompt, decode, ctx, batch=512, ubatch=512, threads=2, engine=None, probe=None,
                warm=None, time_model=None, kv_manager=None, session_kw=None):
    """The predicted trace and the LlamaSession that generated its llama.cpp part. `warm`: the
    engine's warm set per llama_decode call (validate.measure.engine_warm_set); `time_model`: the compute
    speed that times it (this machine's profile; None: the default device's); `kv_manager`: who keeps
    the KV cache (None: llama.cpp's own); `session_kw`: more of LlamaSession's arguments (an MoE load
    mode and routing: kmemsim.validate.moe)."""
    b = TraceBuilder(source="kmemsim predict")
    t = 0
    b.process(t, PID, "python3 (llama-cpp-python)")
    # the heap as the probe leaves it after Llama(); with the warm set, what the import alone had
    # (the baseline's) is written at start, the rest (vocab, metadata, the context's structures, the
    # pages each call references) as the context is built
    anon = (probe or {}).get("anon_bytes") or (engine or {}).get("anon_bytes", 0)
    imported = min(anon, (engine or {}).get("anon_bytes", anon))
    heap, apages, libmaps, notes = _engine(b, t, engine, anon, imported if warm else None)
    other = _engine_kmem_pages(engine)
    if other:
        b.event(t, PID, Op.KMEM, -1, 0, other)
    compute = None
    if probe:
        compute = probe["buffers"].get("CPU compute")
    host = None
    if warm and heap >= 0:
        # what the engine touches around every llama_decode call: its heap beyond llama.cpp's own
        # buffers, and the pages of each library it maps (those of libraries loaded before, such as
        # libc, are charged elsewhere and not in this trace); and the libraries' pages the model's load
        # runs (Llama()'s heap is the host's `built`; the context's code, measured too, is left out:
        # docs/validation.md, trace item 4)
        def touches(w):
            out = []
            for part in ("exec", "files"):
                for nm, n in sorted(w.get(part, {}).items()):
                    maps = libmaps.get(nm, {})
                    m = maps.get(part) or next(iter(maps.values()), None)
                    if m and int(n) > 0:
                        out.append((m[0], min(int(n), m[1])))
            return out
        kinds = ("prompt", "decode")
        host = lw.HostSet(heap, apages, {k: int(warm[k]["anon"]) for k in kinds},
                          {k: touches(warm[k]) for k in kinds + ("load",) if k in warm},
                          {"decode": int(warm["decode_call"]["anon"])} if "decode_call" in warm else {})
        if _pages(imported) < apages:          # else (no probe) the calls' pages are the heap's first
            host.base = _pages(imported)
            host.built = apages - host.base
    first_map = b.next_map
    growth = (warm or {}).get("anon_growth")
    if host and growth:
        # the loader's heap, written before the model is mapped, and the import's heap the
        # context's creation reads (what its window references beyond what the process gains)
        host.load_growth = _pages(growth.get("load", 0))
        if "context" in growth:
            host.context_old = max(0, int(warm["context"]["anon"]) - _pages(growth["context"]))
        # the process's anonymous memory grows as the prompt and each step run, beyond what the
        # session's buffers account for (validate.measure.engine_warm_set's RssAnon at each stop): malloc'd
        # and numpy memory freed (unmapped) with the Llama object, so it goes at the teardown
        host.growth = {k: _pages(growth[k]) for k in ("prompt", "decode")}
        host.grow_pages = host.growth["prompt"] + host.growth["decode"] * int(decode)
        if host.grow_pages:
            host.grow = b.mmap(t, PID, "engine heap growth (work buffers, logits rows)", host.grow_pages,
                               flags=MapFlag.READ | MapFlag.WRITE, cls=PageClass.HEAP)
    s = lw.LlamaSession(model, b, pid=PID, ctx=ctx, batch=batch, ubatch=ubatch, time_model=time_model,
                        compute_buffer_bytes=compute, host=host, threads=threads, kv_manager=kv_manager,
                        **(session_kw or {}))
    t = s.load(t + 1, start_process=False)
    # the reference run's own prompt ids (their token_embd rows are what get_rows reads); the greedy
    # decode's ids are the weights' choice: those the warm run generated, then the session's draw
    hp = s.hp
    ids = reference_prompt(hp["n_vocab"], hp["bos_token_id"], prompt)
    gen = [int(x) for x in (warm or {}).get("tokens", [])][:decode]
    ids += gen + lw.random_token_ids(s.rng, hp["n_vocab"], decode - len(gen)).tolist()
    t = s.request(prompt, decode, t, tokens=ids)
    t = s.close(t, exit_process=False)
    # Process teardown, as the reference child ends (script end -> Py_FinalizeEx): clearing __main__
    # drops the Llama object, whose close() runs llama_free (ggml_backend_buffer_free: the compute,
    # KV and output buffers are freed/munmapped) and llama_model_free (llama_mmap's destructor
    # munmaps the model); then the destructors and deallocations walk the heap: llama_vocab's
    # token vectors and maps are free()d (free writes each chunk's header) and Py_FinalizeEx's
    # module/GC teardown decrements and deallocates every live Python object (obmalloc arenas).
    # What reclaim swapped out of the heap pages this walk writes is swapped back in here
    # (do_swap_page, a major fault each): the live runs show 22-31 MiB of swap-in after the last
    # decode step, on the heap's brk and obmalloc-arena addresses. The warm run measures how many
    # pages it references (`teardown`, at the child's exit stop): 85-87% of what is left of the
    # heap, spread over it as far as its per-mapping counts tell; and the libraries' code it runs.
    for mid, n in b.alive_maps(PID, first_map):
        b.event(t, PID, Op.MUNMAP, mid, 0, n)
    end = (warm or {}).get("teardown")
    if end and host:
        for m, n in touches(end):
            b.event(t + 1, PID, Op.READ, m, 0, n)
    if heap >= 0:
        first, count = spread(min(apages, int(end["anon"])) if end else apages, apages)
        b.ranges(t + 1, PID, Op.WRITE, heap, first, count)
    b.event(t + 2, PID, Op.PROC_EXIT)
    b.meta.setdefault("llama", []).append(s.meta())
    return b.build(), s, notes


# mm/memcontrol.c FLUSH_TIME: the kernel folds a memcg's per-cpu statistics into the totals reclaim
# decides by every 2 s (flush_memcg_stats_dwork()). A read of the cgroup's memory.stat flushes them as
# well (and, measured, one of v1's memory.kmem.usage_in_bytes: docs/recorder.md), so a run recorded
# reading both every 10 ms decides by statistics at most 10 ms old (stats_age_ms).
FLUSH_TIME_MS = 2000.0


# The kernel's flush timer is not the run's: where its 2 s fall against the run is chance, and with
# statistics that old it moves the outcome (tiny 40% unobserved: 11.2-22.9 k major faults over these
# phases; docs/validation-notes.md, session 17). validate predicts the kernel's own flush at these
# fractions of its period; a reader's flushes (the recorder's) start with the run, at phase 0.
FLUSH_PHASES = (0.0, 0.25, 0.5, 0.75)


def stats_age_ms(memcg_interval):
    """How stale the statistics reclaim read were (stats_flush_ms) in a run recorded reading the
    cgroup's memory.stat every memcg_interval s (0: at the start and end only): no older than either
    flush leaves them."""
    return min(1e3 * memcg_interval, FLUSH_TIME_MS) if memcg_interval > 0 else FLUSH_TIME_MS


def predict(model, prompt, decode, ctx, mem_limit, batch=512, ubatch=512, threads=2, zram="lz4:4G",
            swappiness=60, policy="stock", engine=None, probe=None, warm=None, keep_result=False,
            stats_flush_ms=0.0, device=None, recorded=False, stats_flush_phase_ms=0.0, kv_manager=None,
            kernel=None, refresh=False, session_kw=None) -> dict:
    """Predicted metrics of the reference run (keys as in METRICS) plus the configuration.
    stats_flush_ms: how stale the memcg statistics reclaim reads are (Config.stats_flush_ms): 0 reads
    them as they are; FLUSH_TIME_MS as the kernel alone leaves them (`kmemsim predict`'s default).
    stats_flush_phase_ms: when the first flush falls (Config.stats_flush_phase_ms; FLUSH_PHASES).
    device: the machine's measured profile (kmemsim.engine.time.device.Device; None: measure.this_machine()).
    recorded: reclaim at the cost a run under kmemsim's recorder pays (Device.task_costs), as
    validate's recorded reference runs ran; else as the device runs unobserved.
    kernel: Config settings of the kernel the run is predicted on (validate.reference.run_kernel:
    its LRU, readahead and release); None: Config's, this machine's. refresh: measure llama.cpp's
    buffers and the engine's warm set again rather than read them from the cache."""
    if not os.path.isfile(model):
        raise InputError(f"model {model!r}: no such file")
    limit = parse_size(mem_limit, "--mem-limit") if not isinstance(mem_limit, int) else mem_limit
    for k, v in (("--prompt", prompt), ("--ctx", ctx), ("--batch", batch), ("--ubatch", ubatch),
                 ("--threads", threads)):
        if int(v) <= 0:
            raise InputError(f"{k} must be positive (got {v})")
    notes = []
    measure.MEASURED.clear()
    steps = bar(total=5, desc="predict", unit="step")
    steps.set_postfix_str("the engine's footprint")
    if engine is None:
        if os.path.exists(baseline_cache_path()) or os.geteuid() == 0:
            engine = engine_baseline()
    steps.update()
    steps.set_postfix_str("llama.cpp's buffers")
    if probe is None:
        probe = llama_probe(model, ctx, batch, ubatch, threads, refresh=refresh)
    steps.update()
    steps.set_postfix_str("the warm set")
    if warm is None and engine:
        warm = engine_warm_set(model, prompt, ctx, batch, ubatch, threads, warm_steps(decode), refresh=refresh)
    # this machine's profile gives the emulator's clock (llama.cpp's compute between the trace's
    # events, storage time, the task's own reclaim and swap-in time) and the times reported; without
    # one, the default device's compute times the trace, reads complete at once and no time is given
    prof = device if device is not None else this_machine()
    steps.update()
    steps.set_postfix_str("the trace")
    tr, sess, n = build_trace(model, prompt, decode, ctx, batch, ubatch, threads, engine, probe, warm,
                              prof.time_model() if prof is not None else None, kv_manager, session_kw)
    notes += n
    cfg = Config(memcg_limit=limit, zram=zram, swappiness=swappiness, policy=policy, sample_ms=10.0,
                 threads=int(threads), stats_flush_ms=float(stats_flush_ms),
                 stats_flush_phase_ms=float(stats_flush_phase_ms),
                 **(prof.task_costs(zram, recorded) if prof is not None else {}), **(kernel or {}))
    # one replay of the phase-split copy (kmemsim.engine.time.serial.split_phases only inserts PHASE marks, so
    # the counts are those of the trace itself) gives both the metrics and the per-phase counts
    # the time model needs
    tr2, occ = timing.split_phases(tr)
    steps.update()
    steps.set_postfix_str("the replay")
    r = Emulator(cfg).replay(tr2)
    steps.update()
    steps.close()
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
        # the most kernel memory charged at once: page tables, page-cache xarray nodes, the engine's
        # slab (not a metric of the issue; checked against the cgroup's kmem by validate)
        "kernel_memory_bytes": max([s["nr_kernel_pages"], *r.timeline["nr_kernel_pages"]]) * PAGE_SIZE,
        "ttft_s": None,
        "tpot_s": None,
    }
    tt = _times(r, occ, cfg, prompt, batch, ubatch, prof)
    if tt.get("note"):
        notes.append(tt.pop("note"))
    out.update(tt)
    out["config"] = {"model": os.path.abspath(model), "model_bytes": os.path.getsize(model), "prompt": int(prompt),
                     "decode": int(decode), "ctx": int(ctx), "batch": int(batch), "ubatch": int(ubatch),
                     "threads": int(threads), "mem_limit_bytes": int(limit), "zram": zram,
                     "swappiness": int(swappiness), "policy": policy, "stats_flush_ms": float(stats_flush_ms),
                     "stats_flush_phase_ms": float(stats_flush_phase_ms),
                     "engine_file_bytes": (engine or {}).get("file_bytes"),
                     "engine_anon_bytes": probe.get("anon_bytes"),
                     "llama_buffers": probe.get("buffers"),
                     "engine_warm_pages": {k: {"anon": warm[k]["anon"],
                                               "exec": sum(warm[k].get("exec", {}).values()),
                                               "files": sum(warm[k]["files"].values())}
                                           for k in ("prompt", "decode")} if warm else None,
                     "repack_bytes": sess.repack_bytes, "kv_bytes": sess.kv_bytes,
                     "kv_manager": sess.kv_manager.name,
                     "device": prof.path if prof is not None else None,
                     "reclaim_costs": "recorded" if recorded else "unrecorded",
                     "kernel": dict(kernel or {})}
    out["notes"] = notes + measure.MEASURED
    if keep_result:
        out["_result"] = r
        out["_trace"] = tr
    return out


def _times(r, occ, cfg, prompt, batch, ubatch, prof) -> dict:
    """TTFT / TPOT from kmemsim.engine.time.serial (seconds = per-phase counts x device profile) and this
    machine's measured profile `prof` (None: none measured). TTFT: the request's prompt phases (load
    excluded, as the live run times `eval` after `Llama()`); TPOT: the median decode step."""
    if prof is None:
        return {"note": "ttft_s/tpot_s: no device profile workloads/devices/this-machine.toml"}
    reqs = {q: int(prompt) for q in set(occ["request"]) if q}
    toks, outs = lw.step_rows(occ, reqs, batch, ubatch, 1)
    algo = (cfg.zram or "lz4:").split(":")[0] or "lz4"
    # the replay timed its reads with this profile (Config costs): its own waits are the read stall
    pt = timing.phase_times(r.per_phase, occ, prof, algo, toks, outs, read_waits=True)
    m = timing.metrics(pt)
    f = lambda v: None if v is None or v != v else float(v)
    return {"ttft_s": f(m.get("ttft_s")), "tpot_s": f(m.get("tpot_s"))}
