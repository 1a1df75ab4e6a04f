"""The reference run's child program: llama-cpp-python in a fresh process, as docs/validation.md
defines the reference run. Run as a script, never imported by it:

    python child.py MODE OUT [MODEL N M C B U T [GATE]]

Standalone (imports only llama_cpp, numpy and the standard library) so the engine's footprint is
llama-cpp-python's, not kmemsim's; kmemsim reads this file as text and writes a copy beside each run
(kmemsim.validate.reference.child_script), and imports its two functions (reference_prompt,
mapped_file_pages) so parent and child share them. Modes: "run" (the reference run), "baseline"
(import llama_cpp and stop: the interpreter + libraries footprint), "probe" (load metadata only with
no_alloc and create the context: llama.cpp's own buffer sizes, no weight is read), "warm" (the
reference run, stopping before the prompt, each decode step and the end for the parent to clear and
read the pages' referenced bits: kmemsim.validate.measure.engine_warm_set), "moe-page-cache" and
"moe-willneed" (the reference run of an MoE model with each layer's routed experts recorded from its
ffn_moe_topk node; willneed also issues llama.cpp #26003's madvise calls around them: WILLNEED over
the routed experts' slices once the router has chosen, DONTNEED once the layer's ffn_moe_down is
computed; the expert tensors' offsets from experts.json beside OUT: kmemsim.validate.moe). With GATE
(kmemsim is-live), the run waits after Llama() for the controller's go.

The main program runs at module level, as a script's does (the Llama object is a global that
Py_FinalizeEx drops at the end, as the teardown kmemsim.validate.predict models)."""
import ctypes, json, os, sys, time


def reference_prompt(n_vocab, bos, n):
    """The reference run's prompt: BOS, then n - 1 ids from the byte-token range upward, spread
    deterministically over the vocabulary. The child runs this very function, and predict feeds
    the same ids to the workload generator."""
    return [bos] + [259 + (i * 7919) % max(1, n_vocab - 259) for i in range(n - 1)]


