"""Tensor layout of a GGUF model file: where each weight lives in the file, page by page.

This is the tensor <-> page map the workload generator needs (seed-systems.md §4.6): every tensor's
absolute `data_offset` and `n_bytes` (the same numbers gguf.GGUFReader gives; tests compare); llama.cpp mmaps the
whole file, so tensor bytes [data_offset, data_offset + n_bytes) are file pages
[data_offset // 4096, ceil((data_offset + n_bytes) / 4096)). Tensors are 32-byte aligned by default, so
neighbouring tensors share their boundary pages.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field

from ..core.errors import InputError
from ..core.units import PAGE_SIZE

# Architectures whose compute graph the workload generator knows (llama.cpp src/models/<arch>.cpp).
SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe")


@dataclass
class TensorInfo:
    name: str
    type: str               # ggml type name: "F32", "F16", "Q8_0", "Q4_0", ...
    shape: tuple            # ggml order (ne0, ne1, ...): ne0 is the contiguous row length
    n_bytes: int
    data_offset: int        # absolute offset in the file

    @property
    def first_page(self) -> int:
        return self.data_offset // PAGE_SIZE

    @property
    def end_page(self) -> int:
        """One past the last page that holds a byte of this tensor."""
        return -(-(self.data_offset + self.n_bytes) // PAGE_SIZE)

    @property
    def npages(self) -> int:
        return self.end_page - self.first_page

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (ne0 elements): rows of quantised types are whole blocks."""
        rows = 1
        for d in self.shape[1:]:
            rows *= int(d)
        return self.n_bytes // max(rows, 1)


@dataclass
class ModelLayout:
    """What the workload generator needs to know about a model file."""
    path: str | None              # None for a layout computed from a preset (no file on disk)
    arch: str
    hparams: dict                 # n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_expert,
                                  # n_expert_used, n_ff_exp, n_ctx_train
    tensors: list = field(default_factory=list)   # TensorInfo in file order
    file_size: int = 0
    alignment: int = 32
    data_start: int = 0           # offset of the tensor data section

    @property
    def file_pages(self) -> int:
        return -(-self.file_size // PAGE_SIZE)

    def tensor(self, name) -> TensorInfo | None:
        if not hasattr(self, "_by_name"):
            self._by_name = {t.name: t for t in self.tensors}
        return self._by_name.get(name)

    @property
    def name(self) -> str:
        return os.path.basename(self.path) if self.path else self.hparams.get("preset", self.arch)

    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def table(self):
        """pandas DataFrame: name, type, shape, n_bytes, data_offset, first_page, npages."""
        import pandas as pd      # here: the CLI reads layouts at start-up, pandas only for this table
        return pd.DataFrame([{"name": t.name, "type": t.type, "shape": "x".join(map(str, t.shape)),
                              "n_bytes": t.n_bytes, "data_offset": t.data_offset,
                              "first_page": t.first_page, "npages": t.npages} for t in self.tensors])


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
           12: "<d"}
_BIG_ARRAY = 64      # arrays longer than this (the vocabulary) are skipped, not decoded


class _Truncated(Exception):
    pass


