"""The facts of the devices a layout runs on: each GPU's spec, each worker's RAM, threads and link.

A figure comes from the cluster file when it gives one (``Gpu.memory_bandwidth_gbps``,
``Gpu.fp16_tflops``, ``Worker.ram_bandwidth_gbps``, ``Worker.cpu_threads``, ``Worker.network``),
else from the GPU table by the GPU's name, else from a stated default; every figure that did not
come from the cluster file or the table is said in ``notes`` (the prediction's assumptions).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from statistics import median

from layerfit.domain.cluster import Gpu, Worker
from layerfit.speed import calibration
from layerfit.speed.gpu_table import CPU_DEVICE, GPUS, GpuSpec, match

APPLE_TYPES = frozenset({"mps", "metal"})
"""Runtime types of Apple GPUs (GPUStack names them ``mps``)."""
OP_OFFLOAD_TYPES = frozenset({"cuda", "rocm", "musa", "dcu", "dtk", "vulkan", "sycl", "cann", "mps", "metal"})
"""Runtimes whose ggml backend takes the host's large matrix products in prompt processing
(``offload_op``: CUDA and its HIP/MUSA builds, Vulkan, SYCL, CANN, Metal); an rpc-server never does."""


@dataclass(frozen=True)
class GpuFacts:
    gpu_id: str
    name: str
    bandwidth_gbps: float
    fp16_tflops: float
    family: str
    on_cpu: bool
    """ggml's CPU backend served by an rpc-server: it runs at its worker's host figures."""
    described: str
    notes: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        """How the terms name it: ``gpu-a:cuda:0 (RTX 4090)``."""
        return f"{self.gpu_id} ({self.name})" if self.name else self.gpu_id


@dataclass(frozen=True)
class HostFacts:
    worker: str
    ram_bandwidth_gbps: float
    threads: int
    batch_threads: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkFacts:
    """The link between the main worker and one other worker."""

    bandwidth_gbps: float
    """Gbit/s."""
    rtt_ms: float
    notes: tuple[str, ...] = ()


@cache
def _slowest(apple: bool) -> GpuSpec:
    rows = [row for row in GPUS if row.family != "cpu" and (row.family == "apple") == apple]
    return min(rows, key=lambda row: row.memory_bandwidth_gbps)


@cache
def apple_tflops_per_gbps() -> float:
    """The median FP16 TFLOPS per GB/s of the Apple rows that state a rate: the stand-in for those
    that do not (M3, M4)."""
    return median(
        row.fp16_tflops / row.memory_bandwidth_gbps for row in GPUS if row.family == "apple" and row.fp16_tflops
    )


def gpu_facts(gpu_id: str, gpu: Gpu) -> GpuFacts:
    """One GPU's figures: the cluster file's, else the table's by name, else the table's slowest GPU
    of its kind (Apple or not), stated."""
    spec = match(gpu.name)
    notes: list[str] = []
    if spec is not None and spec.name == CPU_DEVICE:
        return GpuFacts(gpu_id, gpu.name, 0.0, 0.0, "cpu", True, "ggml's CPU backend (its worker's RAM and threads)")
    if spec is None:
        spec = _slowest(gpu.type in APPLE_TYPES)
        if gpu.memory_bandwidth_gbps is None or gpu.fp16_tflops is None:
            shown = repr(gpu.name) if gpu.name else "without a name"
            kind = "Apple GPU" if gpu.type in APPLE_TYPES else "GPU"
            notes.append(
                f"{gpu_id} ({shown}) is not in the GPU table: taken as its slowest {kind}, {spec.name} "
                f"({spec.memory_bandwidth_gbps:g} GB/s, {spec.fp16_tflops or 0:g} TFLOPS FP16) with the 'unknown' "
                "family's efficiencies; give memory_bandwidth_gbps and fp16_tflops in the cluster file"
            )
        family = "unknown"
    else:
        family = spec.family
    bandwidth = gpu.memory_bandwidth_gbps if gpu.memory_bandwidth_gbps is not None else spec.memory_bandwidth_gbps
    tflops = gpu.fp16_tflops if gpu.fp16_tflops is not None else spec.fp16_tflops
    if tflops is None:
        tflops = bandwidth * apple_tflops_per_gbps()
        notes.append(
            f"{gpu_id} ({spec.name}): no FP16 rate published; taken as {bandwidth:g} GB/s x "
            f"{apple_tflops_per_gbps():.4f} TFLOPS per GB/s (the Apple GPUs that state one) = {tflops:.1f} TFLOPS"
        )
    limits = calibration.FAMILIES.get(family, calibration.FAMILIES["unknown"]).limits
    if limits:
        notes.append(f"{spec.name} ({family}): {limits}")
    given = "cluster file" if gpu.memory_bandwidth_gbps is not None or gpu.fp16_tflops is not None else ""
    source = "; ".join(
        part for part in (given, f"table: {spec.name}, {spec.source}" if family != "unknown" else "") if part
    )
    described = f"{bandwidth:g} GB/s, {tflops:.4g} TFLOPS FP16 ({source or 'default'})"
    return GpuFacts(gpu_id, gpu.name, bandwidth, tflops, family, False, described, tuple(notes))


def host_facts(worker: Worker, threads: int | None = None, batch_threads: int | None = None) -> HostFacts:
    """A worker's CPU: the cluster file's figures, a deployment's ``-t``/``-tb``, or stated defaults."""
    notes: list[str] = []
    bandwidth = worker.ram_bandwidth_gbps
    if bandwidth is None:
        bandwidth = calibration.DEFAULT_RAM_BANDWIDTH_GBPS
        notes.append(
            f"{worker.name}: RAM bandwidth not given (ram_bandwidth_gbps): taken as {bandwidth:g} GB/s "
            "(dual-channel DDR4-3200)"
        )
    count = threads or worker.cpu_threads
    if count is None:
        count = calibration.DEFAULT_CPU_THREADS
        notes.append(f"{worker.name}: CPU threads not given (cpu_threads, or -t): taken as {count}")
    return HostFacts(worker.name, bandwidth, count, batch_threads or count, tuple(notes))


def link_facts(main: Worker, other: Worker) -> LinkFacts:
    """The link between two workers: the smaller of their bandwidths, the larger of their round
    trips; a figure neither gives is the stated default."""
    notes: list[str] = []
    networks = [worker.network for worker in (main, other) if worker.network is not None]
    bandwidths = [network.bandwidth_gbps for network in networks if network.bandwidth_gbps is not None]
    rtts = [network.rtt_ms for network in networks if network.rtt_ms is not None]
    if not bandwidths:
        notes.append(
            f"link {main.name}-{other.name}: bandwidth not given (network.bandwidth_gbps): taken as "
            f"{calibration.DEFAULT_NETWORK_GBPS:g} Gbit/s"
        )
    if not rtts:
        notes.append(
            f"link {main.name}-{other.name}: round trip not given (network.rtt_ms): taken as "
            f"{calibration.DEFAULT_RTT_MS:g} ms"
        )
    return LinkFacts(
        min(bandwidths, default=calibration.DEFAULT_NETWORK_GBPS),
        max(rtts, default=calibration.DEFAULT_RTT_MS),
        tuple(notes),
    )