def mapped_file_pages(pid="self", skip=()) -> dict:
    """Per file a process maps (basename): its resident file pages in executable mappings (text) and
    in the others (rodata, relro, data), and of each those no other process maps:
    {name: [text, other, text_alone, other_alone]} (/proc/PID/pagemap: bit 63 present, 61 a file
    page, 56 mapped exclusively). Those alone are the ones it brought into the page cache itself and
    is charged for; a page another process maps (the recorder's interpreter maps the same libpython,
    libc and numpy) was read and charged there, drop_caches leaves it, and reclaim of this process's
    cgroup never takes it. (After drop_caches the two are the same pages: /proc/kpagecgroup names
    this cgroup for exactly the exclusive ones, checked for every library of the engine.) Files in
    `skip` (paths) are not read."""
    out = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pm:
        for line in maps:
            f = line.split(None, 5)
            if len(f) < 6 or int(f[4]) == 0 or f[5].strip() in skip:
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            pm.seek(lo // 4096 * 8)
            r = out.setdefault(os.path.basename(f[5].strip()), [0, 0, 0, 0])
            k = 0 if "x" in f[1] else 1
            # one entry at a time, not a tuple of them all (a 1.23 GiB model's mapping has 321 k)
            for v in memoryview(pm.read((hi - lo) // 4096 * 8)).cast("Q"):
                if v >> 63 and (v >> 61) & 1:
                    r[k] += 1
                    r[k + 2] += (v >> 56) & 1
    return out


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    t_start = time.monotonic()
    import llama_cpp
    logs = []
    @llama_cpp.llama_log_callback
    def _log(level, text, user_data):
        try:
            logs.append(text.decode("utf-8", "replace"))
        except Exception:
            pass
    llama_cpp.llama_log_set(_log, ctypes.c_void_p(0))
    res = {"mode": mode, "import_s": time.monotonic() - t_start}
    def status():
        out = {}
        with open("/proc/self/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"):
                    out[k] = int(v.split()[0]) * 1024
        return out
    def write():
        res["log"] = "".join(logs)
        with open(out + ".tmp", "w") as f:
            json.dump(res, f)
        os.replace(out + ".tmp", out)
    if mode == "baseline":
        res["status"] = status()
        # per file mapped: resident pages in executable mappings (text) and in the others (rodata, relro)
        import re
        res["file_rss"], cur = {}, None
        with open("/proc/self/smaps") as f:
            for line in f:
                m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(.*)$", line)
                if m:
                    cur = (os.path.basename(m.group(3)), "x" in m.group(1)) if int(m.group(2)) else None
                elif cur and line.startswith("Rss:"):
                    r = res["file_rss"].setdefault(cur[0], [0, 0])
                    r[0 if cur[1] else 1] += int(line.split()[1]) // 4
        # and of those, the pages this process alone maps: the ones it brought in and is charged for
        res["file_own"] = {k: v[2:] for k, v in mapped_file_pages().items()}
        write()
        sys.exit(0)
    model, N, M, C, B, U, T = sys.argv[3], *map(int, sys.argv[4:10])
    if mode == "probe":
        # llama.cpp's no_alloc (which asserts !use_mmap): load metadata (vocab, hparams) and simulate every buffer allocation; the
        # rest of Llama() runs as in the reference run. Reads no weight.
        import llama_cpp.llama_cpp as _lc
        _default = _lc.llama_model_default_params
        def _no_alloc():
            p = _default()
            p.no_alloc = True
            return p
        _lc.llama_model_default_params = _no_alloc
        res["status_before"] = status()
        try:
            llm = llama_cpp.Llama(model_path=model, n_ctx=C, n_batch=B, n_ubatch=U, n_threads=T,
                                  n_threads_batch=T, use_mmap=False, use_mlock=False, verbose=True)
            res["ok"] = True
        except Exception as e:
            res["ok"] = False
            res["error"] = repr(e)
        res["status_after"] = status()
        write()
        sys.exit(0)
    if mode.startswith("moe-"):
        # the eval callback on llama.cpp's context (llama-cpp-python builds Llama()'s context from
        # llama_context_default_params(): patched as "probe" patches the model's), asking for each
        # layer's ffn_moe_topk (and, for willneed, ffn_moe_down) node; the scheduler computes up to
        # an asked node and calls back with it computed
        import llama_cpp.llama_cpp as _lc
        class _T(ctypes.Structure):      # struct ggml_tensor's head (ggml.h; kmemsim.workload.llama.cb_eval)
            _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                        ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                        ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                        ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]
        with open(os.path.join(os.path.dirname(os.path.abspath(out)), "experts.json")) as f:
            _spec = json.load(f)
        _exps = {int(k): v for k, v in _spec["layers"].items()}   # layer -> [[offset, slice bytes]]
        _nexp = int(_spec["n_expert"])
        _willneed = mode == "moe-willneed"
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _base, _cur, res["routing"], res["madvise_calls"] = [None], {}, [], 0
        def _file_base():
            """Where file offset 0 of the model would be in llama.cpp's mapping (/proc/self/maps)."""
            with open("/proc/self/maps") as f:
                for line in f:
                    p = line.split(None, 5)
                    if len(p) == 6 and os.path.realpath(p[5].strip()) == os.path.realpath(model):
                        return int(p[0].split("-")[0], 16) - int(p[2], 16)
        def _advise(il, ids, advice):
            for off, sl in _exps[il]:
                for e in ids:
                    a = _base[0] + off + e * sl
                    lo = a // 4096 * 4096        # posix_madvise wants a page-aligned start (#26003's fix)
                    if _libc.madvise(lo, a + sl - lo, advice) != 0:
                        raise OSError(ctypes.get_errno(), "madvise")
                    res["madvise_calls"] += 1
        @_lc.ggml_backend_sched_eval_callback
        def _cb(t, ask, user):
            node = ctypes.cast(t, ctypes.POINTER(_T)).contents
            name = node.name.decode(errors="replace")
            topk = name.startswith("ffn_moe_topk-")
            down = _willneed and name.startswith("ffn_moe_down-")
            if ask:
                return topk or down
            il = int(name.rsplit("-", 1)[1]) if (topk or down) else -1
            if topk:
                k, n = int(node.ne[0]), int(node.ne[1])
                rows = [list((ctypes.c_int32 * k).from_address(node.data + i * int(node.nb[1]))) for i in range(n)]
                res["routing"].append([il, rows])
                _cur[il] = sorted({e for r in rows for e in r})
                if _willneed:
                    if _base[0] is None:
                        _base[0] = _file_base()
                    _advise(il, _cur[il], 3)          # MADV_WILLNEED
            elif down:
                _advise(il, _cur.pop(il), 4)          # MADV_DONTNEED
            return True
        _cparams = _lc.llama_context_default_params
        def _with_cb():
            p = _cparams()
            p.cb_eval = _cb
            p.cb_eval_user_data = None
            return p
        _lc.llama_context_default_params = _with_cb
    def mark(tag):
        if mode == "warm":               # tell the parent, wait for its go
            print("KMEMSIM", tag, flush=True)
            sys.stdin.readline()
    if mode == "warm":                   # split Llama() where it creates the context
        import llama_cpp.llama_cpp as _lc
        _init = _lc.llama_init_from_model
        def _init_marked(*a):
            mark("context")
            return _init(*a)
        _lc.llama_init_from_model = _init_marked
    mark("load")
    t0 = time.monotonic()
    llm = llama_cpp.Llama(model_path=model, n_ctx=C, n_batch=B, n_ubatch=U, n_threads=T, n_threads_batch=T,
                          use_mmap=True, use_mlock=False, verbose=True)
    t1 = time.monotonic()
    res["load_s"] = t1 - t0
    if mode == "moe-willneed":
        # #26003 never populates the experts; llama.cpp 0.3.36's loader did (MAP_POPULATE): give
        # them back before the prompt, so the run starts as a lazy load would (the experts' PTEs
        # zapped, their clean page cache invalidated: madvise DONTNEED, posix_fadvise DONTNEED)
        _base[0] = _file_base()
        _fd = os.open(model, os.O_RDONLY)
        for _il, _ts in _exps.items():
            for off, sl in _ts:
                _n = sl * _nexp
                _lo = (_base[0] + off) // 4096 * 4096
                if _libc.madvise(_lo, _base[0] + off + _n - _lo, 4) != 0:
                    raise OSError(ctypes.get_errno(), "madvise")
                os.posix_fadvise(_fd, off, _n, os.POSIX_FADV_DONTNEED)
        os.close(_fd)
    # kmemsim is-live's gate (an 11th argument, the gate's path): hand the controller the pid and
    # llama.cpp's log once Llama() has returned, and wait for its go (kmemsim.validate.live_is)
    if len(sys.argv) > 10:
        _gate = sys.argv[10]
        with open(_gate + ".ready.tmp", "w") as _f:
            json.dump({"pid": os.getpid(), "log": "".join(logs)}, _f)
        os.replace(_gate + ".ready.tmp", _gate + ".ready")
        _g0 = time.monotonic()
        while not os.path.exists(_gate + ".go") and time.monotonic() - _g0 < 600:
            time.sleep(0.002)
        res["gate_wait_s"] = time.monotonic() - _g0
        res["gate_timed_out"] = not os.path.exists(_gate + ".go")
    # the phases on CLOCK_MONOTONIC, the recorder's clock (summary.json t0_monotonic_ns): kmemsim.validate.phases
    res["marks_ns"] = {"load": int(t0 * 1e9)}
    nv = llm.n_vocab()
    bos, eos = llm.token_bos(), llm.token_eos()
    toks = reference_prompt(nv, bos, N)
    import numpy as np
    mark("prompt")
    t2 = time.monotonic()
    llm.eval(toks)
    t3 = time.monotonic()
    res["marks_ns"]["prompt"] = int(t2 * 1e9)
    res["ttft_s"] = t3 - t2
    steps, gen = [], []
    for j in range(M):
        mark("decode")
        a = time.monotonic()
        if j == 0:
            res["marks_ns"]["decode"] = int(a * 1e9)
        # llama-cpp-python 0.3.36's eval() no longer copies logits (logits_all=False): read llama.cpp's buffer
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(nv,)).copy()
        logits[eos] = -np.inf
        tok = int(np.argmax(logits))
        if j % 2 == 0:
            mark("call")                 # warm: every other step split where the interpreter calls llama_decode
        llm.eval([tok])
        steps.append(time.monotonic() - a)
        gen.append(tok)
    mark("end")
    res["marks_ns"]["teardown"] = time.monotonic_ns()
    res["decode_steps_s"] = steps
    res["tpot_s"] = float(np.median(steps)) if steps else None
    res["tokens"] = gen
    res["n_tokens"] = llm.n_tokens
    write()
