"""Loaders for the BPF programs in bpf/: one class per program, each saying which tracepoints it uses
and why, and how its perf records decode. The programs compile together as one bcc object so they
share the `tracked` (pids) and `inodes` maps of bpf/common.h."""
from __future__ import annotations

import ctypes
import os
import re
import struct
import sys
from pathlib import Path

import numpy as np

from ..core.errors import InputError

BPF_DIR = Path(__file__).resolve().parent / "bpf"
HEADER = ("ts", "pid", "tid")
TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")


def import_bcc():
    """Debian's bcc lives in /usr/lib/python3/dist-packages, which pyenv/venv Pythons do not see.
    (PyPI's package named "bcc" is unrelated: never pip-install it.)"""
    try:
        import bcc          # Debian's, found at run time: only the recorder needs it
        return bcc
    except ImportError:
        pass
    deb = "/usr/lib/python3/dist-packages"
    if os.path.isdir(os.path.join(deb, "bcc")) and deb not in sys.path:
        sys.path.append(deb)
    try:
        import bcc          # again, with Debian's dist-packages on the path
        return bcc
    except ImportError:
        raise InputError("bcc is not installed; run `make system` (or `bash .ci/setup-system.sh`) as root "
                         "to install Debian's python3-bpfcc")


class Probe:
    """One BPF program: its source, its tracepoints (with the reason for each), its ring buffer
    (`output`, sized in the program: bpf/common.h `OUTPUT`)."""
    name = ""
    source = ""
    output = ""
    fields: tuple = ()
    times: tuple = ()           # fields holding bpf_ktime_get_ns() instants, written like ts (ns after t0)
    tracepoints: dict = {}
    # what older kernels lack (Debian's 6.1 in `kmemsim vm`): macro -> (tracepoint, field or None),
    # defined for the program's source only where the running kernel has it (`kernel_has`)
    optional: dict = {}

    def __init__(self):
        self.chunks = []        # raw records: decoded once, vectorised, when the recording ends
        self.count = 0
        self.lost = 0           # records the ring buffer had no room for, as of the last drain
        self.dtype = np.dtype([(f, "<u8") for f in HEADER + self.fields])
        self.ring = self._dropped = None

    def code(self):
        return (BPF_DIR / self.source).read_text()

    def open(self, b):
        from .ringbuf import RingBuffer   # the C core's drain: loaded when a recording starts
        t = b[self.output.encode()]           # bcc's names are bytes (bcc.utils._assert_is_bytes)
        self.ring = RingBuffer(t.map_fd, t.max_entries, self.dtype.itemsize)
        self._dropped = b[(self.output + "_dropped").encode()]

    def drain(self):
        data = self.ring.drain()
        if data:
            self.chunks.append(data)
            self.count += len(data) // self.dtype.itemsize
        self.lost = int(self._dropped[0].value)

    def table(self) -> np.ndarray:
        return np.frombuffer(b"".join(self.chunks), dtype=self.dtype)


class Tasks(Probe):
    name, source, output = "tasks", "tasks.c", "task_events"
    fields = ("kind", "other")
    KINDS = ("fork", "exec", "exit")
    tracepoints = {
        "sched:sched_process_fork": "follow children of the recorded process (adds them to `tracked`)",
        "sched:sched_process_exec": "a new image: its mappings come from the kernel, not from mmap()",
        "sched:sched_process_exit": "process end (PROC_EXIT in the trace)",
    }
    # without group_dead (older kernels) a thread group leader's exit stands for the process's
    optional = {"KM_HAVE_EXIT_GROUP_DEAD": ("sched:sched_process_exit", "group_dead")}


class Faults(Probe):
    name, source, output = "faults", "faults.c", "fault_events"
    fields = ("address", "ip", "error_code")
    tracepoints = {
        "exceptions:page_fault_user": "every user page fault: the READ/WRITE accesses of the trace",
    }


