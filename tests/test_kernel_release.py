"""What a kernel release implies for the emulator (kmemsim/engine/kernel_release.py), and a reference
run predicted with the settings of the kernel it ran on (validate.reference.run_kernel)."""
import json

import pytest

from kmemsim.engine.kernel_release import release_config
from kmemsim.live.rundir import fs_types
from kmemsim.validate.reference import run_kernel


@pytest.mark.parametrize("release, machine, fs, want", [
    # Debian 12 / Android 14 GKI 6.1: no swap zeromap (6.12), exec faults read around (6.17),
    # ext4 order-0 page cache (ext4 large folios 6.16)
    ("6.1.0-57-amd64", "x86_64", "ext4", dict(swap_zeromap=False, exec_folio_order=-1, max_folio_order=0,
                                               lru_gen_fairness_safeguards=True)),
    # android15-6.6 on arm64, /data on f2fs: the same, but MGLRU's memcg reclaim of 6.3+
    ("6.6.30-android15-8", "aarch64", "f2fs", dict(swap_zeromap=False, exec_folio_order=-1, max_folio_order=0,
                                                   lru_gen_fairness_safeguards=False)),
    # 6.12: zeromap, still order-0 ext4, no exec readahead
    ("6.12.9", "x86_64", "ext4", dict(swap_zeromap=True, exec_folio_order=-1, max_folio_order=0,
                                      lru_gen_fairness_safeguards=False)),
    # 6.16: ext4 large folios up to PMD order; xfs had them long before
    ("6.16.0", "x86_64", "ext4", dict(swap_zeromap=True, exec_folio_order=-1, max_folio_order=9,
                                      lru_gen_fairness_safeguards=False)),
    ("6.1.0-57-amd64", "x86_64", "xfs", dict(swap_zeromap=False, exec_folio_order=-1, max_folio_order=9,
                                              lru_gen_fairness_safeguards=True)),
    # this machine: 6.18, x86 exec order 0; arm64's is 4 (arch_exec_folio_order)
    ("6.18.44-fc-v1300", "x86_64", "ext4", dict(swap_zeromap=True, exec_folio_order=0, max_folio_order=9,
                                                lru_gen_fairness_safeguards=False)),
    ("6.18.2", "aarch64", "ext4", dict(swap_zeromap=True, exec_folio_order=4, max_folio_order=9,
                                       lru_gen_fairness_safeguards=False)),
    # 9p (the VM's shared root) has no large folios on any release
    ("6.18.2", "x86_64", "9p", dict(swap_zeromap=True, exec_folio_order=0, max_folio_order=0,
                                    lru_gen_fairness_safeguards=False)),
])
def test_a_release_implies_its_mechanisms(release, machine, fs, want):
    assert release_config(release, machine, fs) == want


def test_not_a_release_is_refused():
    with pytest.raises(ValueError):
        release_config("linux")


def test_fs_types_read_mountinfo(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
                  "40 22 0:35 / /tmp rw shared:5 - tmpfs tmpfs rw\n"
                  "51 22 254:16 / /tmp/models ro,relatime - ext4 /dev/vdb ro\n")
    assert fs_types(["254:0", "254:16", "8:1"], str(mi)) == {"254:0": "ext4", "254:16": "ext4"}


def _run(tmp_path, kernel, model="/tmp/models/m.gguf"):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "kernel.json").write_text(json.dumps(kernel))
    (tmp_path / "run" / "summary.json").write_text(json.dumps(
        {"files": {model: {"dev": "254:0", "pages_added": 1}, "/usr/lib/libc.so.6": {"dev": "0:30"}}}))
    return str(tmp_path)


def test_a_6_1_guests_run_is_predicted_as_6_1(tmp_path):
    d = _run(tmp_path, {"kernel": "6.1.0-57-amd64", "machine": "x86_64", "lru": {"mode": "mglru"},
                        "read_ahead_kb": {"254:0": 128, "0:30": None}, "fs_type": {"254:0": "ext4"}})
    assert run_kernel(d, "/elsewhere/m.gguf") == dict(swap_zeromap=False, exec_folio_order=-1, max_folio_order=0,
                                                      lru_gen_fairness_safeguards=True,
                                                      read_ahead_kb=128, lru="mglru")


def test_the_guest_disks_max_sectors_kb_caps_willneed(tmp_path):
    # force_page_cache_ra(): a WILLNEED reads at most max(bdi->io_pages, ra_pages) pages from its
    # start; io_pages is the device's max_sectors_kb (6.1's virtio-blk: 1280 KiB), not this
    # machine's, so kernel.json keeps it beside read_ahead_kb
    d = _run(tmp_path, {"kernel": "6.1.0-57-amd64", "read_ahead_kb": {"254:0": 128},
                        "max_sectors_kb": {"254:0": 1280, "0:30": None}, "fs_type": {"254:0": "ext4"}})
    k = run_kernel(d, "/tmp/models/m.gguf")
    assert k["max_sectors_kb"] == 1280 and k["read_ahead_kb"] == 128


def test_a_run_without_a_kernel_record_keeps_configs_defaults(tmp_path):
    assert run_kernel(str(tmp_path), "/m.gguf") == {}


def test_swap_on_zram_before_6_3_is_counted_from_vmstat():
    """Before 6.3 zram swaps through ->rw_page (__swap_writepage() -> bdev_write_page()), no bio, so
    the recorder's block_bio_queue count is 0 and /proc/vmstat's pswpout is the count; from 6.3 the
    bios are there and the tracked tasks' own are used (vmstat is the whole machine's)."""
    from kmemsim.live.rundir import swap_pages
    summ = {"swap_out_pages": 0, "swap_in_pages": 0, "vmstat_delta": {"pswpout": 7298, "pswpin": 5460}}
    zram = {"zram": {"device": "zram0"}}
    assert swap_pages(summ, {"kernel": "6.1.0-57-amd64", **zram})[:2] == (7298, 5460)
    assert swap_pages(summ, {"kernel": "6.18.44", **zram})[:2] == (0, 0)
    assert swap_pages(dict(summ, swap_out_pages=10), {"kernel": "6.1.0", "swaps": [["/dev/sda2"]]})[:2] == (10, 0)
