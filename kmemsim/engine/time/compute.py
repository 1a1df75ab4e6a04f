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

from dataclasses import dataclass, field

# An MoE's experts are mul_mat_id nodes: ggml computes them row by row per expert
# (ggml_compute_forward_mul_mat_id(), no llamafile_sgemm), slower per MAC than the dense matmuls, so
# their rates go under their type's name with this suffix (by_type["Q4_0 mul_mat_id"])
MUL_MAT_ID = " mul_mat_id"


@dataclass
class TimeModel:
    """The two rates of a device's compute, and what loading and idling cost. by_type: the two rates
    for weights of a ggml type ("F16", "Q8_0", "Q4_0", ...) where they were measured apart: llama.cpp's
    CPU kernels dequantise each type its own way (f16 rows converted, q4_0 repacked for AVX2), so one
    pair fitted on q8_0 put f16's decode 20-30% short and repacked q4_0's 30-60% long (the grid's
    models without pressure, docs/validation.md); a type not in it takes the pair above."""
    weight_gbps: float                       # GB/s (bytes per ns) of weights a graph node streams
    matmul_gmac_s: float                     # the matmuls' multiply-accumulates, 1e9 per second
    ns_per_load_byte: float = 0.5            # repack / read(2) copies at load
    ns_idle_between_requests: int = 0
    by_type: dict = field(default_factory=dict)    # type -> (weight_gbps, matmul_gmac_s)
    # what a layer costs beside its weights' two rates: its ~20-30 graph nodes' dispatch and the
    # barrier after each (ggml_graph_compute_thread: ggml_barrier() between nodes), and the nodes
    # without weights (norms, RoPE, softmax, adds, the activations' conversion for the matmuls),
    # which work on the token rows' n_embd-wide activations. Fitted by kmemsim profile over two
    # shapes: without them, rates fitted on a wide shape put a narrow one 15-37% short.
    ns_per_layer: float = 0.0                # per layer per llama_decode step
    ns_per_activation: float = 0.0           # per layer, token row and embedding element

    def rates(self, qtype: str | None = None) -> tuple[float, float]:
        """The pair of weights of qtype; an MoE's experts (qtype + MUL_MAT_ID) fall back to their
        type's, a type not measured to the device's pair."""
        r = self.by_type.get(qtype)
        if r is None and qtype and str(qtype).endswith(MUL_MAT_ID):
            r = self.by_type.get(str(qtype)[:-len(MUL_MAT_ID)])
        return r if r is not None else (self.weight_gbps, self.matmul_gmac_s)

    def ns(self, weight_bytes, macs, qtype: str | None = None):
        """Nanoseconds of graph nodes that stream weight_bytes and do macs multiply-accumulates, of
        weights of type qtype (None: the device's pair)."""
        g, m = self.rates(qtype)
        return weight_bytes / g + macs / m

    def layers_ns(self, layers, rows, n_embd):
        """Nanoseconds of the nodes without weights of `layers` layers working on `rows` token rows
        of n_embd elements."""
        return layers * (self.ns_per_layer + self.ns_per_activation * rows * n_embd)

    def step_ns(self, cost: dict, weight_bytes, tokens, outputs, layers=0, n_embd=0):
        """Nanoseconds of llama_decode steps of a model whose step costs, by weight type, are `cost`
        ({type: (weight bytes, MACs per token row, MACs per output row)}, LlamaSession.step_cost),
        reading weight_bytes of weights (a step's share of each type as in the whole) with `tokens`
        token rows and `outputs` output rows, through `layers` layers of n_embd. Arrays broadcast."""
        total = sum(b for b, _, _ in cost.values()) or 1
        ns = self.layers_ns(layers, tokens, n_embd)
        for qt, (b, m_tok, m_out) in cost.items():
            ns = ns + self.ns(weight_bytes * (b / total), tokens * m_tok + outputs * m_out, qt)
        return ns


class TimeCursor:
    """Trace time through a ubatch's graph: each node ends TimeModel.ns after it starts."""
    __slots__ = ("t", "tm")

    def __init__(self, t, tm: TimeModel):
        self.t, self.tm = t, tm

    def adv(self, nbytes, macs, qtype=None):
        self.t += self.tm.ns(nbytes, macs, qtype)

    def layer(self, rows, n_embd):
        """A layer's nodes without weights (charged as it starts)."""
        self.t += self.tm.layers_ns(1, rows, n_embd)
