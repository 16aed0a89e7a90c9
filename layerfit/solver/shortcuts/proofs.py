"""Answers proven without a CP model.

* **Capacity bounds that rule everything out** (``capacity_infeasibility``): no worker can run the
  main process; the rules fix the GPU-layer count (no CPU offloading, or ``-ngl``) and no choice of
  devices holds that many layers; or every candidate main worker's RAM is short of what it must
  keep even when its own GPUs and the best remote GPUs hold all they can. Each bound is in the
  model's scaled units and never under-counts, so it holds for every layout.
* **A single-GPU incumbent with every layer on it** (``single_gpu_answer``): one GPU, one worker
  and the most layers the rules allow are each the best value a layout can have, so the strict
  tiers are proven; the tie-break is then found by trying every class of interchangeable GPUs
  (``check`` in bytes decides each), which also gives the alternatives.

Each proof has a name, reported in ``EngineStats.details["proof"]``.
"""

from __future__ import annotations

from layerfit.check import check_layout, unified_workers
from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig, Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import DeviceAssignment, Layout
from layerfit.domain.limits import MAX_DEVICES
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.memory import claims
from layerfit.solver.model.candidates import Incumbent, candidate_of
from layerfit.solver.model.capacity import block_capacity, layer_ceiling, remote_gpu_blocks, top_remote_blocks
from layerfit.solver.model.instance import Instance, SlotKind

NO_MAIN_WORKER = "no-main-worker"
GPU_CAPACITY = "gpu-capacity"
HOST_RAM = "host-ram"
SINGLE_GPU = "single-gpu-enumeration"


def forced_layers(instance: Instance) -> int | None:
    """The GPU-layer count every valid layout has, when the rules fix it."""
    rules = instance.rules
    if rules.layer_target is not None:
        return rules.layer_target
    return instance.n_layers if rules.full_offload else None


def most_blocks_by_main(instance: Instance) -> dict[int, int]:
    """For each candidate main worker, an upper bound on the blocks any layout with it as main puts
    on GPUs: its own best ``local_slots`` GPUs and the best ``rpc_slots`` GPUs of other workers."""
    remote = remote_gpu_blocks(instance)
    most: dict[int, int] = {}
    for w, view in enumerate(instance.workers):
        if not view.main_ok:
            continue
        most[w] = min(instance.n_blocks, _best_blocks(instance, w, remote))
    return most


def _best_blocks(instance: Instance, main: int, remote: tuple[tuple[int, int], ...]) -> int:
    """The blocks of ``main``'s best ``j`` GPUs and the best remote ones beside them, over the local
    counts ``j`` that leave room under llama.cpp's device limit (``domain.limits.MAX_DEVICES``)."""
    without = frozenset((main,))
    if instance.local_slots + instance.rpc_slots <= MAX_DEVICES:
        local = block_capacity(instance, main, SlotKind.LOCAL, instance.local_slots)
        return local + top_remote_blocks(remote, instance.rpc_slots, without)
    return max(
        block_capacity(instance, main, SlotKind.LOCAL, j)
        + top_remote_blocks(remote, min(instance.rpc_slots, MAX_DEVICES - j), without)
        for j in range(instance.local_slots + 1)
    )


def mains_reaching(instance: Instance, layers: int) -> frozenset[int]:
    """The main workers some layout with at least ``layers`` GPU layers can have, by the bounds of
    ``capacity_infeasibility``: the GPUs it can use hold the blocks (the output layer adds at most
    one), and its RAM holds what stays on the host then. Used to leave out, once the incumbent has
    ``layers``, every main worker no layout at least as good can have."""
    most = most_blocks_by_main(instance)
    n = instance.n_blocks
    output = 1 if layer_ceiling(instance) > 0 else 0
    least_host = min(instance.costs.host.values(), default=0)
    prefix = instance.costs.host_prefix_up
    return frozenset(
        w
        for w, blocks in most.items()
        if min(n, blocks) + output >= layers
        and least_host + prefix[n - min(n, blocks)] <= instance.workers[w].ram_capacity
    )


def capacity_infeasibility(instance: Instance) -> str | None:
    """The name of a capacity bound that proves no layout valid, or ``None``."""
    most = most_blocks_by_main(instance)
    if not most:
        return NO_MAIN_WORKER
    forced = forced_layers(instance)
    if forced is not None and forced > 0:
        # The output layer adds at most one layer; a layout needs some device for any layer.
        reachable = max(most.values()) + 1 if layer_ceiling(instance) > 0 else 0
        if reachable < forced:
            return GPU_CAPACITY
    least_host = min(instance.costs.host.values(), default=0)
    prefix = instance.costs.host_prefix_up
    if all(
        least_host + prefix[instance.n_blocks - blocks] > instance.workers[w].ram_capacity for w, blocks in most.items()
    ):
        return HOST_RAM
    return None


def single_gpu_answer(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    instance: Instance,
    incumbent: Incumbent | None,
) -> tuple[Candidate, ...] | None:
    """The best single-GPU layouts, best first (as many as the answer and its alternatives need),
    when the incumbent proves the strict tiers: one GPU holding every layer the rules allow.

    A single device's claim depends only on its worker's memory type, so each class's score is
    known before any check: classes are tried best score first, and ``check`` decides each."""
    if incumbent is None or incumbent.gpus != 1 or incumbent.layers != layer_ceiling(instance):
        return None
    workers = {worker.name: worker for worker in cluster.workers}
    unified = unified_workers(cluster)
    needs: dict[bool, int] = {}
    ranked: list[tuple[float, Layout]] = []
    for cls in instance.classes:
        view = instance.workers[cls.worker]
        if not (cls.local_ok and view.main_ok):
            continue
        device = DeviceAssignment(
            worker=view.name, gpu_index=cls.gpu_indexes[0], blocks=incumbent.layout.devices[0].blocks
        )
        layout = Layout(
            main_worker=view.name,
            n_blocks=instance.n_blocks,
            devices=(device,),
            output_offloaded=incumbent.layout.output_offloaded,
        )
        if view.unified not in needs:
            needs[view.unified] = claims(profile, layout, unified).devices[0].total_bytes
        vram = workers[view.name].gpu(device.gpu_index).allocatable_vram_bytes
        if vram < needs[view.unified]:
            continue
        ranked.append((-vram / MiB if config.policy is Policy.BINPACK else (vram - needs[view.unified]) / MiB, layout))
    ranked.sort(key=lambda entry: entry[0], reverse=True)
    found: list[Candidate] = []
    for _score, layout in ranked:
        if not check_layout(cluster, deployment, profile, layout, config):
            found.append(candidate_of(cluster, deployment, profile, config, layout))
            if len(found) > config.alternatives:
                break
    return tuple(found) or None  # never empty: the incumbent's own class is valid
