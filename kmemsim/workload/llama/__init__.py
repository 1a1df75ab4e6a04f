"""llama.cpp as a workload: the page accesses of its load, context and ubatches, generated from a GGUF
file's layout (session.py), the graph it walks (graph.py), where its weights live (buffers.py), the
host program around it (host.py), MoE routing (routing.py), the events on their way to the trace
(events.py), and the tensor order recorded from real llama.cpp (cb_eval.py). Its KV cache is an
engine-side manager (kmemsim.engine.managers), its clock the device's compute (kmemsim.engine.time)."""
from .buffers import LOAD_MODES, REPACK_TYPES, host_cpu_features
from .graph import (estimate_events, get_rows_order, graph_order, is_matmul_weight, macs_per_row, mul_mat_chunk_pages,
                    output_rows_only, split_prompt, step_rows)
from .host import HostSet
from .session import LlamaSession, check_request, generate, random_token_ids

__all__ = ["LlamaSession", "HostSet", "generate", "check_request", "estimate_events", "random_token_ids", "split_prompt", "step_rows",
           "graph_order", "get_rows_order", "is_matmul_weight", "macs_per_row", "mul_mat_chunk_pages",
           "output_rows_only", "LOAD_MODES", "REPACK_TYPES", "host_cpu_features"]
