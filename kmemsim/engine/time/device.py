"""Device profiles: what a count costs in seconds on a device (workloads/devices/*.toml).

A profile holds flash read latency and bandwidth by I/O size (and the flash's throughput ceiling and
usable queue depth for reads kept in flight, or a measured table of throughput by I/O size and
queue depth: Device.flash_throughput), zram compress/decompress speed per
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
               "swap_zeromap", "exec_folio_order", "lru", "min_ttl_ms")
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
    # and what it pays beside: per page of a file folio it drops (a large folio's PTEs unmapped and
    # its page-cache slots cleared one by one), and per inactive list it shrinks
    # (shrink_inactive_list(): isolation under the LRU lock, lru_add_drain(), the priority loop's
    # pass), whatever that frees: a call that meets referenced folios shrinks more lists per folio
    file_page_us: float = 0.0
    list_us: float = 0.0
    # a minor fault the task takes ([faults] minor_us): a first touch of an anonymous page
    # (do_anonymous_page(): a folio allocated, charged, cleared and mapped; llama.cpp's compute buffer
    # and KV cache at their first ubatch), measured by kmemsim profile; 0 in the published profiles
    minor_fault_us: float = 0.0

    # the same two as a recorded run pays them (kmemsim profile since METHOD 2: the recorder's probes
    # slow reclaim), for predicting the live runs validate records; empty: as above
    recorded: dict = field(default_factory=dict)
    # the two compute rates of weights of one ggml type where measured apart ([compute.TYPE]:
    # TimeModel.by_type): type -> (weight_gbps, matmul_gmac_s)
    compute_by_type: dict = field(default_factory=dict)
    # a layer's nodes without weights ([compute] layer_us, activation_ps: TimeModel.ns_per_layer,
    # ns_per_activation); 0 in the profiles from published figures, whose rates are whole-model ones
    layer_us: float = 0.0
    activation_ps: float = 0.0
    path: str = ""
    extra: dict = field(default_factory=dict)
    # the flash with reads kept in flight ([storage] max_gbps, queue_depth: flash_throughput()):
    # its throughput ceiling in GB/s (None: the largest bandwidth_gbps), and the host's usable queue
    # depth (UFS 4.0's command queue is 32 deep)
    max_gbps: float | None = None
    queue_depth: int = 32
    # the flash measured with reads kept in flight ([storage] throughput_io_kb, qd, throughput_gbps;
    # kmemsim profile's fio runs): GB/s by I/O size (rows, KiB) and queue depth (columns, from 1).
    # None: flash_throughput() scales the QD1 rate by the queue depth (the profiles from published figures)
    throughput_io_kb: np.ndarray | None = None
    qd: np.ndarray | None = None
    throughput_gbps: np.ndarray | None = None
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

        q = min(queue_depth, the profile's queue_depth) reads of S bytes in flight (the host's usable
        queue depth, [storage] queue_depth, default 32: JEDEC UFS 4.0's command queue depth; deeper
        queues wait in the host), capped by the link at max_gbps ([storage] max_gbps, default the
        largest value of the tables). The QD1 rate S / (latency(S) + S / bandwidth(S)) is the
        profile's definition of one synchronous read (read_latency_s, read_bandwidth). Two forms:

        - a measured table ([storage] throughput_io_kb, qd, throughput_gbps; kmemsim profile writes it
          from fio's random O_DIRECT reads): throughput_gbps[i][j] GB/s at throughput_io_kb[i] KiB and
          qd[j] in flight, interpolated linearly in log(size) and log(queue depth) (bilinear between
          the four surrounding points: the QD1 table's log-linear rule in both axes), so a table point
          gives its value and a point between lies between. More in flight than the table's deepest
          column gets that column (no gain assumed past what was measured); a size outside the
          table's gets the edge size's throughput scaled as the QD1 rate changes from that edge to S
          (the QD1 table's sizes go on to readahead's max_sectors_kb requests). kmemsim profile
          measures the QD1 table with preads (the kernel's reads are timed by it) and this one with
          fio (engines' O_DIRECT reads), so their queue depth 1 rates can differ.
        - without it (the profiles from published figures): q reads of S bytes in flight, each taking
          its QD1 time: min(max_gbps, q x S / (latency(S) + S / bandwidth(S))), the QD1 rate at queue
          depth 1. It cannot bend: an IOPS ceiling at small sizes (a 2-CPU VM's CPUs, UFS 4.0 below
          24 KB), a soft knee, or a device slower at depth than at 2-4 need the table.
        """
        q = np.asarray(queue_depth, float)
        if (q < 1).any() or not np.isfinite(q).all():
            raise InputError(f"flash_throughput: queue_depth must be >= 1, got {queue_depth!r}")
        s = np.maximum(np.asarray(io_bytes, float), 1.0)
        qd1 = s / (self.read_latency_s(s) + s / self.read_bandwidth(s))
        q = np.minimum(q, self.queue_depth)
        if self.throughput_gbps is None:
            cap = (self.max_gbps if self.max_gbps is not None else float(self.bandwidth_gbps.max())) * 1e9
            out = np.minimum(cap, q * qd1)
        else:
            cap = (self.max_gbps if self.max_gbps is not None else float(self.throughput_gbps.max())) * 1e9
            kb = self.throughput_io_kb
            edge = np.clip(s, kb[0] * 1024, kb[-1] * 1024)
            edge_qd1 = edge / (self.read_latency_s(edge) + edge / self.read_bandwidth(edge))
            out = np.minimum(cap, self._table(edge, q) * 1e9 * (qd1 / edge_qd1))
        return float(out) if out.ndim == 0 else out

    def _table(self, io_bytes, q):
        """throughput_gbps bilinear in (log size, log queue depth), sizes and depths clipped to the table."""
        def bracket(x, grid):
            x = np.clip(x, grid[0], grid[-1])
            i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, max(len(grid) - 2, 0))
            i1 = np.minimum(i + 1, len(grid) - 1)
            span = grid[i1] - grid[i]
            return i, i1, np.where(span > 0, (x - grid[i]) / np.where(span > 0, span, 1.0), 0.0)
        x, y = np.broadcast_arrays(np.log(np.asarray(io_bytes, float) / 1024.0), np.log(np.asarray(q, float)))
        i, i1, u = bracket(x, np.log(self.throughput_io_kb))
        j, j1, v = bracket(y, np.log(self.qd))
        t = self.throughput_gbps
        return (1 - u) * ((1 - v) * t[i, j] + v * t[i, j1]) + u * ((1 - v) * t[i1, j] + v * t[i1, j1])

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
                "file_page_us": float(rc.get("file_page_us", self.file_page_us)),
                "list_us": float(rc.get("list_us", self.list_us)),
                "scan_us": float(self.scan_us_per_page)}

    def time_model(self):
        """llama.cpp's compute time on this device."""
        return TimeModel(weight_gbps=self.weight_gbps, matmul_gmac_s=self.matmul_gmac_s,
                         by_type=dict(self.compute_by_type), ns_per_layer=self.layer_us * 1e3,
                         ns_per_activation=self.activation_ps * 1e-3)

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
                                     else float((self.bandwidth_gbps if self.throughput_gbps is None
                                                 else self.throughput_gbps).max())),
                        "queue_depth": self.queue_depth}
                       | ({} if self.throughput_gbps is None else
                          {"throughput_io_kb": self.throughput_io_kb.tolist(), "qd": self.qd.tolist(),
                           "throughput_gbps": self.throughput_gbps.tolist()}),
            "zram": {"compress_gbps": self.compress_gbps, "decompress_gbps": self.decompress_gbps,
                     "zero_page_us": self.zero_page_us},
            "reclaim": {"scan_us_per_page": self.scan_us_per_page, "file_folio_us": self.file_folio_us,
                        "file_page_us": self.file_page_us, "list_us": self.list_us,
                        "swap_page_us": self.swap_page_us, "recorded": self.recorded},
            "compute": {"weight_gbps": self.weight_gbps, "matmul_gmac_s": self.matmul_gmac_s,
                        "layer_us": self.layer_us, "activation_ps": self.activation_ps}
                       | {k: {"weight_gbps": g, "matmul_gmac_s": m} for k, (g, m) in self.compute_by_type.items()},
            "faults": {"minor_us": self.minor_fault_us},
            "engine": self.engine,
            "path": self.path,
        }


