"""KV managers by name: a manager registers itself with @register; commands look it up with get()."""
from __future__ import annotations

from ...core.errors import InputError

_MANAGERS: dict = {}


def register(cls):
    """Class decorator: make a KVCache subclass selectable as --kv-manager cls.name."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    _MANAGERS[cls.name] = cls
    return cls


def names() -> list[str]:
    return list(_MANAGERS)


def get(name):
    """The manager class registered as `name`."""
    try:
        return _MANAGERS[name]
    except KeyError:
        raise InputError(f"--kv-manager {name!r}: unknown KV manager; known: {', '.join(_MANAGERS)}") from None
