"""`kmemsim vm run` without booting: the kernel it picks, virtme-ng's command line (--dry-run), the one
line it says for what is missing, and the recorder's view of what an older kernel's tracefs lacks.
The boot itself is tests/test_vm_live.py's."""
import os
import shlex

import pytest
from click.testing import CliRunner

from kmemsim.cli import main
from kmemsim.core.errors import InputError
from kmemsim.live import probes, vm


@pytest.fixture
def boot(tmp_path, monkeypatch):
    """A /boot with two 6.1 images and a 6.18 one, their modules in a /lib/modules of its own."""
    b, m = tmp_path / "boot", tmp_path / "modules"
    for rel in ("6.1.0-9-amd64", "6.1.0-57-amd64", "6.18.1-amd64"):
        (b / f"vmlinuz-{rel}").parent.mkdir(exist_ok=True)
        (b / f"vmlinuz-{rel}").write_bytes(b"")
        (m / rel).mkdir(parents=True)
        (m / rel / "modules.dep").write_text("")
    monkeypatch.setattr(vm, "BOOT_DIR", str(b))
    monkeypatch.setattr(vm, "MODULES_DIR", str(m))
    return b, m


def invoke(*args):
    return CliRunner().invoke(main, ["vm", "run", *args], catch_exceptions=False)


def test_the_newest_6_1_kernel_is_booted(boot):
    k = vm.find_kernel()
    assert k.release == "6.1.0-57-amd64"          # 57 > 9 as numbers; 6.18 is not the 6.1 series
    assert k.image.endswith("vmlinuz-6.1.0-57-amd64")
    assert k.headers.endswith("/6.1.0-57-amd64/build")


def test_a_kernel_without_its_modules_is_refused(boot):
    b, m = boot
    (m / "6.1.0-57-amd64" / "modules.dep").unlink()
    with pytest.raises(InputError, match="no modules for 6.1.0-57-amd64"):
        vm.find_kernel()


def test_no_6_1_kernel_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(vm, "BOOT_DIR", str(tmp_path))
    r = invoke("--dry-run", "--", "uname", "-r")
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("kmemsim: no 6.1 kernel to boot")
    assert "linux-image-amd64" in r.output


