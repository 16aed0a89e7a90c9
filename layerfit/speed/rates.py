"""How fast one device runs a token: effective bandwidth, FLOPS and a fixed cost per layer.

A GPU reaches its family's share of its spec bandwidth and FP16 rate (``calibration.FAMILIES``),
and a block takes the longer of its reading and its arithmetic (a roofline: on a GPU the reading).
The CPU backend reads at most ``CPU_BANDWIDTH_PER_THREAD_GBPS`` per thread and a share of the
RAM bandwidth in all, and computes at a rate per thread; a block on it takes the reading and the
arithmetic one after the other (measured: with one thread an F16, a Q8_0 and a Q4_0 model of the
same shape take 108, 67 and 43 ms per token, which bytes / 8.6 GB/s plus FLOPs / 51 GFLOPS give
within 3 %, the larger of the two within 15 %; ``cpu-speed.csv``). A device shared by ``sharing``
processes that decode at the same time gets that share of its bandwidth and FLOPS.
"""

from __future__ import annotations

from dataclasses import dataclass

from layerfit.speed import calibration
from layerfit.speed.devices import GpuFacts, HostFacts

GB = 1e9
MS_PER_S = 1e3


@dataclass(frozen=True)
class Rate:
    """One device's speed, in bytes and FLOPs per millisecond."""

    bytes_per_ms: float
    decode_flops_per_ms: float
    prompt_flops_per_ms: float
    layer_ms: float
    described: str
    """``1008 GB/s x 0.78 (ada)``: how the effective figures were made."""
    overlapped: bool = True
    """Reading and arithmetic overlap (a GPU): the longer counts; else (the CPU) both add."""

    def decode_ms(self, read_bytes: float, flops: float) -> float:
        """Decode time of ``read_bytes`` read with ``flops`` done."""
        reading, arithmetic = read_bytes / self.bytes_per_ms, flops / self.decode_flops_per_ms
        return max(reading, arithmetic) if self.overlapped else reading + arithmetic

    def prompt_ms(self, flops: float) -> float:
        return flops / self.prompt_flops_per_ms


def _per_ms(per_s: float) -> float:
    return per_s / MS_PER_S


def host_rate(host: HostFacts, sharing: int = 1) -> Rate:
    """The CPU backend of a worker (its host blocks and experts, or an rpc-server serving its CPU)."""
    per_threads = host.threads * calibration.CPU_BANDWIDTH_PER_THREAD_GBPS
    whole = host.ram_bandwidth_gbps * calibration.CPU_BANDWIDTH_EFFICIENCY
    bandwidth = min(per_threads, whole) / sharing
    limit = (
        f"{host.threads} threads x {calibration.CPU_BANDWIDTH_PER_THREAD_GBPS:g} GB/s"
        if per_threads <= whole
        else (f"{host.ram_bandwidth_gbps:g} GB/s RAM x {calibration.CPU_BANDWIDTH_EFFICIENCY:g}")
    )
    return Rate(
        bytes_per_ms=_per_ms(bandwidth * GB),
        decode_flops_per_ms=_per_ms(host.threads * calibration.CPU_DECODE_GFLOPS_PER_THREAD * GB / sharing),
        prompt_flops_per_ms=_per_ms(host.batch_threads * calibration.CPU_PROMPT_GFLOPS_PER_THREAD * GB / sharing),
        layer_ms=calibration.CPU_LAYER_US / MS_PER_S,
        overlapped=False,
        described=f"{bandwidth:.3g} GB/s ({limit}{f', shared by {sharing}' if sharing > 1 else ''})",
    )


def gpu_rate(gpu: GpuFacts, host: HostFacts, sharing: int = 1) -> Rate:
    """A GPU at its family's efficiencies; ggml's CPU backend behind an rpc-server at ``host``'s."""
    if gpu.on_cpu:
        return host_rate(host, sharing)
    family = calibration.FAMILIES.get(gpu.family, calibration.FAMILIES["unknown"])
    bandwidth = gpu.bandwidth_gbps * family.bandwidth / sharing
    flops = gpu.fp16_tflops * 1e3 * GB * family.compute / sharing
    shared = f", shared by {sharing}" if sharing > 1 else ""
    return Rate(
        bytes_per_ms=_per_ms(bandwidth * GB),
        decode_flops_per_ms=_per_ms(flops),
        prompt_flops_per_ms=_per_ms(flops),
        layer_ms=family.layer_us / MS_PER_S,
        described=f"{gpu.bandwidth_gbps:g} GB/s x {family.bandwidth:g} ({gpu.family}{shared})",
    )
