"""The `kmemsim` command: the group (main.py) and one module per command, registered here with one line
each. The command modules import their heavy machinery inside the command (start-up: `kmemsim --help`
loads no pandas, no C core)."""
from .main import main
from . import cleanup, compare, demo, experiment, export, is_live, predict, profile, record, replay, scenario, sweep, \
    trace_export, trace_import, validate, vm, workload

__all__ = ["main"]

main.add_command(demo.demo)
main.add_command(compare.compare)
main.add_command(experiment.experiment)
main.add_command(profile.profile)
main.add_command(replay.replay)
main.add_command(record.run)
main.add_command(record.record)
main.add_command(cleanup.cleanup)
main.add_command(workload.model)
main.add_command(workload.workload)
main.add_command(workload.trace)
main.add_command(predict.predict)
main.add_command(validate.validate)
main.add_command(is_live.is_live)
main.add_command(sweep.sweep)
main.add_command(export.export)
main.add_command(vm.vm)
workload.workload.add_command(scenario.scenario)     # `kmemsim workload scenario`
workload.trace.add_command(trace_import.trace_import)   # `kmemsim trace import ftrace|perfetto`
workload.trace.add_command(trace_export.trace_export)   # `kmemsim trace export oracleGeneral|csv`
