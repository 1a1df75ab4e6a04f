"""The reference live run and `kmemsim validate`: llama-cpp-python under the recorder, in a memory
cgroup with zram swap, against `kmemsim predict` for the same configuration.

The reference run (docs/validation.md):
  a fresh Python process (this interpreter, llama-cpp-python 0.3.36), page cache dropped first,
  Llama(model_path, n_ctx=C, n_batch=B, n_ubatch=U, n_threads=T, use_mmap=True, use_mlock=False);
  exactly N prompt tokens evaluated (the first is BOS) and M greedy decode steps with EOS suppressed.
  TTFT = the prompt's evaluation time after load; TPOT = the median decode step, both from the same
  run made again unrecorded right after it (the recorder changes the run it records).
The child writes what llama.cpp logged (buffer sizes) and its timings to a JSON file beside the run.
"""
from __future__ import annotations

import contextlib
import ctypes
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from . import phases
from .errors import InputError
from .samplers import INTERVAL_S, kernel_memory, read_kv
from .units import parse_size

PAGE = 4096


def reference_prompt(n_vocab, bos, n):
    """The reference run's prompt: BOS, then n - 1 ids from the byte-token range upward, spread
    deterministically over the vocabulary. The child runs this very function (its source is copied
    into the child script), and predict feeds the same ids to the workload generator."""
    return [bos] + [259 + (i * 7919) % max(1, n_vocab - 259) for i in range(n - 1)]


# The child process. Standalone (imports only llama_cpp and the standard library) so the engine's
# footprint is llama-cpp-python's, not kmemsim's. Modes: "run" (the reference run), "baseline" (import
# llama_cpp and stop: the interpreter + libraries footprint), "probe" (load metadata only with
# no_alloc and create the context: llama.cpp's own buffer sizes, no weight is read), "warm" (the
# reference run, stopping before the prompt, each decode step and the end for the parent to clear and
# read the pages' referenced bits: engine_warm_set).
CHILD = r'''
import ctypes, json, os, sys, time
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
#MAPPED_FILE_PAGES#
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
# the phases on CLOCK_MONOTONIC, the recorder's clock (summary.json t0_monotonic_ns): kmemsim.phases
res["marks_ns"] = {"load": int(t0 * 1e9)}
nv = llm.n_vocab()
bos, eos = llm.token_bos(), llm.token_eos()
#REFERENCE_PROMPT#
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
'''

_BUF = re.compile(r"(\S+) (model|compute|KV) buffer size =\s*([\d.]+) MiB")
_KV = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")


def buffers_from_log(log: str) -> dict:
    """llama.cpp's own buffer sizes (bytes) from its load log: {'CPU_Mapped model': .., 'CPU_REPACK
    model': .., 'CPU KV': .., 'CPU compute': .., 'CPU output': ..}. Sizes are logged in MiB with two
    decimals, so each is exact to +-5 KiB."""
    out = {}
    for name, kind, mib in _BUF.findall(log):
        key = f"{name} {kind}"
        out[key] = out.get(key, 0) + int(round(float(mib) * 1024 * 1024))
    m = re.search(r"(\S+)\s+output buffer size =\s*([\d.]+) MiB", log)
    if m:
        out[f"{m.group(1)} output"] = int(round(float(m.group(2)) * 1024 * 1024))
    return out


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


def reference_child_source() -> str:
    """The child script's text: CHILD with the sources of reference_prompt and mapped_file_pages."""
    return (CHILD.replace("#REFERENCE_PROMPT#", inspect.getsource(reference_prompt))
            .replace("#MAPPED_FILE_PAGES#", inspect.getsource(mapped_file_pages)))


def child_script(dirpath) -> str:
    p = os.path.join(dirpath, "kmemsim_reference_child.py")
    with open(p + ".tmp", "w") as f:
        f.write(reference_child_source())
    os.replace(p + ".tmp", p)
    return p


def model_size(model) -> int:
    try:
        return os.path.getsize(model)
    except OSError:
        raise InputError(f"cannot read model {model!r}: no such file") from None


def parse_limits(spec, model_bytes) -> list[tuple[str, int]]:
    """'40%,60%,1G' -> [('40%', bytes), ...]; percents are of the model file's size."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if part.endswith("%"):
            try:
                pct = float(part[:-1])
            except ValueError:
                raise InputError(f"--mem-limit {part!r}: expected a percent like 60% or a size like 512M") from None
            if pct <= 0:
                raise InputError(f"--mem-limit {part!r}: must be positive")
            out.append((part, int(model_bytes * pct / 100) // PAGE * PAGE))
        else:
            out.append((part, parse_size(part, "--mem-limit") // PAGE * PAGE))
    if not out:
        raise InputError("--mem-limit: no limit given (e.g. 40%,60%,80%,100%,120%)")
    return out


# ------------------------------------------------------------------------------------------------
# The live side

def _child_argv(script, mode, out, model=None, prompt=0, decode=0, ctx=0, batch=512, ubatch=512, threads=2):
    argv = [sys.executable, script, mode, out]
    if model is not None:
        argv += [os.path.abspath(model), str(prompt), str(decode), str(ctx), str(batch), str(ubatch),
                 str(threads)]
    return argv


def _child_env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)          # the child needs only llama_cpp: keep kmemsim out of its imports
    return env


@contextlib.contextmanager
def child_pythonpath_removed():
    """run_command() starts the child with this process's environment: drop PYTHONPATH around it, as
    _child_env() does for subprocess.run, so kmemsim stays out of the child's imports."""
    old = os.environ.pop("PYTHONPATH", None)
    try:
        yield
    finally:
        if old is not None:
            os.environ["PYTHONPATH"] = old


def _reference_child(model, prompt, decode, ctx, mem_limit, outdir, batch, ubatch, threads, zram, swappiness,
                     memcg_interval, record) -> int:
    """One reference run in `outdir` (kmemsim.recorder.run_command, recorded or not); its exit status."""
    from .recorder import run_command
    os.makedirs(outdir, exist_ok=True)
    script = child_script(outdir)
    res_path = os.path.join(outdir, "llama_result.json")
    argv = _child_argv(script, "run", res_path, model, prompt, decode, ctx, batch, ubatch, threads)
    with child_pythonpath_removed():
        rc = run_command(argv, os.path.join(outdir, "run"), mem_limit=mem_limit, zram=zram,
                         swappiness=swappiness, drop_caches=True, smaps_interval=0, record=record,
                         memcg_interval=memcg_interval)
    if rc == 130:                        # the recording was interrupted: stop, don't go on to the next limit
        raise KeyboardInterrupt("live run interrupted")
    return rc


