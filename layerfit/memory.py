"""THE memory model: how much VRAM and RAM a layout needs, and llama.cpp's layer-split rules.

Every engine and the checker go through this module; nothing else computes claims.

llama.cpp semantics followed here:

* Devices are ordered RPC servers first, then the main worker's GPUs; ``-ts`` indexes that order.
* With ``OUTPUT_FIRST`` (llama.cpp since December 2025) ``-ngl k`` offloads the output layer and
  the last ``k-1`` blocks; with ``OUTPUT_LAST`` (older builds) the last ``k`` blocks, and the
  output layer only when ``k`` exceeds the block count.
* Offloaded layers are contiguous per device in device order; the output layer is the last one.
* Per device: role fixed cost + its blocks' weights and KV + output layer if it holds it + the
  role's compute buffer (the partial-offload size when any layer stays on the host, the
  multi-device size when a full offload spans several devices) + the logits buffer on the device
  holding the output layer + the input copies on the first device of a multi-device offload.
* Host RAM of the main worker: fixed + kept blocks (host weight size and KV) + token embedding +
  output layer if kept + host compute buffer. Each rpc-server costs its worker a fixed amount.
* MoE: a GPU-resident block whose experts stay on the host (``Layout.host_expert_blocks``) costs
  its device the block less its expert tensors, and the main worker's RAM those tensors (host
  expert size, per the mmap policy). Such a layout runs with tensor overrides, which switch off
  llama.cpp's pipeline parallelism and leave weights on the host: it is priced with the
  partial-offload compute buffers.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import accumulate
from typing import NamedTuple

from layerfit.domain.config import OffloadOrder
from layerfit.domain.layout import Claims, DeviceAssignment, DeviceClaim, Layout, WorkerClaim
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.errors import InputError

# ---------------------------------------------------------------------------------------------
# Per-device and per-host pieces (the solver builds its linear expressions from these too).
# ---------------------------------------------------------------------------------------------


def is_partial(layout: Layout) -> bool:
    """True when any block, the output layer or a GPU-resident block's experts stay on the host."""
    return layout.cpu_blocks > 0 or not layout.output_offloaded or bool(layout.host_expert_blocks)


def host_expert_bytes(profile: MemoryProfile, blocks: Collection[int]) -> tuple[int, int]:
    """(VRAM saved, host RAM taken) when the experts of these GPU-resident blocks stay on the host."""
    return (
        sum(profile.expert_bytes(block) for block in blocks),
        sum(profile.host_expert_bytes(block) for block in blocks),
    )


def device_compute_bytes(
    profile: MemoryProfile,
    role: DeviceRole,
    *,
    partial: bool,
    unified_worker: bool,
    holds_output: bool,
    multi_device: bool | None = None,
    first_device: bool | None = None,
    host_blocks: int | None = None,
) -> int:
    """Compute buffer of one device: its role's, the logits if it holds the output layer, and the
    input copies of the first device when a full offload spans several devices.

    ``multi_device`` (more than one device), ``first_device`` (first in device order) and
    ``host_blocks`` (blocks kept on the host: some splits turn flash attention off, see
    ``FlashAttnFallback``) left at ``None`` mean the caller does not model them: the largest value
    they allow is returned.
    """
    compute = profile.role_costs(role, unified_worker).compute.bytes_for(partial, multi_device)
    fallback = profile.flash_attn_fallback
    if partial and fallback is not None:
        compute += fallback.device_bytes(host_blocks, holds_output)
    if holds_output:
        compute += profile.output_compute_bytes
    may_be_first = first_device if first_device is not None else role is not DeviceRole.MAIN
    if not partial and multi_device is not False and may_be_first:
        compute += profile.first_device_compute_bytes
    return compute


def device_overhead_bytes(
    profile: MemoryProfile,
    role: DeviceRole,
    *,
    partial: bool,
    unified_worker: bool,
    holds_output: bool,
    multi_device: bool | None = None,
    first_device: bool | None = None,
    host_blocks: int | None = None,
) -> int:
    """Everything a device costs besides its blocks: fixed + compute + output layer + main extras.

    ``multi_device``/``first_device``/``host_blocks`` as in ``device_compute_bytes`` (``None``: the
    upper bound).
    """
    costs = profile.role_costs(role, unified_worker)
    overhead = costs.fixed_bytes + device_compute_bytes(
        profile,
        role,
        partial=partial,
        unified_worker=unified_worker,
        holds_output=holds_output,
        multi_device=multi_device,
        first_device=first_device,
        host_blocks=host_blocks,
    )
    if holds_output:
        overhead += profile.output_weight_bytes
    if role is DeviceRole.MAIN:
        overhead += profile.extra_main_gpu_bytes
    return overhead


