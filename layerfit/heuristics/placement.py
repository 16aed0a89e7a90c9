"""Placements: a main worker, its devices in llama.cpp order and the ``-ts`` shares over them.

With an ``-ngl`` value a placement defines a layout through llama.cpp's split rule
(``memory.layout_from_flags``), computed once per (layers, shares) over anonymous devices and
memoised: the split depends on nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from layerfit.domain.config import OffloadOrder
from layerfit.domain.layout import Layout
from layerfit.heuristics.views import GpuView, WorkerView
from layerfit.memory import layout_from_flags

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
    main_gpus_may_idle: bool = False
    """The main worker's GPUs are fixed (all of them, in a distributed layout): one the split leaves
    without a layer stays idle, as in GPUStack, since no smaller placement is tried instead."""
    devices_may_idle: bool = False
    """The shares are the user's ``-ts`` over a worker's GPUs: a device it leaves without a layer at
    a low ``-ngl`` stays idle and is not in the layout (as ``check`` reads a split)."""
    fill_every_device: bool = False
    """The devices are a manual selection used whole: one the VRAM split leaves without a layer
    takes one from the device with the most (``filled_shape``), so that every selected GPU is used
    at the layer count GPUStack places (it keeps such a GPU reserved but idle)."""


def placement(
    main: WorkerView,
    devices: tuple[GpuView, ...],
    shares: tuple[float, ...] | None = None,
    *,
    main_gpus_may_idle: bool = False,
    devices_may_idle: bool = False,
    fill_every_device: bool = False,
) -> Placement:
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
        shares=shares if shares is not None else _vram_shares(devices),
        tokens=tuple(tokens),
        worker_names=tuple(names),
        worker_ram_bytes=tuple(ram),
        worker_unified=tuple(unified),
        main_gpus_may_idle=main_gpus_may_idle,
        devices_may_idle=devices_may_idle,
        fill_every_device=fill_every_device,
    )


@lru_cache(maxsize=1 << 16)
def filled_shape(n_blocks: int, n_gpu_layers: int, shares: tuple[float, ...], order: OffloadOrder) -> Layout:
    """``layer_shape``, with every device that has a share given at least one layer: each one the
    split leaves empty takes a layer from the device holding the most (the first of equals). The
    layer counts become the shares (llama.cpp's rule gives integer shares exactly those counts).
    Unchanged when no device is left empty, or when there are fewer layers than such devices."""
    shape = layer_shape(n_blocks, n_gpu_layers, shares, order)
    counts = [0] * len(shares)
    for position, device in enumerate(shape.devices):
        last = position == len(shape.devices) - 1
        counts[device.gpu_index] = device.blocks + int(last and shape.output_offloaded)
    empty = [i for i, count in enumerate(counts) if count == 0 and shares[i] > 0]
    if not empty or sum(counts) < sum(1 for share in shares if share > 0):
        return shape
    for position in empty:
        donor = counts.index(max(counts))
        counts[donor] -= 1
        counts[position] = 1
    return layer_shape(n_blocks, n_gpu_layers, tuple(float(count) for count in counts), order)


def _vram_shares(devices: tuple[GpuView, ...]) -> tuple[float, ...]:
    """GPUStack's split: allocatable VRAM; one device takes every layer whatever its share."""
    if len(devices) == 1:
        return (1.0,)
    return tuple(float(gpu.vram_bytes) for gpu in devices)