def names() -> list[str]:
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


# the reclaim costs a profile gives as a run under kmemsim's recorder pays them ([reclaim] recorded)
RECLAIM_COSTS = ("file_folio_us", "file_page_us", "list_us", "swap_page_us")


def _opt_num(d, key, where, default=0.0):
    """An optional cost (>= 0) of section d: _num's check where given, else default."""
    return _num(d, key, where, strict=False) if key in d else default


def _num(d, key, where, lo=0.0, strict=True):
    if key not in d:
        raise InputError(f"{where}: missing {key}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (v <= lo if strict else v < lo):
        raise InputError(f"{where}: {key} must be a number {'>' if strict else '>='} {lo:g}, got {v!r}")
    return float(v)


def _throughput_table(st: dict, io_kb, path) -> dict:
    """[storage] throughput_gbps (GB/s, a row per throughput_io_kb size, default io_kb; a column per
    qd, which starts at 1 and increases) as Device fields; none without it."""
    if "throughput_gbps" not in st:
        for k in ("qd", "throughput_io_kb"):
            if k in st:
                raise InputError(f"{path}: storage: {k} without throughput_gbps (the table it labels)")
        return {}
    where = f"{path}: storage"
    try:
        kb = np.asarray(st.get("throughput_io_kb", io_kb), float)
        qd = np.asarray(st["qd"], float)
        t = np.asarray(st["throughput_gbps"], float)
    except KeyError:
        raise InputError(f"{where}: throughput_gbps needs qd, the queue depth of each column")
    except (ValueError, TypeError) as e:
        raise InputError(f"{where}: throughput_gbps must be a list of rows of numbers ({e})")
    if kb.ndim != 1 or qd.ndim != 1 or len(kb) < 1 or len(qd) < 1 or (np.diff(kb) <= 0).any() or (kb <= 0).any():
        raise InputError(f"{where}: throughput_io_kb must be positive I/O sizes (KiB) that increase")
    if qd[0] != 1 or (np.diff(qd) <= 0).any() or (qd != np.round(qd)).any():
        raise InputError(f"{where}: qd must be increasing integer queue depths from 1, got {st['qd']!r}")
    if t.shape != (len(kb), len(qd)) or not np.isfinite(t).all() or (t <= 0).any():
        raise InputError(f"{where}: throughput_gbps must have a row of {len(qd)} positive GB/s (one per qd) "
                         f"for each of the {len(kb)} sizes of throughput_io_kb, got shape {t.shape}")
    return {"throughput_io_kb": kb, "qd": qd, "throughput_gbps": t}


def parse(raw: dict, path: str = "<device>") -> Device:
    known = {"name", "description", "source", "memory", "kernel", "storage", "zram", "reclaim", "faults", "compute",
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
    table = _throughput_table(st, io_kb, path)
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
        file_folio_us=_opt_num(rc, "file_folio_us", f"{path}: reclaim"),
        swap_page_us=_opt_num(rc, "swap_page_us", f"{path}: reclaim", None),
        file_page_us=_opt_num(rc, "file_page_us", f"{path}: reclaim"),
        list_us=_opt_num(rc, "list_us", f"{path}: reclaim"),
        minor_fault_us=_opt_num(raw.get("faults", {}), "minor_us", f"{path}: faults"),
        recorded={k: _num(rc["recorded"], k, f"{path}: reclaim.recorded", strict=False)
                  for k in RECLAIM_COSTS if k in rc.get("recorded", {})},
        weight_gbps=_num(c, "weight_gbps", f"{path}: compute"),
        matmul_gmac_s=_num(c, "matmul_gmac_s", f"{path}: compute"),
        compute_by_type={k: (_num(v, "weight_gbps", f"{path}: compute.{k}"),
                             _num(v, "matmul_gmac_s", f"{path}: compute.{k}"))
                         for k, v in c.items() if isinstance(v, dict)},
        layer_us=_opt_num(c, "layer_us", f"{path}: compute"),
        activation_ps=_opt_num(c, "activation_ps", f"{path}: compute"),
        path=str(path), extra={k: raw[k] for k in ("reference", "measured") if k in raw},
        max_gbps=max_gbps, queue_depth=qd, **table,
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
