"""Device profiles: what a count costs in seconds on a device (workloads/devices/*.toml).

A profile holds flash read latency and bandwidth by I/O size, zram compress/decompress speed per
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
                        "bandwidth_gbps": self.bandwidth_gbps.tolist()},
            "zram": {"compress_gbps": self.compress_gbps, "decompress_gbps": self.decompress_gbps,
                     "zero_page_us": self.zero_page_us},
            "reclaim": {"scan_us_per_page": self.scan_us_per_page, "file_folio_us": self.file_folio_us,
                        "swap_page_us": self.swap_page_us, "recorded": self.recorded},
            "compute": {"weight_gbps": self.weight_gbps, "matmul_gmac_s": self.matmul_gmac_s},
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
             "reference", "measured"}
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
