"""How placements fit: ``memory.claims`` memoised on canonical layouts, checked like ``check.py``.

Claims come from ``memory.claims`` on a canonical copy of a placement's layout: worker names
become tokens (main = 0, RPC workers 1, 2, ... in order of appearance) and GPU indexes become
positions. Layouts with the same blocks per position, token pattern and unified-memory flags need
the same bytes, so identical GPUs and workers share one ``claims`` call for the whole search.
Before that call, each device's blocks plus ``memory.device_overhead_bytes`` (the sum ``claims``
makes for it) rule out layouts with an overflowing GPU without building any claims. The capacity
comparison mirrors ``check.capacity_reasons`` (VRAM per device; RAM, or the single pool of a
unified-memory worker, per worker); the property tests hold the three equal.

A placement whose split leaves a GPU with a share but without a layer does not fit: that layout
belongs to the smaller placement without the GPU, which the strategies try on its own. The one
exception is a distributed main worker's GPUs (``Placement.main_gpus_may_idle``): they are all of
its GPUs, no smaller set is tried, and GPUStack too leaves one the split gives nothing idle. A
manual selection's devices (``Placement.fill_every_device``) are all used: one the split leaves
empty takes a layer from the device holding the most (``placement.filled_shape``). Under a user
``-ts`` (``Placement.devices_may_idle``) a device the split leaves empty is simply not in the layout.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import product

from layerfit.domain.config import OffloadOrder
from layerfit.domain.layout import Claims, DeviceAssignment, Layout
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.heuristics.placement import Placement, filled_shape, layer_shape
from layerfit.heuristics.views import GpuView
from layerfit.memory import block_prefix_bytes, claims, device_overhead_bytes, is_partial, keeps_scan, range_kinds

_ROLES = tuple(DeviceRole)


def _role(token: int, position: int, last: int) -> DeviceRole:
    """``Layout.role`` on a canonical layout: RPC for other workers, MAIN for the last local GPU."""
    if token:
        return DeviceRole.RPC
    return DeviceRole.MAIN if position == last else DeviceRole.LOCAL


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
    need: Need | None
    """``None`` when a lower bound already shows a device is too small (no claims computed)."""
    fits: bool
    vram_ok: bool
    main_short: bool
    """The main worker (without unified memory) is short of RAM."""


class Evaluator:
    """Memoised claims of one profile under one offload order."""

    def __init__(self, profile: MemoryProfile, order: OffloadOrder) -> None:
        self.profile = profile
        self.order = order
        self.evaluations = 0
        self._needs: dict[tuple[object, ...], Need] = {}
        self._layer_bytes: dict[int, int] = {}
        self._overheads: dict[tuple[tuple[DeviceRole, ...], bool, bool], int] = {}
        self._exact_overheads: dict[
            tuple[DeviceRole, bool, bool, bool, bool, bool, bool, int | None, bool | None], int
        ] = {}
        self._prefix = block_prefix_bytes(profile)

    @property
    def claims_computed(self) -> int:
        return len(self._needs)

    def shape(self, n_gpu_layers: int, shares: tuple[float, ...]) -> Layout:
        return layer_shape(self.profile.n_blocks, n_gpu_layers, shares, self.order)

    def placement_shape(self, where: Placement, n_gpu_layers: int) -> Layout:
        """The placement's canonical layout at ``-ngl n_gpu_layers`` (``Placement.fill_every_device``
        applied)."""
        if where.fill_every_device:
            return filled_shape(self.profile.n_blocks, n_gpu_layers, where.shares, self.order)
        return self.shape(n_gpu_layers, where.shares)

    def evaluate(self, where: Placement, n_gpu_layers: int) -> Verdict:
        """Fit of the placement at ``-ngl n_gpu_layers`` (same rule as ``check.capacity_reasons``)."""
        self.evaluations += 1
        if not self._every_device_used(where, n_gpu_layers) or self._device_surely_short(where, n_gpu_layers):
            return Verdict(where, n_gpu_layers, need=None, fits=False, vram_ok=False, main_short=False)
        need = self.need(where, n_gpu_layers)
        vram_ok = all(used <= gpu.vram_bytes for used, gpu in zip(need.device_bytes, where.devices, strict=True))
        short = [used > ram for used, ram in zip(need.worker_bytes, where.worker_ram_bytes, strict=True)]
        return Verdict(
            placement=where,
            n_gpu_layers=n_gpu_layers,
            need=need,
            fits=vram_ok and not any(short),
            vram_ok=vram_ok,
            main_short=short[0] and not where.worker_unified[0],
        )

    def _every_device_used(self, where: Placement, n_gpu_layers: int) -> bool:
        """Every device with a share holds a layer; otherwise the layout is a smaller placement's.
        Without any positive share (GPUs with nothing allocatable) nothing can be placed."""
        if n_gpu_layers == 0:
            return True
        with_share = sum(1 for share in where.shares if share > 0)
        if with_share == 0:
            return False
        used = {device.gpu_index for device in self.placement_shape(where, n_gpu_layers).devices}
        if where.devices_may_idle:
            return bool(used)
        if where.main_gpus_may_idle:
            needed = {i for i, share in enumerate(where.shares) if share > 0 and where.tokens[i] != 0}
            return needed <= used and bool(used)
        return len(used) == with_share

    def devices_overhead(self, devices: tuple[GpuView, ...]) -> int:
        """The least the devices cost together besides their layers (each holds at least one)."""
        return sum(self.least_overhead(_ROLES, gpu.unified, False) for gpu in devices)

    def _device_surely_short(self, where: Placement, n_gpu_layers: int) -> bool:
        """A device's blocks plus its overhead (``memory.device_overhead_bytes``) exceed its VRAM.

        The same sum ``memory.claims`` makes for the device; checked first because it needs no
        claims, and ``claims`` stays the judge of every layout that passes.
        """
        shape = self.placement_shape(where, n_gpu_layers)
        prefix = self._prefix
        partial = is_partial(shape)
        several = len(shape.devices) > 1
        first = shape.cpu_blocks
        last = len(shape.devices) - 1
        for position, device in enumerate(shape.devices):
            gpu = where.devices[device.gpu_index]
            end = first + device.blocks
            overhead = self._overhead(
                _role(where.tokens[device.gpu_index], position, last),
                partial=partial,
                unified=gpu.unified,
                holds_output=shape.output_offloaded and position == last,
                several=several,
                first_device=position == 0,
                host_blocks=shape.cpu_blocks,
                kinds=range_kinds(self.profile, first, end),
                keeps_scan=keeps_scan(self.profile, first, end),
            )
            if prefix[end] - prefix[first] + overhead > gpu.vram_bytes:
                return True
            first = end
        return False

    def _overhead(
        self,
        role: DeviceRole,
        *,
        partial: bool,
        unified: bool,
        holds_output: bool,
        several: bool,
        first_device: bool,
        host_blocks: int,
        kinds: int | None,
        keeps_scan: bool | None,
    ) -> int:
        fallback = self.profile.flash_attn_fallback
        splits_fa_off = fallback is not None and partial and host_blocks in fallback.host_blocks
        key = (role, partial, unified, holds_output, several, first_device, splits_fa_off, kinds, keeps_scan)
        cached = self._exact_overheads.get(key)
        if cached is None:
            cached = device_overhead_bytes(
                self.profile,
                role,
                partial=partial,
                unified_worker=unified,
                holds_output=holds_output,
                multi_device=several,
                first_device=first_device,
                host_blocks=host_blocks,
                kinds=kinds,
                keeps_scan=keeps_scan,
            )
            self._exact_overheads[key] = cached
        return cached

    def least_overhead(self, roles: tuple[DeviceRole, ...], unified: bool, holds_output: bool) -> int:
        """The least a device in one of ``roles`` costs besides its blocks, over every layout."""
        key = (roles, unified, holds_output)
        cached = self._overheads.get(key)
        if cached is None:
            cached = min(
                device_overhead_bytes(
                    self.profile,
                    role,
                    partial=partial,
                    unified_worker=unified,
                    holds_output=holds_output,
                    multi_device=multi,
                    first_device=first,
                    host_blocks=0,  # no block on the host never turns flash attention off
                    kinds=kinds,
                    keeps_scan=False,
                )
                for role in roles
                for partial, multi, first in product((False, True), repeat=3)
                for kinds in (None, *(entry.kinds for entry in self.profile.kinds_compute))
            )
            self._overheads[key] = cached
        return cached

    def need(self, where: Placement, n_gpu_layers: int) -> Need:
        """Bytes the placement needs, memoised on the canonical layout (blocks per position, tokens)."""
        shape = self.placement_shape(where, n_gpu_layers)
        blocks = tuple((device.gpu_index, device.blocks) for device in shape.devices)
        key = (shape.cpu_blocks, blocks, shape.output_offloaded, where.tokens, where.worker_unified)
        cached = self._needs.get(key)
        if cached is None:
            cached = self._canonical_need(where, shape)
            self._needs[key] = cached
        return cached

    def _canonical_need(self, where: Placement, shape: Layout) -> Need:
        canonical = Layout(
            main_worker="0",
            n_blocks=shape.n_blocks,
            devices=tuple(
                DeviceAssignment.model_construct(
                    worker=str(where.tokens[device.gpu_index]), gpu_index=device.gpu_index, blocks=device.blocks
                )
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
        shape = self.placement_shape(where, n_gpu_layers)
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
        """The most layers in ``lo..hi`` whose ``layer_bytes`` fit ``vram_bytes``; ``lo - 1`` if none.

        With ``vram_bytes`` net of ``devices_overhead``: an upper bound on what a placement holds.
        """
        if hi < lo:
            return lo - 1
        counts = range(lo, hi + 1)
        return lo - 1 + bisect_right(counts, vram_bytes, key=self.layer_bytes)
