"""Time: what a count costs on a device (device.py, its profiles under kmemsim/data/devices/), the
compute of llama.cpp's graph (compute.py), and seconds per phase as counts x costs (serial.py)."""
from .compute import TimeCursor, TimeModel
from .device import Device, load

__all__ = ["Device", "load", "TimeModel", "TimeCursor"]
