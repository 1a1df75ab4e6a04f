"""`kmemsim vm run`: a command run as root in Debian bookworm's 6.1 kernel (`linux-image-amd64`:
CONFIG_LRU_GEN=y, switched at run time through /sys/kernel/mm/lru_gen/enabled; zram a module; memcg;
BTF), booted under qemu by virtme-ng with this machine's root file system shared read-only, so the
project, its venv, bcc and the 6.1 headers are all there and the recorder runs in the guest as it
runs here. Its output and exit status come back; what it writes lands on the host only in the
directories shared read-write (the current one by default). docs/vm.md.

Here the CPU shows no vmx/svm flag: /dev/kvm exists, but a KVM guest stops in the kernel's
decompressor, so qemu emulates the CPU (TCG), some ten times slower than the host."""
from __future__ import annotations

import glob
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

from ..core.errors import InputError
from ..core.units import parse_size

SERIES = "6.1"                  # the kernel series to boot: Debian 12's, as Android 14's GKI
BOOT_DIR = "/boot"
MODULES_DIR = "/lib/modules"
DEFAULT_MEMORY = "2G"           # the recorder and bcc's compile take ~300 MiB; a small model fits beside
MAX_CPUS = 64
MIN_FREE_DISK = 256 << 20       # qemu's and virtme-ng's files, and a run directory's
# what the guest is given of this environment: the rest of it is the guest init's
PASS_ENV = ("HOME", "LANG", "LC_ALL", "TERM", "CI", "MPLCONFIGDIR", "PYTHONPATH", "VIRTUAL_ENV",
            "LLAMA_CPP_LIB_PATH")
PASS_PREFIXES = ("KMEMSIM_", "OPENBLAS_", "OMP_")
LRU = {"classic": "n", "mglru": "y"}    # /sys/kernel/mm/lru_gen/enabled (mm/vmscan.c: lru_gen_change_state)
# llama.cpp's libraries built for the CPU qemu emulates (.ci/build-guest-llama.sh, `make guest-llama`):
# the venv's are built for this CPU (-march=native), whose AVX-512 TCG lacks. The guest's llama_cpp
# loads them through LLAMA_CPP_LIB_PATH (llama_cpp/llama_cpp.py)
GUEST_LLAMA = os.path.join(sys.prefix, "guest-llama", "lib")
APT = "apt-get install qemu-system-x86 busybox-static linux-image-amd64 linux-headers-amd64, or `make setup`"


@dataclass(frozen=True)
class Kernel:
    image: str
    release: str

    @property
    def modules(self) -> str:
        return os.path.join(MODULES_DIR, self.release)

    @property
    def headers(self) -> str:
        return os.path.join(self.modules, "build")


def version_key(release: str):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", release)]


def find_kernel(image: str | None = None, series: str = SERIES) -> Kernel:
    """The kernel to boot: IMAGE (a vmlinuz-RELEASE), else the newest /boot/vmlinuz-SERIES.*. Its
    modules (/lib/modules/RELEASE, from the same package) must be there: zram, 9p and virtio are."""
    if image is not None:
        if not os.path.isfile(image):
            raise InputError(f"--kernel {image}: no such file")
        release = os.path.basename(image).removeprefix("vmlinuz-")
        if release == os.path.basename(image):
            raise InputError(f"--kernel {image}: expected /boot/vmlinuz-RELEASE (the release names its modules)")
    else:
        found = sorted(glob.glob(os.path.join(BOOT_DIR, f"vmlinuz-{series}.*")), key=version_key)
        if not found:
            raise InputError(f"no {series} kernel to boot: no {BOOT_DIR}/vmlinuz-{series}.* ({APT})")
        image = found[-1]
        release = os.path.basename(image).removeprefix("vmlinuz-")
    k = Kernel(image, release)
    if not os.path.isfile(os.path.join(k.modules, "modules.dep")):
        raise InputError(f"no modules for {release}: no {k.modules}/modules.dep (its linux-image package installs them)")
    return k


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kvm_missing() -> str | None:
    """Why KVM cannot run the guest, or None. A /dev/kvm without vmx/svm in the CPU's flags (a VM
    without nested virtualisation, as here) is not enough: qemu either fails setting an MSR or the
    guest stops in the decompressor."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "/dev/kvm is not readable and writable"
    if not cpu_flags() & {"vmx", "svm"}:
        return "the CPU shows no vmx/svm flag"
    return None


def vng_binary() -> str:
    """virtme-ng's `vng`: beside this Python (the venv's), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "vng")
    found = here if os.access(here, os.X_OK) else shutil.which("vng")
    if not found:
        raise InputError("no virtme-ng: `vng` not found (pip install virtme-ng, or `make setup`)")
    return found


