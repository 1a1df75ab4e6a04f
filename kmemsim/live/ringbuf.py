"""A BPF ring buffer mapped into this process and drained in bulk (c_ext/ringbuf.c): the layout of
kernel/bpf/ringbuf.c as libbpf maps it (ringbuf.c `ringbuf_map_mmap_kern()`): the consumer's
position on a writable page at offset 0; the producer's position on the next page, then the data
mapped twice, so a record that wraps is contiguous."""
from __future__ import annotations

import mmap

import numpy as np

from ..engine.kernel import ffi, lib


class RingBuffer:
    def __init__(self, map_fd: int, size: int, rec: int):
        page = mmap.PAGESIZE
        self.rec = rec
        self.mask = size - 1
        self._cons = mmap.mmap(map_fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._prod = mmap.mmap(map_fd, page + 2 * size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page)
        self._out = np.empty(size // (rec + 8) * rec, np.uint8)     # room for a full buffer
        self._c_cons = ffi.from_buffer("uint64_t[]", self._cons)
        self._c_prod = ffi.from_buffer("uint64_t[]", self._prod)
        self._c_map = ffi.from_buffer("uint8_t[]", self._prod)
        self._c_data = self._c_map + page           # a pointer into _c_map, which keeps the mapping
        self._c_out = ffi.from_buffer("uint8_t[]", self._out)

    def drain(self) -> bytes:
        """The records committed since the last drain, concatenated."""
        parts = []
        cap = len(self._out) // self.rec
        while True:
            n = lib.km_ringbuf_drain(self._c_cons, self._c_prod, self._c_data, self.mask, self.rec, self._c_out, cap)
            if n < 0:
                raise RuntimeError("a BPF program wrote a record of another size to its ring buffer")
            parts.append(self._out[:n * self.rec].tobytes())
            if n < cap:
                return b"".join(parts)

    def close(self):
        del self._c_cons, self._c_prod, self._c_map, self._c_data, self._c_out   # release the mappings
        self._cons.close()
        self._prod.close()
