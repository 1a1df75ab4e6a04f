"""llama.cpp's compute time on a device: what the graph's nodes cost between the trace's events.

Each graph node streams its weights from memory, then does its multiply-accumulates, one after the
other: ns = weight bytes / weight_gbps + MACs / matmul_gmac_s (a matmul of n token rows against a
weight of P elements: n x P MACs, whatever the weight type). On this machine (docs/validation.md) the
two measured rates give the three validation models' prefill and decode within their own run-to-run
spread or up to 20% outside it, where a roofline of bytes alone put llama-1B's prompt at 0.49 s
against 1.0-1.3 s. A device profile gives them (Device.time_model; `kmemsim profile` measures this
machine's). The workload generator clocks its trace with it (TimeCursor); the serial time model
(serial.py) charges the same nodes' compute.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TimeModel:
    """The two rates of a device's compute, and what loading and idling cost."""
    weight_gbps: float                       # GB/s (bytes per ns) of weights a graph node streams
    matmul_gmac_s: float                     # the matmuls' multiply-accumulates, 1e9 per second
    ns_per_load_byte: float = 0.5            # repack / read(2) copies at load
    ns_idle_between_requests: int = 0

    def ns(self, weight_bytes, macs):
        """Nanoseconds of graph nodes that stream weight_bytes and do macs multiply-accumulates."""
        return weight_bytes / self.weight_gbps + macs / self.matmul_gmac_s


class TimeCursor:
    """Trace time through a ubatch's graph: each node ends TimeModel.ns after it starts."""
    __slots__ = ("t", "tm")

    def __init__(self, t, tm: TimeModel):
        self.t, self.tm = t, tm

    def adv(self, nbytes, macs):
        self.t += self.tm.ns(nbytes, macs)
