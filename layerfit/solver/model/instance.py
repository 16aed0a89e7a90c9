"""The solver's view of one deployment: candidate GPUs in classes, scaled sizes, and the rules.

Everything here is plain data computed once before a model is built, so that the constraint
modules only iterate over it.

Candidate GPUs and workers are filtered by exact lower bounds only (a filtered GPU or worker can
appear in no valid layout), so the model stays complete:

* A GPU is a candidate for a role when its allocatable VRAM covers the least any device of that
  role can need: the role's fixed and compute cost plus one block or the output layer.
* A worker can be the main one when its RAM covers the least the main process needs; it can host
  rpc-servers when its RAM covers one server's fixed cost.
* The manual selection keeps only the selected GPUs and their workers as main (a ``-ts`` maps
  onto it, ``layerfit.domain.selection``); used whole (the default), the layout has exactly as many
  devices as the selection has GPUs.

GPUs of one worker with the same type and allocatable VRAM are interchangeable: they form a class
and the model counts how many of a class it uses instead of choosing among them, which removes
that symmetry and most of the model's size on large clusters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from itertools import chain, pairwise

from layerfit.budget.deadline import Deadline
from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.config import Objective, PlannerConfig, Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.profile import DeviceRole, MemoryProfile
from layerfit.solver.model.costs import Costs, least_fixed, memory_costs
from layerfit.solver.model.deployment_rules import Rules, TensorSplit, deployment_rules, most_devices
from layerfit.solver.model.expert_costs import ExpertCosts, dense_prefix, expert_costs
from layerfit.solver.model.scale import Scale, choose_scale, tie_break_unit
from layerfit.solver.model.speed_costs import SpeedCosts, speed_costs
from layerfit.speed.deployment import speed_key, worker_speed_key

__all__ = ["GpuClass", "Instance", "Rules", "SlotKind", "TensorSplit", "WorkerView", "build_instance"]


class SlotKind(StrEnum):
    """Device slots come in two groups, RPC servers first, then the main worker's own GPUs."""

    RPC = "rpc"
    LOCAL = "local"


@dataclass(frozen=True)
class GpuClass:
    """Interchangeable GPUs of one worker."""

    worker: int
    """Position in ``Instance.workers``."""
    gpu_type: str
    gpu_indexes: tuple[int, ...]
    capacity: int
    """Allocatable VRAM of each, scaled (rounded down)."""
    rpc_ok: bool
    local_ok: bool
    tie_capacity: int = 0
    """Allocatable VRAM in the tie-break's coarser unit (see ``tie_break_unit``)."""
    speed_key: tuple[object, ...] | None = None
    """What its GPUs' speed depends on, when the instance counts time (``speed.deployment.speed_key``)."""

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
    main_ok: bool
    rpc_ok: bool
    classes: tuple[int, ...]
    twin_of: int | None = None
    """An earlier worker identical to this one for the model (symmetry breaking), if any."""
    tie_ram: int = 0
    """Allocatable RAM in the tie-break's coarser unit."""
    speed_key: tuple[object, ...] | None = None
    """Its CPU and network, when the instance counts time (``speed.deployment.worker_speed_key``)."""


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
    experts: ExpertCosts | None = None
    """Where experts go is a decision (``expert_costs``); ``None``: they stay with their blocks."""
    speed: SpeedCosts | None = None
    """The decode time per token (``speed_costs``), when the objective is speed or the deployment
    sets ``min_decode_tokens_per_s``; ``None``: time is not modelled."""

    @property
    def uniform_blocks(self) -> bool:
        """Every block costs the same (on GPU and on the host) and no expert is placed apart."""
        return self.costs.uniform_block is not None and self.experts is None

    @property
    def interchangeable_devices(self) -> bool:
        """Swapping two devices of the same role, with their block counts, changes neither a memory
        figure nor (when time is modelled) the time: every block costs the same everywhere, no
        ``-ts`` fixes the order (symmetry breaking and ``canonical``)."""
        uniform_time = self.speed is None or (self.speed.uniform and not self.speed.fixed_host_experts)
        return self.uniform_blocks and uniform_time and self.rules.tensor_split is None

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

    def restricted(
        self,
        *,
        rpc_slots: int,
        local_slots: int,
        mains: frozenset[int] | None = None,
        rpc_workers: frozenset[int] | None = None,
    ) -> Instance:
        """The same deployment with fewer slots and, optionally, fewer candidate main workers and
        rpc-server workers.

        Used once a tier is known or bounded: every layout that can still be optimal fits the
        smaller model.
        """
        workers = tuple(
            replace(
                view,
                main_ok=view.main_ok and (mains is None or w in mains),
                rpc_ok=view.rpc_ok and (rpc_workers is None or w in rpc_workers),
            )
            for w, view in enumerate(self.workers)
        )
        classes = tuple(
            replace(
                cls,
                local_ok=cls.local_ok and workers[cls.worker].main_ok,
                rpc_ok=cls.rpc_ok and workers[cls.worker].rpc_ok,
            )
            for cls in self.classes
        )
        return replace(
            self,
            workers=workers,
            classes=classes,
            rpc_slots=min(rpc_slots, self.rpc_slots),
            local_slots=min(local_slots, self.local_slots),
        )


