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


def placement(
    main: WorkerView,
    devices: tuple[GpuView, ...],
    shares: tuple[float, ...] | None = None,
    *,
    main_gpus_may_idle: bool = False,
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
    )


def _vram_shares(devices: tuple[GpuView, ...]) -> tuple[float, ...]:
    """GPUStack's split: allocatable VRAM; one device takes every layer whatever its share."""
    if len(devices) == 1:
        return (1.0,)
    return tuple(float(gpu.vram_bytes) for gpu in devices)