def check_host(memory: int, dirs, mem_flag: str = "--mem") -> None:
    """What the VM needs from this machine, each missing piece as one line."""
    if platform.machine() != "x86_64":
        raise InputError(f"kmemsim vm boots x86_64 kernels; this machine is {platform.machine()}")
    if shutil.which("qemu-system-x86_64") is None:
        raise InputError(f"no qemu: qemu-system-x86_64 not found ({APT})")
    if shutil.which("busybox") is None:
        raise InputError("no busybox: virtme-ng builds the guest's initramfs with it (Debian's 6.1 has 9p "
                         f"and virtio as modules) ({APT})")
    for d in dirs:
        free = shutil.disk_usage(d).free
        if free < MIN_FREE_DISK:
            raise InputError(f"no disk space: {d} has {free >> 20} MiB free, the VM needs {MIN_FREE_DISK >> 20} MiB")
    avail = meminfo_kb("MemAvailable")
    if avail is not None and memory > avail * 1024:
        raise InputError(f"not enough memory: the guest's {memory >> 20} MiB exceed this machine's "
                         f"{avail >> 10} MiB available ({mem_flag})")


def meminfo_kb(key: str) -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def guest_env(environ=None) -> dict:
    """PATH with this Python's directory first (so `kmemsim` is the venv's), and what PASS_ENV and
    PASS_PREFIXES name."""
    environ = os.environ if environ is None else environ
    bindir = os.path.dirname(sys.executable)
    path = [bindir] + [p for p in environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(":") if p and p != bindir]
    env = {"PATH": ":".join(path)}
    for k, v in environ.items():
        if k in PASS_ENV or k.startswith(PASS_PREFIXES):
            env[k] = v
    if os.path.isdir(GUEST_LLAMA) and "LLAMA_CPP_LIB_PATH" not in environ:
        env["LLAMA_CPP_LIB_PATH"] = GUEST_LLAMA
    return env


