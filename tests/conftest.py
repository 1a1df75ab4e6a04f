"""Shared test set-up. Live tests (root, BPF, cgroups, zram) and llama tests skip with a reason on a
machine without them; under CI=true they must run, so a skip there fails the whole session."""
import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "live" in item.keywords and not IN_CI and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason="live test: needs root (runs in CI)"))


_skipped_in_ci = []


def pytest_runtest_logreport(report):
    if IN_CI and report.skipped and ("live" in report.keywords or "llama" in report.keywords):
        _skipped_in_ci.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if _skipped_in_ci:
        print(f"\nCI=true but {len(_skipped_in_ci)} live/llama test(s) skipped; they must run in CI:")
        for n in _skipped_in_ci:
            print("  " + n)
        session.exitstatus = 1
