"""`kmemsim vm run -- COMMAND`: COMMAND as root in Debian's 6.1 kernel under qemu (virtme-ng), this
machine's root file system shared read-only (kmemsim/live/vm.py; docs/vm.md)."""
import os
import sys

import click

from ..live import vm as vm_boot
from . import options


@click.group(epilog="""
\b
Example (each command's --help has its own):
  kmemsim vm run -- cat /proc/version
""")
def vm():
    """Debian bookworm's 6.1 kernel (MGLRU built in, zram, memcg, BTF) booted under qemu with this
    machine's root file system, read-only: the recorder and `kmemsim validate` run in it unchanged."""


@vm.command(context_settings={"ignore_unknown_options": False}, epilog="""
\b
Example (as root: the 6.1 kernel's version and its LRU, about half a minute without KVM):
  kmemsim vm run --lru mglru -- cat /proc/version /sys/kernel/mm/lru_gen/enabled
""")
@click.option("--mem", "memory", cls=options.Opt, old=options.VOCABULARY["--mem"], type=options.Size(),
              default=vm_boot.DEFAULT_MEMORY, show_default=True, help="the guest's RAM")
@click.option("--cpus", default=2, show_default=True, type=int, help="the guest's CPUs")
@click.option("--rwdir", "rwdirs", multiple=True, metavar="DIR",
              help="a directory the guest writes through to this machine (repeatable)")
@click.option("--no-cwd", is_flag=True, help="do not share the current directory read-write")
@click.option("--lru", type=click.Choice(sorted(vm_boot.LRU)),
              help="reclaim's lists for COMMAND: mglru writes y to /sys/kernel/mm/lru_gen/enabled before "
                   "it, classic n (default: the kernel's, classic)")
@click.option("--disk", "disks", multiple=True, metavar="IMAGE[:DIR]",
              help="a file system image (`kmemsim vm disk`'s) attached as a disk and mounted read-only at DIR "
                   "in the guest (default /tmp/IMAGE's stem): files read from a block device, as on a phone "
                   "(repeatable)")
@click.option("--kernel", metavar="VMLINUZ", help="the kernel image (default: the newest /boot/vmlinuz-6.1.*)")
@click.option("--timeout", type=float, metavar="S", help="stop the guest after S seconds (exit 124)")
@click.option("--dry-run", is_flag=True, help="print virtme-ng's command line and boot nothing")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(memory, cpus, rwdirs, no_cwd, lru, disks, kernel, timeout, dry_run, command):
    """Boot the 6.1 kernel, run COMMAND in it as root, exit with its status.

    The guest sees this machine's files read-only (writes go to a tmpfs overlay and vanish), except
    the current directory and each --rwdir, which it writes through. Without KVM (no vmx/svm flag)
    qemu emulates the CPU: booting takes about half a minute."""
    sys.exit(vm_boot.run(list(command), memory=memory, cpus=cpus, rwdirs=rwdirs, share_cwd=not no_cwd,
                         kernel=kernel, lru=lru, timeout=timeout, dry_run=dry_run,
                         disks=disks, mem_flag=options.flag("memory", "--mem")))


@vm.command(epilog="""
\b
Example (an image holding a file; `kmemsim vm run --disk scenarios.img -- ls /tmp/scenarios` lists it in the guest):
  kmemsim vm disk workloads/scenarios/small.toml -o scenarios.img
""")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@options.out(help="the image file to write (raw ext4)")
def disk(files, out):
    """An ext4 image holding FILES (models) for `kmemsim vm run --disk IMAGE`: in the guest they are
    read through a block device and its readahead, as on a phone's flash, not over the shared 9p root."""
    from ..core.paths import output_file  # here: loaded when the command runs
    output_file(out)
    size = vm_boot.make_disk(files, out)
    click.echo(f"wrote {out} ({size / 2**20:.0f} MiB, ext4): {', '.join(os.path.basename(f) for f in files)}")
