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
from ..core.limits import (MAX_ALIGNMENT, MAX_EMBD, MAX_EXPERTS, MAX_FF, MAX_GGUF_KEYS, MAX_GGUF_TENSORS,
                           MAX_HEAD_DIM, MAX_HEADS, MAX_LAYERS, MAX_U32, MAX_VOCAB)
from ..core.paths import input_file
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
_INT_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)
_BIG_ARRAY = 64      # arrays longer than this (the vocabulary) are skipped, not decoded
_TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32",
               7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64", 12: "float64"}


class _Truncated(Exception):
    pass


def _parse_header(buf):
    """GGUF v2/v3 header (ggml/src/gguf.cpp gguf_init_from_file_impl): returns (kv dict, key types,
    tensor infos, data start, alignment). Parsed with struct, because gguf.GGUFReader decodes every
    vocabulary entry into numpy views (minutes for a 150k-token vocabulary); tests check both agree.
    What gguf.cpp refuses is refused here too (duplicate keys and tensors, a bad alignment, a count
    the file cannot hold), each as one InputError."""
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
    # each key takes at least 12 bytes (its length and type), each tensor's info at least 24
    if n_kv > MAX_GGUF_KEYS or n_kv * 12 > n - pos:
        raise InputError(f"the header declares {n_kv:,} metadata keys, more than "
                         + (f"a GGUF has ({MAX_GGUF_KEYS:,})" if n_kv > MAX_GGUF_KEYS
                            else f"its {n:,} bytes can hold (truncated or corrupt)"))
    if n_tensors > MAX_GGUF_TENSORS or n_tensors * 24 > n - pos:
        raise InputError(f"the header declares {n_tensors:,} tensors, more than "
                         + (f"a GGUF has ({MAX_GGUF_TENSORS:,})" if n_tensors > MAX_GGUF_TENSORS
                            else f"its {n:,} bytes can hold (truncated or corrupt)"))
    kv, types = {}, {}
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
                need(pos, 8 * cnt)              # every string has its 8-byte length at least
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
        if key in kv:
            raise InputError(f"GGUF key {key!r} appears twice (gguf.cpp refuses duplicate keys)")
        kv[key], types[key] = val, vt
    tensors, names = [], set()
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
        if name in names:
            raise InputError(f"tensor {name!r} appears twice (gguf.cpp refuses duplicate names)")
        names.add(name)
        tensors.append((name, tuple(dims), tt, off))
    align = 32
    if "general.alignment" in kv:
        align = kv["general.alignment"]
        if types["general.alignment"] not in _INT_TYPES:
            raise InputError(f"general.alignment has type {_TYPE_NAMES.get(types['general.alignment'])} "
                             f"({align!r}), expected an integer")
        if not 1 <= align <= MAX_ALIGNMENT or align & (align - 1):
            raise InputError(f"general.alignment {align}: expected a power of two up to {MAX_ALIGNMENT:,} "
                             "(ggml pads tensor data to it)")
    return kv, types, tensors, -(-pos // align) * align, align


def _int_key(kv, types, key, default, lo, hi, path):
    """An integer metadata value within [lo, hi] (the limits of kmemsim.core.limits), or InputError."""
    if key not in kv:
        return default
    v = kv[key]
    if types[key] not in _INT_TYPES:
        shown = f"{v!r}" if not isinstance(v, list) else f"a list of {len(v)}"
        raise InputError(f"{path}: GGUF key {key} has type {_TYPE_NAMES.get(types[key], types[key])} "
                         f"({shown}), expected an integer")
    if not lo <= v <= hi:
        raise InputError(f"{path}: GGUF key {key} = {v:,} is outside {lo:,}..{hi:,} (no real model has that)")
    return v


def read_layout(path, check_arch=True) -> ModelLayout:
    """Parse a GGUF file's header (no tensor data is read). Raises InputError for a file that is not a
    GGUF, is truncated, has metadata no real model has, or (check_arch) has an architecture whose graph
    kmemsim does not model or lacks the tensors that graph reads."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType   # here: gguf takes 0.2 s to import (start-up)
    path = input_file(path, expected=".gguf model file")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic = f.read(4)
        if magic != b"GGUF":
            raise InputError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            try:
                kv, types, tinfo, data_start, align = _parse_header(mm)
            except _Truncated:
                raise InputError(f"{path}: truncated GGUF: the file ends ({size:,} bytes) inside its header")
            except InputError as e:
                raise InputError(f"{path}: {e}")
    arch = kv.get("general.architecture")
    if arch is None:
        raise InputError(f"{path}: GGUF without general.architecture; not a model file")
    if not isinstance(arch, str):
        raise InputError(f"{path}: general.architecture is not a string ({arch!r})")
    if check_arch and arch not in SUPPORTED_ARCHS:
        raise InputError(f"{path}: architecture {arch!r} is not supported by the workload generator "
                         f"(supported: {', '.join(SUPPORTED_ARCHS)})")
    if not tinfo:
        raise InputError(f"{path}: GGUF with no tensors; not a model file")
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
        if ne >= 1 << 63:
            raise InputError(f"{path}: tensor {name!r} has {ne:,} elements (more than int64 holds)")
        if dims and dims[0] % block:
            raise InputError(f"{path}: tensor {name!r}: its rows of {dims[0]} are not whole {qt.name} blocks "
                             f"of {block}")
        if off % align:
            raise InputError(f"{path}: tensor {name!r} at offset {off:,}, not a multiple of the alignment {align}")
        nb = ne // block * tsize
        tensors.append(TensorInfo(name, qt.name, tuple(int(d) for d in dims), nb, data_start + off))
        end = max(end, data_start + off + nb)
    if end > size:
        raise InputError(f"{path}: truncated GGUF: tensor data runs to byte {end:,} but the file has "
                         f"{size:,} bytes")
    a = arch

    def k(name, default, lo, hi):
        return _int_key(kv, types, f"{a}.{name}", default, lo, hi, path)

    n_embd = k("embedding_length", 0, 0, MAX_EMBD)
    n_head = k("attention.head_count", 0, 0, MAX_HEADS)
    tok = next((t for t in tensors if t.name == "token_embd.weight"), None)
    toks = kv.get("tokenizer.ggml.tokens", 0)
    hp = {
        "n_layer": k("block_count", 0, 0, MAX_LAYERS),
        "n_embd": n_embd,
        "n_ff": k("feed_forward_length", 0, 0, MAX_FF),
        "n_head": n_head,
        "n_head_kv": k("attention.head_count_kv", n_head, 1, MAX_HEADS),
        "head_dim": k("attention.key_length", 0, 0, MAX_HEAD_DIM) or (n_embd // n_head if n_head else 0),
        "n_vocab": int(tok.shape[1]) if tok is not None and len(tok.shape) > 1
        else (toks if isinstance(toks, int) else len(toks)),
        "n_expert": k("expert_count", 0, 0, MAX_EXPERTS),
        "n_expert_used": k("expert_used_count", 0, 0, MAX_EXPERTS),
        "n_ff_exp": k("expert_feed_forward_length", 0, 0, MAX_FF),
        "n_ctx_train": k("context_length", 0, 0, MAX_U32),
        # llama_vocab's special BOS id (1, SPM's, when the file does not say)
        "bos_token_id": _int_key(kv, types, "tokenizer.ggml.bos_token_id", 1, 0, MAX_U32, path),
    }
    if hp["n_layer"] <= 0 or n_embd <= 0 or n_head <= 0:
        raise InputError(f"{path}: GGUF lacks {arch}.block_count/embedding_length/attention.head_count")
    if hp["n_expert"] and not hp["n_ff_exp"]:
        exps = next((t for t in tensors if t.name.endswith("ffn_up_exps.weight")), None)
        hp["n_ff_exp"] = int(exps.shape[1]) if exps is not None and len(exps.shape) > 1 else 0
    L = ModelLayout(path=path, arch=arch, hparams=hp, tensors=tensors, file_size=size,
                    alignment=align, data_start=data_start)
    if check_arch:
        check_model(L)
    return L


def check_model(L: ModelLayout) -> None:
    """What llama.cpp's loader checks before it runs a model (llama_model::load_tensors,
    create_tensor), on the metadata the workload generator trusts: heads that divide, the tensors
    of every layer there and of the shapes the metadata says, none beyond block_count."""
    hp, where = L.hparams, L.path or L.name
    nl, ne, nh, nkv, hd = hp["n_layer"], hp["n_embd"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    if nkv > nh or nh % nkv:
        raise InputError(f"{where}: attention.head_count_kv {nkv} does not divide attention.head_count {nh}")
    if not 1 <= hd <= MAX_HEAD_DIM:
        raise InputError(f"{where}: a head of {hd} dimensions (attention.key_length; at most {MAX_HEAD_DIM})")
    if hp["n_expert"] and not 1 <= hp["n_expert_used"] <= hp["n_expert"]:
        raise InputError(f"{where}: expert_used_count {hp['n_expert_used']} is outside 1..expert_count "
                         f"{hp['n_expert']}")
    if L.tensor("token_embd.weight") is None:
        raise InputError(f"{where}: tensor 'token_embd.weight' is missing (llama.cpp refuses the model)")
    if not 1 <= hp["n_vocab"] <= MAX_VOCAB:
        raise InputError(f"{where}: a vocabulary of {hp['n_vocab']:,} tokens (at most {MAX_VOCAB:,})")

    def shape(name, want):
        t = L.tensor(name)
        if t is None:
            raise InputError(f"{where}: tensor {name!r} is missing (llama.cpp refuses the model)")
        if want is not None and tuple(t.shape[:len(want)]) != want:
            raise InputError(f"{where}: tensor {name!r} has shape {tuple(t.shape)}, the metadata says "
                             f"{want} (llama.cpp refuses the model)")

    shape("token_embd.weight", (ne, hp["n_vocab"]))
    shape("output_norm.weight", (ne,))
    for il in range(nl):
        b = f"blk.{il}."
        shape(b + "attn_norm.weight", (ne,))
        shape(b + "attn_q.weight", (ne, nh * hd))
        shape(b + "attn_k.weight", (ne, nkv * hd))
        shape(b + "attn_v.weight", (ne, nkv * hd))
        shape(b + "attn_output.weight", (nh * hd, ne))
        shape(b + "ffn_norm.weight", (ne,))
        if L.tensor(b + "ffn_gate_inp.weight") is not None:
            for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"):
                shape(b + n, None)
            if not hp["n_expert"]:
                raise InputError(f"{where}: layer {il} has experts but expert_count is not set")
        else:
            for n in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"):
                shape(b + n, None)
    for t in L.tensors:
        if t.name.startswith("blk."):
            idx = t.name.split(".")[1]
            if not idx.isdigit() or int(idx) >= nl:
                raise InputError(f"{where}: tensor {t.name!r} is beyond block_count {nl} (llama.cpp: "
                                 "wrong number of tensors)")


def layout_of(model) -> ModelLayout:
    """A ModelLayout from a path or a layout object."""
    if isinstance(model, ModelLayout):
        return model
    return read_layout(model)
