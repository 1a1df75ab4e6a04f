"""Device profiles: what a count costs in seconds on a device (workloads/devices/*.toml).

A profile holds flash read latency and bandwidth by I/O size (and the flash's throughput ceiling and
usable queue depth for reads kept in flight: Device.flash_throughput), zram compress/decompress speed per
algorithm, what reclaim costs (per page scanned, per file folio dropped, per page swapped out),
llama.cpp's compute speed (weight bytes streamed and matmul multiply-accumulates per second:
kmemsim.engine.time.compute.TimeModel), and the kernel settings the device implies (mapped onto
kmemsim.engine.kernel.Config fields). Counts come from the emulator; kmemsim.engine.time.serial multiplies them by a
profile.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core.errors import InputError
from ...core.data import DEFAULT_DEVICE, DEVICES
from ...core.units import PAGE_SIZE, parse_size
from .compute import TimeModel

DEVICES_DIR = DEVICES
CONFIG_KEYS = ("read_ahead_kb", "max_sectors_kb", "fault_around_bytes", "prefault_young", "swappiness",
               "zram", "lmk", "min_free_kbytes", "watermark_scale_factor", "max_folio_order",
               "swap_zeromap", "exec_folio_order")
ALGOS = ("lz4", "zstd", "lzo", "lzo-rle")


@dataclass
class Device:
    name: str
    description: str
    source: str
    ram: int                               # bytes
    available: int                         # bytes: default --mem for what a trace models
    kernel: dict                           # Config fields
    io_kb: np.ndarray
    latency_us: np.ndarray
    bandwidth_gbps: np.ndarray
    compress_gbps: dict
    decompress_gbps: dict
    zero_page_us: float
    scan_us_per_page: float
    weight_gbps: float                     # GB/s (bytes per ns) of weights a llama_decode step streams
    matmul_gmac_s: float                   # the matmuls' multiply-accumulates, 1e9 per second
    # memcg reclaim's own time (kmemsim profile measures it): per file folio it drops (unmap,
    # __remove_mapping), and per anonymous page it swaps out (compression included; None: the zram
    # compress speed alone)
    file_folio_us: float = 0.0
    swap_page_us: float | None = None
    # the same two as a recorded run pays them (kmemsim profile since METHOD 2: the recorder's probes
    # slow reclaim), for predicting the live runs validate records; empty: as above
    recorded: dict = field(default_factory=dict)
    path: str = ""
    extra: dict = field(default_factory=dict)
    # the flash with reads kept in flight ([storage] max_gbps, queue_depth: flash_throughput()):
    # its throughput ceiling in GB/s (None: the largest bandwidth_gbps), and the host's usable queue
    # depth (UFS 4.0's command queue is 32 deep)
    max_gbps: float | None = None
    queue_depth: int = 32
    # what GPU inference engines and their KV codecs cost ([gpu], [codecs]; engine_costs())
    engine: dict = field(default_factory=dict)

    # --- storage ---------------------------------------------------------------------------------
    def _interp(self, io_bytes, ys):
        x = np.log(np.maximum(np.asarray(io_bytes, float), 1.0) / 1024.0)
        return np.interp(x, np.log(self.io_kb), ys)

    def read_latency_s(self, io_bytes):
        """Per-I/O latency of one synchronous read of io_bytes (log-linear between table points)."""
        return self._interp(io_bytes, self.latency_us) * 1e-6

    def read_bandwidth(self, io_bytes):
        """Bytes per second of a read of io_bytes."""
        return self._interp(io_bytes, self.bandwidth_gbps) * 1e9

    def flash_throughput(self, io_bytes, queue_depth):
        """Bytes per second of reads of io_bytes each, queue_depth of them kept in flight.

        The model: q = min(queue_depth, the profile's queue_depth) reads of S bytes in flight, each
        taking its QD1 time latency(S) + S / bandwidth(S) (the profile's own definition of a
        synchronous read: read_latency_s, read_bandwidth), so q x S bytes per QD1 time, capped by the
        link at max_gbps: min(max_gbps, q x S / (latency(S) + S / bandwidth(S))). Its terms: the QD1
        table ([storage] io_kb, latency_us, bandwidth_gbps), the host's usable queue depth
        ([storage] queue_depth, default 32: JEDEC UFS 4.0's command queue depth) and the device's
        ceiling at high queue depth ([storage] max_gbps, default the table's largest bandwidth).
        At queue depth 1 it is the QD1 rate S / (latency(S) + S / bandwidth(S))."""
        q = np.asarray(queue_depth, float)
        if (q < 1).any() or not np.isfinite(q).all():
            raise InputError(f"flash_throughput: queue_depth must be >= 1, got {queue_depth!r}")
        s = np.maximum(np.asarray(io_bytes, float), 1.0)
        qd1 = s / (self.read_latency_s(s) + s / self.read_bandwidth(s))
        cap = (self.max_gbps if self.max_gbps is not None else float(self.bandwidth_gbps.max())) * 1e9
        out = np.minimum(cap, np.minimum(q, self.queue_depth) * qd1)
        return float(out) if out.ndim == 0 else out

    # --- inference engines beside llama.cpp's CPU path ------------------------------------------
    ENGINE_KEYS = ("gpu_weight_gbps", "gpu_gmac_s", "svm_alloc_gbps", "flexgen8_decomp_gbps", "flexgen4_decomp_gbps")

    def engine_costs(self) -> dict:
        """The [gpu] and [codecs] tables (GB/s and GMAC/s): a GPU engine's streaming of weights and KV
        (gpu_weight_gbps) and its multiply-accumulates (gpu_gmac_s), allocating raw buffers
        (svm_alloc_gbps), and the KV codecs' decompression (raw bytes out per second). A profile
        without them cannot time a GPU engine: the error says which key is missing."""
        missing = [k for k in self.ENGINE_KEYS if k not in self.engine]
        if missing:
            table = lambda k: "codecs" if k.startswith("flexgen") else "gpu"
            raise InputError(f"device {self.name}: no " + ", ".join(
                f"[{table(k)}] {k.removeprefix('gpu_') if table(k) == 'gpu' and k != 'svm_alloc_gbps' else k}"
                for k in missing) + " (a GPU engine's costs; see galaxy-s25plus.toml)")
        return dict(self.engine)

    # --- zram ------------------------------------------------------------------------------------
    def zram_algo(self, zram: str | None) -> str:
        algo = (zram or self.kernel.get("zram") or "lz4:0").partition(":")[0]
        if algo not in self.compress_gbps or algo not in self.decompress_gbps:
            raise InputError(f"device {self.name}: no zram speed for algorithm {algo!r} "
                             f"(has {', '.join(sorted(self.compress_gbps))})")
        return algo

    def task_costs(self, zram: str | None, recorded: bool = False) -> dict:
        """What the emulator's clock charges (kmemsim.engine.kernel.Config fields, as kmemsim.engine.time.serial charges
        the same counts): a readahead read's latency and bandwidth at max_sectors_kb requests, and
        microseconds per page swapped in (decompressed, or a same-filled/zeromap page), per page
        swapped out, per file folio dropped and per page scanned by the task's own reclaim.
        recorded: reclaim as a run under kmemsim's recorder pays it (`recorded`, when measured)."""
        algo = self.zram_algo(zram)
        io = int(self.kernel.get("max_sectors_kb", 4096)) * 1024
        rc = self.recorded if recorded else {}
        swap_us = rc.get("swap_page_us", self.swap_page_us)
        return {"io_latency_us": float(self.read_latency_s(io)) * 1e6,
                "io_read_gbps": float(self.read_bandwidth(io)) / 1e9,
                "swapin_us": PAGE_SIZE / (self.decompress_gbps[algo] * 1e3),
                "zero_page_us": float(self.zero_page_us),
                "swapout_us": (float(swap_us) if swap_us is not None
                               else PAGE_SIZE / (self.compress_gbps[algo] * 1e3)),
                "file_folio_us": float(rc.get("file_folio_us", self.file_folio_us)),
                "scan_us": float(self.scan_us_per_page)}

    def time_model(self):
        """llama.cpp's compute time on this device."""
        return TimeModel(weight_gbps=self.weight_gbps, matmul_gmac_s=self.matmul_gmac_s)

    def config_kwargs(self) -> dict:
        """The kernel settings this device implies, as kmemsim.engine.kernel.Config keyword arguments."""
        return dict(self.kernel)

    def as_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "source": self.source,
            "ram_bytes": self.ram, "available_bytes": self.available, "kernel": self.kernel,
            "storage": {"io_kb": self.io_kb.tolist(), "latency_us": self.latency_us.tolist(),
                        "bandwidth_gbps": self.bandwidth_gbps.tolist(),
                        "max_gbps": (self.max_gbps if self.max_gbps is not None
                                     else float(self.bandwidth_gbps.max())),
                        "queue_depth": self.queue_depth},
            "zram": {"compress_gbps": self.compress_gbps, "decompress_gbps": self.decompress_gbps,
                     "zero_page_us": self.zero_page_us},
            "reclaim": {"scan_us_per_page": self.scan_us_per_page, "file_folio_us": self.file_folio_us,
                        "swap_page_us": self.swap_page_us, "recorded": self.recorded},
            "compute": {"weight_gbps": self.weight_gbps, "matmul_gmac_s": self.matmul_gmac_s},
            "engine": self.engine,
            "path": self.path,
        }


def names() -> list[str]:
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


def _num(d, key, where, lo=0.0, strict=True):
    if key not in d:
        raise InputError(f"{where}: missing {key}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (v <= lo if strict else v < lo):
        raise InputError(f"{where}: {key} must be a number {'>' if strict else '>='} {lo:g}, got {v!r}")
    return float(v)


def parse(raw: dict, path: str = "<device>") -> Device:
    known = {"name", "description", "source", "memory", "kernel", "storage", "zram", "reclaim", "compute",
             "gpu", "codecs", "reference", "measured"}
    for k in raw:
        if k not in known:
            raise InputError(f"{path}: unknown key {k!r}")
    mem = raw.get("memory", {})
    try:
        ram = parse_size(mem.get("ram", "0"), "memory.ram")
        avail = parse_size(mem.get("available", mem.get("ram", "0")), "memory.available")
    except InputError as e:
        raise InputError(f"{path}: {e}")
    kernel = dict(raw.get("kernel", {}))
    for k in kernel:
        if k not in CONFIG_KEYS:
            raise InputError(f"{path}: kernel.{k} is not an emulator setting ({', '.join(CONFIG_KEYS)})")
    st = raw.get("storage", {})
    try:
        io_kb = np.asarray(st["io_kb"], float)
        lat = np.asarray(st["latency_us"], float)
        bw = np.asarray(st["bandwidth_gbps"], float)
    except (KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path}: storage needs io_kb, latency_us, bandwidth_gbps lists ({e})")
    if not (len(io_kb) == len(lat) == len(bw) >= 1) or (np.diff(io_kb) <= 0).any() or \
            (io_kb <= 0).any() or (lat < 0).any() or (bw <= 0).any():
        raise InputError(f"{path}: storage: io_kb must increase, and the three lists have one positive "
                         "value per I/O size")
    max_gbps = _num(st, "max_gbps", f"{path}: storage") if "max_gbps" in st else None
    qd = st.get("queue_depth", 32)
    if isinstance(qd, bool) or not isinstance(qd, int) or qd < 1:
        raise InputError(f"{path}: storage: queue_depth must be an integer >= 1, got {qd!r}")
    z = raw.get("zram", {})
    comp, decomp = dict(z.get("compress_gbps", {})), dict(z.get("decompress_gbps", {}))
    for k, v in list(comp.items()) + list(decomp.items()):
        if k not in ALGOS or isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise InputError(f"{path}: zram speed {k} = {v!r}: algorithm one of {', '.join(ALGOS)}, speed > 0")
    c = raw.get("compute", {})
    if "prefill_weight_gbps" in c or "decode_weight_gbps" in c:
        raise InputError(f"{path}: compute: decode_weight_gbps/prefill_weight_gbps are an old time model; "
                         "give weight_gbps and matmul_gmac_s (kmemsim profile measures them)")
    rc = raw.get("reclaim", {})
    return Device(
        name=str(raw.get("name", Path(path).stem)), description=str(raw.get("description", "")),
        source=str(raw.get("source", "")), ram=ram, available=avail, kernel=kernel,
        io_kb=io_kb, latency_us=lat, bandwidth_gbps=bw, compress_gbps=comp, decompress_gbps=decomp,
        zero_page_us=_num(z, "zero_page_us", f"{path}: zram", strict=False),
        scan_us_per_page=_num(rc, "scan_us_per_page", f"{path}: reclaim", strict=False),
        file_folio_us=_num(rc, "file_folio_us", f"{path}: reclaim", strict=False) if "file_folio_us" in rc else 0.0,
        swap_page_us=_num(rc, "swap_page_us", f"{path}: reclaim", strict=False) if "swap_page_us" in rc else None,
        recorded={k: _num(rc["recorded"], k, f"{path}: reclaim.recorded", strict=False)
                  for k in ("file_folio_us", "swap_page_us") if k in rc.get("recorded", {})},
        weight_gbps=_num(c, "weight_gbps", f"{path}: compute"),
        matmul_gmac_s=_num(c, "matmul_gmac_s", f"{path}: compute"),
        path=str(path), extra={k: raw[k] for k in ("reference", "measured") if k in raw},
        max_gbps=max_gbps, queue_depth=qd,
        engine={f"gpu_{k}" if k != "svm_alloc_gbps" else k: _num(raw["gpu"], k, f"{path}: gpu")
                for k in raw.get("gpu", {})} | {k: _num(raw["codecs"], k, f"{path}: codecs")
                                               for k in raw.get("codecs", {})},
    )


def load(name_or_path: str | None = None) -> Device:
    """A device by name (kmemsim/data/devices/NAME.toml) or by path. None: DEFAULT_DEVICE."""
    spec = name_or_path or DEFAULT_DEVICE
    p = Path(spec)
    if not (p.suffix == ".toml" and p.exists()):
        p = DEVICES_DIR / f"{spec}.toml"
    if not p.exists():
        raise InputError(f"unknown device {spec!r}; known: {', '.join(names())} (or a path to a .toml)")
    try:
        raw = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: not valid TOML: {e}")
    return parse(raw, str(p))
