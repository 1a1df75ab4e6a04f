"""What every stage shares: the trace schema, units (the one PAGE_SIZE), the one input error, atomic
writes, and where kmemsim's bundled files live."""
from .atomic import atomic_json, atomic_path, atomic_write
from .data import DEFAULT_DEVICE, cache_dir
from .errors import InputError
from .trace import Advice, MapFlag, Op, PageClass, Trace, TraceBuilder, WriteFlag
from .units import PAGE_SIZE, format_size, pages, parse_size, size_to_pages

__all__ = ["PAGE_SIZE", "InputError", "Trace", "TraceBuilder", "Op", "MapFlag", "PageClass", "WriteFlag",
           "Advice", "parse_size", "size_to_pages", "format_size", "pages", "atomic_path", "atomic_write",
           "atomic_json", "cache_dir", "DEFAULT_DEVICE"]
