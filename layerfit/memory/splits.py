"""llama.cpp's offload order and tensor split, both directions (``-ngl``/``-ts`` to a layout and back)."""

from __future__ import annotations

from collections.abc import Sequence

from layerfit.domain.choices import OffloadOrder
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.errors import InputError


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


def used_device_blocks(
    n_blocks: int, n_gpu_layers: int, tensor_split: Sequence[float], order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
) -> tuple[tuple[int, ...], int | None]:
    """``device_blocks`` over the devices llama.cpp gives a layer (the output layer counts), the
    ones it leaves empty left out: their blocks in device order, and the position of the output
    layer's device among them (the last, as the output layer is the last layer; ``None``: host)."""
    per_device, output_device = device_blocks(n_blocks, n_gpu_layers, tensor_split, order)
    kept = [i for i, blocks in enumerate(per_device) if blocks or i == output_device]
    return tuple(per_device[i] for i in kept), None if output_device is None else kept.index(output_device)


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
