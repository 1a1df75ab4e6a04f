"""What a kernel release implies for the emulator's settings (kmemsim.engine.kernel.Config): the
mechanisms that came in a release the emulator models either way. One home for these facts: `kmemsim
profile` writes them for the machine it measures, and validation predicts a run with the ones of the
kernel it ran on (kernel.json's release), so a 6.1 guest is predicted as 6.1, not as this machine.

Each entry: (Config field, the first release with it, its value from then, its value before)."""
from __future__ import annotations

import re

FEATURES = (
    # mm: swap zeromap (6.12, "mm: store zero pages to be swapped out in a bitmap"): zero-filled
    # anon pages swap out to a bit, not to zram's same-filled slots
    ("swap_zeromap", (6, 12), True, False),
    # exec faults read forward within the vma in folios of the arch's exec order (6.17,
    # do_sync_mmap_readahead's VM_EXEC branch: x86 order 0, arm64 4); before, read-around as data
    ("exec_folio_order", (6, 17), None, -1),
    # MGLRU memcg reclaim (6.3, the memcg LRU series: "mm: multi-gen LRU: remove eviction fairness
    # safeguard" and the aging one): a lruvec aged is skipped, memcg reclaim never stops short;
    # before, 6.1's lru_gen_shrink_lruvec() evicts on after aging and stops at its safeguards
    ("lru_gen_fairness_safeguards", (6, 3), False, True),
)
EXEC_ORDER = {"x86_64": 0, "AMD64": 0, "aarch64": 4, "arm64": 4}     # arch_exec_folio_order()
# Large folios in the page cache, by file system: page_cache_ra_order() reads up to PMD order where
# mapping_large_folio_support(), else order-0 folios. ext4 since 6.16 ("ext4: enable large folio for
# regular file"), xfs since 5.18; 9p, f2fs (phones' /data) and the rest: order 0
LARGE_FOLIO_FS = {"ext4": (6, 16), "xfs": (5, 18)}
PMD_ORDER = 9


def release_tuple(release: str) -> tuple[int, int]:
    """'6.1.0-57-amd64' -> (6, 1)."""
    m = re.match(r"(\d+)\.(\d+)", release or "")
    if not m:
        raise ValueError(f"not a kernel release: {release!r}")
    return int(m.group(1)), int(m.group(2))


def release_config(release: str, machine: str = "x86_64", fs: str | None = "ext4") -> dict:
    """The Config settings RELEASE implies on MACHINE for a file on FS (None: not known, taken as
    one with large folios where the release has them)."""
    rel = release_tuple(release)
    out = {}
    for field, since, new, old in FEATURES:
        if field == "exec_folio_order":
            new = EXEC_ORDER.get(machine, 0)
        out[field] = new if rel >= since else old
    since = LARGE_FOLIO_FS.get(fs or "ext4")
    out["max_folio_order"] = PMD_ORDER if since is not None and rel >= since else 0
    return out
