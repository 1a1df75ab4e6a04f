"""The engine's own footprint, measured on this machine the same way for every model, for the
prediction of a reference run: the interpreter and llama-cpp-python before any model
(engine_baseline), what llama.cpp reports for a model without reading a weight (llama_probe), the pages
the engine touches around each llama_decode call (engine_warm_set, by /proc's referenced bits and a
ptrace stop at exit), and this machine's device profile (device_profile). Each is cached (per boot,
model, context) in kmemsim.core.data.cache_dir(), keyed also on what it depends on beyond the model
(environment(): llama-cpp-python's version, the kernel, Python), and not cached when other programs
kept the machine busy while it was measured (Busy)."""
from __future__ import annotations

import ctypes
import hashlib
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

from ..core.atomic import atomic_json, atomic_write
from ..core.data import DEVICES, cache_dir
from ..core.errors import InputError
from ..core.progress import say
from ..core.units import PAGE_SIZE
from ..engine.time import device as dev
from ..live.profile import METHOD
from ..live.recorder import require_root, run_command
from ..live.samplers import kernel_memory, read_kv
from .child import mapped_file_pages
from .reference import buffers_from_log, child_argv, child_env, child_pythonpath_removed, child_script

BASELINE = "engine-baseline.json"        # beside a live run: the engine measured just before it
PROFILE = "device-profile.toml"          # in DIR: the machine's profile the runs are predicted with


def environment() -> dict:
    """What a cached measurement depends on beyond the model and its context: llama-cpp-python's
    version (its llama.cpp sizes the buffers and runs the graph), the kernel (what a process's
    pages and the page cache look like) and Python (the interpreter's own heap and libraries)."""
    import importlib.metadata
    import platform
    try:
        llama = importlib.metadata.version("llama_cpp_python")
    except importlib.metadata.PackageNotFoundError:
        llama = "none"
    return {"llama_cpp_python": llama, "kernel": os.uname().release, "python": platform.python_version()}


def _env_tag() -> str:
    return hashlib.sha1(json.dumps(environment(), sort_keys=True).encode()).hexdigest()[:10]


def baseline_cache_path() -> str:
    """Where the engine baseline is cached: one per environment()."""
    return os.path.join(cache_dir(), f"engine-baseline-{_env_tag()}.json")


# A measurement taken while other programs kept the CPUs busy is not kept. What they used is the
# machine's CPU time over the measurement (/proc/stat's cpu line: all but idle and iowait, steal
# included) less this process's and its children's own (getrusage: the measurement is ours, its
# children reaped before the check): over BUSY_SHARE of the CPUs' time means the machine was busy.
# (/proc/pressure/cpu and /proc/loadavg cannot tell: the measurement's own threads wait for the CPUs
# too, and count as load.)
BUSY_SHARE = 0.25


def _cpu_busy_s():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")      # less idle and iowait


def _own_cpu_s():
    import resource
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


class Busy:
    """Other programs' CPU use over a measurement: `with Busy() as b: ...` leaves b.reason None when
    the machine was quiet enough to cache the result, else says why not."""

    def __enter__(self):
        self.t0, self.c0, self.o0, self.reason = time.monotonic(), _cpu_busy_s(), _own_cpu_s(), None
        return self

    def __exit__(self, *exc):
        wall, n = time.monotonic() - self.t0, os.cpu_count() or 1
        others = (_cpu_busy_s() - self.c0) - (_own_cpu_s() - self.o0)
        share = others / (wall * n) if wall > 0 else 0.0
        if share > BUSY_SHARE:
            self.reason = (f"other programs used {100 * share:.0f}% of the {n} CPUs over the {wall:.1f} s it took "
                           f"(/proc/stat less this process's own; the limit is {100 * BUSY_SHARE:.0f}%)")
        return False


# what this process measured and whether it kept it, as sentences (predict reports them in its notes)
MEASURED: list[str] = []


def keep(path, res, busy, what):
    """Cache measurement `res` at `path` unless the machine was busy while it was taken; say which."""
    if busy.reason:
        MEASURED.append(f"{what} measured now, not cached: {busy.reason}")
        say(f"  not cached: {busy.reason}; the next run measures {what} again")
        return res
    atomic_json(path, res)
    MEASURED.append(f"{what} measured now, cached in {path}")
    say(f"  cached in {path}")
    return res


