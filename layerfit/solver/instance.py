"""The solver's view of one deployment: candidate GPUs in classes, scaled sizes, and the rules.

Everything here is plain data computed once before a model is built, so that the constraint
modules only iterate over it.

Candidate GPUs and workers are filtered by exact lower bounds only (a filtered GPU or worker can
appear in no valid layout), so the model stays complete:

* A GPU is a candidate for a role when its allocatable VRAM covers the least any device of that
  role can need: the role's fixed and compute cost plus one block or the output layer.
* A worker can be the main one when its RAM covers the least the main process needs; it can host
  rpc-servers when its RAM covers one server's fixed cost.
* The manual selection (ignored when ``-ts`` is given, as GPUStack does and ``check`` agrees)
  keeps only the selected GPUs and their workers as main.

GPUs of one worker with the same type and allocatable VRAM are interchangeable: they form a class
and the model counts how many of a class it uses instead of choosing among them, which removes
that symmetry and most of the model's size on large clusters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from itertools import product
from typing import NamedTuple

from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.errors import SolverError
from layerfit.memory import (
    block_prefix_bytes,
    device_overhead_bytes,
    host_prefix_bytes,
    layer_devices,
    main_host_overhead_bytes,
)
from layerfit.solver.scale import Scale, choose_scale, to_mib


class SlotKind(StrEnum):
    """Device slots come in two groups, RPC servers first, then the main worker's own GPUs."""

    RPC = "rpc"
    LOCAL = "local"


class DeviceKind(NamedTuple):
    """What a device's fixed costs depend on: its role, its worker's memory type, partial offload."""

    role: DeviceRole
    unified: bool
    partial: bool


@dataclass(frozen=True)
class GpuClass:
    """Interchangeable GPUs of one worker."""

    worker: int
    """Position in ``Instance.workers``."""
    gpu_type: str
    gpu_indexes: tuple[int, ...]
    capacity: int
    """Allocatable VRAM of each, scaled (rounded down)."""
    capacity_mib: int
    rpc_ok: bool
    local_ok: bool

    @property
    def count(self) -> int:
        return len(self.gpu_indexes)


@dataclass(frozen=True)
class WorkerView:
    """One worker as the model sees it."""

    name: str
    unified: bool
    ram_capacity: int
    """Allocatable RAM (the whole pool on a unified-memory worker), scaled (rounded down)."""
    ram_mib: int
    main_ok: bool
    rpc_ok: bool
    classes: tuple[int, ...]
    twin_of: int | None = None
    """An earlier worker identical to this one for the model (symmetry breaking), if any."""


@dataclass(frozen=True)
class HostCosts:
    """Main-worker RAM besides kept blocks as a linear function of three switches (scaled)."""

    base: int
    """Full offload, output layer on a GPU, a main GPU present."""
    partial: int
    """Added when any layer stays on the host."""
    kept_output: int
    """Added when the output layer stays on the host."""
    no_main_gpu: int
    """Added when the main worker uses none of its GPUs."""


@dataclass(frozen=True)
class Costs:
    """Every memory figure the model needs, scaled, taken from ``layerfit.memory``."""

    block_prefix_up: tuple[int, ...]
    """GPU bytes of blocks ``0 .. i-1``, rounded up (end of a device's range)."""
    block_prefix_down: tuple[int, ...]
    """The same rounded down (start of a device's range), so a range is never under-counted."""
    host_prefix_up: tuple[int, ...]
    uniform_block: int | None
    """Scaled GPU cost of one block when all blocks cost the same (no element constraints)."""
    uniform_host_block: int | None
    device: Mapping[DeviceKind, int]
    output: int
    host: HostCosts
    rpc_host: int


@dataclass(frozen=True)
class TensorSplit:
    """A user ``-ts``: for every reachable GPU-layer count, the blocks of each device in order."""

    shares: tuple[float, ...]
    blocks_by_layers: Mapping[int, tuple[int, ...]]
    """GPU layers -> blocks per device; only counts where every device gets a valid share."""

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


