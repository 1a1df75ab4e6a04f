"""kmemsim.core.units.parse_size: binary units as the kernel's memparse() reads them (lib/cmdline.c:
K, M, G, T are powers of 1024)."""
import pytest

from kmemsim.core.errors import InputError
from kmemsim.core.units import format_size, parse_size, size_to_pages


@pytest.mark.parametrize("text,expected", [
    ("4096", 4096), ("1K", 1024), ("1k", 1024), ("512M", 512 << 20), ("2G", 2 << 30),
    ("1T", 1 << 40), ("1KiB", 1024), ("3MiB", 3 << 20), ("2GiB", 2 << 30), ("2gb", 2 << 30),
    ("1.5K", 1536), ("0.5G", 512 << 20), (" 64M ", 64 << 20), ("10B", 10), (8192, 8192),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "12Q", "1..5M", "M", "1.1B", "--5", "5 M M", None, 1.5, True])
def test_parse_size_garbage(bad):
    with pytest.raises(InputError):
        parse_size(bad, "--mem")


@pytest.mark.parametrize("bad", ["0", 0, "0M", "-1", "-5M", -4096])
def test_parse_size_zero_or_negative(bad):
    with pytest.raises(InputError, match="--mem"):
        parse_size(bad, "--mem")


def test_zero_allowed_when_asked():
    assert parse_size("0", allow_zero=True) == 0
    with pytest.raises(InputError, match="negative"):
        parse_size("-1", allow_zero=True)


def test_messages_are_one_line():
    for bad in ("abc", "0", "-1G"):
        with pytest.raises(InputError) as e:
            parse_size(bad, "--mem")
        assert "\n" not in str(e.value) and str(e.value).startswith("--mem")


def test_pages():
    assert size_to_pages("512M") == 131072
    assert size_to_pages("4097") == 1
    with pytest.raises(InputError, match="page"):
        size_to_pages("100")


def test_format_size():
    assert format_size(512 << 20) == "512M"
    assert format_size(1536) == "1.5K"
    assert format_size(100) == "100"