class Mmap(Probe):
    name, source, output = "mmap", "mmap.c", "mmap_events"
    fields = ("kind", "addr", "len", "prot", "flags", "fd", "off", "ret")
    KINDS = ("mmap", "munmap", "mremap")
    tracepoints = {
        "syscalls:sys_enter_mmap": "mmap arguments (fd, offset, prot, flags)",
        "syscalls:sys_exit_mmap": "the address mmap returned",
        "syscalls:sys_enter_munmap": "unmapped ranges",
        "syscalls:sys_enter_mremap": "mremap old range and new length",
        "syscalls:sys_exit_mremap": "mremap new address",
    }


class Filemap(Probe):
    name, source, output = "filemap", "filemap.c", "filemap_events"
    fields = ("kind", "ino", "dev", "index", "order", "pfn", "tracked")
    KINDS = ("add", "delete", "fault")
    tracepoints = {
        "filemap:mm_filemap_add_to_page_cache": "a folio enters the page cache (read, readahead)",
        "filemap:mm_filemap_delete_from_page_cache": "a folio leaves it (reclaim, truncate, drop_caches)",
        "filemap:mm_filemap_fault": "a fault on a file mapping reached filemap_fault",
    }
    # older kernels (6.1) have no mm_filemap_fault: `filemap_faults` stays 0 (summary's `kernel_lacks`)
    optional = {"KM_HAVE_FILEMAP_FAULT": ("filemap:mm_filemap_fault", None)}


class Vmscan(Probe):
    name, source, output = "vmscan", "vmscan.c", "vmscan_events"
    fields = ("kind", "a", "b", "c", "d", "e", "f", "priority", "flags")
    KINDS = ("shrink_inactive", "shrink_active", "direct_reclaim", "memcg_reclaim", "write_folio")
    tracepoints = {
        "vmscan:mm_vmscan_lru_shrink_inactive": "shrink_inactive_list: scanned, reclaimed, dirty, activated, kept referenced",
        "vmscan:mm_vmscan_lru_shrink_active": "shrink_active_list: taken, deactivated, rotated (referenced executable file folios kept active)",
        "vmscan:mm_vmscan_direct_reclaim_begin": "start of direct reclaim (global pressure)",
        "vmscan:mm_vmscan_direct_reclaim_end": "its end: duration and pages reclaimed",
        "vmscan:mm_vmscan_memcg_reclaim_begin": "start of memcg reclaim (the limit was hit at charge)",
        "vmscan:mm_vmscan_memcg_reclaim_end": "its end: duration and pages reclaimed",
        "vmscan:mm_vmscan_write_folio": "pageout() of a folio; RECLAIM_WB_ANON = swap-out",
    }


class ReadIO(Probe):
    name, source, output = "readio", "readio.c", "read_events"
    fields = ("queued", "sector", "nr_sector", "error")
    times = ("queued",)
    tracepoints = {
        "block:block_split": "a read bio split to the device's limits: its rest goes on at a new sector",
        "block:block_rq_complete": "a request's completion ends its read bios (blk-mq traces no bio completion)",
    }


class SwapIO(Probe):
    name, source, output = "swapio", "swapio.c", "swap_events"
    fields = ("write", "sector", "nr_sector", "dev", "tracked")
    tracepoints = {
        "block:block_bio_queue": "bios to swap devices: pages swapped out (W) and in (R), exactly; "
                                 "other read bios go to readio.c (their submission)",
    }


class Oom(Probe):
    name, source, output = "oom", "oom.c", "oom_events"
    fields = ("victim", "total_vm", "anon_rss", "file_rss", "shmem_rss", "oom_score_adj")
    tracepoints = {"oom:mark_victim": "the OOM killer chose a recorded process"}


ALL = (Tasks, Faults, Mmap, Filemap, Vmscan, ReadIO, SwapIO, Oom)     # ReadIO before SwapIO: it calls read_bio_queued()


def tracepoint_format(tracepoint: str) -> str | None:
    """The running kernel's format file of GROUP:NAME, None where it has no such tracepoint (or no
    tracefs is mounted)."""
    group, name = tracepoint.split(":")
    for root in TRACEFS:
        try:
            return Path(root, "events", group, name, "format").read_text()
        except OSError:
            continue
    return None