@dataclass(frozen=True)
class Instance:
    """Everything a model for one deployment is built from."""

    deployment: str
    n_blocks: int
    workers: tuple[WorkerView, ...]
    classes: tuple[GpuClass, ...]
    rpc_slots: int
    local_slots: int
    costs: Costs
    rules: Rules
    scale: Scale
    policy: Policy
    uniform_blocks: bool

    @property
    def n_layers(self) -> int:
        return self.n_blocks + 1

    def slots(self, kind: SlotKind) -> int:
        return self.rpc_slots if kind is SlotKind.RPC else self.local_slots

    def classes_for(self, kind: SlotKind) -> tuple[int, ...]:
        """Classes that may fill a slot of this kind."""
        if kind is SlotKind.RPC:
            return tuple(c for c, cls in enumerate(self.classes) if cls.rpc_ok)
        return tuple(c for c, cls in enumerate(self.classes) if cls.local_ok)

    def class_of(self, worker: str, gpu_index: int) -> int | None:
        for c, cls in enumerate(self.classes):
            if self.workers[cls.worker].name == worker and gpu_index in cls.gpu_indexes:
                return c
        return None

    def worker_index(self, name: str) -> int | None:
        return next((w for w, view in enumerate(self.workers) if view.name == name), None)


# ---------------------------------------------------------------------------------------------
# Building an instance
# ---------------------------------------------------------------------------------------------


def build_instance(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> Instance:
    """Prepare one deployment for the model: rules, scaled costs, candidate workers and GPUs."""
    rules = _rules(deployment, profile, config)
    scale = choose_scale(_all_sizes(cluster, profile))
    selection = _selection(cluster, deployment)
    min_main_ram = min(
        main_host_overhead_bytes(profile, partial=p, output_offloaded=o, has_main_gpu=m)
        for p, o, m in product(rules.partial_values, (False, True), (False, True))
    )
    allow_rpc = deployment.distributed_inference_across_workers and not rules.single_device
    workers: list[WorkerView] = []
    classes: list[GpuClass] = []
    for worker in cluster.workers:
        main_ok = (selection is None or worker.name in {name for name, _ in selection}) and (
            worker.allocatable_ram_bytes >= min_main_ram
        )
        rpc_ok = allow_rpc and worker.allocatable_ram_bytes >= profile.rpc_host_fixed_bytes
        worker_classes = _gpu_classes(
            worker, len(workers), profile, rules, scale, selection, main_ok=main_ok, rpc_ok=rpc_ok
        )
        first = len(classes)
        classes.extend(worker_classes)
        workers.append(
            WorkerView(
                name=worker.name,
                unified=worker.unified_memory,
                ram_capacity=scale.capacity(worker.allocatable_ram_bytes),
                ram_mib=to_mib(worker.allocatable_ram_bytes),
                main_ok=main_ok,
                rpc_ok=rpc_ok and any(cls.rpc_ok for cls in worker_classes),
                classes=tuple(range(first, len(classes))),
            )
        )
    workers = _mark_twins(workers, classes)
    max_devices = _max_devices(profile.n_layers, rules)
    local_slots = min(
        max_devices,
        max((sum(classes[c].count for c in view.classes if classes[c].local_ok) for view in workers if view.main_ok),
            default=0),
    )
    rpc_capacity = sum(cls.count for cls in classes if cls.rpc_ok and workers[cls.worker].rpc_ok)
    rpc_slots = min(config.max_rpc_servers, max_devices, rpc_capacity) if allow_rpc else 0
    return Instance(
        deployment=deployment.name,
        n_blocks=profile.n_blocks,
        workers=tuple(workers),
        classes=tuple(classes),
        rpc_slots=rpc_slots,
        local_slots=local_slots,
        costs=_costs(profile, scale),
        rules=rules,
        scale=scale,
        policy=config.policy,
        uniform_blocks=_uniform(profile),
    )


def _rules(deployment: Deployment, profile: MemoryProfile, config: PlannerConfig) -> Rules:
    params = deployment.params
    n_layers = profile.n_layers
    target = None if params.n_gpu_layers is None else min(params.n_gpu_layers, n_layers)
    image = deployment.kind is ModelKind.IMAGE
    full = image or not deployment.cpu_offloading
    if full or target == n_layers:
        partial_values: tuple[bool, ...] = (False,)
    elif target is not None:
        partial_values = (True,)
    else:
        partial_values = (False, True)
    split = None
    if params.tensor_split is not None:
        split = _tensor_split(params.tensor_split, profile.n_blocks, config.offload_order)
    return Rules(
        layer_target=target,
        full_offload=full,
        single_device=image,
        offload_order=config.offload_order,
        partial_values=partial_values,
        tensor_split=split,
    )


def _tensor_split(tensor_split: Iterable[float], n_blocks: int, order: OffloadOrder) -> TensorSplit:
    """For every GPU-layer count, what llama.cpp gives each device; counts leaving a device empty are
    dropped (such a device could not be part of the layout)."""
    shares = tuple(share for share in tensor_split if share > 0)
    table: dict[int, tuple[int, ...]] = {}
    last = len(shares) - 1
    for layers in range(1, n_blocks + 2):
        devices = layer_devices(n_blocks, layers, shares, order)
        per_device = [0] * len(shares)
        for device in devices[:n_blocks]:
            if device is not None:
                per_device[device] += 1
        output_device = devices[n_blocks]
        if output_device is not None and output_device != last:
            continue
        if all(per_device[:last]) and (per_device[last] or output_device == last):
            table[layers] = tuple(per_device)
    return TensorSplit(shares=shares, blocks_by_layers=table)


def _selection(cluster: Cluster, deployment: Deployment) -> frozenset[tuple[str, int]] | None:
    """Selected GPUs as (worker, index); ``None`` when there is no selection or ``-ts`` overrides it."""
    if deployment.gpu_selection is None or deployment.params.tensor_split is not None:
        return None
    for ref in deployment.gpu_selection:
        cluster.gpu(ref)  # InputError naming the reference when it does not exist
    return frozenset((ref.worker, ref.index) for ref in deployment.gpu_selection)


def _all_sizes(cluster: Cluster, profile: MemoryProfile) -> list[int]:
    sizes = [*block_prefix_bytes(profile), *host_prefix_bytes(profile), profile.rpc_host_fixed_bytes]
    for role, unified, partial, output in product(DeviceRole, (False, True), (False, True), (False, True)):
        sizes.append(
            device_overhead_bytes(profile, role, partial=partial, unified_worker=unified, holds_output=output)
        )
    for partial, output, main in product((False, True), repeat=3):
        sizes.append(main_host_overhead_bytes(profile, partial=partial, output_offloaded=output, has_main_gpu=main))
    for worker in cluster.workers:
        sizes.append(worker.allocatable_ram_bytes)
        sizes.extend(gpu.allocatable_vram_bytes for gpu in worker.gpus)
    return sizes


def _min_device_bytes(profile: MemoryProfile, roles: Iterable[DeviceRole], unified: bool, rules: Rules) -> int:
    """The least any device of these roles can need: its fixed costs and one block or the output."""
    smallest_block = min(w + kv for w, kv in zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True))
    least_content = min(smallest_block, profile.output_weight_bytes)
    return least_content + min(
        device_overhead_bytes(profile, role, partial=partial, unified_worker=unified, holds_output=False)
        for role in roles
        for partial in rules.partial_values
    )


