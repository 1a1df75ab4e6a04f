"""Storage-backed partial offload, mzCache's first baseline (mzcache-project/mzcache
baselines/partial_offload, scripts/ttft/run_partial_offload.sh): for a remaining share, a split of whole
weight layers and whole KV layers kept on flash, read back cold (drop_caches before each repetition)
through the page cache before the GPU's prefill, which waits for all of it.

The split: the artifact maps (context, ratio) to (weight_layers, kv_layers) with a hand-tuned table
for Qwen3 and an equal-fraction reconstruction for EXAONE; the table is not in the artifact's text we
have, so both models take the equal fraction here: round((1 - remaining) x num_layers) layers of each.
The reads: buffered read(2) of the offloaded files, so the kernel's synchronous readahead windows
(the device's read_ahead_kb) one after another: the flash model at that I/O size and queue depth 1.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.errors import InputError
from .mzcache import MzModel, layer_seconds


@dataclass(frozen=True)
class Split:
    m: MzModel
    weight_layers: int          # the last layers' weights, on flash
    kv_layers: int              # the last layers' KV, on flash

    @property
    def kv_layer_bytes(self) -> int:
        return self.m.chunk_bytes * self.m.n_chunks

    @property
    def offloaded_bytes(self) -> int:
        return self.weight_layers * self.m.weight_layer_bytes + self.kv_layers * self.kv_layer_bytes

    @property
    def remaining(self) -> float:
        return 1.0 - self.offloaded_bytes / self.m.full_bytes


def split(m: MzModel, remaining: float) -> Split:
    if not 0.0 <= remaining <= 1.0:
        raise InputError(f"remaining ratio {remaining}: expected 0..1")
    k = int(round((1.0 - remaining) * m.n_layer))
    return Split(m, k, k)


def restore(s: Split, dev, q, costs, pipeline):
    """The cold reads, then the GPU's prefill of the query over every layer; returns the Schedule
    (its makespan is the TTFT)."""
    m = s.m
    io = int(dev.kernel.get("read_ahead_kb", 128)) * 1024
    read = pipeline.stream("read", pipeline.flash())
    gpu = pipeline.stream("gpu", pipeline.resource("gpu", 1))
    loads = []
    for i in range(m.n_layer - s.weight_layers, m.n_layer):
        loads.append(read.read(f"weights L{i}", nbytes=m.weight_layer_bytes, io_bytes=io, queue_depth=1))
    for i in range(m.n_layer - s.kv_layers, m.n_layer):
        loads.append(read.read(f"KV L{i}", nbytes=s.kv_layer_bytes, io_bytes=io, queue_depth=1))
    per_layer = layer_seconds(m, q, costs)
    for i in range(m.n_layer):
        gpu.work(f"layer {i}", seconds=per_layer, after=loads if i == 0 else ())
    hp = q.hp
    head = hp["n_vocab"] * hp["n_embd"] * 2
    gpu.work("output", seconds=head / costs.gpu_bytes + head / 2 / costs.gpu_macs)
    return pipeline.run()
