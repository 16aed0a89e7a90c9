"""``claims``: per-device VRAM and per-worker RAM of a layout, the single definition of memory use."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import accumulate

from layerfit.domain.layout import Claims, DeviceClaim, Layout, WorkerClaim
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.errors import InputError, expect
from layerfit.memory.kinds import keeps_scan, range_kinds
from layerfit.memory.pieces import (
    block_prefix_bytes,
    device_compute_bytes,
    host_expert_bytes,
    is_partial,
    main_host_overhead,
)


def claims(
    profile: MemoryProfile,
    layout: Layout,
    unified_workers: Collection[str] = (),
    *,
    op_offload_gpu: tuple[str, int] | None = None,
) -> Claims:
    """Per-device VRAM and per-worker RAM a layout needs; the single definition of memory use.

    ``unified_workers`` names workers with one CPU/GPU memory pool: their GPUs use the profile's
    ``unified`` role costs, and their ``WorkerClaim.pool_bytes`` adds RAM and VRAM together.
    ``op_offload_gpu`` (worker, GPU index): a layout with every layer on the host, run by a GPU build
    that sees that GPU (``-ngl 0`` without ``--device none``); it gets a claim with no layers but the
    process's fixed cost and the op-offload compute buffer, and the host the smaller buffer.
    """
    expect(profile, MemoryProfile, "profile")
    expect(layout, Layout, "layout")
    if op_offload_gpu is not None and not layout.devices and profile.op_offload_compute_bytes:
        return _op_offload_claims(profile, layout, op_offload_gpu, unified_workers)
    if layout.n_blocks != profile.n_blocks:
        raise InputError("layout.n_blocks", f"layout has {layout.n_blocks} blocks, the model has {profile.n_blocks}")
    partial = is_partial(layout)
    multi_device = len(layout.devices) > 1
    prefix = block_prefix_bytes(profile)
    kv_prefix = (0, *accumulate(profile.block_kv_bytes))
    if layout.host_expert_blocks and not profile.is_moe:
        raise InputError("layout.host_expert_blocks", "the model has no expert tensors to keep on the host")
    device_claims: list[DeviceClaim] = []
    first = layout.cpu_blocks
    last_position = len(layout.devices) - 1
    host_experts = frozenset(layout.host_expert_blocks)
    for position, device in enumerate(layout.devices):
        role = layout.role(position)
        holds_output = layout.output_offloaded and position == last_position
        unified = device.worker in unified_workers
        costs = profile.role_costs(role, unified)
        end = first + device.blocks
        kv = kv_prefix[end] - kv_prefix[first]
        saved, _ = host_expert_bytes(profile, host_experts.intersection(range(first, end)))
        device_claims.append(
            DeviceClaim(
                worker=device.worker,
                gpu_index=device.gpu_index,
                role=role,
                blocks=device.blocks,
                first_block=first,
                holds_output=holds_output,
                weight_bytes=prefix[end] - prefix[first] - kv - saved,
                kv_bytes=kv,
                output_bytes=profile.output_weight_bytes if holds_output else 0,
                compute_bytes=device_compute_bytes(
                    profile,
                    role,
                    partial=partial,
                    unified_worker=unified,
                    holds_output=holds_output,
                    multi_device=multi_device,
                    first_device=position == 0,
                    host_blocks=layout.cpu_blocks,
                    kinds=range_kinds(profile, first, end),
                    keeps_scan=keeps_scan(profile, first, end),
                ),
                fixed_bytes=costs.fixed_bytes,
                extra_bytes=profile.extra_main_gpu_bytes if role is DeviceRole.MAIN else 0,
            )
        )
        first = end
    return Claims(devices=tuple(device_claims), workers=_worker_claims(profile, layout, device_claims, unified_workers))


def _op_offload_claims(
    profile: MemoryProfile, layout: Layout, gpu: tuple[str, int], unified_workers: Collection[str]
) -> Claims:
    costs = profile.role_costs(DeviceRole.MAIN, gpu[0] in unified_workers)
    device = DeviceClaim(
        worker=gpu[0],
        gpu_index=gpu[1],
        role=DeviceRole.MAIN,
        blocks=0,
        first_block=layout.n_blocks,
        holds_output=False,
        weight_bytes=0,
        kv_bytes=0,
        output_bytes=0,
        compute_bytes=profile.op_offload_compute_bytes,
        fixed_bytes=costs.fixed_bytes,
        extra_bytes=profile.extra_main_gpu_bytes,
    )
    workers = list(_worker_claims(profile, layout, (device,), unified_workers))
    host_compute = profile.op_offload_host_compute_bytes
    workers[0] = workers[0].model_copy(update={"compute_bytes": host_compute})
    return Claims(devices=(device,), workers=tuple(workers))


def _worker_claims(
    profile: MemoryProfile, layout: Layout, devices: Sequence[DeviceClaim], unified_workers: Collection[str]
) -> tuple[WorkerClaim, ...]:
    partial = is_partial(layout)
    kept = layout.cpu_blocks
    has_main_gpu = any(claim.role is DeviceRole.MAIN for claim in devices)
    kv_kept = sum(profile.block_kv_bytes[:kept])
    overhead = main_host_overhead(
        profile,
        partial=partial,
        output_offloaded=layout.output_offloaded,
        has_main_gpu=has_main_gpu,
        multi_device=len(layout.devices) > 1,
        host_blocks=kept,
    )
    main = WorkerClaim(
        worker=layout.main_worker,
        is_main=True,
        unified_memory=layout.main_worker in unified_workers,
        fixed_bytes=overhead.fixed_bytes,
        weight_bytes=sum(profile.host_weight_bytes(i) for i in range(kept)),
        kv_bytes=kv_kept + overhead.kv_bytes,
        embedding_bytes=overhead.embedding_bytes,
        output_bytes=overhead.output_bytes,
        compute_bytes=overhead.compute_bytes,
        expert_bytes=host_expert_bytes(profile, layout.host_expert_blocks)[1],
        vram_bytes=sum(claim.total_bytes for claim in devices if claim.worker == layout.main_worker),
    )
    result = [main]
    for worker in layout.workers[1:]:
        servers = sum(1 for device in layout.rpc_devices if device.worker == worker)
        result.append(
            WorkerClaim(
                worker=worker,
                is_main=False,
                unified_memory=worker in unified_workers,
                fixed_bytes=servers * profile.rpc_host_fixed_bytes,
                vram_bytes=sum(claim.total_bytes for claim in devices if claim.worker == worker),
            )
        )
    return tuple(result)