def _gpu_classes(
    worker: Worker,
    worker_position: int,
    profile: MemoryProfile,
    rules: Rules,
    scale: Scale,
    selection: frozenset[tuple[str, int]] | None,
    *,
    main_ok: bool,
    rpc_ok: bool,
) -> list[GpuClass]:
    unified = worker.unified_memory
    local_floor = _min_device_bytes(profile, (DeviceRole.LOCAL, DeviceRole.MAIN), unified, rules)
    rpc_floor = _min_device_bytes(profile, (DeviceRole.RPC,), unified, rules)
    groups: dict[tuple[str, int, bool, bool], list[Gpu]] = {}
    for gpu in worker.gpus:
        if selection is not None and (worker.name, gpu.index) not in selection:
            continue
        local = main_ok and gpu.allocatable_vram_bytes >= local_floor
        remote = rpc_ok and gpu.allocatable_vram_bytes >= rpc_floor
        if local or remote:
            groups.setdefault((gpu.type, gpu.allocatable_vram_bytes, local, remote), []).append(gpu)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0], -item[0][1], min(g.index for g in item[1])))
    return [
        GpuClass(
            worker=worker_position,
            gpu_type=gpu_type,
            gpu_indexes=tuple(sorted(gpu.index for gpu in gpus)),
            capacity=scale.capacity(vram),
            capacity_mib=to_mib(vram),
            rpc_ok=remote,
            local_ok=local,
        )
        for (gpu_type, vram, local, remote), gpus in ordered
    ]