# ---------------------------------------------------------------------------------------------
# Building an instance
# ---------------------------------------------------------------------------------------------


def build_instance(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    *,
    experts: bool = False,
    deadline: Deadline | None = None,
) -> Instance:
    """Prepare one deployment for the model: rules, scaled costs, candidate workers and GPUs.
    ``experts``: where the experts go is a decision of the model. ``DeadlinePassed`` once
    ``deadline`` has passed (checked per worker: on 1,024 GPUs this takes about 0.3 s). Time is
    modelled (``Instance.speed``) under ``objective: speed`` or a ``min_decode_tokens_per_s``; its
    GPU classes then also split by speed (``speed.deployment.speed_key``)."""
    timed = models_time(deployment, config)
    rules = deployment_rules(deployment, profile, config, experts=experts)
    raw = memory_costs(profile)
    raw_experts = expert_costs(profile) if experts else None
    expert_sizes = () if raw_experts is None else raw_experts.sizes()
    scale = choose_scale(chain(raw.sizes(), expert_sizes, _capacities(cluster)))
    # the GPU floors take each block at its lightest (experts on the host when they may go there)
    floor_costs = (
        raw if raw_experts is None else replace(raw, block_prefix_up=dense_prefix(raw.block_prefix_up, raw_experts))
    )
    selection = _selection(cluster, deployment)
    min_main_ram = min(size for kind, size in raw.host.items() if kind.partial in rules.partial_values)
    allow_rpc = deployment.distributed_inference_across_workers and not rules.single_device
    workers: list[WorkerView] = []
    classes: list[GpuClass] = []
    for worker in cluster.workers:
        if deadline is not None:
            deadline.check()
        main_ok = (selection is None or worker.name in {name for name, _ in selection}) and (
            worker.allocatable_ram_bytes >= min_main_ram
        )
        rpc_ok = allow_rpc and worker.allocatable_ram_bytes >= profile.rpc_host_fixed_bytes
        worker_classes = _gpu_classes(
            worker, len(workers), floor_costs, rules, scale, selection, main_ok=main_ok, rpc_ok=rpc_ok, timed=timed
        )
        first = len(classes)
        classes.extend(worker_classes)
        workers.append(
            WorkerView(
                name=worker.name,
                unified=worker.unified_memory,
                ram_capacity=scale.capacity(worker.allocatable_ram_bytes),
                main_ok=main_ok,
                rpc_ok=rpc_ok and any(cls.rpc_ok for cls in worker_classes),
                classes=tuple(range(first, len(classes))),
                speed_key=worker_speed_key(worker) if timed else None,
            )
        )
    if deadline is not None:
        deadline.check()
    workers, classes = _tie_break_sizes(workers, classes)
    workers = _mark_twins(workers, classes)
    max_devices = most_devices(profile.n_layers, rules)
    local_slots = min(
        max_devices,
        max(
            (sum(classes[c].count for c in view.classes if classes[c].local_ok) for view in workers if view.main_ok),
            default=0,
        ),
    )
    rpc_capacity = sum(cls.count for cls in classes if cls.rpc_ok and workers[cls.worker].rpc_ok)
    rpc_slots = min(config.max_rpc_servers, max_devices, rpc_capacity) if allow_rpc else 0
    speed = None
    if timed:
        refs = [(cls.worker, cls.gpu_indexes[0], cls.local_ok, cls.rpc_ok) for cls in classes]
        leads = [view.main_ok for view in workers]
        serves = [view.rpc_ok for view in workers]
        speed = speed_costs(cluster, deployment, profile, refs, leads, serves, rpc_slots + local_slots)
    return Instance(
        deployment=deployment.name,
        n_blocks=profile.n_blocks,
        workers=tuple(workers),
        classes=tuple(classes),
        rpc_slots=rpc_slots,
        local_slots=local_slots,
        costs=raw.scaled(scale),
        rules=rules,
        scale=scale,
        policy=config.policy,
        experts=None if raw_experts is None else raw_experts.scaled(scale),
        speed=speed,
    )


