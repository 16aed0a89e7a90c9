"""Layer kinds of each block, and the compute of devices that hold only some of them.

llama.cpp's scheduler gives each device the graph of its own blocks: a mask is built (and copied,
4 times under pipeline parallelism) only for the devices whose layers attend with it, a recurrent
scan runs only where recurrent layers are, the experts' activations only where MoE layers are.
The memory model (``memory.kinds``) looks the figures up by the union of a device's block kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntFlag
from functools import reduce
from operator import or_
from typing import TypeVar

from layerfit.domain.profile import KindsCompute
from layerfit.estimators.compute import ComputeEstimate
from layerfit.estimators.model_shape import ModelShape

T = TypeVar("T")


class LayerKind(IntFlag):
    """What a block contains, as far as compute buffers are concerned."""

    FULL_ATTENTION = 1
    WINDOW_ATTENTION = 2
    """Sliding-window or chunked attention (its own, smaller mask)."""
    RECURRENT = 4
    EXPERTS = 8
    FEED_FORWARD = 16


def layer_kinds(shape: ModelShape) -> tuple[int, ...]:
    """The kinds of every block (``LayerKind`` bits)."""
    kinds = []
    for block in range(shape.block_count):
        kind = LayerKind(0)
        if shape.head_count_kv[block]:
            kind |= LayerKind.WINDOW_ATTENTION if shape.swa_layers[block] else LayerKind.FULL_ATTENTION
        if shape.recurrent_layers[block]:
            kind |= LayerKind.RECURRENT
        if shape.block_expert_bytes[block]:
            kind |= LayerKind.EXPERTS
        if shape.ffn_width[block]:
            kind |= LayerKind.FEED_FORWARD
        kinds.append(int(kind))
    return tuple(kinds)


def range_unions(kinds: Sequence[int]) -> tuple[int, ...]:
    """Every union of the kinds of a contiguous block range, except that of all blocks, ascending."""
    everything = reduce(or_, kinds, 0)
    unions: set[int] = set()
    for start in range(len(kinds)):
        union = 0
        for kind in kinds[start:]:
            union |= kind
            if union == everything:
                break
            unions.add(union)
    return tuple(sorted(unions))


def blocks_within(shape: ModelShape, kinds: Sequence[int], union: int) -> ModelShape:
    """The shape restricted to the blocks whose kinds lie within ``union`` (for their activations)."""
    keep = [block for block, kind in enumerate(kinds) if kind | union == union]

    def pick(values: tuple[T, ...]) -> tuple[T, ...]:
        return tuple(values[block] for block in keep)

    experts = union & LayerKind.EXPERTS
    return shape.model_copy(
        update={
            "block_count": len(keep),
            "head_count": pick(shape.head_count),
            "head_count_kv": pick(shape.head_count_kv),
            "swa_layers": pick(shape.swa_layers),
            "ffn_width": pick(shape.ffn_width),
            "recurrent_layers": pick(shape.recurrent_layers),
            "block_bytes": pick(shape.block_bytes),
            "block_expert_bytes": pick(shape.block_expert_bytes),
            "block_dense_elements": pick(shape.block_dense_elements),
            "block_expert_elements": pick(shape.block_expert_elements),
            "expert_count": shape.expert_count if experts else 0,
            "expert_used_count": shape.expert_used_count if experts else 0,
        }
    )


def scan_crossings(kinds: Sequence[int]) -> tuple[int, ...]:
    """Blocks ``b`` where ``b-1`` and ``b`` are both recurrent without attention
    (``MemoryProfile.scan_crossings``)."""
    attends = LayerKind.FULL_ATTENTION | LayerKind.WINDOW_ATTENTION

    def plain_recurrent(kind: int) -> bool:
        return bool(kind & LayerKind.RECURRENT) and not kind & attends

    return tuple(b for b in range(1, len(kinds)) if plain_recurrent(kinds[b - 1]) and plain_recurrent(kinds[b]))


def kinds_compute(
    shape: ModelShape, estimate: Callable[[ModelShape], ComputeEstimate]
) -> tuple[tuple[int, ...] | None, tuple[KindsCompute, ...]]:
    """``MemoryProfile.block_kinds`` and ``kinds_compute``: ``estimate`` (activations and buffers of
    a shape) run on the blocks within each union of kinds a device can hold."""
    kinds = layer_kinds(shape)
    unions = range_unions(kinds)
    if not unions:
        return None, ()
    entries = []
    for union in unions:
        part = estimate(blocks_within(shape, kinds, union))
        entries.append(
            KindsCompute(
                kinds=union,
                device=part.device,
                output_bytes=part.output,
                first_device_bytes=part.first_device,
                scan_bytes=part.scan,
            )
        )
    return kinds, tuple(entries)