def test_dry_run_shows_virtme_ngs_command_line(boot, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(vm, "kvm_missing", lambda: "the CPU shows no vmx/svm flag")
    r = invoke("--dry-run", "--mem", "1G", "--cpus", "1", "--lru", "mglru", "--rwdir", str(tmp_path / "boot"),
               "--", "python3", "-c", "print('a b')")
    assert r.exit_code == 0, r.output
    args = shlex.split(r.output)
    assert args[args.index("--run") + 1].endswith("vmlinuz-6.1.0-57-amd64")
    assert "--force-9p" in args and "--disable-kvm" in args       # TCG: no vmx/svm here
    assert args[args.index("--memory") + 1] == "1024M" and args[args.index("--cpus") + 1] == "1"
    rw = [args[i + 1] for i, a in enumerate(args) if a == "--rwdir"]
    assert rw == [str(work), str(tmp_path / "boot")]                # the current directory first
    assert args[args.index("--cwd") + 1] == str(work)
    script = args[args.index("--exec") + 1]
    assert "modprobe zram" in script and "echo y > /sys/kernel/mm/lru_gen/enabled" in script
    assert script.endswith("exec python3 -c " + shlex.quote("print('a b')"))
    path = next(p for p in script.split("; ") if p.startswith("export PATH="))
    assert shlex.split(path)[1].removeprefix("PATH=").split(":")[0] == os.path.dirname(os.sys.executable)


def test_kvm_is_used_where_the_cpu_has_it(boot, monkeypatch):
    monkeypatch.setattr(vm, "kvm_missing", lambda: None)
    r = invoke("--dry-run", "--no-cwd", "--", "true")
    assert r.exit_code == 0 and "--disable-kvm" not in r.output and "--rwdir" not in r.output


def test_kvm_needs_the_cpus_flag(monkeypatch):
    monkeypatch.setattr(vm, "cpu_flags", lambda: {"sse2", "hypervisor"})
    if os.access("/dev/kvm", os.R_OK | os.W_OK):
        assert vm.kvm_missing() == "the CPU shows no vmx/svm flag"
    monkeypatch.setattr(vm, "cpu_flags", lambda: {"svm"})
    assert vm.kvm_missing() in (None, "no /dev/kvm", "/dev/kvm is not readable and writable")


@pytest.mark.parametrize("args, says", [
    (["--mem", "100M"], "--mem 100M: the guest needs at least 256M"),
    (["--memory", "100M"], "--memory 100M: the guest needs at least 256M"),      # the old name, as typed
    (["--mem", "lots"], "--mem"),
    (["--cpus", "0"], "--cpus 0: expected 1..64"),
    (["--timeout", "-1"], "--timeout -1.0: expected a positive number of seconds"),
    (["--rwdir", "/no/such/dir"], "--rwdir /no/such/dir: no such directory"),
    (["--rwdir", "/"], "--rwdir /: the root file system is shared read-only"),
    (["--rwdir", "/tmp/a=b"], "--rwdir /tmp/a=b: virtme-ng takes no '=' or ','"),
    (["--kernel", "/no/such/vmlinuz"], "--kernel /no/such/vmlinuz: no such file"),
    (["--lru", "lfu"], "Invalid value for '--lru'"),
])
def test_bad_input_is_one_line(boot, args, says):
    r = invoke("--dry-run", *args, "--", "true")
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and r.output.startswith("kmemsim: ") and says in r.output


def test_what_the_machine_lacks_is_one_line(monkeypatch, tmp_path):
    real = vm.shutil.which
    monkeypatch.setattr(vm.shutil, "which", lambda n: None if n == "qemu-system-x86_64" else real(n))
    with pytest.raises(InputError, match=r"^no qemu: qemu-system-x86_64 not found \(apt-get install qemu-system-x86"):
        vm.check_host(256 << 20, [str(tmp_path)])
    monkeypatch.setattr(vm.shutil, "which", lambda n: "/usr/bin/" + n)
    monkeypatch.setattr(vm.shutil, "disk_usage", lambda d: type("U", (), {"free": 10 << 20})())
    with pytest.raises(InputError, match="^no disk space: .* has 10 MiB free"):
        vm.check_host(256 << 20, [str(tmp_path)])
    monkeypatch.setattr(vm.shutil, "disk_usage", lambda d: type("U", (), {"free": 1 << 40})())
    monkeypatch.setattr(vm, "meminfo_kb", lambda k: 512 << 10)
    with pytest.raises(InputError, match="^not enough memory: the guest's 2048 MiB"):
        vm.check_host(2 << 30, [str(tmp_path)])


def test_the_recorder_leaves_out_what_an_older_kernel_lacks(tmp_path, monkeypatch):
    """6.1 has no filemap:mm_filemap_fault and no group_dead in sched_process_exit."""
    ev = tmp_path / "events"
    (ev / "sched" / "sched_process_exit").mkdir(parents=True)
    (ev / "sched" / "sched_process_exit" / "format").write_text(
        "name: sched_process_exit\nformat:\n\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
        "\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n")
    monkeypatch.setattr(probes, "TRACEFS", (str(tmp_path),))
    assert probes.kernel_has("sched:sched_process_exit")
    assert probes.kernel_has("sched:sched_process_exit", "pid")
    assert probes.kernel_has("sched:sched_process_exit", "comm")
    assert not probes.kernel_has("sched:sched_process_exit", "group_dead")
    assert not probes.kernel_has("filemap:mm_filemap_fault")
    monkeypatch.setattr(probes, "TRACEFS", (str(tmp_path / "none"),))
    assert probes.kernel_has("filemap:mm_filemap_fault")     # no tracefs: bcc's compile will say


def test_a_disk_image_holds_the_models_and_is_mounted_read_only(boot, tmp_path, monkeypatch):
    """`kmemsim vm disk` writes an ext4 image with the files at its root (mke2fs -d; debugfs reads it
    back without mounting), and `vm run --disk IMAGE[:DIR]` attaches it (virtme-ng: virtio-blk, vda
    first) and mounts it read-only where asked."""
    import subprocess
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(os.urandom(300_000))
    b.write_bytes(b"x" * 5000)
    img = tmp_path / "models.img"
    r = CliRunner().invoke(main, ["vm", "disk", str(a), str(b), "-o", str(img)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    ls = subprocess.run(["debugfs", "-R", "ls -l /", str(img)], capture_output=True, text=True).stdout
    assert "a.gguf" in ls and "b.gguf" in ls and "300000" in ls
    dumped = tmp_path / "back"
    subprocess.run(["debugfs", "-R", f"dump /a.gguf {dumped}", str(img)], capture_output=True, check=True)
    assert dumped.read_bytes() == a.read_bytes()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(vm, "kvm_missing", lambda: "the CPU shows no vmx/svm flag")
    r = invoke("--dry-run", "--disk", str(img), "--disk", f"{img}:/tmp/second", "--", "true")
    assert r.exit_code == 0, r.output
    args = shlex.split(r.output)
    assert [args[i + 1] for i, x in enumerate(args) if x == "--disk"] == [str(img), str(img)]
    script = args[args.index("--exec") + 1]
    assert "mount -o ro /dev/vda /tmp/models" in script and "mount -o ro /dev/vdb /tmp/second" in script
    assert script.index("mount -o ro /dev/vda") < script.index("exec true")


@pytest.mark.parametrize("spec, says", [
    ("nothere.img", "no such image file"),
    ("{img}:relative/dir", "must be an absolute path"),
])
def test_a_bad_disk_is_one_line(boot, tmp_path, spec, says):
    img = tmp_path / "x.img"
    img.write_bytes(b"")
    r = invoke("--dry-run", "--disk", spec.format(img=img), "--", "true")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and says in r.output, r.output


def test_two_files_of_one_name_make_no_image(tmp_path):
    (tmp_path / "x").mkdir()
    for d in (tmp_path, tmp_path / "x"):
        (d / "m.gguf").write_bytes(b"1")
    r = CliRunner().invoke(main, ["vm", "disk", str(tmp_path / "m.gguf"), str(tmp_path / "x" / "m.gguf"),
                                  "-o", str(tmp_path / "o.img")], catch_exceptions=False)
    assert r.exit_code == 2 and "share a name" in r.output
    assert not (tmp_path / "o.img").exists()


def test_the_guest_loads_llama_cpp_built_for_its_cpu(tmp_path, monkeypatch):
    """Where `make guest-llama` built llama.cpp for the CPU qemu emulates, the guest's llama_cpp
    loads it (LLAMA_CPP_LIB_PATH, read by llama_cpp/llama_cpp.py); a path the user set wins."""
    monkeypatch.setattr(vm, "GUEST_LLAMA", str(tmp_path))
    assert vm.guest_env({"PATH": "/bin"})["LLAMA_CPP_LIB_PATH"] == str(tmp_path)
    assert vm.guest_env({"PATH": "/bin", "LLAMA_CPP_LIB_PATH": "/mine"})["LLAMA_CPP_LIB_PATH"] == "/mine"
    monkeypatch.setattr(vm, "GUEST_LLAMA", str(tmp_path / "absent"))
    assert "LLAMA_CPP_LIB_PATH" not in vm.guest_env({"PATH": "/bin"})
