"""What every stage shares: the trace schema, units (the one PAGE_SIZE), the one input error, atomic
writes, and where kmemsim's bundled files live.

The names below load with their module on first use (PEP 562), so importing kmemsim.core.errors, as
every command does at start-up, does not load numpy with the trace schema."""
from importlib import import_module

_HOME = {
    "atomic": ("atomic_path", "atomic_write", "atomic_json"),
    "data": ("DEFAULT_DEVICE", "cache_dir"),
    "errors": ("InputError",),
    "trace": ("Advice", "MapFlag", "Op", "PageClass", "Trace", "TraceBuilder", "WriteFlag"),
    "units": ("PAGE_SIZE", "format_size", "pages", "parse_size", "size_to_pages"),
}
_WHERE = {name: mod for mod, names in _HOME.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name):
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value
