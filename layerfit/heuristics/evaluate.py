"""Placements and how they fit: llama.cpp's split rule and ``memory.claims``, memoised.

A placement is a main worker, its devices in llama.cpp order (RPC servers first, then the main
worker's GPUs) and the ``-ts`` shares over them. With an ``-ngl`` value it defines a layout through
``memory.layout_from_flags``. Claims come from ``memory.claims`` on a canonical copy of that layout:
worker names become tokens (main = 0, RPC workers 1, 2, ... in order of appearance) and GPU indexes
become positions. Placements with the same shares, token pattern and unified-memory flags need the
same bytes, so a cluster of identical GPUs costs one ``claims`` call per shape for the whole search.
The capacity comparison mirrors ``check.capacity_reasons`` (VRAM per device; RAM, or the single
pool of a unified-memory worker, per worker); the tests hold the two equal.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from layerfit.domain.config import OffloadOrder
from layerfit.domain.layout import Claims, DeviceAssignment, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.heuristics.views import GpuView, WorkerView
from layerfit.memory import block_prefix_bytes, claims, layout_from_flags

_ANONYMOUS = "_"


@lru_cache(maxsize=1 << 16)
def layer_shape(n_blocks: int, n_gpu_layers: int, shares: tuple[float, ...], order: OffloadOrder) -> Layout:
    """llama.cpp's layout for ``-ngl``/``-ts`` over anonymous devices; ``gpu_index`` is the position."""
    devices = [(_ANONYMOUS, position) for position in range(len(shares))]
    return layout_from_flags(_ANONYMOUS, devices, n_blocks, n_gpu_layers, shares, order)


@dataclass(frozen=True, slots=True)
class Placement:
    """Main worker, devices in llama.cpp order and ``-ts`` shares; see ``placement()``."""

    main: WorkerView
    devices: tuple[GpuView, ...]
    shares: tuple[float, ...]
    tokens: tuple[int, ...]
    """Worker token of each device: 0 for the main worker, 1, 2, ... for RPC workers."""
    worker_names: tuple[str, ...]
    worker_ram_bytes: tuple[int, ...]
    worker_unified: tuple[bool, ...]

    @property
    def vram_bytes(self) -> int:
        return sum(gpu.vram_bytes for gpu in self.devices)

    @property
    def rpc_count(self) -> int:
        return sum(1 for token in self.tokens if token)


def placement(main: WorkerView, devices: tuple[GpuView, ...], shares: tuple[float, ...] | None = None) -> Placement:
    """A placement; ``shares`` default to the devices' allocatable VRAM (GPUStack's split)."""
    names = [main.name]
    ram = [main.ram_bytes]
    unified = [main.unified]
    tokens = []
    for gpu in devices:
        if gpu.worker not in names:
            names.append(gpu.worker)
            ram.append(gpu.worker_ram_bytes)
            unified.append(gpu.unified)
        tokens.append(names.index(gpu.worker))
    return Placement(
        main=main,
        devices=devices,
        shares=shares if shares is not None else tuple(float(gpu.vram_bytes) for gpu in devices),
        tokens=tuple(tokens),
        worker_names=tuple(names),
        worker_ram_bytes=tuple(ram),
        worker_unified=tuple(unified),
    )