def _parse_header(buf):
    """GGUF v2/v3 header (ggml/src/gguf.cpp gguf_init_from_file_impl): returns (kv dict, tensor infos,
    data start). Parsed with struct, because gguf.GGUFReader decodes every vocabulary entry into numpy
    views (minutes for a 150k-token vocabulary); tests check both agree."""
    n = len(buf)

    def need(pos, k):
        if pos + k > n:
            raise _Truncated()

    def u(fmt, pos):
        k = struct.calcsize(fmt)
        need(pos, k)
        return struct.unpack_from(fmt, buf, pos)[0], pos + k

    def string(pos):
        ln, pos = u("<Q", pos)
        need(pos, ln)
        return bytes(buf[pos:pos + ln]).decode("utf-8", "replace"), pos + ln

    version, pos = u("<I", 4)
    if version not in (2, 3):
        raise InputError(f"GGUF version {version} (kmemsim reads versions 2 and 3)")
    n_tensors, pos = u("<Q", pos)
    n_kv, pos = u("<Q", pos)
    if n_tensors > 1 << 24 or n_kv > 1 << 24:
        raise _Truncated()
    kv = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        vt, pos = u("<I", pos)
        if vt == 8:
            val, pos = string(pos)
        elif vt in _SCALAR:
            val, pos = u(_SCALAR[vt], pos)
        elif vt == 9:
            et, pos = u("<I", pos)
            cnt, pos = u("<Q", pos)
            if et == 8:
                vals = []
                for i in range(cnt):
                    ln, pos = u("<Q", pos)
                    if cnt <= _BIG_ARRAY:
                        need(pos, ln)
                        vals.append(bytes(buf[pos:pos + ln]).decode("utf-8", "replace"))
                    pos += ln
                need(pos, 0)
                val = vals if cnt <= _BIG_ARRAY else cnt
            elif et in _SCALAR:
                k = struct.calcsize(_SCALAR[et])
                need(pos, k * cnt)
                val = (list(struct.unpack_from("<" + _SCALAR[et][1] * cnt, buf, pos))
                       if cnt <= _BIG_ARRAY else cnt)
                pos += k * cnt
            else:
                raise InputError(f"GGUF key {key!r}: unsupported array element type {et}")
        else:
            raise InputError(f"GGUF key {key!r}: unknown value type {vt}")
        kv[key] = val
    tensors = []
    for _ in range(n_tensors):
        name, pos = string(pos)
        nd, pos = u("<I", pos)
        if nd > 4:
            raise InputError(f"tensor {name!r} has {nd} dimensions (GGML_MAX_DIMS is 4)")
        dims = []
        for _ in range(nd):
            d, pos = u("<Q", pos)
            dims.append(d)
        tt, pos = u("<I", pos)
        off, pos = u("<Q", pos)
        tensors.append((name, tuple(dims), tt, off))
    align = int(kv.get("general.alignment", 32))
    return kv, tensors, -(-pos // align) * align, align


def read_layout(path, check_arch=True) -> ModelLayout:
    """Parse a GGUF file's header (no tensor data is read). Raises InputError for a file that is not a
    GGUF, is truncated, or has an architecture whose graph kmemsim does not model."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType   # here: gguf takes 0.2 s to import (start-up)
    path = str(path)
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, expected a .gguf model file")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic = f.read(4)
        if magic != b"GGUF":
            raise InputError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                kv, tinfo, data_start, align = _parse_header(mm)
            except _Truncated:
                raise InputError(f"{path}: truncated GGUF: the file ends ({size:,} bytes) inside its header")
            except InputError as e:
                raise InputError(f"{path}: {e}")
    arch = kv.get("general.architecture")
    if arch is None:
        raise InputError(f"{path}: GGUF without general.architecture; not a model file")
    if check_arch and arch not in SUPPORTED_ARCHS:
        raise InputError(f"{path}: architecture {arch!r} is not supported by the workload generator "
                         f"(supported: {', '.join(SUPPORTED_ARCHS)})")
    tensors = []
    end = data_start
    for name, dims, tt, off in tinfo:
        try:
            qt = GGMLQuantizationType(tt)
        except ValueError:
            raise InputError(f"{path}: tensor {name!r} has unknown ggml type {tt}")
        block, tsize = GGML_QUANT_SIZES[qt]
        ne = 1
        for d in dims:
            ne *= d
        nb = ne // block * tsize
        tensors.append(TensorInfo(name, qt.name, tuple(int(d) for d in dims), nb, data_start + off))
        end = max(end, data_start + off + nb)
    if end > size:
        raise InputError(f"{path}: truncated GGUF: tensor data runs to byte {end:,} but the file has "
                         f"{size:,} bytes")
    a = arch

    def k(name, default=None):
        return kv.get(f"{a}.{name}", default)

    n_embd = int(k("embedding_length", 0))
    n_head = int(k("attention.head_count", 0) or 0)
    tok = next((t for t in tensors if t.name == "token_embd.weight"), None)
    toks = kv.get("tokenizer.ggml.tokens", 0)
    hp = {
        "n_layer": int(k("block_count", 0)),
        "n_embd": n_embd,
        "n_ff": int(k("feed_forward_length", 0) or 0),
        "n_head": n_head,
        "n_head_kv": int(k("attention.head_count_kv", n_head) or n_head),
        "head_dim": int(k("attention.key_length", 0) or (n_embd // n_head if n_head else 0)),
        "n_vocab": int(tok.shape[1]) if tok is not None else (toks if isinstance(toks, int) else len(toks)),
        "n_expert": int(k("expert_count", 0) or 0),
        "n_expert_used": int(k("expert_used_count", 0) or 0),
        "n_ff_exp": int(k("expert_feed_forward_length", 0) or 0),
        "n_ctx_train": int(k("context_length", 0) or 0),
        # llama_vocab's special BOS id (1, SPM's, when the file does not say)
        "bos_token_id": int(kv.get("tokenizer.ggml.bos_token_id", 1)),
    }
    if hp["n_layer"] <= 0 or n_embd <= 0 or n_head <= 0:
        raise InputError(f"{path}: GGUF lacks {arch}.block_count/embedding_length/attention.head_count")
    if hp["n_expert"] and not hp["n_ff_exp"]:
        exps = next((t for t in tensors if t.name.endswith("ffn_up_exps.weight")), None)
        hp["n_ff_exp"] = int(exps.shape[1]) if exps is not None else 0
    return ModelLayout(path=path, arch=arch, hparams=hp, tensors=tensors, file_size=size,
                       alignment=align, data_start=data_start)


def layout_of(model) -> ModelLayout:
    """A ModelLayout from a path or a layout object."""
    if isinstance(model, ModelLayout):
        return model
    return read_layout(model)