def models_time(deployment: Deployment, config: PlannerConfig) -> bool:
    """Whether a deployment's instance models the decode time: its objective is speed, or it sets
    a minimum decode speed."""
    return config.objective_for(deployment) is Objective.SPEED or deployment.min_decode_tokens_per_s is not None


def _selection(cluster: Cluster, deployment: Deployment) -> frozenset[tuple[str, int]] | None:
    """Selected GPUs as (worker, index); ``None`` when there is no selection."""
    if deployment.gpu_selection is None:
        return None
    for ref in deployment.gpu_selection:
        cluster.gpu(ref)  # InputError naming the reference when it does not exist
    return frozenset((ref.worker, ref.index) for ref in deployment.gpu_selection)


def _capacities(cluster: Cluster) -> list[int]:
    sizes = []
    for worker in cluster.workers:
        sizes.append(worker.allocatable_ram_bytes)
        sizes.extend(gpu.allocatable_vram_bytes for gpu in worker.gpus)
    return sizes


def _min_device_bytes(costs: Costs, roles: Iterable[DeviceRole], unified: bool, rules: Rules) -> int:
    """The least any device of these roles can need: its fixed costs and one block or the output."""
    prefix = costs.block_prefix_up
    smallest_block = min(b - a for a, b in pairwise(prefix))
    return min(smallest_block, costs.output) + least_fixed(
        costs, tuple(roles), unified=unified, partial=rules.partial_values, multi=None
    )


def _gpu_classes(
    worker: Worker,
    worker_position: int,
    costs: Costs,
    rules: Rules,
    scale: Scale,
    selection: frozenset[tuple[str, int]] | None,
    *,
    main_ok: bool,
    rpc_ok: bool,
    timed: bool = False,
) -> list[GpuClass]:
    unified = worker.unified_memory
    local_floor = _min_device_bytes(costs, (DeviceRole.LOCAL, DeviceRole.MAIN), unified, rules)
    rpc_floor = _min_device_bytes(costs, (DeviceRole.RPC,), unified, rules)
    groups: dict[tuple[str, int, bool, bool, tuple[object, ...] | None], list[Gpu]] = {}
    for gpu in worker.gpus:
        if selection is not None and (worker.name, gpu.index) not in selection:
            continue
        local = main_ok and gpu.allocatable_vram_bytes >= local_floor
        remote = rpc_ok and gpu.allocatable_vram_bytes >= rpc_floor
        if local or remote:
            key = (gpu.type, gpu.allocatable_vram_bytes, local, remote, speed_key(worker, gpu) if timed else None)
            groups.setdefault(key, []).append(gpu)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0], -item[0][1], min(g.index for g in item[1])))
    return [
        GpuClass(
            worker=worker_position,
            gpu_type=gpu_type,
            gpu_indexes=tuple(sorted(gpu.index for gpu in gpus)),
            capacity=scale.capacity(vram),
            rpc_ok=remote,
            local_ok=local,
            speed_key=key,
        )
        for (gpu_type, vram, local, remote, key), gpus in ordered
    ]


def _tie_break_sizes(workers: list[WorkerView], classes: list[GpuClass]) -> tuple[list[WorkerView], list[GpuClass]]:
    """Capacities in units coarse enough to keep the tie-break's coefficients small."""
    gpu_unit = tie_break_unit(cls.capacity for cls in classes)
    ram_unit = tie_break_unit(view.ram_capacity for view in workers)
    return (
        [replace(view, tie_ram=view.ram_capacity // ram_unit) for view in workers],
        [replace(cls, tie_capacity=cls.capacity // gpu_unit) for cls in classes],
    )


def _mark_twins(workers: list[WorkerView], classes: list[GpuClass]) -> list[WorkerView]:
    """Link each worker to the previous one that is identical for the model (same RAM, flags and
    GPU classes up to their indexes, and when time is modelled the same CPU, network and GPU
    speeds): swapping two such workers changes no memory figure and no time."""
    last_seen: dict[tuple[object, ...], int] = {}
    marked: list[WorkerView] = []
    for w, view in enumerate(workers):
        signature = (
            view.unified,
            view.ram_capacity,
            view.main_ok,
            view.rpc_ok,
            view.speed_key,
            tuple(
                (
                    classes[c].gpu_type,
                    classes[c].capacity,
                    classes[c].count,
                    classes[c].rpc_ok,
                    classes[c].local_ok,
                    classes[c].speed_key,
                )
                for c in view.classes
            ),
        )
        twin = last_seen.get(signature)
        last_seen[signature] = w
        marked.append(view if twin is None else replace(view, twin_of=twin))
    return marked
