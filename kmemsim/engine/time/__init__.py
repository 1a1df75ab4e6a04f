"""Time: what a count costs on a device (device.py, its profiles under kmemsim/data/devices/), the
compute of llama.cpp's graph (compute.py), seconds per phase as counts x costs (serial.py), and
overlapped streams whose critical path is a request's time (pipeline.py)."""
from .compute import TimeCursor, TimeModel
from .device import Device, load
from .pipeline import Pipeline, Schedule

__all__ = ["Device", "load", "TimeModel", "TimeCursor", "Pipeline", "Schedule"]