def _mark_twins(workers: list[WorkerView], classes: list[GpuClass]) -> list[WorkerView]:
    """Link each worker to the previous one that is identical for the model (same RAM, flags and
    GPU classes up to their indexes): swapping two such workers changes no memory figure."""
    last_seen: dict[tuple[object, ...], int] = {}
    marked: list[WorkerView] = []
    for w, view in enumerate(workers):
        signature = (
            view.unified,
            view.ram_capacity,
            view.main_ok,
            view.rpc_ok,
            tuple(
                (classes[c].gpu_type, classes[c].capacity, classes[c].count, classes[c].rpc_ok, classes[c].local_ok)
                for c in view.classes
            ),
        )
        twin = last_seen.get(signature)
        last_seen[signature] = w
        marked.append(view if twin is None else _with_twin(view, twin))
    return marked


def _with_twin(view: WorkerView, twin: int) -> WorkerView:
    return WorkerView(
        name=view.name,
        unified=view.unified,
        ram_capacity=view.ram_capacity,
        ram_mib=view.ram_mib,
        main_ok=view.main_ok,
        rpc_ok=view.rpc_ok,
        classes=view.classes,
        twin_of=twin,
    )


def _max_devices(n_layers: int, rules: Rules) -> int:
    """Every device but the last holds a block, so no layout has more devices than GPU layers."""
    limit = n_layers if rules.layer_target is None else rules.layer_target
    if rules.tensor_split is not None:
        limit = min(limit, rules.tensor_split.n_devices)
    if rules.single_device:
        limit = min(limit, 1)
    return limit


def _uniform(profile: MemoryProfile) -> bool:
    gpu = {w + kv for w, kv in zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True)}
    host = {profile.host_weight_bytes(i) + profile.block_kv_bytes[i] for i in range(profile.n_blocks)}
    return len(gpu) == 1 and len(host) == 1


def _costs(profile: MemoryProfile, scale: Scale) -> Costs:
    gpu_prefix = block_prefix_bytes(profile)
    host_prefix = host_prefix_bytes(profile)
    uniform = _uniform(profile)
    device: dict[DeviceKind, int] = {}
    outputs: set[int] = set()
    for role, unified, partial in product(DeviceRole, (False, True), (False, True)):
        without = device_overhead_bytes(profile, role, partial=partial, unified_worker=unified, holds_output=False)
        with_output = device_overhead_bytes(profile, role, partial=partial, unified_worker=unified, holds_output=True)
        device[DeviceKind(role, unified, partial)] = scale.claim(without)
        outputs.add(with_output - without)
    if len(outputs) != 1:
        raise SolverError("the memory model's output-layer cost depends on the device kind; the encoding assumes not")
    return Costs(
        block_prefix_up=tuple(scale.claim(size) for size in gpu_prefix),
        block_prefix_down=tuple(scale.capacity(size) for size in gpu_prefix),
        host_prefix_up=tuple(scale.claim(size) for size in host_prefix),
        uniform_block=scale.claim(gpu_prefix[1]) if uniform else None,
        uniform_host_block=scale.claim(host_prefix[1]) if uniform else None,
        device=device,
        output=scale.claim(outputs.pop()),
        host=_host_costs(profile, scale),
        rpc_host=scale.claim(profile.rpc_host_fixed_bytes),
    )


def _host_costs(profile: MemoryProfile, scale: Scale) -> HostCosts:
    """Fit ``base + a*partial + b*kept_output + c*no_main_gpu`` that is >= every scaled corner."""
    corners = {
        (p, k, n): scale.claim(
            main_host_overhead_bytes(profile, partial=bool(p), output_offloaded=not k, has_main_gpu=not n)
        )
        for p, k, n in product((0, 1), repeat=3)
    }

    def largest_step(axis: int) -> int:
        steps = []
        for corner, value in corners.items():
            if corner[axis] == 1:
                lower = list(corner)
                lower[axis] = 0
                steps.append(value - corners[(lower[0], lower[1], lower[2])])
        return max(steps)

    coefficients = (largest_step(0), largest_step(1), largest_step(2))
    base = max(
        value - sum(c * z for c, z in zip(coefficients, corner, strict=True)) for corner, value in corners.items()
    )
    return HostCosts(base=base, partial=coefficients[0], kept_output=coefficients[1], no_main_gpu=coefficients[2])