def live_run(model, prompt, decode, ctx, mem_limit, outdir, batch=512, ubatch=512, threads=2,
             zram="lz4:4G", swappiness=60, memcg_interval=INTERVAL_S) -> dict:
    """The reference run under the recorder (reading the cgroup's memory.stat every memcg_interval
    s), then the same run unrecorded in `outdir`/unrecorded/ for its times (UNRECORDED). Returns the
    measured metrics; the run directory is `outdir`."""
    args = (model, prompt, decode, ctx, mem_limit)
    rest = (batch, ubatch, threads, zram, swappiness, memcg_interval)
    rc = _reference_child(*args, outdir, *rest, record=True)
    _reference_child(*args, os.path.join(outdir, UNRECORDED), *rest, record=False)
    return measured(outdir, model, rc)


def recorded_memcg_interval(outdir):
    """How often the recorder read the run's memory.stat (its command.json; runs recorded before
    --memcg-interval read it at every tick)."""
    with open(os.path.join(outdir, "run", "command.json")) as f:
        return json.load(f).get("memcg_interval", INTERVAL_S)


def _peak_kernel_memory(run_dir):
    """The cgroup's largest kernel-memory charge (v1's watermark; else the largest sampled), or None
    (a run recorded without either)."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        peak = json.load(f).get("kernel_memory_peak_bytes")
    if peak is not None:
        return peak
    p = os.path.join(run_dir, "samples.parquet")
    if not os.path.exists(p):
        return None
    k = kernel_memory(pd.read_parquet(p))
    return int(k.max()) if k is not None and len(k) else None


# The recorder changes the run it records: its reads of the cgroup's memory.stat flush the memcg
# statistics reclaim decides by (at tiny 120%, 60-79 major faults recorded against 5-10 k
# unrecorded), and its probes cost a little time (before session 16 a lot: qwen 60% decoded a token
# in 5.17 s recorded, 1.97 s unrecorded). The times reported, and the unobserved prediction's
# comparison, are those of the same run unrecorded, made right after it (live_run), as the device
# a prediction stands for runs. Runs recorded before session 15 have none: their own times.
UNRECORDED = "unrecorded"


def _result(outdir) -> dict:
    p = os.path.join(outdir, "llama_result.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def measured(outdir, model, rc=0) -> dict:
    with open(os.path.join(outdir, "run", "summary.json")) as f:
        s = json.load(f)
    res = _result(outdir)
    quiet = _result(os.path.join(outdir, UNRECORDED))
    times = quiet if "tpot_s" in quiet else res
    mp = os.path.realpath(model)
    row = next((v for k, v in s.get("files", {}).items() if os.path.realpath(k) == mp), None)
    if row is None:
        ino = os.stat(model).st_ino
        row = next((v for v in list(s.get("files", {}).values()) + s.get("other_files", [])
                    if v.get("ino") == ino), {"pages_added": 0, "pages_deleted": 0})
    out = {
        "storage_read_bytes": row["pages_added"] * PAGE,
        "file_evicted_bytes": row["pages_deleted"] * PAGE,
        "major_faults": s.get("major_faults"),
        "minor_faults": s.get("minor_faults"),
        "swap_out_bytes": s.get("swap_out_pages", 0) * PAGE,
        "swap_in_bytes": s.get("swap_in_pages", 0) * PAGE,
        "peak_resident_bytes": s.get("peak_resident_bytes"),
        "kernel_memory_bytes": _peak_kernel_memory(os.path.join(outdir, "run")),
        "ttft_s": times.get("ttft_s"),
        "tpot_s": times.get("tpot_s"),
        "times_from": "unrecorded run" if times is quiet else "recorded run",
        "ttft_recorded_s": res.get("ttft_s"),
        "tpot_recorded_s": res.get("tpot_s"),
        "exit_code": rc,
        "complete": bool(s.get("complete")) and rc == 0 and "tpot_s" in res,
        "oom_kills": s.get("oom_kills", 0),
        "lost_events": s.get("lost_events", 0),
        "buffers": buffers_from_log(res.get("log", "")),
    }
    q = os.path.join(outdir, UNRECORDED, "run", "summary.json")
    if os.path.exists(q):
        with open(q) as f:
            qs = json.load(f)
        v = qs.get("vmstat_delta")
        if v:   # what the unrecorded run shows without probes: the machine's vmstat (it ran alone)
            out[UNRECORDED] = {
                "major_faults": qs.get("major_faults"), "minor_faults": qs.get("minor_faults"),
                "swap_out_bytes": v["pswpout"] * PAGE, "swap_in_bytes": v["pswpin"] * PAGE,
                # block reads (PGPGIN counts 1 KiB units, submit_bio()) less the swap-ins among them
                "storage_read_bytes": v["pgpgin"] * 1024 - v["pswpin"] * PAGE,
                "peak_resident_bytes": qs.get("peak_resident_bytes")}
    return out


# ------------------------------------------------------------------------------------------------
# The engine's own footprint, measured the same way for every model

def _cache_dir():
    d = os.environ.get("KMEMSIM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "kmemsim")
    os.makedirs(d, exist_ok=True)
    return d


def _atomic_json(path, obj):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f, indent=1, default=str)
    os.replace(tmp, path)


BASELINE = "engine-baseline.json"        # beside a live run: the engine measured just before it
PROFILE = "device-profile.toml"          # in DIR: the machine's profile the runs are predicted with


def boot_profile_path() -> str:
    """Where this boot's measured device profile is cached (a new machine is a new boot; a profile
    measured another way, profile.METHOD, is measured again)."""
    from .profile import METHOD
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    return os.path.join(_cache_dir(), f"device-profile-{boot}-m{METHOD}.toml")


def device_profile(out, progress=None):
    """The device profile DIR's runs are predicted with (kept in DIR/device-profile.toml, so `--reuse`
    predicts with the profile its runs were made beside). The emulator's clock (reads in flight,
    reclaim and compute time) and the reported TTFT/TPOT come from it, so it must be this machine's:
    workloads/devices/this-machine.toml is whichever machine last ran `kmemsim profile` (session 14:
    that file said 102 us per 4 KiB read, 27 us of reclaim per file folio and a 29 ms decode step of
    the profile's model; this machine measured 43 us, 12 us and 45 ms). A validation without one in DIR
    measures it (`kmemsim profile`, ~60 s, root) once per boot, in a process of its own (its llama.cpp
    run would otherwise map libllama into this one, which the reference child then shares); without
    root, the file is used."""
    from . import device as dev, predict as P
    from .atomic import atomic_write
    path = os.path.join(out, PROFILE)
    if not os.path.exists(path):
        cache = boot_profile_path()
        if not os.path.exists(cache):
            if os.geteuid() != 0:
                return P._this_machine()
            if progress:
                progress("measuring this machine's device profile (kmemsim profile)")
            r = subprocess.run([sys.executable, "-m", "kmemsim.cli", "profile", "-o", cache],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["no output"])[-1]
                raise InputError(f"measuring this machine's device profile failed: {last}; "
                                 "run `kmemsim profile -o FILE` to see why")
        atomic_write(path, Path(cache).read_text())
    return dev.load(path)


def engine_baseline(refresh=False) -> dict:
    """The interpreter + llama-cpp-python footprint before any model: the reference child imports
    llama_cpp and stops, under the recorder, page cache dropped first, no limit. Measured once per
    machine (cached in ~/.cache/kmemsim/engine-baseline.json): anon pages (RssAnon), page cache charged
    to the cgroup (memcg cache: the libraries and .pyc files read, readahead included), the part of
    it mapped (memcg mapped_file), and per file mapped (the recorder's filemap records) the pages it
    added: `libraries`, [name, pages] each; per library its resident pages and those no other
    process maps (`library_rss`, `library_own`). What the child reads itself depends on what this
    process keeps mapped (its own interpreter, the modules it has imported), so `validate` measures
    it again beside each live run (`refresh`)."""
    path = os.path.join(_cache_dir(), BASELINE)
    if os.path.exists(path) and not refresh:
        with open(path) as f:
            res = json.load(f)
        # a cache from before the per-library or kernel-memory records is measured again (as root;
        # else kept as is)
        if ("library_own" in res and "kmem_bytes" in res) or os.geteuid() != 0:
            return res
    from .recorder import run_command, require_root
    require_root()
    with tempfile.TemporaryDirectory(prefix="kmemsim-baseline-") as d:
        script = child_script(d)
        out = os.path.join(d, "baseline.json")
        with child_pythonpath_removed():
            run_command(_child_argv(script, "baseline", out), os.path.join(d, "run"), drop_caches=True,
                        interval=0.005, smaps_interval=0, memcg_interval=0.005)
        s = pd.read_parquet(os.path.join(d, "run", "samples.parquet"))
        with open(out) as f:
            child = json.load(f)
        # the last tick with the process alive: the largest charge
        i = int(np.argmax((s["memcg_total_cache"] + s["memcg_total_rss"]).to_numpy()))
        kmem = kernel_memory(s)
        with open(os.path.join(d, "run", "summary.json")) as f:
            files = json.load(f).get("files", {})
        res = {"file_bytes": int(s["memcg_total_cache"].iloc[i]),
               # the files the engine mapped (libraries, extension modules) and the pages of each it
               # brought into the page cache: each is faulted in on its own, readahead per file
               "libraries": [[os.path.basename(k), int(v["pages_added"])] for k, v in sorted(files.items())
                             if v.get("filemap_faults", 0) > 0 and v.get("pages_added", 0) > 0],
               # per library, its resident pages in executable mappings and in the others
               "library_rss": child.get("file_rss", {}),
               # and of those, the pages no other process maps: the child's own, charged to its
               # cgroup (the recorder's interpreter maps the same libpython, libc, libcrypto)
               "library_own": child.get("file_own"),
               "mapped_file_bytes": int(s["memcg_total_mapped_file"].iloc[i]),
               "anon_bytes": int(child["status"]["RssAnon"]),
               "rss_file_bytes": int(child["status"]["RssFile"]),
               # kernel memory charged to the cgroup (page tables, slab: dentries, inodes, ...)
               "kmem_bytes": int(kmem.iloc[i]) if kmem is not None else 0,
               "python": sys.version.split()[0], "measured": time.time()}
    _atomic_json(path, res)
    return res


def llama_probe(model, ctx, batch=512, ubatch=512, threads=2) -> dict:
    """What llama.cpp itself reports for this model and context, without reading a weight: the model
    loaded with no_alloc (metadata, vocab; buffers simulated) and Llama() built as in the reference
    run. Returns the logged buffer sizes and the process's RssAnon after Llama() (interpreter +
    libraries + llama.cpp's vocab/metadata heap + llama-cpp-python's objects). Cached per model file
    (path, size, mtime) and context."""
    st = os.stat(model)
    key = f"{os.path.realpath(model)}|{st.st_size}|{int(st.st_mtime)}|{ctx}|{batch}|{ubatch}|{threads}"
    import hashlib
    path = os.path.join(_cache_dir(), "probe-" + hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    with tempfile.TemporaryDirectory(prefix="kmemsim-probe-") as d:
        script = child_script(d)
        out = os.path.join(d, "probe.json")
        p = subprocess.run(_child_argv(script, "probe", out, model, 1, 0, ctx, batch, ubatch, threads),
                           env=_child_env(), capture_output=True, text=True, timeout=600)
        if not os.path.exists(out):
            raise InputError(f"llama.cpp could not load {model} (metadata probe failed: "
                             f"{(p.stderr or '').strip().splitlines()[-1:] or p.returncode})")
        with open(out) as f:
            r = json.load(f)
    if not r.get("ok"):
        raise InputError(f"llama.cpp could not create a context for {model}: {r.get('error')}")
    res = {"key": key, "buffers": buffers_from_log(r["log"]), "anon_bytes": r["status_after"]["RssAnon"],
           "anon_before_bytes": r["status_before"]["RssAnon"], "rss_file_bytes": r["status_after"]["RssFile"]}
    _atomic_json(path, res)
    return res


_VMA = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ (\d+)\s*(.*)$")


def _anon_growth(anon_at, steps) -> dict:
    """{"load": bytes, "context": bytes, "prompt": bytes, "decode": bytes per step} from the warm
    run's (mark, RssAnon) stops; load: over llama_model_load_from_file (from Llama() to
    llama_init_from_model), context: from there to the prompt."""
    first = {}
    for tag, a in anon_at:
        first.setdefault(tag, a)
    at = [a for tag, a in anon_at if tag == "decode"]
    return {"load": max(0, first["context"] - first["load"]), "context": max(0, first["prompt"] - first["context"]),
            "prompt": max(0, at[0] - first["prompt"]),
            "decode": max(0, (anon_at[-1][1] - at[0]) // steps)}


def referenced_pages(pid, skip=()) -> dict:
    """Pages of pid with the referenced bit set, from /proc/PID/smaps (`Referenced`: the PTE's young
    bit or the folio's PG_referenced, which clear_refs clears): anonymous (inode 0: heap, stack,
    private mappings) and per file basename, without the files in `skip` and the kernel's special
    mappings ([vdso], [vvar]). A file's count (`files`, `exec`) is the part of its referenced pages
    that pid alone maps, in proportion to its resident pages (mapped_file_pages): the rest another
    process keeps resident, charged to it, out of reach of the reference run's reclaim
    (libpython's text, mapped by the recorder's interpreter); `files_all`, `exec_all` count them
    all."""
    anon, files, execs, cur = 0, {}, {}, None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = _VMA.match(line)
            if m:
                perms, ino, name = m.group(1), int(m.group(2)), m.group(3).strip()
                cur = None if name.startswith("[v") or name in skip else ("" if ino == 0 else os.path.basename(name))
                x = "x" in perms
            elif cur is not None and line.startswith("Referenced:"):
                n = int(line.split()[1]) // (PAGE // 1024)
                if cur == "":
                    anon += n
                elif n:
                    d = execs if x else files
                    d[cur] = d.get(cur, 0) + n
    res = mapped_file_pages(pid, skip)      # not the model's pagemap entries: it is not counted here
    own = [{name: round(n * r[k + 2] / r[k]) if (r := res.get(name)) and r[k] else n for name, n in d.items()}
           for k, d in ((0, execs), (1, files))]
    return {"anon": anon, "files": {k: v for k, v in own[1].items() if v},
            "exec": {k: v for k, v in own[0].items() if v}, "files_all": files, "exec_all": execs}


def _ptrace(request, pid, data=0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return 0 if libc.ptrace(request, pid, None, ctypes.c_void_p(data)) == 0 else ctypes.get_errno()


def _trace_exit(pid):
    """PTRACE_SEIZE pid (a child of this process) with PTRACE_O_TRACEEXIT: it will stop in do_exit()
    at ptrace_event(PTRACE_EVENT_EXIT), before exit_mm(), its address space still whole."""
    err = _ptrace(0x4206, pid, 0x40)
    if err:
        raise InputError(f"cannot trace the warm child's exit (ptrace: {os.strerror(err)}): "
                         "run as root or set kernel.yama.ptrace_scope to 1 or less")


def _measure_at_exit(p, measure):
    """Wait for traced child p's exit stop and return measure(pid) taken there (None if it ended
    without stopping there); the child is let go and reaped, p.returncode set."""
    got = None
    while True:
        _, st = os.waitpid(p.pid, 0)
        if not os.WIFSTOPPED(st):
            p.returncode = os.waitstatus_to_exitcode(st)
            return got
        stop, sig = st >> 8, 0
        if stop == signal.SIGTRAP | (6 << 8):            # PTRACE_EVENT_EXIT
            got = measure(p.pid)
        elif stop & 0xff != signal.SIGTRAP:
            sig = stop & 0xff                            # a signal for the child: deliver it
        _ptrace(7, p.pid, sig)                           # PTRACE_CONT


def warm_steps(decode) -> int:
    """How many decode steps the warm run takes for a run of `decode`: 5 at least (the medians),
    the run's own up to 32 (their token ids)."""
    return max(5, min(int(decode), 32))


