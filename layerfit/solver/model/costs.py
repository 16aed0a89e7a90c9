"""Every memory figure the model uses, read from ``layerfit.memory`` and then scaled.

A device costs, besides its blocks:

* ``device[kind]``: the part that depends on its kind (role, memory type, partial offload, more
  than one device in the layout), taken from ``memory.device_overhead_bytes``;
* ``output`` when it holds the output layer (weights and logits);
* ``first_device`` when it is the first device of a full offload over several devices.

The main worker's RAM besides kept blocks is ``host[kind]`` (partial offload, output layer on a
GPU, a main GPU present, more than one device). The constraint modules pick the kind with one-hot
variables, so any function of those switches is encoded exactly; only the two add-ons above are
assumed additive, and that is verified here against the memory model for every combination.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from itertools import pairwise, product
from typing import NamedTuple

from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.errors import SolverError
from layerfit.memory import block_prefix_bytes, device_overhead_bytes, host_prefix_bytes, main_host_overhead_bytes
from layerfit.solver.model.scale import Scale

BOOLS = (False, True)


class DeviceKind(NamedTuple):
    """What a device's fixed costs depend on. ``None``: the cost does not depend on that switch."""

    role: DeviceRole
    unified: bool | None
    partial: bool
    multi: bool | None


class HostKind(NamedTuple):
    """What the main worker's RAM (besides kept blocks) depends on."""

    partial: bool
    output_offloaded: bool
    main_gpu: bool
    multi: bool | None


@dataclass(frozen=True)
class Costs:
    """The memory figures of one profile, in bytes or, after ``scaled``, in model units."""

    block_prefix_up: tuple[int, ...]
    """GPU bytes of blocks ``0 .. i-1``, rounded up (the end of a device's range)."""
    block_prefix_down: tuple[int, ...]
    """The same rounded down (the start of a range), so no range is under-counted."""
    host_prefix_up: tuple[int, ...]
    uniform_block: int | None
    """GPU cost of one block when every block costs the same on GPU and host (no element constraints)."""
    uniform_host_block: int | None
    device: Mapping[DeviceKind, int]
    output: int
    first_device: int
    host: Mapping[HostKind, int]
    rpc_host: int

    def sizes(self) -> Iterator[int]:
        """Every figure, to choose a unit that divides them all."""
        yield from self.block_prefix_up
        yield from self.host_prefix_up
        yield from self.device.values()
        yield from self.host.values()
        yield from (self.output, self.first_device, self.rpc_host)

    def scaled(self, scale: Scale) -> Costs:
        """The figures in ``scale``'s unit, rounded so the model never under-counts."""
        return Costs(
            block_prefix_up=tuple(scale.claim(size) for size in self.block_prefix_up),
            block_prefix_down=tuple(scale.capacity(size) for size in self.block_prefix_down),
            host_prefix_up=tuple(scale.claim(size) for size in self.host_prefix_up),
            uniform_block=None if self.uniform_block is None else scale.claim(self.uniform_block),
            uniform_host_block=None if self.uniform_host_block is None else scale.claim(self.uniform_host_block),
            device={kind: scale.claim(size) for kind, size in self.device.items()},
            output=scale.claim(self.output),
            first_device=scale.claim(self.first_device),
            host={kind: scale.claim(size) for kind, size in self.host.items()},
            rpc_host=scale.claim(self.rpc_host),
        )


def least_fixed(
    costs: Costs,
    roles: Collection[DeviceRole],
    *,
    unified: bool | None,
    partial: Collection[bool],
    multi: bool | None,
) -> int:
    """The least fixed cost of a device of one of ``roles``, on a worker of memory type ``unified``,
    in an offload state among ``partial``, in a layout of several devices when ``multi`` (``None``
    for ``unified`` or ``multi``: either)."""
    return min(
        (
            cost
            for kind, cost in costs.device.items()
            if kind.role in roles
            and kind.partial in partial
            and (unified is None or kind.unified in (None, unified))
            and (multi is None or kind.multi in (None, multi))
        ),
        default=0,
    )


