"""The deployment's rules in the form the solver uses: ``-ngl``, offloading, ``-ts``, a selection.

``deployment_rules`` reads them once per deployment (``instance.build_instance``); a ``-ts`` becomes
the blocks of each device for every GPU-layer count, as ``layerfit.memory`` splits them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from layerfit.domain.config import OffloadOrder, PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.limits import MAX_DEVICES
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.selection import tensor_split_in_force, whole_selection
from layerfit.memory import device_blocks, used_device_blocks


@dataclass(frozen=True)
class TensorSplit:
    """A user ``-ts``: for every reachable GPU-layer count, the blocks of each device in order."""

    shares: tuple[float, ...]
    blocks_by_layers: Mapping[int, tuple[int, ...]]
    """GPU layers -> blocks per device; only counts with a valid layout. The devices are those
    llama.cpp gives a layer at that count (fewer than the shares when it leaves some empty), or,
    over a selection used whole, every device, each holding a layer."""

    @property
    def n_devices(self) -> int:
        return len(self.shares)


@dataclass(frozen=True)
class Rules:
    """The deployment's hard rules in the form the constraint modules use."""

    layer_target: int | None
    """Exact GPU layers (user ``-ngl``, capped at the layer count)."""
    full_offload: bool
    single_device: bool
    offload_order: OffloadOrder
    partial_values: tuple[bool, ...]
    """Values the partial-offload switch can take under these rules."""
    tensor_split: TensorSplit | None
    device_count: int | None = None
    """Exact number of devices (a selection used whole: its GPUs, or the shares of its ``-ts``)."""


def deployment_rules(deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, *, experts: bool) -> Rules:
    params = deployment.params
    n_layers = profile.n_layers
    target = None if params.n_gpu_layers is None else min(params.n_gpu_layers, n_layers)
    image = deployment.kind is ModelKind.IMAGE
    full = image or not deployment.cpu_offloading
    if full or (target == n_layers and not experts):
        partial_values: tuple[bool, ...] = (False,)
    elif target == n_layers:
        partial_values = (False, True)  # every layer on GPUs, experts on the host or not
    elif target is not None:
        partial_values = (True,)
    else:
        partial_values = (False, True)
    split = None
    shares = tensor_split_in_force(deployment, config)
    whole = whole_selection(deployment, config)
    if shares is not None:
        split = tensor_split_blocks(shares, profile.n_blocks, config.offload_order, drops_empty=not whole)
    if not whole or deployment.gpu_selection is None:
        device_count = None
    else:  # used whole: every selected GPU, or with a -ts one device per share llama.cpp reads
        device_count = len(deployment.gpu_selection) if split is None else split.n_devices
    return Rules(
        layer_target=target,
        full_offload=full,
        single_device=image,
        offload_order=config.offload_order,
        partial_values=partial_values,
        tensor_split=split,
        device_count=device_count,
    )


def tensor_split_blocks(
    tensor_split: Iterable[float], n_blocks: int, order: OffloadOrder, *, drops_empty: bool = True
) -> TensorSplit:
    """For every GPU-layer count, the blocks llama.cpp gives each device, as ``check`` reads a split:
    with ``drops_empty``, over the devices it gives a layer (``memory.used_device_blocks``);
    without, over every device, and counts that leave one without a layer are dropped (no layout
    over these devices matches them)."""
    shares = tuple(share for share in tensor_split if share > 0)
    last = len(shares) - 1
    table: dict[int, tuple[int, ...]] = {}
    for layers in range(1, n_blocks + 2):
        if drops_empty:
            table[layers] = used_device_blocks(n_blocks, layers, shares, order)[0]
            continue
        per_device, output_device = device_blocks(n_blocks, layers, shares, order)
        # every device holds a layer, and the output layer (when offloaded) is on the last one
        if all(per_device[:-1]) and (per_device[-1] or output_device == last) and output_device in (None, last):
            table[layers] = per_device
    return TensorSplit(shares=shares, blocks_by_layers=table)


def most_devices(n_layers: int, rules: Rules) -> int:
    """Every device but the last holds a block, so no layout has more devices than GPU layers, nor
    more than one llama.cpp process runs (``domain.limits.MAX_DEVICES``)."""
    limit = min(MAX_DEVICES, n_layers if rules.layer_target is None else rules.layer_target)
    if rules.tensor_split is not None:
        limit = min(limit, rules.tensor_split.n_devices)
    if rules.single_device:
        limit = min(limit, 1)
    return limit