def engine_warm_set(model, prompt, ctx, batch=512, ubatch=512, threads=2, steps=5) -> dict:
    """The pages the engine touches around each llama_decode call: the reference run without a limit
    (child mode "warm"), the referenced bits cleared (/proc/PID/clear_refs) before the prompt and
    before each decode step and read (/proc/PID/smaps) after it, by this process while the child waits;
    and the same around Llama()'s two parts (`load`: llama_model_load_from_file, the loader's code,
    most of it run before the model is mapped; `context`: llama_init_from_model, after the model's
    reads);
    every other step is also split where the interpreter calls llama_decode (after reading the logits
    and sampling), so `decode_call` counts the anonymous pages the call alone references.
    Anonymous pages (interpreter, llama-cpp-python, llama.cpp's heap and buffers) and per library the
    pages of its executable mappings (`exec`: text) and of the others (`files`: rodata, relro); the
    model file is left out (the workload generator has it). The
    kernel's reclaim sees these as referenced every step (folio_referenced in shrink_folio_list:
    anon -> activate; a VM_EXEC file page -> activate). Returns {"load": {...}, "context": {...},
    "prompt": {...}, "decode": {...}}, each {"anon": pages, "files": {basename: pages}, "exec":
    {basename: pages}}, and "decode_call":
    {"anon": pages}; decode is the median over the whole steps after the first (the first also touches
    what it allocates), decode_call over the split ones; and "teardown", what the child references
    from the end of its last step to its exit, read at the exit stop (ptrace's PTRACE_EVENT_EXIT,
    before exit_mm() unmaps everything), with its RssAnon there and before (`rss_anon`,
    `rss_anon_before`). Cached per model file, prompt and context."""
    import hashlib
    st = os.stat(model)
    key = (f"{os.path.realpath(model)}|{st.st_size}|{int(st.st_mtime)}|{prompt}|{ctx}|{batch}|{ubatch}|"
           f"{threads}|{steps}|call|growth|load|context|own|teardown|loadgrowth|ctx")
    path = os.path.join(_cache_dir(), "warm-" + hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    windows = []                      # (mark opening it, mark closing it, decode step, referenced pages)
    anon_at = []                      # (mark, the child's RssAnon in bytes when it stopped there)
    with tempfile.TemporaryDirectory(prefix="kmemsim-warm-") as d:
        script = child_script(d)
        out = os.path.join(d, "warm.json")
        err = open(os.path.join(d, "stderr"), "w+")
        p = subprocess.Popen(_child_argv(script, "warm", out, model, prompt, steps, ctx, batch, ubatch, threads),
                             env=_child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            cur, step, skip, teardown = None, -1, {os.path.realpath(model), os.path.abspath(model)}, None
            for line in p.stdout:
                if not line.startswith("KMEMSIM "):
                    continue
                tag = line.split()[1]
                anon_at.append((tag, read_kv(f"/proc/{p.pid}/status").get("RssAnon", 0) * 1024))
                if cur:
                    windows.append((cur, tag, step, referenced_pages(p.pid, skip)))
                step += tag == "decode"
                cur = tag
                if cur == "end":
                    end_anon = anon_at[-1][1]
                    _trace_exit(p.pid)
                with open(f"/proc/{p.pid}/clear_refs", "w") as f:
                    f.write("1")          # clear the referenced bits of every page of the child
                p.stdin.write("\n")
                p.stdin.flush()
                if cur == "end":
                    # the teardown (Py_FinalizeEx, llama_free, llama_model_free) up to the exit stop
                    teardown = _measure_at_exit(p, lambda pid: referenced_pages(pid, skip) | {
                        "rss_anon": read_kv(f"/proc/{pid}/status").get("RssAnon", 0) * 1024,
                        "rss_anon_before": end_anon})
                    break
            p.wait(timeout=600)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        if p.returncode != 0 or len(windows) != 3 + steps + (steps + 1) // 2 or teardown is None:
            err.seek(0)
            raise InputError(f"llama.cpp could not run {model} to measure the engine's warm set "
                             f"({(err.read().strip().splitlines() or [p.returncode])[-1]})")
        with open(out) as f:
            tokens = json.load(f)["tokens"]
    dec = [r for a, b, j, r in windows if a == "decode" and b != "call" and j >= 1]
    call = [r for a, b, j, r in windows if a == "call" and j >= 1] or [r for a, b, j, r in windows if a == "call"]
    med = lambda xs: int(np.median(xs))
    res = {"key": key, "load": windows[0][3], "context": windows[1][3], "prompt": windows[2][3],
           "decode": {"anon": med([r["anon"] for r in dec])} | {
               k: {n: med([r[k].get(n, 0) for r in dec]) for n in sorted({n for r in dec for n in r[k]})}
               for k in ("files", "exec", "files_all", "exec_all")},
           "decode_call": {"anon": med([r["anon"] for r in call])},
           # what the process's anonymous memory grows by (new pages: llama.cpp's compute buffer as
           # far as the graph reaches, ggml's work buffer, the logits rows llama-cpp-python keeps):
           # over the prompt's call, and per decode step (mean over the steps); over the model's
           # load (the loader's metadata and vocabulary, its load-time buffers) and the context's
           # creation (the KV cache, llama_context's structures)
           "anon_growth": _anon_growth(anon_at, steps),
           # the greedy decode's ids: the weights decide them, so every run of this model and
           # prompt, under any limit, generates these (their token_embd rows are what decode reads)
           "tokens": tokens,
           # what the teardown references, from the last decode step to the exit stop: the heap
           # Py_FinalizeEx and the destructors walk (llama.cpp's buffers are unmapped untouched)
           "teardown": teardown,
           "steps": [dict(r, window=f"{a}-{b}") for a, b, _, r in windows[3:]]}
    _atomic_json(path, res)
    return res


# ------------------------------------------------------------------------------------------------
# kmemsim validate: live vs predicted, per limit

METRICS = ["storage_read_bytes", "file_evicted_bytes", "major_faults", "minor_faults", "swap_out_bytes",
           "swap_in_bytes", "peak_resident_bytes", "kernel_memory_bytes", "ttft_s", "tpot_s"]
# the bounds of issue 5 (relative error); swap only where swapping happened; minor faults, swap-ins,
# kernel memory and times are reported without a bound
BOUNDS = {"storage_read_bytes": 0.10, "file_evicted_bytes": 0.10, "peak_resident_bytes": 0.10,
          "major_faults": 0.20, "swap_out_bytes": 0.20}


def rel_error(pred, meas):
    if pred is None or meas is None:
        return None
    if meas == 0:
        return 0.0 if pred == 0 else float("inf")
    return (pred - meas) / meas


def within(metric, pred, meas):
    b = BOUNDS.get(metric)
    if b is None or pred is None or meas is None:
        return None
    if metric == "swap_out_bytes" and meas < 1 << 20 and pred < 1 << 20:
        return True                      # no swapping on either side (< 1 MiB)
    if metric == "file_evicted_bytes" and max(pred, meas) < 4 << 20:
        return True                      # nothing (< 4 MiB) evicted on either side
    e = rel_error(pred, meas)
    return e is not None and abs(e) <= b


def check_args(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness):
    size = model_size(model)
    for k, v in (("--prompt", prompt), ("--ctx", ctx), ("--batch", batch), ("--ubatch", ubatch),
                 ("--threads", threads)):
        if v is None or int(v) <= 0:
            raise InputError(f"{k} must be positive (got {v})")
    if decode < 0:
        raise InputError(f"--decode must not be negative (got {decode})")
    if prompt + decode > ctx:
        raise InputError(f"--prompt + --decode = {prompt + decode} exceeds --ctx {ctx}")
    if not 0 <= swappiness <= 200:
        raise InputError(f"--swappiness {swappiness}: expected 0..200")
    if zram:
        from .swap_setup import parse_zram
        parse_zram(zram)
    return parse_limits(limits, size)


SENSITIVITY = (0.99, 1.01)     # engine heap factors of the sensitivity band (validation.csv, .md)


def _has_run(d) -> bool:
    """A live run was recorded in d (its run directory's summary)."""
    return os.path.exists(os.path.join(d, "run", "summary.json"))


def run_dirs(d, repeat=1, reuse=False) -> list:
    """The directories of a limit's live runs: the first is d itself, repetition i (2, 3, ...) is
    d/repeat-<i>. With reuse, every run already there counts too."""
    n = max(1, int(repeat))
    if reuse:
        while _has_run(os.path.join(d, f"repeat-{n + 1}")):
            n += 1
    return [d] + [os.path.join(d, f"repeat-{i}") for i in range(2, n + 1)]


def combine(runs: list) -> dict:
    """The live figures of repeated runs of one limit: per metric the median (the one compared) and
    the lowest and highest run. The kernel moves between runs of the same configuration (and is
    bistable at some limits, docs/validation.md), so one run alone can mislead either way."""
    out = {}
    for m in METRICS:
        v = [r.get(m) for r in runs if r.get(m) is not None]
        out[m] = (float(np.median(v)), min(v), max(v), v) if v else (None, None, None, [])
    return out


def validate(model, prompt, decode, ctx, limits, out, batch=512, ubatch=512, threads=2, zram="lz4:4G",
             swappiness=60, reuse=False, progress=None, repeat=1, memcg_interval=INTERVAL_S) -> pd.DataFrame:
    """For each limit: `repeat` live reference runs (with reuse, those already in out/<label>/ and its
    repeat-<i>/), the prediction, and the comparison against the runs' median. Writes
    out/validation.csv, validation.md, plots/ and per-limit predicted.json / measured.json (each
    run's; each run's unrecorded twin, whose times are reported, in its unrecorded/),
    engine-baseline.json (the engine measured just before each run; the prediction uses the first
    run's, also when reused) and device-profile.toml (device_profile); the phase table and plots
    are the first run's. memcg_interval: how often the recorder reads the cgroup's memory.stat
    (kmemsim run --memcg-interval; 0: at the start and end only, the kernel as it runs unobserved);
    a reused run is predicted with the period it was recorded with. Returns the long table."""
    from . import predict as P
    lims = check_args(model, prompt, decode, ctx, batch, ubatch, threads, limits, zram, swappiness)
    if int(repeat) < 1:
        raise InputError(f"--repeat must be at least 1 (got {repeat})")
    dirs = {label: run_dirs(os.path.join(out, label.replace("%", "pct")), repeat, reuse) for label, _ in lims}
    reused = {rd: reuse and _has_run(rd) for ds in dirs.values() for rd in ds}
    if not all(reused.values()):
        from .recorder import require_root
        require_root()                   # before anything runs: a live run is still to be made
    os.makedirs(out, exist_ok=True)
    engine = None                        # the cached baseline, for runs recorded without their own
    probe = llama_probe(model, ctx, batch, ubatch, threads)
    warm = engine_warm_set(model, prompt, ctx, batch, ubatch, threads, warm_steps(decode))
    prof = device_profile(out, progress)
    rows = []
    runs = {}
    for label, limit in lims:
        d = dirs[label][0]
        live = []
        n, k = len(dirs[label]), sum(reused[rd] for rd in dirs[label])
        if progress and k:
            progress(f"{label} ({limit / 2**20:.0f} MiB): reusing {k} of {n} live runs")
        for i, rd in enumerate(dirs[label], 1):
            if progress and not reused[rd]:
                progress(f"{label} ({limit / 2**20:.0f} MiB): live run" + (f" {i} of {n}" if n > 1 else ""))
            if reused[rd]:
                meas = measured(rd, model)
            else:
                # the engine's start-up measured just before its run, as this process is then: the
                # pages it keeps mapped (the interpreter, the modules imported so far) the child
                # neither reads nor is charged for (engine_baseline)
                os.makedirs(rd, exist_ok=True)
                _atomic_json(os.path.join(rd, BASELINE), engine_baseline(refresh=True))
                meas = live_run(model, prompt, decode, ctx, limit, rd, batch, ubatch, threads, zram, swappiness,
                                memcg_interval)
            _atomic_json(os.path.join(rd, "measured.json"), meas)
            live.append(meas)
        if os.path.exists(os.path.join(d, BASELINE)):
            with open(os.path.join(d, BASELINE)) as f:
                eng = json.load(f)
        else:
            eng = engine = engine or engine_baseline()
        # the reference run as it ran, under the recorder (reclaim at the cost it paid there, the
        # memcg statistics as fresh as its reads of them keep them), for what it measured
        age = P.stats_age_ms(recorded_memcg_interval(d))
        args = (model, prompt, decode, ctx, limit, batch, ubatch, threads, zram, swappiness)
        kw = dict(engine=eng, probe=probe, warm=warm, device=prof)
        pred = P.predict(*args, **kw, keep_result=True, recorded=True, stats_flush_ms=age)
        res = pred.pop("_result")
        pred.pop("_trace")
        # and as its unrecorded twin ran, the device unobserved: reclaim at its unobserved cost, the
        # statistics as old as the kernel alone leaves them; its times are the ones reported
        quiet = P.predict(*args, **kw, stats_flush_ms=P.FLUSH_TIME_MS)
        # where the kernel's own flush sets the statistics' age, its timer's phase is the run's chance:
        # the same predictions at the other phases (P.FLUSH_PHASES) give the range it spans
        def over_phase(flush_ms, **k):
            return [P.predict(*args, **kw, **k, stats_flush_ms=flush_ms, stats_flush_phase_ms=f * flush_ms)
                    for f in P.FLUSH_PHASES[1:]]
        phased = over_phase(age, recorded=True) if age >= P.FLUSH_TIME_MS else []
        quiet_phased = over_phase(P.FLUSH_TIME_MS)
        pred.update({"ttft_recorded_s": pred["ttft_s"], "tpot_recorded_s": pred["tpot_s"],
                     "ttft_s": quiet["ttft_s"], "tpot_s": quiet["tpot_s"],
                     UNRECORDED: dict({m: quiet.get(m) for m in METRICS},
                                      stats_flush_ms=quiet["config"]["stats_flush_ms"],
                                      reclaim_costs=quiet["config"]["reclaim_costs"],
                                      over_flush_phase={m: [q.get(m) for q in [quiet] + quiet_phased]
                                                        for m in METRICS})})
        if phased:
            pred["over_flush_phase"] = {m: [q.get(m) for q in [pred] + phased] for m in METRICS}
        # Sensitivity, not an error bar: the same prediction with the engine's measured heap 1%
        # smaller and larger. Near a tipping point (reclaim turning to anon or not, a cyclic scan
        # just fitting) a few hundred KiB move the outcome as much as the bound allows.
        band = [P.predict(*args, **dict(kw, probe=dict(probe, anon_bytes=int(probe["anon_bytes"] * f))),
                          recorded=True, stats_flush_ms=age)
                for f in SENSITIVITY]
        _atomic_json(os.path.join(d, "predicted.json"), pred)
        runs[label] = (d, res, live[0])
        med = combine(live)
        for m in METRICS:
            p = pred.get(m)
            q, lo, hi, each = med[m]
            # the band is of the recorded run's reclaim costs: no band for the unobserved times
            alt = [v for v in [p] + ([] if m in ("ttft_s", "tpot_s") else [b.get(m) for b in band + phased])
                   if v is not None]
            qs = [v for v in pred[UNRECORDED]["over_flush_phase"][m] if v is not None]
            rows.append({"model": os.path.basename(model), "model_bytes": model_size(model), "limit": label,
                         "limit_bytes": limit, "metric": m, "predicted": p, "measured": q,
                         "measured_lo": lo, "measured_hi": hi, "live_runs": len(each),
                         "predicted_lo": min(alt) if alt else None, "predicted_hi": max(alt) if alt else None,
                         "rel_error": rel_error(p, q), "bound": BOUNDS.get(m), "within": within(m, p, q),
                         # within the bound of at least one run: the prediction is one the kernel made
                         "within_some_run": (any(within(m, p, v) for v in each)
                                             if BOUNDS.get(m) is not None and p is not None and each else None),
                         "live_complete": all(r.get("complete") for r in live),
                         "oom_kills": sum(r.get("oom_kills") or 0 for r in live),
                         # the first run made again unrecorded, what it shows without probes (the
                         # recorder moves the kernel too: docs/validation.md, "The reference run"),
                         # beside the prediction of the device unobserved
                         "measured_unrecorded": (live[0].get(UNRECORDED) or {}).get(m),
                         "predicted_unrecorded": pred[UNRECORDED].get(m),
                         "predicted_unrecorded_lo": min(qs) if qs else None,
                         "predicted_unrecorded_hi": max(qs) if qs else None})
    df = pd.DataFrame(rows)
    write_outputs(df, out, runs, model)
    return df


def score(df: pd.DataFrame) -> pd.DataFrame:
    """Cells within the issue's bounds, per model and bounded metric: `within` (against the median of
    the runs), `some_run` (within the bound of at least one run) and `cells` (limits predicted)."""
    d = df[df["metric"].isin(list(BOUNDS))]
    g = d.groupby(["model", "metric"], sort=False)
    true = lambda s: int(s.eq(True).sum())
    out = pd.DataFrame({"within": g["within"].apply(true), "some_run": g["within_some_run"].apply(true),
                        "cells": g["within"].apply(lambda s: int(s.notna().sum()))})
    return out.reset_index()


def score_markdown(df: pd.DataFrame) -> str:
    """'k / n' within the bounds per model and bounded metric, and in all when there are several
    models; with repeated runs, within the bound of some run beside it."""
    s = score(df)
    if s.empty:
        return ""
    many = int(df["live_runs"].max()) > 1 if "live_runs" in df else False
    models = list(dict.fromkeys(s["model"]))
    rows = [(m, s[s["model"] == m]) for m in models]
    if len(models) > 1:
        rows.append(("all", s.groupby("metric", sort=False)[["within", "some_run", "cells"]].sum().reset_index()))
    cols = [m for m in BOUNDS if m in set(s["metric"])]
    lines = ["Limits within the bound (" + ", ".join(f"{m} {BOUNDS[m] * 100:.0f}%" for m in cols) + ")"
             + (": against the median of the runs (in brackets: of at least one run)" if many else "") + "\n",
             "| model | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for name, t in rows:
        t = t.set_index("metric")
        cell = lambda m: ("-" if m not in t.index else f"{t.loc[m, 'within']} / {t.loc[m, 'cells']}"
                          + (f" ({t.loc[m, 'some_run']})" if many else ""))
        lines.append(f"| {name} | " + " | ".join(cell(m) for m in cols) + " |")
    return "\n".join(lines) + "\n\n"


GRID_METRICS = ("storage_read_bytes", "file_evicted_bytes", "major_faults", "swap_out_bytes",
                "peak_resident_bytes", "ttft_s", "tpot_s")


GRID_NOTE = ("predicted / measured (error), measured the median run [lowest .. highest run] where there were "
             "several; **✗** outside the bound, *~* outside the median's bound but within one run's.\n")


def grid_markdown(df: pd.DataFrame) -> str:
    """Models by limits, one column per metric: 'predicted / measured [lowest .. highest run] (error)',
    a miss marked (GRID_NOTE)."""
    lines = ["| model | limit | " + " | ".join(GRID_METRICS) + " |", "|---|---|" + "---:|" * len(GRID_METRICS)]
    known = lambda v: v is not None and not pd.isna(v)
    for (model, limit), g in df.groupby(["model", "limit"], sort=False):
        g = g.set_index("metric")
        cells = []
        for m in GRID_METRICS:
            if m not in g.index:
                cells.append("-")
                continue
            r = g.loc[m]
            span = (f" [{_fmt(m, r.measured_lo)} .. {_fmt(m, r.measured_hi)}]"
                    if r.get("live_runs", 1) > 1 and known(r.get("measured_lo")) else "")
            e = f" ({r.rel_error * 100:+.0f}%)" if known(r.rel_error) and not np.isinf(r.rel_error) else ""
            some = r.get("within_some_run")
            miss = "" if not known(r.within) or r.within else (" *~*" if known(some) and some else " **✗**")
            cells.append(f"{_fmt(m, r.predicted)} / {_fmt(m, r.measured)}{span}{e}{miss}")
        lines.append(f"| {model} | {limit} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_summary(out, df: pd.DataFrame):
    """DIR/validation.csv and DIR/summary.md over several models validated into DIR/<model>/."""
    from .rundir import atomic_write
    atomic_write(os.path.join(out, "validation.csv"), lambda tmp: df.to_csv(tmp, index=False))
    md = ("# kmemsim validate: summary\n\n" + score_markdown(df) + grid_markdown(df) + "\n" + GRID_NOTE
          + "Each model's full table, its unrecorded twins and its per-phase tables are in its own "
          "validation.md.\n")
    atomic_write(os.path.join(out, "summary.md"), lambda tmp: open(tmp, "w").write(md))


def _fmt(metric, v):
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if metric.endswith("_bytes"):
        return f"{v / 2**20:.1f}M"
    if metric.endswith("_s"):
        return f"{v:.3f}s"
    return f"{int(v)}"


def markdown(df: pd.DataFrame) -> str:
    """The table of validation.md: one row per limit and metric. With repeated runs, measured is their
    median, beside the lowest and highest run and whether the prediction is within the bound of at
    least one of them."""
    runs = int(df["live_runs"].max()) if "live_runs" in df and len(df) else 1
    many = runs > 1
    hdr = "| model | limit | metric | predicted | measured | error | bound | predicted, engine heap ±1% |"
    sep = "|---|---|---|---:|---:|---:|---|---:|"
    if many:
        hdr += " measured, lowest .. highest run (runs) | within the bound of a run |"
        sep += "---:|---|"
    lines = [hdr, sep]
    nan = lambda v: v is None or (isinstance(v, float) and np.isnan(v))
    for r in df.itertuples():
        e = "-" if nan(r.rel_error) else ("inf" if np.isinf(r.rel_error) else f"{r.rel_error * 100:+.1f}%")
        ok = "" if nan(r.within) else ("ok" if r.within else "**MISS**")
        b = "" if nan(r.bound) else f"{r.bound * 100:.0f}% {ok}"
        lo, hi = getattr(r, "predicted_lo", None), getattr(r, "predicted_hi", None)
        band = f"{_fmt(r.metric, lo)} .. {_fmt(r.metric, hi)}" if _fmt(r.metric, lo) != "-" else "-"
        line = (f"| {r.model} | {r.limit} ({r.limit_bytes / 2**20:.0f}M) | {r.metric} | "
                f"{_fmt(r.metric, r.predicted)} | {_fmt(r.metric, r.measured)} | {e} | {b} | {band} |")
        if many:
            some = "" if nan(r.within_some_run) else ("yes" if r.within_some_run else "no")
            line += (f" {_fmt(r.metric, r.measured_lo)} .. {_fmt(r.metric, r.measured_hi)} ({r.live_runs}) |"
                     f" {some} |")
        lines.append(line)
    return "\n".join(lines) + "\n"


TIMES_NOTE = ("\nttft_s and tpot_s are measured in the same run made again unrecorded (each limit's "
              f"`{UNRECORDED}/`; runs recorded without one: the recorded run's own), as the device runs "
              "unobserved: the recorder's probes cost time, and its reads of the cgroup's memory.stat change "
              "what reclaim does (docs/recorder.md).\n")


UNRECORDED_METRICS = ("major_faults", "minor_faults", "swap_out_bytes", "swap_in_bytes", "peak_resident_bytes")


def markdown_unrecorded(df: pd.DataFrame) -> str:
    """The unrecorded twins beside the prediction of the device unobserved (no bound): what needs no
    probe (wait4() faults, the machine's pswpout/pswpin, the memcg's peak)."""
    if "predicted_unrecorded" not in df:
        return ""
    d = df[df["metric"].isin(UNRECORDED_METRICS) & df["measured_unrecorded"].notna()]
    if not len(d):
        return ""
    lines = ["\nThe same runs made again unrecorded, beside the prediction of the device unobserved (reclaim "
             "at its unobserved cost, the memcg statistics as old as the kernel alone leaves them; no bound):\n",
             "| model | limit | metric | predicted, unobserved | measured, unrecorded | error "
             "| predicted over the kernel's flush phase |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in d.itertuples():
        e = rel_error(r.predicted_unrecorded, r.measured_unrecorded)
        e = "-" if e is None or np.isnan(e) else ("inf" if np.isinf(e) else f"{e * 100:+.1f}%")
        lo, hi = getattr(r, "predicted_unrecorded_lo", None), getattr(r, "predicted_unrecorded_hi", None)
        rng = "-" if lo is None or pd.isna(lo) else f"{_fmt(r.metric, lo)} .. {_fmt(r.metric, hi)}"
        lines.append(f"| {r.model} | {r.limit} | {r.metric} | {_fmt(r.metric, r.predicted_unrecorded)} | "
                     f"{_fmt(r.metric, r.measured_unrecorded)} | {e} | {rng} |")
    return "\n".join(lines) + "\n"


def write_outputs(df, out, runs, model):
    from .rundir import atomic_write
    atomic_write(os.path.join(out, "validation.csv"), lambda tmp: df.to_csv(tmp, index=False))
    ph = phases.table(runs, model)
    atomic_write(os.path.join(out, "validation-phases.csv"), lambda tmp: ph.to_csv(tmp, index=False))
    md = score_markdown(df) + markdown(df) + TIMES_NOTE + markdown_unrecorded(df) + phases.markdown(ph)
    atomic_write(os.path.join(out, "validation.md"), lambda tmp: open(tmp, "w").write(md))
    try:
        plots(out, runs, model)
    except Exception as e:            # noqa: BLE001 - plots are a convenience; the table is the result
        with open(os.path.join(out, "plots-error.txt"), "w") as f:
            f.write(f"{type(e).__name__}: {e}\n")


def plots(out, runs, model):
    """Per limit: resident file and anon memory, cumulative page-cache adds, and the memcg's file
    LRU lists (where the recorder sampled memory.stat through the run), predicted beside measured,
    on the phase axis (kmemsim.phases.axis: start-up, load, prompt, decode, teardown, each
    stretched to one unit; the emulator's clock is the generator's placeholder, not seconds)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from .rundir import atomic_write
    pdir = os.path.join(out, "plots")
    os.makedirs(pdir, exist_ok=True)
    ino = os.stat(model).st_ino
    for label, (d, res, meas) in runs.items():
        fig, ax = plt.subplots(1, 3, figsize=(18, 4))
        s = pd.read_parquet(os.path.join(d, "run", "samples.parquet"))
        with open(os.path.join(d, "llama_result.json")) as f:
            starts, _ = phases.boundaries(os.path.join(d, "run"), json.load(f), model)
        tl = res.timeline
        xs = phases.axis(s["t"], starts, s["t"].max())
        xp = phases.predicted_axis(tl)
        # measured from the records and /proc/PID/status, not memory.stat: the recorder may read that
        # only at the start and end (--memcg-interval 0), as each read changes reclaim
        f = pd.read_parquet(os.path.join(d, "run", "raw", "filemap.parquet"))
        ch = pd.concat([phases.tracked(f[f["kind"] == "add"]), f[f["kind"] == "delete"]]).sort_values("t")
        pages = np.left_shift(1, ch["order"].to_numpy().astype(np.int64)) * np.where(ch["kind"] == "add", 1, -1)
        ax[0].plot(phases.axis(ch["t"], starts, s["t"].max()), np.cumsum(pages) * PAGE / 2**20,
                   label="file (measured, page cache added less deleted)")
        ax[0].plot(xs, s["status_RssAnon"] / 2**20, label="anon (measured, RssAnon)")
        ax[0].plot(xp, tl["nr_file_pages"] * PAGE / 2**20, "--", label="file (predicted)")
        ax[0].plot(xp, tl["nr_anon_pages"] * PAGE / 2**20, "--", label="anon (predicted)")
        ax[0].set_ylabel("MiB")
        ax[0].set_title(f"resident memory, limit {label}")
        for g, what in ((phases.tracked(f[f["kind"] == "add"]), "all files"),     # as validation-phases.csv
                        (f[(f["kind"] == "add") & (f["ino"] == ino)], "model")):
            ax[1].plot(phases.axis(g["t"], starts, s["t"].max()),
                       np.cumsum(np.left_shift(1, g["order"].to_numpy().astype(np.int64))) * PAGE / 2**20,
                       label=f"{what} (measured)")
        ax[1].plot(xp, tl["file_pages_added"] * PAGE / 2**20, "--", label="all files (predicted)")
        ax[1].axhline(os.path.getsize(model) / 2**20, color="grey", lw=0.5, label="model size")
        ax[1].set_ylabel("MiB read into the page cache")
        ax[1].set_title("cumulative storage reads")
        # the file LRU lists: whether the active list holds the workingset (docs/validation-notes.md, item 7)
        for lst, color in (("active", "C0"), ("inactive", "C1")):
            col = phases.memcg_stat(s, f"{lst}_file")
            m = s[["t", col]].dropna() if col else s.iloc[:0]
            if len(m) > 10:
                ax[2].plot(phases.axis(m["t"], starts, s["t"].max()), m[col] / 2**20, color=color,
                           label=f"{lst} file (measured)")
            ax[2].plot(xp, tl[f"nr_{lst}_file"] * PAGE / 2**20, "--", color=color,
                       label=f"{lst} file (predicted)")
        ax[2].set_ylabel("MiB")
        ax[2].set_title("file LRU lists (memcg)")
        for a in ax:
            a.set_xticks(np.arange(len(phases.PHASES)) + 0.5, phases.PHASES)
            for x in range(1, len(phases.PHASES)):
                a.axvline(x, color="grey", lw=0.3)
            a.legend(fontsize=7, loc="upper left")     # "best" searches every point: slow on long runs
        fig.tight_layout()
        name = os.path.join(pdir, f"{label.replace('%', 'pct')}.png")
        atomic_write(name, lambda tmp: fig.savefig(tmp, format="png", dpi=90))
        plt.close(fig)