def device_fixed(costs: Costs, role: DeviceRole, unified: bool | None, *, multi: bool, partial: bool = False) -> int:
    """The fixed cost of a device of ``role`` in a full offload, or a partial one with ``partial``
    (``unified=None``: the least over memory types)."""
    return least_fixed(costs, (role,), unified=unified, partial=(partial,), multi=multi)


def memory_costs(profile: MemoryProfile) -> Costs:
    """The profile's figures in bytes, with the additive parts checked against the memory model."""
    gpu_prefix = block_prefix_bytes(profile)
    host_prefix = host_prefix_bytes(profile)
    gpu_sizes = {b - a for a, b in pairwise(gpu_prefix)}
    host_sizes = {b - a for a, b in pairwise(host_prefix)}
    uniform = len(gpu_sizes) == 1 and len(host_sizes) == 1
    return Costs(
        block_prefix_up=gpu_prefix,
        block_prefix_down=gpu_prefix,
        host_prefix_up=host_prefix,
        uniform_block=gpu_prefix[1] if uniform else None,
        uniform_host_block=host_prefix[1] if uniform else None,
        device=_device_costs(profile),
        output=_output_cost(profile),
        first_device=_first_device_cost(profile),
        host=_host_costs(profile),
        rpc_host=profile.rpc_host_fixed_bytes,
    )


def _overhead(
    profile: MemoryProfile, role: DeviceRole, unified: bool, partial: bool, multi: bool, *, output: bool, first: bool
) -> int:
    return device_overhead_bytes(
        profile,
        role,
        partial=partial,
        unified_worker=unified,
        holds_output=output,
        multi_device=multi,
        first_device=first,
    )


def _device_costs(profile: MemoryProfile) -> dict[DeviceKind, int]:
    def base(role: DeviceRole, unified: bool, partial: bool, multi: bool) -> int:
        return _overhead(profile, role, unified, partial, multi, output=False, first=False)

    grid = list(product(DeviceRole, BOOLS, BOOLS, BOOLS))
    by_unified = any(base(r, True, p, m) != base(r, False, p, m) for r, _, p, m in grid)
    by_multi = any(base(r, u, p, True) != base(r, u, p, False) for r, u, p, _ in grid)
    return {
        DeviceKind(r, u if by_unified else None, p, m if by_multi else None): base(r, u, p, m)
        for r, u, p, m in grid
        if (by_unified or not u) and (by_multi or not m)
    }


def _constant(values: set[int], what: str) -> int:
    if len(values) != 1:
        raise SolverError(f"the memory model's {what} is not a constant add-on; the CP encoding needs updating")
    return values.pop()


def _output_cost(profile: MemoryProfile) -> int:
    steps = {
        _overhead(profile, r, u, p, m, output=True, first=f) - _overhead(profile, r, u, p, m, output=False, first=f)
        for r, u, p, m, f in product(DeviceRole, BOOLS, BOOLS, BOOLS, BOOLS)
    }
    return _constant(steps, "output-layer cost")


def _first_device_cost(profile: MemoryProfile) -> int:
    applies = set()
    for r, u, p, m, o in product(DeviceRole, BOOLS, BOOLS, BOOLS, BOOLS):
        step = _overhead(profile, r, u, p, m, output=o, first=True) - _overhead(
            profile, r, u, p, m, output=o, first=False
        )
        if p or not m:
            _constant({step, 0}, "first-device cost outside a multi-device full offload")
        else:
            applies.add(step)
    return _constant(applies, "first-device cost")


def _host_costs(profile: MemoryProfile) -> dict[HostKind, int]:
    def ram(partial: bool, output: bool, main_gpu: bool, multi: bool) -> int:
        return main_host_overhead_bytes(
            profile, partial=partial, output_offloaded=output, has_main_gpu=main_gpu, multi_device=multi
        )

    grid = [(p, o, g) for p, o, g in product(BOOLS, BOOLS, BOOLS) if p or o]  # full offload keeps no output
    by_multi = any(ram(p, o, g, True) != ram(p, o, g, False) for p, o, g in grid)
    return {
        HostKind(p, o, g, m if by_multi else None): ram(p, o, g, m)
        for p, o, g in grid
        for m in (BOOLS if by_multi else (False,))
    }