def guest_script(argv, env: dict, lru: str | None = None, disks=()) -> str:
    """The shell line the guest's init runs: the environment, zram's module (the recorder's --zram
    looks for /sys/block/zram0), tracefs, each disk mounted read-only where it was asked (virtme-ng
    attaches them as virtio-blk devices in order: vda, vdb, ...; Debian builds virtio_blk as a
    module), the LRU asked for, then the command."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append("modprobe zram num_devices=1 2>/dev/null")
    lines.append("mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null")
    if disks:
        lines.append("modprobe virtio_blk")
        for i, d in enumerate(disks):
            dev = f"/dev/vd{chr(ord('a') + i)}"
            # udev is not there to make the node at once: wait for it (a few seconds under TCG)
            lines.append(f"for i in $(seq 100); do [ -b {dev} ] && break; sleep 0.1; done")
            lines.append(f"mkdir -p {shlex.quote(d.mount)} && mount -o ro {dev} {shlex.quote(d.mount)} "
                         f"|| {{ echo 'kmemsim vm: cannot mount {d.image} ({dev}) at {d.mount}' >&2; exit 2; }}")
    if lru is not None:
        lines.append(f"echo {LRU[lru]} > /sys/kernel/mm/lru_gen/enabled || exit 2")
    lines.append("exec " + shlex.join(argv))
    return "; ".join(lines)


def command_line(argv, kernel: Kernel, memory: int, cpus: int, rwdirs, cwd: str, kvm: bool,
                 lru: str | None = None, environ=None, disks=()) -> list:
    """virtme-ng's command line: the root file system read-only over 9p (bookworm's qemu ships the
    C virtiofsd, whose arguments are not the ones virtme-ng passes: it would wait, then fall back),
    HOME as a copy-on-write overlay (caches read, writes kept in the guest), RWDIRS read-write."""
    env = guest_env(environ)
    args = [vng_binary(), "--run", kernel.image, "--force-9p", "--memory", f"{memory >> 20}M",
            "--cpus", str(cpus), "--cwd", cwd]
    if not kvm:
        args.append("--disable-kvm")
    home = env.get("HOME")
    if home and home != "/" and os.path.isdir(home) and not any(in_dir(home, d) for d in rwdirs):
        args += ["--overlay-rwdir", home]
    for d in rwdirs:
        args += ["--rwdir", d]
    for d in disks:
        args += ["--disk", d.image]         # (qemu guesses raw and says so: it is)
    args += ["--exec", guest_script(argv, env, lru, disks)]
    return args


def in_dir(path: str, d: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(d)]) == os.path.abspath(d)


def shared_dirs(rwdirs, share_cwd: bool, cwd: str) -> list:
    """The read-write directories, absolute, each existing, the root never."""
    out = []
    for d in ([cwd] if share_cwd else []) + list(rwdirs):
        a = os.path.abspath(d)
        if a == "/":
            raise InputError(f"--rwdir {d}: the root file system is shared read-only; name a directory in it")
        if "=" in a or "," in a:
            raise InputError(f"--rwdir {d}: virtme-ng takes no '=' or ',' in a shared directory's path")
        if not os.path.isdir(a):
            raise InputError(f"--rwdir {d}: no such directory")
        if a not in out:
            out.append(a)
    return out


@dataclass(frozen=True)
class Disk:
    image: str          # a file system image on this machine (raw)
    mount: str          # where the guest mounts it, read-only


def parse_disk(spec: str) -> Disk:
    """IMAGE[:DIR]: a raw file system image (e.g. `kmemsim vm disk`'s) the guest mounts read-only at
    DIR (default /tmp/IMAGE's stem: the guest's root is read-only, /tmp is its own)."""
    image, _, mount = spec.partition(":")
    if not os.path.isfile(image):
        raise InputError(f"--disk {spec}: no such image file {image!r} (make one with `kmemsim vm disk`)")
    if "=" in image or "," in image:
        raise InputError(f"--disk {spec}: virtme-ng takes no '=' or ',' in a disk's path")
    mount = mount or "/tmp/" + os.path.splitext(os.path.basename(image))[0]
    if not os.path.isabs(mount):
        raise InputError(f"--disk {spec}: the mount point {mount!r} must be an absolute path in the guest")
    return Disk(os.path.abspath(image), os.path.normpath(mount))


def make_disk(files, image: str, slack: float = 1.1) -> int:
    """An ext4 image holding FILES at its root (mke2fs -d: no mount, no root), sized to them plus
    ext4's metadata, written whole or not at all. Files read from a block device in the guest are
    read as on a phone's flash, through the block layer's readahead (read_ahead_kb), where the shared
    root's 9p has its own (v9fs sets the bdi's ra_pages from its msize). Returns the image's size."""
    from ..core.atomic import atomic_path  # here: only `vm disk` writes
    mke2fs = shutil.which("mke2fs") or "/usr/sbin/mke2fs"
    if not os.access(mke2fs, os.X_OK):
        raise InputError("no mke2fs: apt-get install e2fsprogs")
    files = [os.path.abspath(f) for f in files]
    for f in files:
        if not os.path.isfile(f):
            raise InputError(f"{f}: no such file")
    names = [os.path.basename(f) for f in files]
    if len(set(names)) < len(names):
        raise InputError("two files share a name: the image holds them side by side at its root")
    total = sum(os.path.getsize(f) for f in files)
    size_mib = int(total * slack / 2**20) + 64
    with tempfile.TemporaryDirectory(prefix="kmemsim-disk-") as d:
        for f in files:            # linked where they share a file system, else copied
            try:
                os.link(f, os.path.join(d, os.path.basename(f)))
            except OSError:
                shutil.copyfile(f, os.path.join(d, os.path.basename(f)))
        with atomic_path(image) as tmp:
            r = subprocess.run([mke2fs, "-q", "-F", "-t", "ext4", "-L", "kmemsim", "-d", d, tmp, f"{size_mib}M"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise InputError(f"mke2fs failed: {(r.stderr.strip().splitlines() or ['no output'])[-1]}")
    return os.path.getsize(image)


def run(argv, *, memory: str = DEFAULT_MEMORY, cpus: int = 2, rwdirs=(), share_cwd: bool = True,
        kernel: str | None = None, lru: str | None = None, timeout: float | None = None,
        dry_run: bool = False, out=None, err=None, disks=(), mem_flag: str = "--mem") -> int:
    """Boot the kernel, run ARGV in it, return its exit status (124: past TIMEOUT, 130: interrupted).
    The guest's output goes to OUT and ERR (this process's stdout and stderr); mem_flag: the flag the
    memory came by, for messages."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if not argv:
        raise InputError("no command: kmemsim vm run -- COMMAND...")
    mem = parse_size(memory, mem_flag)
    if mem < 256 << 20:
        raise InputError(f"{mem_flag} {memory}: the guest needs at least 256M")
    if not 1 <= cpus <= MAX_CPUS:
        raise InputError(f"--cpus {cpus}: expected 1..{MAX_CPUS}")
    if lru is not None and lru not in LRU:
        raise InputError(f"--lru {lru}: expected one of {', '.join(LRU)}")
    if timeout is not None and not 0 < timeout < 1e7:
        raise InputError(f"--timeout {timeout}: expected a positive number of seconds")
    cwd = os.getcwd()
    dirs = shared_dirs(rwdirs, share_cwd and cwd != "/", cwd)
    disks = [parse_disk(d) for d in disks]
    k = find_kernel(kernel)
    why = kvm_missing()
    args = command_line(argv, k, mem, cpus, dirs, cwd, why is None, lru, disks=disks)
    if dry_run:
        print(shlex.join(args), file=out)
        return 0
    check_host(mem, dirs + [os.environ.get("TMPDIR", "/tmp")], mem_flag)
    if not os.path.isfile(os.path.join(k.headers, "Makefile")):
        print(f"kmemsim vm: no headers at {k.headers}: the recorder cannot compile its probes in the guest "
              "(apt-get install linux-headers-amd64)", file=err)
    if why is not None:
        print(f"kmemsim vm: {why}: qemu emulates the CPU (TCG), ~10x slower; booting {k.release} takes "
              "half a minute", file=err)
        if "avx512f" in cpu_flags() and not os.path.isdir(GUEST_LLAMA):
            print("kmemsim vm: this llama.cpp is built for this CPU's AVX-512, which qemu does not emulate: "
                  "in the guest it stops on SIGILL (`make guest-llama` builds one for the guest)", file=err)
    return boot(args, timeout, out, err)


def copy(src, dst):
    """A pipe's bytes to a text stream as they come (its binary buffer where it has one)."""
    sink = getattr(dst, "buffer", None)
    for chunk in iter(lambda: os.read(src.fileno(), 65536), b""):
        if sink is not None:
            sink.write(chunk)
            sink.flush()
        else:
            dst.write(chunk.decode(errors="replace"))
        dst.flush()
    src.close()


def boot(args, timeout, out, err) -> int:
    """Run virtme-ng in a process group of its own (vng -> sh -> virtme-run -> qemu), ended whole on a
    signal or past the timeout. The guest's output comes through pipes: qemu opens /proc/self/fd/1 and
    2 as chardev files, which would truncate a file they were redirected to."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(args[0]) + ":" + env.get("PATH", "")    # vng runs virtme-run by name
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, start_new_session=True)
    copies = [threading.Thread(target=copy, args=(src, dst), daemon=True)
              for src, dst in ((p.stdout, out), (p.stderr, err))]
    for t in copies:
        t.start()
    stopped = []

    def stop(signum, frame):
        stopped.append(signum)
        os.killpg(p.pid, signal.SIGTERM)
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"kmemsim vm: the guest ran past --timeout {timeout:g} s; stopped", file=err)
            end(p)
            return 124
        return 130 if stopped else rc if rc >= 0 else 128 - rc
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if p.poll() is None:
            end(p)
        for t in copies:
            t.join(5)


def end(p):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue
