"""Bad input in a fleet, found before planning: each is reported with a reason, the rest is planned.

* A deployment that cannot be planned at all (its selection names a worker or GPU the cluster does
  not have, or its profile cannot be estimated) is left out; its replicas come back unplaced with
  the reason, and its current placements are reported and left as they are.
* A current placement whose layout has another block count than the model is reported and
  ignored (its memory cannot be computed); the replica is planned as a new one.
* A current placement on a worker or GPU the cluster no longer has is reported; it is not running
  any more, and the replica is placed anew (a move).
* Pins are checked one by one and together (``pin_conflicts``): a pin that no longer fits, or that
  together with the pins before it overflows a GPU or a worker, is reported and not enforced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from layerfit.check import capacity_reasons, reference_reasons, unified_workers
from layerfit.domain.cluster import Cluster, GpuRef
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, Placement
from layerfit.domain.layout import Claims
from layerfit.domain.plan import Reason, ReasonKind, Severity
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import LayerfitError
from layerfit.memory import claims as compute_claims


@dataclass(frozen=True)
class Screened:
    """What can be planned, what cannot (by deployment), and the reasons found."""

    fleet: Fleet
    profiles: dict[str, MemoryProfile]
    unplaceable: dict[str, Reason]
    reasons: tuple[Reason, ...]


def _selection_problem(cluster: Cluster, ref: GpuRef) -> Reason | None:
    if not cluster.has_worker(ref.worker):
        return Reason(
            kind=ReasonKind.UNKNOWN_WORKER,
            resource="gpu_selection",
            worker=ref.worker,
            message=f"selected GPU {ref}: worker {ref.worker} is not in the cluster",
        )
    worker = cluster.worker(ref.worker)
    if not worker.has_gpu(ref.index) or worker.gpu(ref.index).type != ref.type:
        return Reason(
            kind=ReasonKind.UNKNOWN_GPU,
            resource="gpu_selection",
            worker=ref.worker,
            gpu_index=ref.index,
            message=f"selected GPU {ref} does not exist on worker {ref.worker}",
        )
    return None


def _deployment_problem(cluster: Cluster, deployment: Deployment) -> tuple[MemoryProfile | None, Reason | None]:
    for ref in deployment.gpu_selection or ():
        problem = _selection_problem(cluster, ref)
        if problem is not None:
            return None, problem.model_copy(update={"message": f"deployment {deployment.name}: {problem.message}"})
    from layerfit.planner import resolve_profile

    try:
        return resolve_profile(deployment), None
    except LayerfitError as error:
        message = f"deployment {deployment.name}: no memory profile: {error}"
        return None, Reason(kind=ReasonKind.INVALID_PARAMETER, resource="profile", message=message)


def _placement_problem(cluster: Cluster, placement: Placement, profile: MemoryProfile) -> tuple[bool, Reason | None]:
    """Whether the placement is kept as current, and what is wrong with it."""
    where = f"current placement of {placement.deployment} replica {placement.replica}"
    layout = placement.layout
    if layout.n_blocks != profile.n_blocks:
        message = f"{where}: the layout has {layout.n_blocks} blocks, the model {profile.n_blocks}; it is ignored"
        return False, Reason(kind=ReasonKind.BLOCK_COUNT_MISMATCH, severity=Severity.WARNING, message=message)
    missing = reference_reasons(cluster, layout)
    if missing:
        message = f"{where}: {missing[0].message}; it is not running any more and is placed anew"
        return True, missing[0].model_copy(update={"severity": Severity.WARNING, "message": message})
    return True, None


def screen(fleet: Fleet) -> Screened:
    """Separate what can be planned from what cannot, with a reason for every problem."""
    cluster = fleet.cluster
    profiles: dict[str, MemoryProfile] = {}
    unplaceable: dict[str, Reason] = {}
    for deployment in fleet.deployments:
        profile, problem = _deployment_problem(cluster, deployment)
        if problem is not None:
            unplaceable[deployment.name] = problem
        elif profile is not None:
            profiles[deployment.name] = profile
    reasons: list[Reason] = list(unplaceable.values())
    current: list[Placement] = []
    for placement in fleet.current:
        if placement.deployment in unplaceable:
            message = (
                f"current placement of {placement.deployment} replica {placement.replica} is left as it is: "
                "the deployment cannot be planned"
            )
            reasons.append(Reason(kind=ReasonKind.NO_CANDIDATE, severity=Severity.WARNING, message=message))
            continue
        keep, problem = _placement_problem(cluster, placement, profiles[placement.deployment])
        if problem is not None:
            reasons.append(problem)
        if keep:
            current.append(placement)
    planned = fleet.model_copy(
        update={
            "deployments": tuple(d for d in fleet.deployments if d.name not in unplaceable),
            "current": tuple(current),
        }
    )
    return Screened(fleet=planned, profiles=profiles, unplaceable=unplaceable, reasons=tuple(reasons))


def pin_conflicts(
    cluster: Cluster, pins: Sequence[tuple[Placement, MemoryProfile]]
) -> tuple[list[Placement], list[Reason]]:
    """Pins that fit together, in order; each one that would overflow with those before it, why."""
    unified = unified_workers(cluster)
    accepted: list[Placement] = []
    taken: list[Claims] = []
    reasons: list[Reason] = []
    for placement, profile in pins:
        needed = compute_claims(profile, placement.layout, unified)
        overflow = capacity_reasons(cluster, *taken, needed)
        if overflow:
            reasons.append(
                Reason(
                    kind=ReasonKind.PIN_BROKEN,
                    severity=Severity.WARNING,
                    worker=placement.layout.main_worker,
                    message=f"pinned replica {placement.replica} of {placement.deployment} does not fit together "
                    f"with the pins before it: {overflow[0].message}; it is not enforced",
                )
            )
            continue
        accepted.append(placement)
        taken.append(needed)
    return accepted, reasons
