"""The corpus's input files: GGUF headers written with the gguf library's own constants (value and
tensor types, quantisation block sizes), malformed on purpose one way each; kmemsim traces (Parquet
written with pyarrow, so the metadata can lie); libCacheSim files; scenario TOML; and files that are
not what they seem (a FIFO, a directory named like a file, a link to /dev/zero)."""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q, GGUFValueType as VT

# ---- GGUF ---------------------------------------------------------------------------------------

_FMT = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I", VT.INT32: "<i",
        VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _val(vt, v) -> bytes:
    if vt == VT.STRING:
        return _s(v)
    if vt == VT.ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_val(et, x) for x in items)
    return struct.pack(_FMT[vt], v)


def shape(arch="llama", layers=2, dim=64, ff=128, heads=2, kv_heads=1, vocab=300, wtype=Q.F16):
    """(kv, tensors) of a small model llama.cpp's loader would take: kv = [(key, type, value)],
    tensors = [name, ne (ggml order), type]."""
    kv = [("general.architecture", VT.STRING, arch), ("general.name", VT.STRING, "hardening"),
          (f"{arch}.block_count", VT.UINT32, layers), (f"{arch}.context_length", VT.UINT32, 4096),
          (f"{arch}.embedding_length", VT.UINT32, dim), (f"{arch}.feed_forward_length", VT.UINT32, ff),
          (f"{arch}.attention.head_count", VT.UINT32, heads),
          (f"{arch}.attention.head_count_kv", VT.UINT32, kv_heads)]
    hd = dim // heads
    t = [["token_embd.weight", (dim, vocab), wtype]]
    for i in range(layers):
        b = f"blk.{i}."
        t += [[b + "attn_norm.weight", (dim,), Q.F32], [b + "attn_q.weight", (dim, heads * hd), wtype],
              [b + "attn_k.weight", (dim, kv_heads * hd), wtype], [b + "attn_v.weight", (dim, kv_heads * hd), wtype],
              [b + "attn_output.weight", (heads * hd, dim), wtype], [b + "ffn_norm.weight", (dim,), Q.F32],
              [b + "ffn_gate.weight", (dim, ff), wtype], [b + "ffn_up.weight", (dim, ff), wtype],
              [b + "ffn_down.weight", (ff, dim), wtype]]
    t += [["output_norm.weight", (dim,), Q.F32]]
    return kv, t


def gguf_bytes(kv, tensors, version=3, align=32, offsets=None, n_tensors=None, n_kv=None,
               data=True) -> bytes:
    """A GGUF file: header, metadata, tensor infos, padding and zero tensor data (at most 64 MiB of
    it). offsets, n_tensors and n_kv override what the header says."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kv) if n_kv is None else n_kv)
    body = b"".join(_s(k) + struct.pack("<I", vt) + _val(vt, v) for k, vt, v in kv)
    infos, off, sizes = b"", 0, []
    for i, (name, ne, tt) in enumerate(tensors):
        block, tsize = GGML_QUANT_SIZES[Q(tt)] if tt in Q._value2member_map_ else (1, 1)
        nb = int(np.prod(ne, dtype=object)) // block * tsize
        o = off if offsets is None else offsets[i]
        infos += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tt, min(o, 2**64 - 1))
        sizes.append(nb)
        off += -(-nb // align) * align
    out = head + body + infos
    out += b"\0" * (-len(out) % align)
    if data:
        out += b"\0" * min(off, 64 << 20)      # a header that lies about its tensors gets what fits
    return out


def write_gguf(path, kv=None, tensors=None, **kw):
    if kv is None:
        kv, tensors = shape()
    with open(path, "wb") as f:
        f.write(gguf_bytes(kv, tensors, **kw))
    return str(path)


def replace_kv(kv, key, vt, value):
    """kv with key's entry replaced (added if missing; removed when vt is None)."""
    out = [e for e in kv if e[0] != key]
    if vt is not None:
        out.append((key, vt, value))
    return out


# ---- traces -------------------------------------------------------------------------------------

COLS = {"t": np.int64, "pid": np.int32, "op": np.uint8, "map": np.int32, "page": np.int64,
        "npages": np.int64, "arg": np.int64, "flags": np.uint32}


def write_trace(path, rows, meta=None, raw_meta=None, cols=None, types=None):
    """A Parquet trace as kmemsim writes it, except where told: rows (t, pid, op, map, page, npages,
    arg, flags), meta (JSON) or raw_meta (bytes as they are), cols (replacing columns), types
    (arrow types per column)."""
    arr = np.array(rows, dtype=object).reshape(-1, 8) if rows else np.zeros((0, 8), object)
    data = {k: arr[:, i].astype(dt) for i, (k, dt) in enumerate(COLS.items())}
    data.update(cols or {})
    fields = {k: pa.array(v, type=(types or {}).get(k)) for k, v in data.items()}
    table = pa.table(fields)
    m = {"files": [], "processes": [], "maps": [], "phases": [], "source": "hardening", "schema_version": 1}
    m.update(meta or {})
    md = raw_meta if raw_meta is not None else json.dumps(m).encode()
    table = table.replace_schema_metadata({b"kmemsim.trace": md} if md is not False else {})
    pq.write_table(table, path)
    return str(path)


MMAP, READ, WRITE, PROC_START, PHASE = 2, 4, 5, 0, 10


def ok_rows(pages=64):
    """A process that maps one anonymous region and writes it: the trace every replay takes."""
    return [(0, 1, PROC_START, -1, 0, 0, 0, 0), (1, 1, MMAP, 0, 0, pages, -1, 6), (2, 1, WRITE, 0, 0, pages, 0, 0)]


# ---- scenarios ----------------------------------------------------------------------------------

def scenario(duration="60.0", switch='pattern = "random"\ndwell = [5.0, 10.0]\ngap = 1.0', llm="", top="",
             app="", tail=""):
    """Scenario TOML: two apps switching (chat with a heap and an APK, maps with a heap), and the
    parts a case changes: top-level keys, [switch]'s keys, chat's extra keys, an [llm] and more."""
    return f"""name = "hardening"
seed = 1
duration = {duration}
{top}
[apps.chat]
tick = 1.0
{app}
[[apps.chat.anon]]
name = "heap"
mb = 8
[[apps.chat.file]]
name = "apk"
path = "/data/app/chat.apk"
mb = 4

[apps.maps]
[[apps.maps.anon]]
name = "heap"
mb = 16

[switch]
{switch}
{llm}
{tail}
"""


def llm(model='{ preset = "Qwen3-0.6B", type = "q4_0", layers = 1 }', keys="", requests='arrival = "poisson"\nmean_interval = 20.0'):
    """An [llm] table (a one-layer Qwen3-0.6B by default) with extra keys and its [llm.requests]."""
    return f"""
[llm]
model = {model}
ctx = 1024
decode = 4
prompt = 32
{keys}
[llm.requests]
{requests}
"""
