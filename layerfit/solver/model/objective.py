"""The objective tiers of ``docs/design.md`` ("The objective").

Strict tiers, solved together with weights that provably dominate (each tier's weight exceeds
the whole range of the tiers below it; the ranges are small, so coefficients stay small):

1. most layers on GPUs (blocks + output layer),
2. fewest workers (main + rpc-server workers),
3. fewest GPUs.

Under ``objective: speed`` the strict tiers are the decode time, fewest workers, fewest GPUs
(``speed_tiers``), with the same weights (the time's weight is the layers' weight).

Then, with those fixed, the placement policy's tie-break in a second solve:

* binpack: the least allocatable VRAM over the GPUs used (fill the fullest GPUs, keep big ones
  free); with no GPU used, the main worker with the least allocatable RAM;
* spread: the most headroom left on the tightest GPU used; with no GPU used, the main worker with
  the most allocatable RAM.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Policy
from layerfit.domain.layout import Claims, Layout
from layerfit.solver.model.instance import Instance
from layerfit.solver.model.variables import Expr, Variables


@dataclass(frozen=True)
class StrictTiers:
    """Linear expressions of the three strict tiers and their combined, weighted objective."""

    layers: Expr
    workers: Expr
    gpus: Expr
    combined: Expr
    """Maximise: ``layers * layer_weight - workers * worker_weight - gpus``."""
    layer_weight: int
    worker_weight: int


def strict_weights(instance: Instance) -> tuple[int, int]:
    """``(layer_weight, worker_weight)``: the worker weight exceeds the GPU-count range, and the
    layer weight exceeds the range of ``workers * worker_weight + gpus``."""
    max_gpus = instance.rpc_slots + instance.local_slots
    worker_weight = max_gpus + 1
    return instance.rpc_slots * worker_weight + max_gpus + 1, worker_weight


def strict_value(instance: Instance, layers: int, workers: int, gpus: int) -> int:
    """The weighted strict objective of given tier values."""
    layer_weight, worker_weight = strict_weights(instance)
    return layer_weight * layers - worker_weight * workers - gpus


def strict_tiers(instance: Instance, variables: Variables) -> StrictTiers:
    """The strict tiers as expressions, and their weighted sum to maximise."""
    layer_weight, worker_weight = strict_weights(instance)
    layers = variables.gpu_layers
    workers = sum(variables.worker_used.values())
    gpus = sum(slot.used for slot in variables.slots)
    return StrictTiers(
        layers=layers,
        workers=workers,
        gpus=gpus,
        combined=layer_weight * layers - worker_weight * workers - gpus,
        layer_weight=layer_weight,
        worker_weight=worker_weight,
    )


@dataclass(frozen=True)
class SpeedTiers:
    """``objective: speed``'s strict tiers: the decode time (microseconds), workers, GPUs, and their
    weighted sum to minimise (each weight exceeds the whole range of the tiers below it)."""

    time: Expr
    workers: Expr
    gpus: Expr
    combined: Expr
    """Minimise: ``time * time_weight + workers * worker_weight + gpus``."""
    time_weight: int
    worker_weight: int

    def value(self, time: int, workers: int, gpus: int) -> int:
        return self.time_weight * time + self.worker_weight * workers + gpus


def speed_tiers(instance: Instance, variables: Variables) -> SpeedTiers:
    """The speed objective's tiers as expressions (the instance models time)."""
    if variables.decode_us is None:
        raise ValueError("the instance does not model time")
    time_weight, worker_weight = strict_weights(instance)
    workers = sum(variables.worker_used.values())
    gpus = sum(slot.used for slot in variables.slots)
    combined = time_weight * variables.decode_us + worker_weight * workers + gpus
    return SpeedTiers(variables.decode_us, workers, gpus, combined, time_weight, worker_weight)


def tie_break(model: cp_model.CpModel, instance: Instance, variables: Variables, *, uses_gpus: bool) -> Expr:
    """The policy's tie-break as an expression to minimise (adds a headroom variable for spread)."""
    if not uses_gpus:
        ram = sum(instance.workers[w].tie_ram * main for w, main in variables.main.items())
        return ram if instance.policy is Policy.BINPACK else -ram
    if instance.policy is Policy.BINPACK:
        return sum(
            instance.classes[c].tie_capacity * assigned
            for slot in variables.slots
            for c, assigned in slot.assign.items()
        )
    top = max((cls.capacity for cls in instance.classes), default=0)
    headroom = model.new_int_var(0, top, "spread_headroom")
    for slot in variables.slots:
        capacity = sum(instance.classes[c].capacity * assigned for c, assigned in slot.assign.items())
        model.add(headroom <= capacity - slot.need).only_enforce_if(slot.used)
    return -headroom


def placement_score(cluster: Cluster, policy: Policy, layout: Layout, claims: Claims) -> float:
    """The tie-break of a decoded layout in MiB, higher is better under the policy."""
    if not layout.devices:
        ram_mib = cluster.worker(layout.main_worker).allocatable_ram_bytes / MiB
        return -ram_mib if policy is Policy.BINPACK else ram_mib
    if policy is Policy.BINPACK:
        return (
            -sum(
                cluster.worker(device.worker).gpu(device.gpu_index).allocatable_vram_bytes for device in layout.devices
            )
            / MiB
        )
    return (
        min(
            cluster.worker(claim.worker).gpu(claim.gpu_index).allocatable_vram_bytes - claim.total_bytes
            for claim in claims.devices
        )
        / MiB
    )
