"""The `kmemsim` command: the group (main.py) and one module per command, registered here in one table,
name -> "module:attr", imported only when the command is used (start-up: `kmemsim --help` loads no
numpy, pandas or C core). A group whose subcommands live in other modules lists them beside it."""
from .main import main

__all__ = ["main"]

_C = "kmemsim.cli."
main.lazy.update({
    "demo": _C + "demo:demo",
    "compare": _C + "compare:compare",
    "experiment": _C + "experiment:experiment",
    "profile": _C + "profile:profile",
    "replay": _C + "replay:replay",
    "run": _C + "record:run",
    "record": _C + "record:record",
    "cleanup": _C + "cleanup:cleanup",
    "model": _C + "workload:model",
    "workload": (_C + "workload:workload", {"scenario": _C + "scenario:scenario"}),
    "trace": (_C + "workload:trace", {"import": _C + "trace_import:trace_import",
                                      "export": _C + "trace_export:trace_export"}),
    "predict": _C + "predict:predict",
    "validate": _C + "validate:validate",
    "is-live": _C + "is_live:is_live",
    "sweep": _C + "sweep:sweep",
    "export": _C + "export:export",
    "vm": _C + "vm:vm",
})
