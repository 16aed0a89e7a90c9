"""Single-GPU full offloads of one deployment, over the cluster's GPU table.

The claims of such a layout do not depend on which GPU holds it, only on the GPU's memory type, so
they are computed once per type and moved to each GPU that fits (``fitting_gpus``); the workers
whose GPUs together can hold a full offload are the multi-GPU hosts (``multi_gpu_hosts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TypeVar

import numpy as np

from layerfit.check import offload_order_reasons, rule_reasons, speed_reasons
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Claims, DeviceAssignment, Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.fleet.gpu_table import BoolArray, GpuTable, IntArray
from layerfit.memory import claims as compute_claims
from layerfit.memory import make_layout
from layerfit.speed.deployment import layout_speed_key

Item = TypeVar("Item")


def stratified(items: Sequence[Item], limit: int, offset: int) -> list[Item]:
    """At most ``limit`` items spread evenly over ``items``, starting at a per-deployment offset."""
    if limit <= 0 or len(items) <= limit:
        return list(items)
    step = len(items) / limit
    return [items[int((i * step + offset % max(1, int(step))) % len(items))] for i in range(limit)]


def _single_layout(profile: MemoryProfile, config: PlannerConfig, worker: Worker, index: int) -> Layout:
    device = DeviceAssignment(worker=worker.name, gpu_index=index, blocks=profile.n_blocks)
    return make_layout(worker.name, profile.n_blocks, [device], config.offload_order)


def _single_template(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, worker: Worker, index: int
) -> Claims | None:
    """The claims of a full offload on one GPU of this worker's memory type; ``None`` if a rule forbids it."""
    layout = _single_layout(profile, config, worker, index)
    rules = (
        *offload_order_reasons(layout, config.offload_order),
        *rule_reasons(cluster, deployment, profile, layout, config),
    )
    if rules:
        return None
    return compute_claims(profile, layout, {worker.name} if worker.unified_memory else ())


class Fitting:
    """The GPUs a single-GPU full offload fits on alone (rows of the fleet's ``GpuTable``, in
    cluster order), and its claims per memory kind (unified or not): they depend only on that, so
    the memory model and the rules run once per kind."""

    def __init__(self, table: GpuTable, fits: BoolArray, templates: dict[bool, Claims | None]) -> None:
        self.table, self.fits, self.templates = table, fits, templates
        self.rows = np.flatnonzero(fits)

    def __bool__(self) -> bool:
        return len(self.rows) > 0

    @cached_property
    def _by_room(self) -> IntArray:
        order = self.table.by_room
        return order[self.fits[order]]

    def chosen(self, limit: int, offset: int) -> list[int]:
        """Every fitting GPU's row, or (past ``limit``) half of those that fit tightest (the same
        ones for every deployment, so that several can share a GPU) and half spread evenly over the
        rest (so that deployments do not all compete for the same few)."""
        if limit <= 0 or len(self.rows) <= limit:
            return [int(row) for row in self.rows]
        tight = limit // 2
        rest = stratified(range(tight, len(self.rows)), limit - tight, offset)
        return [int(self._by_room[position]) for position in [*range(tight), *rest]]


def fitting_gpus(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, table: GpuTable
) -> Fitting:
    """The GPUs (of the selection, where there is one) a full offload fits on alone, and there
    meets the deployment's ``min_decode_tokens_per_s`` alone (as every other candidate does:
    ``check.checked_claims``)."""
    selected = None if deployment.gpu_selection is None else {(r.worker, r.index) for r in deployment.gpu_selection}
    mask = table.selected(selected)
    templates: dict[bool, Claims | None] = {}
    fits = np.zeros(len(mask), dtype=np.bool_)
    for unified in (False, True):
        first = table.first_of_kind(mask, unified)
        if first is None:
            continue
        worker, index = table.gpu(first)
        template = templates[unified] = _single_template(cluster, deployment, profile, config, worker, index)
        if template is not None:
            ram = template.workers[0].pool_bytes if unified else template.workers[0].ram_bytes
            fits |= table.fitting(mask, unified, template.devices[0].total_bytes, ram)
    if deployment.min_decode_tokens_per_s is not None:
        fits &= _fast_enough(cluster, deployment, profile, config, table, fits)
    return Fitting(table, fits, templates)


def _fast_enough(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    table: GpuTable,
    fits: BoolArray,
) -> BoolArray:
    """The fitting GPUs where a full offload alone meets ``min_decode_tokens_per_s`` (``check.speed_reasons``,
    once per ``layout_speed_key``: GPUs alike in speed decide alike)."""
    fast = np.zeros(len(fits), dtype=np.bool_)
    decided: dict[object, bool] = {}
    for row in np.flatnonzero(fits):
        worker, index = table.gpu(int(row))
        layout = _single_layout(profile, config, worker, index)
        key = layout_speed_key(cluster, layout)
        if key not in decided:
            decided[key] = not speed_reasons(cluster, deployment, profile, layout)
        fast[row] = decided[key]
    return fast


def _moved_template(template: Claims, worker: Worker, index: int) -> Claims:
    return template.model_copy(
        update={
            "devices": (template.devices[0].model_copy(update={"worker": worker.name, "gpu_index": index}),),
            "workers": (template.workers[0].model_copy(update={"worker": worker.name}),),
        }
    )


def chosen_singles(
    profile: MemoryProfile,
    config: PlannerConfig,
    fitting: Fitting,
    limit: int,
    offset: int,
    made: dict[int, tuple[Layout, Claims]] | None = None,
) -> list[tuple[Layout, Claims]]:
    """The chosen single-GPU full offloads with their claims (``made``: those of the group so far,
    which members share)."""
    made = {} if made is None else made
    chosen = []
    for row in fitting.chosen(limit, offset):
        if row not in made:
            worker, index = fitting.table.gpu(row)
            template = fitting.templates[worker.unified_memory]
            assert template is not None  # a GPU fits only where its kind has a template
            made[row] = (_single_layout(profile, config, worker, index), _moved_template(template, worker, index))
        chosen.append(made[row])
    return chosen


def single_gpu_candidates(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, limit: int, offset: int
) -> list[tuple[Layout, Claims]]:
    """Full offloads on one GPU that fit (at most ``limit``, chosen from ``offset``)."""
    fitting = fitting_gpus(cluster, deployment, profile, config, GpuTable.of(cluster))
    return chosen_singles(profile, config, fitting, limit, offset)


def _lower_bound_vram(profile: MemoryProfile) -> int:
    """VRAM any full offload needs in total, whatever the split: weights, KV and the output layer."""
    return sum(profile.block_weight_bytes) + sum(profile.block_kv_bytes) + profile.output_weight_bytes


def multi_gpu_hosts(deployment: Deployment, profile: MemoryProfile, table: GpuTable) -> list[Worker]:
    """Workers with several GPUs whose VRAM together can hold a full offload, smallest first."""
    named = None if deployment.gpu_selection is None else set(deployment.selected_workers)
    return table.hosts(_lower_bound_vram(profile), named)