def kernel_has(tracepoint: str, field: str | None = None) -> bool:
    """Whether the running kernel has the tracepoint (and its field). Without a readable tracefs it
    says yes: bcc's compile then reports what is wrong."""
    if not any(os.path.isdir(os.path.join(root, "events")) for root in TRACEFS):
        return True
    fmt = tracepoint_format(tracepoint)
    if fmt is None:
        return False
    return field is None or re.search(rf"field:[^;]*\b{re.escape(field)}(\[\d*\])?;", fmt) is not None


def kernel_dev(st_dev: int) -> int:
    """User-space dev_t (os.stat) -> the kernel's internal dev_t that tracepoints report."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def user_dev(kdev: int) -> int:
    return os.makedev(kdev >> 20, kdev & 0xFFFFF)


def _prog_recursion_misses(fd: int) -> int:
    """bpf(BPF_OBJ_GET_INFO_BY_FD) on a program: its struct bpf_prog_info's recursion_misses (UAPI,
    linux/bpf.h: offset 208 of the 232 bytes of 5.12+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    info = ctypes.create_string_buffer(232)
    attr = ctypes.create_string_buffer(struct.pack("IIQ", fd, len(info), ctypes.addressof(info)), 128)
    nr_bpf = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)
    if nr_bpf is None or libc.syscall(nr_bpf, 15, attr, 16) < 0:     # __NR_bpf, BPF_OBJ_GET_INFO_BY_FD
        return 0
    return struct.unpack_from("Q", info.raw, 208)[0]


class Probes:
    """All programs compiled as one object, attached, with their ring buffers mapped."""

    def __init__(self, probes=ALL):
        bcc = import_bcc()
        self.probes = [p() for p in probes]
        text = (BPF_DIR / "common.h").read_text() + "\n" + "\n".join(p.code() for p in self.probes)
        # {"tracepoint[.field]": macro} the running kernel lacks: their code is left out (summary.json)
        self.kernel_lacks, defines = {}, []
        for p in self.probes:
            for macro, (tp, field) in p.optional.items():
                if kernel_has(tp, field):
                    defines.append(f"-D{macro}")
                else:
                    self.kernel_lacks[tp + (f".{field}" if field else "")] = macro
        try:
            self.b = bcc.BPF(text=text.encode(), cflags=["-Wno-duplicate-decl-specifier", "-Wno-macro-redefined", *defines])
        except Exception as e:
            raise InputError(f"cannot load the BPF programs ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                             "run as root after `make system` (bcc, kernel header links, tracefs)")
        for p in self.probes:
            p.open(self.b)

    def __getitem__(self, name):
        return next(p for p in self.probes if p.name == name)

    def track(self, pid: int):
        self.b[b"tracked"][ctypes.c_uint32(pid)] = ctypes.c_uint8(1)

    def watch_inode(self, kdev: int, ino: int):
        k = self.b[b"inodes"].Key()
        k.ino, k.dev = ino, kdev
        self.b[b"inodes"][k] = ctypes.c_uint8(1)

    def watch_swap_dev(self, kdev: int):
        self.b[b"swap_devs"][ctypes.c_uint32(kdev)] = ctypes.c_uint8(1)

    def drain(self):
        for p in self.probes:
            p.drain()

    def lost(self):
        return sum(p.lost for p in self.probes)

    def file_counts(self):
        """{(kernel dev, ino): (pages added, pages deleted, filemap faults)} kept in the kernel."""
        return {(k.dev, k.ino): (v.added, v.deleted, v.faults) for k, v in self.b[b"file_counts"].items()}

    def recursion_misses(self) -> dict:
        """{tracepoint: runs the kernel skipped}: a tracepoint's program does not run while another
        BPF program runs on that CPU (trace_call_bpf(): bpf_prog_active), as when an interrupt's
        tracepoint (block:block_rq_complete) comes during one of ours; the kernel counts each skip
        (bpf_prog_info.recursion_misses, read with BPF_OBJ_GET_INFO_BY_FD)."""
        out = {}
        for name, fn in self.b.funcs.items():
            n = _prog_recursion_misses(fn.fd)
            if n:
                out[name.decode().removeprefix("tracepoint__").replace("__", ":", 1)] = n
        return out

    def array(self, name):
        return [int(v.value) for v in self.b[name.encode()].values()]

    def close(self):
        for p in self.probes:
            if p.ring:
                p.ring.close()
        self.b.cleanup()