def block_prefix_bytes(profile: MemoryProfile) -> tuple[int, ...]:
    """``prefix[i]`` = weights + KV of blocks ``0 .. i-1`` on a GPU (length ``n_blocks + 1``)."""
    per_block = (w + kv for w, kv in zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True))
    return (0, *accumulate(per_block))


def host_prefix_bytes(profile: MemoryProfile) -> tuple[int, ...]:
    """``prefix[i]`` = host weights + KV of blocks ``0 .. i-1`` kept in RAM (length ``n_blocks + 1``)."""
    per_block = (profile.host_weight_bytes(i) + profile.block_kv_bytes[i] for i in range(profile.n_blocks))
    return (0, *accumulate(per_block))


class MainHostOverhead(NamedTuple):
    """Main-worker RAM besides kept blocks, itemised as ``WorkerClaim`` reports it."""

    fixed_bytes: int
    embedding_bytes: int
    output_bytes: int
    compute_bytes: int


def main_host_overhead(
    profile: MemoryProfile,
    *,
    partial: bool,
    output_offloaded: bool,
    has_main_gpu: bool,
    multi_device: bool | None = None,
    host_blocks: int | None = None,
) -> MainHostOverhead:
    """Fixed cost (with the main-GPU extras when there is no main GPU), token embedding, the output
    layer kept on the host, and the host compute buffer (the logits too when the output stays).
    ``host_blocks`` as in ``device_compute_bytes``."""
    kept_output = not output_offloaded
    fallback = profile.flash_attn_fallback
    fallback_bytes = fallback.host_extra_bytes if partial and fallback and fallback.applies(host_blocks) else 0
    return MainHostOverhead(
        fixed_bytes=profile.host_fixed_bytes + (0 if has_main_gpu else profile.extra_main_gpu_bytes),
        embedding_bytes=profile.token_embedding_bytes,
        output_bytes=profile.host_output_bytes if kept_output else 0,
        compute_bytes=profile.host_compute.bytes_for(partial, multi_device)
        + (profile.host_output_compute_bytes if kept_output else 0)
        + fallback_bytes,
    )


def main_host_overhead_bytes(
    profile: MemoryProfile,
    *,
    partial: bool,
    output_offloaded: bool,
    has_main_gpu: bool,
    multi_device: bool | None = None,
    host_blocks: int | None = None,
) -> int:
    """Main-worker RAM besides kept blocks: fixed, embedding, kept output layer, compute, extras.

    ``multi_device=None`` (device count not modelled) takes the larger host compute buffer;
    ``host_blocks`` as in ``device_compute_bytes``.
    """
    return sum(
        main_host_overhead(
            profile,
            partial=partial,
            output_offloaded=output_offloaded,
            has_main_gpu=has_main_gpu,
            multi_device=multi_device,
            host_blocks=host_blocks,
        )
    )


# ---------------------------------------------------------------------------------------------
# claims()
# ---------------------------------------------------------------------------------------------


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
        kv_bytes=kv_kept,
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


# ---------------------------------------------------------------------------------------------
# llama.cpp's offload order and tensor split, both directions.
# ---------------------------------------------------------------------------------------------


def output_offloaded_for(order: OffloadOrder, gpu_blocks: int, n_blocks: int, has_devices: bool) -> bool:
    """Whether llama.cpp puts the output layer on a GPU when ``gpu_blocks`` blocks are offloaded."""
    if not has_devices:
        return False
    if order is OffloadOrder.OUTPUT_FIRST:
        return True
    return gpu_blocks == n_blocks


def make_layout(
    main_worker: str,
    n_blocks: int,
    devices: Sequence[DeviceAssignment],
    order: OffloadOrder = OffloadOrder.OUTPUT_FIRST,
) -> Layout:
    """A layout whose output-layer placement follows ``order``, as llama.cpp would place it."""
    gpu_blocks = sum(device.blocks for device in devices)
    return Layout(
        main_worker=main_worker,
        n_blocks=n_blocks,
        devices=tuple(devices),
        output_offloaded=output_offloaded_for(order, gpu_blocks, n_blocks, bool(devices)),
    )


def gpu_layers_flag(layout: Layout) -> int:
    """The ``-ngl`` value that reproduces the layout."""
    return layout.gpu_layers


