"""Skips shared by the tests, each with its reason (under CI=true a skipped live or llama test fails
the session: conftest.py)."""
import pytest


def needs_llama_cpp():
    """The llama_cpp module, or a skip saying what is missing and where it comes from."""
    return pytest.importorskip("llama_cpp", reason="llama test: needs llama-cpp-python (make setup installs it)")
