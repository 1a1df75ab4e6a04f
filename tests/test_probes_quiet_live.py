"""`make test` quiet (issue 43, item 7): the recorder's probes give bcc its names as bytes, as bcc
expects (bcc/utils.py _assert_is_bytes warns "not a bytes object" for each str, a thousand times a
test run), so compiling, filling the maps and reading them back warns nothing."""
import os
import warnings

import pytest

pytestmark = pytest.mark.live


def test_probes_pass_bcc_bytes():
    from kmemsim.live.probes import Probes
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # any warning fails the test, bcc's included
        p = Probes()
        try:
            p.track(os.getpid())
            p.watch_inode(1 << 20, 2)
            p.watch_swap_dev(1 << 20)
            p.drain()
            p.file_counts()
            for name in ("vmscan_totals", "swap_totals", "read_totals"):
                assert all(v >= 0 for v in p.array(name))
            p.recursion_misses()
        finally:
            p.close()
