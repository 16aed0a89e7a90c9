"""Per-device and per-host pieces of the memory model; ``claims`` and the solver build on these."""

from __future__ import annotations

from collections.abc import Collection
from itertools import accumulate
from typing import NamedTuple, TypedDict, Unpack

from layerfit.domain.layout import Layout
from layerfit.domain.profile import ComputeBuffer, DeviceRole, MemoryProfile
from layerfit.memory.kinds import kinds_entry


class DevicePlace(TypedDict, total=False):
    """What a caller knows of a device's place in the layout (``device_compute_bytes``); a key left
    out, or ``None``, is not modelled and gets the upper bound."""

    multi_device: bool | None
    first_device: bool | None
    host_blocks: int | None
    kinds: int | None
    keeps_scan: bool | None


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
    kinds: int | None = None,
    keeps_scan: bool | None = None,
) -> int:
    """Compute buffer of one device: its role's, the logits if it holds the output layer, and the
    input copies of the first device when a full offload spans several devices.

    ``multi_device`` (more than one device), ``first_device`` (first in device order) and
    ``host_blocks`` (blocks kept on the host: some splits turn flash attention off, see
    ``FlashAttnFallback``) left at ``None`` mean the caller does not model them: the largest value
    they allow is returned. ``kinds`` (``kinds.range_kinds`` of the device's blocks; ``None``: not
    modelled) lowers the figure to that of a device holding only those layer kinds;
    ``keeps_scan=False`` (``kinds.keeps_scan``) takes the recurrent scan off a device after the first
    of a multi-device full offload. Without pipeline parallelism (``MemoryProfile.pipeline_parallel``)
    a multi-device full offload costs each device its partial-offload buffer (measured: the same
    buffers as with experts kept on the host).
    """

    def state(partial: bool, multi_device: bool | None) -> int:
        return _device_compute(
            profile,
            role,
            (partial, unified_worker, holds_output),
            multi_device=multi_device,
            first_device=first_device,
            host_blocks=host_blocks,
            kinds=kinds,
            keeps_scan=keeps_scan,
        )

    if partial or multi_device is False or profile.pipeline_parallel:
        return state(partial, multi_device)
    several = state(True, True)
    return several if multi_device else max(several, state(False, False))


def _device_compute(
    profile: MemoryProfile, role: DeviceRole, flags: tuple[bool, bool, bool], **place: Unpack[DevicePlace]
) -> int:
    """``device_compute_bytes`` in the offload state given; ``flags``: (partial, unified worker, holds output)."""
    partial, unified_worker, holds_output = flags
    multi_device, first_device, host_blocks = (
        place.get("multi_device"),
        place.get("first_device"),
        place.get("host_blocks"),
    )
    kinds, keeps_scan = place.get("kinds"), place.get("keeps_scan")
    may_be_first = first_device if first_device is not None else role is not DeviceRole.MAIN
    pipeline_first = not partial and multi_device is not False and may_be_first
    drops_scan = not partial and multi_device is True and first_device is False and keeps_scan is False

    def buffer(device: ComputeBuffer, output: int, first: int, scan: int) -> int:
        extras = (output if holds_output else 0) + (first if pipeline_first else 0)
        return device.bytes_for(partial, multi_device) + extras - (scan if drops_scan else 0)

    per_state = profile.output_compute
    compute = buffer(
        profile.role_costs(role, unified_worker).compute,
        profile.output_compute_bytes if per_state is None else per_state.bytes_for(partial, multi_device),
        profile.first_device_compute_bytes,
        profile.scan_bytes,
    )
    fallback = profile.flash_attn_fallback if partial else None
    # a split that turns flash attention off runs the host's last attention op on the device
    entry = kinds_entry(profile, kinds) if fallback is None or not fallback.applies(host_blocks) else None
    if entry is not None:
        compute = min(compute, buffer(entry.device, entry.output_bytes, entry.first_device_bytes, entry.scan_bytes))
    if fallback is not None:
        compute += fallback.device_bytes(host_blocks, holds_output)
    return compute


def device_overhead_bytes(
    profile: MemoryProfile,
    role: DeviceRole,
    *,
    partial: bool,
    unified_worker: bool,
    holds_output: bool,
    **place: Unpack[DevicePlace],
) -> int:
    """Everything a device costs besides its blocks: fixed + compute + output layer + main extras.

    ``place`` as in ``device_compute_bytes`` (left out or ``None``: the upper bound).
    """
    costs = profile.role_costs(role, unified_worker)
    overhead = costs.fixed_bytes + device_compute_bytes(
        profile,
        role,
        partial=partial,
        unified_worker=unified_worker,
        holds_output=holds_output,
        **place,
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
    kv_bytes: int = 0
    """The KV cache kept on the host whatever the layout (``MemoryProfile.host_kv_bytes``)."""


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
    layer kept on the host, the host compute buffer (the logits too when the output stays), and the
    KV cache the options keep on the host whatever the layout.
    ``host_blocks`` as in ``device_compute_bytes``; with none and the output offloaded, a partial
    layout keeps only experts there (``host_experts_compute_bytes``). The host's buffer does not follow
    the kinds of the blocks it keeps (measured: a host without attention blocks still holds the masks)."""
    kept_output = not output_offloaded
    if not partial and not profile.pipeline_parallel:
        multi_device = False  # the host's buffer is the single-device one (measured)
    fallback = profile.flash_attn_fallback
    fallback_bytes = fallback.host_extra_bytes if partial and fallback and fallback.applies(host_blocks) else 0
    experts_only = partial and host_blocks == 0 and not kept_output  # only GPU blocks' experts on the host
    host_buffer = profile.host_compute.bytes_for(partial, multi_device)
    if experts_only and profile.host_experts_compute_bytes is not None:
        host_buffer = profile.host_experts_compute_bytes
    return MainHostOverhead(
        fixed_bytes=profile.host_fixed_bytes + (0 if has_main_gpu else profile.extra_main_gpu_bytes),
        embedding_bytes=profile.token_embedding_bytes,
        output_bytes=profile.host_output_bytes if kept_output else 0,
        compute_bytes=host_buffer + (profile.host_output_compute_bytes if kept_output else 0) + fallback_bytes,
        kv_bytes=profile.host_kv_bytes,
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