@dataclass(frozen=True, slots=True)
class Need:
    """Bytes a canonical layout needs: per device position, per worker token, main RAM."""

    device_bytes: tuple[int, ...]
    """Per placement device; 0 for a device llama.cpp leaves without layers."""
    worker_bytes: tuple[int, ...]
    """Per worker token: RAM, or RAM + VRAM for a unified-memory worker."""
    main_ram_bytes: int
    gpu_layers: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a placement fits at one ``-ngl`` value, with the bytes it needs."""

    placement: Placement
    n_gpu_layers: int
    need: Need
    fits: bool
    vram_ok: bool
    host_short: bool
    """RAM of a worker without unified memory is short: fewer GPU layers cannot fix it."""


class Evaluator:
    """Memoised claims of one profile under one offload order."""

    def __init__(self, profile: MemoryProfile, order: OffloadOrder) -> None:
        self.profile = profile
        self.order = order
        self.evaluations = 0
        self._needs: dict[tuple[object, ...], Need] = {}
        self._layer_bytes: dict[int, int] = {}
        self._prefix = block_prefix_bytes(profile)

    @property
    def claims_computed(self) -> int:
        return len(self._needs)

    def shape(self, n_gpu_layers: int, shares: tuple[float, ...]) -> Layout:
        return layer_shape(self.profile.n_blocks, n_gpu_layers, shares, self.order)

    def evaluate(self, where: Placement, n_gpu_layers: int) -> Verdict:
        """Fit of the placement at ``-ngl n_gpu_layers`` (same rule as ``check.capacity_reasons``)."""
        self.evaluations += 1
        need = self.need(where, n_gpu_layers)
        vram_ok = all(used <= gpu.vram_bytes for used, gpu in zip(need.device_bytes, where.devices, strict=True))
        host_short = False
        pool_short = False
        for token, used in enumerate(need.worker_bytes):
            if used > where.worker_ram_bytes[token]:
                if where.worker_unified[token]:
                    pool_short = True
                else:
                    host_short = True
        fits = vram_ok and not host_short and not pool_short
        return Verdict(
            placement=where, n_gpu_layers=n_gpu_layers, need=need, fits=fits, vram_ok=vram_ok, host_short=host_short
        )

    def need(self, where: Placement, n_gpu_layers: int) -> Need:
        key = (n_gpu_layers, where.shares, where.tokens, where.worker_unified)
        cached = self._needs.get(key)
        if cached is None:
            cached = self._canonical_need(where, n_gpu_layers)
            self._needs[key] = cached
        return cached

    def _canonical_need(self, where: Placement, n_gpu_layers: int) -> Need:
        shape = self.shape(n_gpu_layers, where.shares)
        canonical = Layout(
            main_worker="0",
            n_blocks=shape.n_blocks,
            devices=tuple(
                DeviceAssignment(worker=str(where.tokens[device.gpu_index]), gpu_index=device.gpu_index, blocks=device.blocks)
                for device in shape.devices
            ),
            output_offloaded=shape.output_offloaded,
        )
        unified = {str(token) for token, flag in enumerate(where.worker_unified) if flag}
        result = claims(self.profile, canonical, unified)
        device_bytes = [0] * len(where.devices)
        for device in result.devices:
            device_bytes[device.gpu_index] = device.total_bytes
        worker_bytes = [0] * len(where.worker_names)
        for worker in result.workers:
            token = int(worker.worker)
            worker_bytes[token] = worker.pool_bytes if worker.unified_memory else worker.ram_bytes
        return Need(
            device_bytes=tuple(device_bytes),
            worker_bytes=tuple(worker_bytes),
            main_ram_bytes=result.workers[0].ram_bytes,
            gpu_layers=canonical.gpu_layers,
        )

    def layout(self, where: Placement, n_gpu_layers: int) -> Layout:
        """The real layout (worker names, GPU indexes) of a placement at ``-ngl n_gpu_layers``."""
        shape = self.shape(n_gpu_layers, where.shares)
        devices = tuple(
            DeviceAssignment(
                worker=where.devices[device.gpu_index].worker,
                gpu_index=where.devices[device.gpu_index].index,
                blocks=device.blocks,
            )
            for device in shape.devices
        )
        return Layout(
            main_worker=where.main.name,
            n_blocks=shape.n_blocks,
            devices=devices,
            output_offloaded=shape.output_offloaded,
        )

    def claims(self, layout: Layout, unified_workers: frozenset[str]) -> Claims:
        return claims(self.profile, layout, unified_workers)

    def layer_bytes(self, n_gpu_layers: int) -> int:
        """Weights and KV of the layers ``-ngl n_gpu_layers`` puts on GPUs (no per-device costs).

        A lower bound on the VRAM any placement needs for that many layers; grows with the layers.
        """
        cached = self._layer_bytes.get(n_gpu_layers)
        if cached is None:
            shape = self.shape(n_gpu_layers, (1.0,))
            prefix = self._prefix
            cached = prefix[-1] - prefix[shape.cpu_blocks]
            if shape.output_offloaded:
                cached += self.profile.output_weight_bytes
            self._layer_bytes[n_gpu_layers] = cached
        return cached

    def layers_within(self, vram_bytes: int, lo: int, hi: int) -> int:
        """The most layers in ``lo..hi`` whose ``layer_bytes`` fit ``vram_bytes``; ``lo - 1`` if none."""
        if hi < lo:
            return lo - 1
        counts = range(lo, hi + 1)
        return lo - 1 + bisect_right(counts, vram_bytes, key=self.layer_bytes)


def largest_fitting(at: Callable[[int], Verdict], lo: int, hi: int, *, monotone: bool, total: int) -> Verdict | None:
    """The verdict with the most layers in ``lo..hi`` that fits, or ``None``.

    ``monotone``: the devices' VRAM grows with the layers (one device, all counts partial), so a
    binary search finds the most layers VRAM allows; RAM shrinks with more layers, so that count
    is the only one to check. Otherwise scan down from ``hi``. Below ``total`` (partial offload)
    the main RAM only grows as layers go back to the host, so a worker short of RAM ends the scan.
    """
    if hi < lo:
        return None
    if monotone:
        return _bisect(at, lo, hi)
    for count in range(hi, lo - 1, -1):
        verdict = at(count)
        if verdict.fits:
            return verdict
        if verdict.host_short and count < total:
            return None
    return None


def _bisect(at: Callable[[int], Verdict], lo: int, hi: int) -> Verdict | None:
    best: Verdict | None = None
    low, high = lo, hi
    while low <= high:
        middle = (low + high) // 2
        verdict = at(middle)
        if verdict.vram_ok:
            best, low = verdict, middle + 1
        else:
            high = middle - 1
    return best if best is not None and best.fits else None