def tensor_split_counts(layout: Layout) -> tuple[int, ...]:
    """Integer ``-ts`` counts (layers per device, the output layer on the last) for the layout."""
    counts = [device.blocks for device in layout.devices]
    if layout.output_offloaded and counts:
        counts[-1] += 1
    return tuple(counts)


def layer_devices(
    n_blocks: int, n_gpu_layers: int, tensor_split: Sequence[float], order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
) -> tuple[int | None, ...]:
    """Device of every layer as llama.cpp computes it (``None`` = host); the output layer is last.

    Follows ``load_tensors``: the cumulative normalised split in float32; layer ``il`` (the output
    layer is ``il == n_blocks``) goes to ``upper_bound(splits, (il - i_gpu_start) / act_gpu_layers)``.
    """
    if n_gpu_layers < 0:
        raise InputError("n_gpu_layers", f"must be >= 0, got {n_gpu_layers}")
    if not tensor_split or any(share < 0 for share in tensor_split) or sum(tensor_split) <= 0:
        raise InputError("tensor_split", f"needs non-negative shares with a positive sum, got {list(tensor_split)}")
    import numpy as np  # here, not at the top: ``layerfit estimate`` never needs it

    cumulative = np.cumsum(np.asarray(tensor_split, dtype=np.float32), dtype=np.float32)
    splits = cumulative / cumulative[-1]
    if order is OffloadOrder.OUTPUT_FIRST:
        gpu_start = max(n_blocks + 1 - n_gpu_layers, 0)
    else:
        gpu_start = max(n_blocks - n_gpu_layers, 0)
    active = min(n_gpu_layers, n_blocks + 1)
    last_device = len(tensor_split) - 1
    # Vectorised over layers; each element is the same float32 division and upper_bound.
    offsets = np.arange(n_blocks + 1) - gpu_start
    on_gpu = (offsets >= 0) & (offsets < active)
    fractions = offsets[on_gpu].astype(np.float32) / np.float32(max(active, 1))
    found = np.minimum(np.searchsorted(splits, fractions, side="right"), last_device).tolist()
    devices: list[int | None] = [None] * (n_blocks + 1)
    for layer, device in zip(np.flatnonzero(on_gpu).tolist(), found, strict=True):
        devices[layer] = device
    return tuple(devices)


def device_blocks(
    n_blocks: int, n_gpu_layers: int, tensor_split: Sequence[float], order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
) -> tuple[tuple[int, ...], int | None]:
    """Blocks llama.cpp gives each device from ``-ngl``/``-ts``, and the device of the output layer
    (``None``: it stays on the host)."""
    devices = layer_devices(n_blocks, n_gpu_layers, tensor_split, order)
    per_device = [0] * len(tensor_split)
    for device in devices[:n_blocks]:
        if device is not None:
            per_device[device] += 1
    return tuple(per_device), devices[n_blocks]


def split_layers(
    n_blocks: int, n_gpu_layers: int, tensor_split: Sequence[float], order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
) -> tuple[int, tuple[int, ...], bool]:
    """What llama.cpp does with ``-ngl`` and ``-ts``: (CPU blocks, blocks per device, output offloaded)."""
    per_device, output_device = device_blocks(n_blocks, n_gpu_layers, tensor_split, order)
    return n_blocks - sum(per_device), per_device, output_device is not None


def layout_from_flags(
    main_worker: str,
    gpus: Sequence[tuple[str, int]],
    n_blocks: int,
    n_gpu_layers: int,
    tensor_split: Sequence[float] | None = None,
    order: OffloadOrder = OffloadOrder.OUTPUT_FIRST,
) -> Layout:
    """The layout llama.cpp builds from ``-ngl``/``-ts`` over ``gpus`` (llama.cpp device order).

    Without ``tensor_split`` every device gets an equal share (a stand-in for llama.cpp's default,
    free memory). Devices that receive no layer are dropped from the layout.
    """
    if not gpus or n_gpu_layers == 0:
        return Layout(main_worker=main_worker, n_blocks=n_blocks)
    shares = tuple(tensor_split) if tensor_split is not None else (1.0,) * len(gpus)
    if len(shares) != len(gpus):
        raise InputError("tensor_split", f"has {len(shares)} entries for {len(gpus)} devices")
    per_device, output_device = device_blocks(n_blocks, n_gpu_layers, shares, order)
    assignments = tuple(
        DeviceAssignment(worker=worker, gpu_index=index, blocks=per_device[i])
        for i, (worker, index) in enumerate(gpus)
        if per_device[i] or i == output_device
    )
    return Layout(
        main_worker=main_worker, n_blocks=n_blocks, devices=assignments, output_offloaded=output_device is not None
    )
