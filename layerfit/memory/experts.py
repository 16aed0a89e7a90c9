"""MoE expert placement on top of the memory model: a set of blocks whose experts stay in host RAM.

With the experts of a fixed set of blocks ``F`` in host RAM (``--n-cpu-moe``, ``--cpu-moe``, ``-ot``),
every layout costs exactly what ``memory.claims`` charges the same layout with
``host_expert_blocks = F`` restricted to its GPU blocks, and that cost can be written as a dense
profile: each block of ``F`` costs its GPU the block less its experts and, kept on the host, the
block less its experts' host size; the experts' host size is a fixed RAM cost of the main process
(they are in host RAM wherever the block goes); and the compute buffers are the partial-offload ones
(tensor overrides switch off pipeline parallelism). Engines that place layers only (the GPUStack
strategies, the CP-SAT model, the fleet) plan over that profile unchanged; ``attach`` then names the
experts in the layout and prices it with the real profile. ``tests/test_memory_experts.py`` holds the
equality of the two pricings.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from layerfit.domain.layout import Claims, Layout
from layerfit.domain.profile import ComputeBuffer, MemoryProfile, RoleCosts
from layerfit.memory import claims, host_expert_bytes

if TYPE_CHECKING:  # annotations only: ``layerfit estimate`` loads this module, and no deployment types
    from layerfit.domain.config import PlannerConfig
    from layerfit.domain.deployment import Deployment


def first_expert_blocks(profile: MemoryProfile, count: int) -> tuple[int, ...]:
    """The first ``count`` blocks that have experts: what ``--n-cpu-moe`` keeps on the host."""
    return profile.expert_blocks[:count]


def expertless_blocks(profile: MemoryProfile) -> tuple[int, ...]:
    """Blocks without expert tensors (all of a dense model's; a MoE model's leading dense blocks)."""
    return tuple(sorted(set(range(profile.n_blocks)) - set(profile.expert_blocks)))


def _partial_always(buffer: ComputeBuffer) -> ComputeBuffer:
    size = buffer.partial_offload_bytes
    return ComputeBuffer(full_offload_bytes=size, partial_offload_bytes=size, multi_device_bytes=size)


def _role(costs: RoleCosts) -> RoleCosts:
    return RoleCosts(fixed_bytes=costs.fixed_bytes, compute=_partial_always(costs.compute))


def profile_with_host_experts(profile: MemoryProfile, blocks: Collection[int]) -> MemoryProfile:
    """A dense profile that prices every layout as ``profile`` does with these blocks' experts on the
    host (``blocks`` empty: ``profile`` itself)."""
    chosen = frozenset(blocks)
    if not chosen:
        return profile
    gpu = tuple(
        weights - (profile.expert_bytes(block) if block in chosen else 0)
        for block, weights in enumerate(profile.block_weight_bytes)
    )
    host = tuple(
        profile.host_weight_bytes(block) - (profile.host_expert_bytes(block) if block in chosen else 0)
        for block in range(profile.n_blocks)
    )
    _, experts_in_ram = host_expert_bytes(profile, chosen)
    return profile.model_copy(
        update={
            "block_weight_bytes": gpu,
            "block_host_weight_bytes": host,
            "block_expert_bytes": None,
            "block_host_expert_bytes": None,
            "fixed_host_experts": None,
            "stand_in_host_experts": tuple(sorted(chosen)),
            "host_fixed_bytes": profile.host_fixed_bytes + experts_in_ram,
            "main": _role(profile.main),
            "local": _role(profile.local),
            "rpc": _role(profile.rpc),
            "unified": None if profile.unified is None else _role(profile.unified),
            "host_compute": _partial_always(profile.host_compute),
            "first_device_compute_bytes": 0,
        }
    )


def with_host_experts(layout: Layout, blocks: Collection[int]) -> Layout:
    """The layout with the experts of those of ``blocks`` that sit on GPUs kept on the host."""
    return layout.with_host_experts(blocks)


def attach(
    profile: MemoryProfile, layout: Layout, blocks: Collection[int], unified_workers: Collection[str] = ()
) -> tuple[Layout, Claims]:
    """A layout planned over ``profile_with_host_experts(profile, blocks)``, with its experts named
    and its claims from the real profile."""
    real = with_host_experts(layout, blocks)
    return real, claims(profile, real, unified_workers)


def engine_blocks(profile: MemoryProfile) -> tuple[int, ...]:
    """The blocks whose experts the user's tensor overrides keep on the host (none: empty)."""
    return profile.fixed_host_experts or ()


def experts_are_a_decision(deployment: Deployment, profile: MemoryProfile, config: PlannerConfig) -> bool:
    """The engines choose where experts go: a MoE model, expert offload on, CPU offloading allowed,
    and no tensor override of the user's fixing them."""
    return profile.is_moe and profile.fixed_host_experts is None and config.expert_offload and deployment.cpu_offloading