def boot_profile_path() -> str:
    """Where this boot's measured device profile is cached (a new machine is a new boot; a profile
    measured another way, profile.METHOD, is measured again)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown"
    return os.path.join(cache_dir(), f"device-profile-{boot}-m{METHOD}.toml")


def device_profile(out, progress=None, given=None):
    """The device profile DIR's runs are predicted with (kept in DIR/device-profile.toml, so `--reuse`
    predicts with the profile its runs were made beside). The emulator's clock (reads in flight,
    reclaim and compute time) and the reported TTFT/TPOT come from it, so it must be this machine's:
    workloads/devices/this-machine.toml is whichever machine last ran `kmemsim profile` (session 14:
    that file said 102 us per 4 KiB read, 27 us of reclaim per file folio and a 29 ms decode step of
    the profile's model; this machine measured 43 us, 12 us and 45 ms). A validation without one in DIR
    measures it (`kmemsim profile`, ~60 s, root) once per boot, in a process of its own (its llama.cpp
    run would otherwise map libllama into this one, which the reference child then shares); without
    root, the file is used. GIVEN: a profile file to use instead (copied into DIR; a DIR that has one
    keeps its own)."""
    path = os.path.join(out, PROFILE)
    if given is not None and not os.path.exists(path):
        # a profile given (`validate --device`): a 6.1 guest under TCG, whose own
        # measurement would time qemu's emulation, is predicted with its host's
        atomic_write(path, Path(given).read_text())
    if not os.path.exists(path):
        cache = boot_profile_path()
        if not os.path.exists(cache):
            if os.geteuid() != 0:
                return this_machine()
            if progress:
                progress("measuring this machine's device profile (kmemsim profile)")
            # --no-fio: the kernel's reads are timed by the QD1 table; the flash's table by queue depth
            # is for engines' O_DIRECT reads, which a validation run has none of
            r = subprocess.run([sys.executable, "-m", "kmemsim.cli", "profile", "--no-fio", "-o", cache],
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
    path = baseline_cache_path()
    if os.path.exists(path) and not refresh:
        with open(path) as f:
            res = json.load(f)
        # a cache from before the per-library or kernel-memory records is measured again (as root;
        # else kept as is)
        if ("library_own" in res and "kmem_bytes" in res) or os.geteuid() != 0:
            return res
    require_root()
    say("measuring the engine before any model (the interpreter importing llama_cpp, under the recorder)")
    with Busy() as busy, tempfile.TemporaryDirectory(prefix="kmemsim-baseline-") as d:
        script = child_script(d)
        out = os.path.join(d, "baseline.json")
        with child_pythonpath_removed():
            run_command(child_argv(script, "baseline", out), os.path.join(d, "run"), drop_caches=True,
                        interval=0.005, smaps_interval=0, memcg_interval=0.005)
        s = pd.read_parquet(os.path.join(d, "run", "samples.parquet"))
        with open(out) as f:
            child = json.load(f)
        # the last tick with the process alive: the largest charge
        # cgroup v1's memory.stat says total_cache / total_rss / total_mapped_file, v2's file / anon /
        # file_mapped (the 6.1 guest mounts v2 only)
        col = {k: next(c for c in (f"memcg_total_{k}", f"memcg_{v2}") if c in s)
               for k, v2 in (("cache", "file"), ("rss", "anon"), ("mapped_file", "file_mapped"))}
        i = int(np.argmax((s[col["cache"]] + s[col["rss"]]).to_numpy()))
        kmem = kernel_memory(s)
        with open(os.path.join(d, "run", "summary.json")) as f:
            summ = json.load(f)
        files = summ.get("files", {})
        # a file the engine faulted on: filemap_fault() seen, or where the kernel has no such
        # tracepoint (6.1: summary's kernel_lacks), one the child maps (its smaps)
        no_fault_tp = "filemap:mm_filemap_fault" in summ.get("kernel_lacks", [])
        mapped = set(child.get("file_rss", {}))

        def faulted(k, v):
            return v.get("filemap_faults", 0) > 0 or (no_fault_tp and os.path.basename(k) in mapped)
        res = {"file_bytes": int(s[col["cache"]].iloc[i]),
               # the files the engine mapped (libraries, extension modules) and the pages of each it
               # brought into the page cache: each is faulted in on its own, readahead per file
               "libraries": [[os.path.basename(k), int(v["pages_added"])] for k, v in sorted(files.items())
                             if faulted(k, v) and v.get("pages_added", 0) > 0],
               # per library, its resident pages in executable mappings and in the others
               "library_rss": child.get("file_rss", {}),
               # and of those, the pages no other process maps: the child's own, charged to its
               # cgroup (the recorder's interpreter maps the same libpython, libc, libcrypto)
               "library_own": child.get("file_own"),
               "mapped_file_bytes": int(s[col["mapped_file"]].iloc[i]),
               "anon_bytes": int(child["status"]["RssAnon"]),
               "rss_file_bytes": int(child["status"]["RssFile"]),
               # kernel memory charged to the cgroup (page tables, slab: dentries, inodes, ...)
               "kmem_bytes": int(kmem.iloc[i]) if kmem is not None else 0,
               "python": sys.version.split()[0], "measured": time.time(), "environment": environment()}
    return keep(path, res, busy, "the engine")


def llama_probe(model, ctx, batch=512, ubatch=512, threads=2, refresh=False) -> dict:
    """What llama.cpp itself reports for this model and context, without reading a weight: the model
    loaded with no_alloc (metadata, vocab; buffers simulated) and Llama() built as in the reference
    run. Returns the logged buffer sizes and the process's RssAnon after Llama() (interpreter +
    libraries + llama.cpp's vocab/metadata heap + llama-cpp-python's objects). Cached per model file
    (path, size, mtime) and context."""
    st = os.stat(model)
    key = (f"{os.path.realpath(model)}|{st.st_size}|{int(st.st_mtime)}|{ctx}|{batch}|{ubatch}|{threads}|"
           + json.dumps(environment(), sort_keys=True))
    path = os.path.join(cache_dir(), "probe-" + hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(path) and not refresh:
        with open(path) as f:
            return json.load(f)
    say(f"measuring llama.cpp's buffers and heap for {os.path.basename(model)} at n_ctx {ctx:,} "
        "(Llama() with no_alloc in a child process: no weight is read)")
    with Busy() as busy, tempfile.TemporaryDirectory(prefix="kmemsim-probe-") as d:
        script = child_script(d)
        out = os.path.join(d, "probe.json")
        p = subprocess.run(child_argv(script, "probe", out, model, 1, 0, ctx, batch, ubatch, threads),
                           env=child_env(), capture_output=True, text=True, timeout=600)
        if not os.path.exists(out):
            raise InputError(f"llama.cpp could not load {model} (metadata probe failed: "
                             f"{(p.stderr or '').strip().splitlines()[-1:] or p.returncode})")
        with open(out) as f:
            r = json.load(f)
    if not r.get("ok"):
        raise InputError(f"llama.cpp could not create a context for {model}: {r.get('error')}")
    res = {"key": key, "buffers": buffers_from_log(r["log"]), "anon_bytes": r["status_after"]["RssAnon"],
           "anon_before_bytes": r["status_before"]["RssAnon"], "rss_file_bytes": r["status_after"]["RssFile"]}
    return keep(path, res, busy, "llama.cpp's buffers")


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
                n = int(line.split()[1]) // (PAGE_SIZE // 1024)
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


def engine_warm_set(model, prompt, ctx, batch=512, ubatch=512, threads=2, steps=5, refresh=False) -> dict:
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
    st = os.stat(model)
    key = (f"{os.path.realpath(model)}|{st.st_size}|{int(st.st_mtime)}|{prompt}|{ctx}|{batch}|{ubatch}|"
           f"{threads}|{steps}|call|growth|load|context|own|teardown|loadgrowth|ctx|"
           + json.dumps(environment(), sort_keys=True))
    path = os.path.join(cache_dir(), "warm-" + hashlib.sha1(key.encode()).hexdigest()[:16] + ".json")
    if os.path.exists(path) and not refresh:
        with open(path) as f:
            return json.load(f)
    say(f"measuring the pages the engine touches per llama_decode call: {os.path.basename(model)} run "
        f"unlimited for {prompt:,} prompt tokens and {steps} decode steps, its referenced bits read from /proc")
    busy = Busy().__enter__()
    windows = []                      # (mark opening it, mark closing it, decode step, referenced pages)
    anon_at = []                      # (mark, the child's RssAnon in bytes when it stopped there)
    with tempfile.TemporaryDirectory(prefix="kmemsim-warm-") as d:
        script = child_script(d)
        out = os.path.join(d, "warm.json")
        err = open(os.path.join(d, "stderr"), "w+")
        p = subprocess.Popen(child_argv(script, "warm", out, model, prompt, steps, ctx, batch, ubatch, threads),
                             env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
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
    busy.__exit__(None, None, None)
    return keep(path, res, busy, "the warm set")




def this_machine():
    """This machine's measured profile: the one `kmemsim validate` measured since this boot
    (device_profile), else kmemsim/data/devices/this-machine.toml (`kmemsim profile`'s, made on
    whichever machine ran it last), or None."""
    for here in (boot_profile_path(), DEVICES / "this-machine.toml"):
        if os.path.exists(here):
            return dev.load(str(here))
    return None
