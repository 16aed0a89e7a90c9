"""Bad input in a fleet, found before planning: each is reported with a reason, the rest is planned.

* A deployment that cannot be planned at all (its selection names a worker or GPU the cluster does
  not have, or its profile cannot be estimated) is left out; its replicas come back unplaced with
  the reason. Its current placements keep running where they are and their memory (from its
  profile) is taken out of the cluster before planning (``Screened.fleet``), so that nothing is
  planned into it; where that memory is not known (no profile, or a layout of another block count)
  the replica is stopped before anything starts (``Screened.stop_first``) and reported stopped.
* A current placement whose layout has another block count than the model cannot be costed: it is
  reported, stopped before anything starts, and the replica is placed anew (a move).
* A current placement on a worker or GPU the cluster no longer has is reported; it is not running
  any more, and the replica is placed anew (a move).
* Pins are checked one by one and together (``pin_conflicts``): a pin that no longer fits, or that
  together with the pins before it overflows a GPU or a worker, is reported and not enforced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from layerfit.check import capacity_reasons, reference_reasons, unified_workers
from layerfit.domain.cluster import Cluster, GpuRef
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, FleetPlan, Move, Placement, ReplicaChange, ReplicaRef
from layerfit.domain.layout import Claims
from layerfit.domain.plan import Reason, ReasonKind, Severity
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import LayerfitError
from layerfit.fleet.busy import busy_reasons
from layerfit.fleet.moves import gpu_names
from layerfit.fleet.sequential import subtract
from layerfit.memory import claims as compute_claims


@dataclass(frozen=True)
class Screened:
    """What can be planned, what cannot (by deployment), and the reasons found."""

    fleet: Fleet
    """The deployments that can be planned, their usable current placements, and the cluster less
    the memory of the replicas left running outside the plan."""
    profiles: dict[str, MemoryProfile]
    unplaceable: dict[str, Reason]
    reasons: tuple[Reason, ...]
    stop_first: tuple[Placement, ...] = ()
    """Running replicas whose memory cannot be known: stopped before anything starts."""


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
    """The deployment's profile where it can be estimated, and why the deployment cannot be planned."""
    from layerfit.planning.profiles import resolve_profile

    try:
        profile: MemoryProfile | None = resolve_profile(deployment)
    except LayerfitError as error:
        message = f"deployment {deployment.name}: no memory profile: {error}"
        return None, Reason(kind=ReasonKind.INVALID_PARAMETER, resource="profile", message=message)
    for ref in deployment.gpu_selection or ():
        problem = _selection_problem(cluster, ref)
        if problem is not None:
            return profile, problem.model_copy(update={"message": f"deployment {deployment.name}: {problem.message}"})
    return profile, None


def _where(placement: Placement) -> str:
    return f"current placement of {placement.deployment} replica {placement.replica}"


def _placement_problem(cluster: Cluster, placement: Placement, profile: MemoryProfile) -> tuple[bool, Reason | None]:
    """Whether the placement is kept as current (else it is stopped first), and what is wrong with it."""
    layout = placement.layout
    missing = reference_reasons(cluster, layout)
    if missing:
        message = f"{_where(placement)}: {missing[0].message}; it is not running any more and is placed anew"
        return True, missing[0].model_copy(update={"severity": Severity.WARNING, "message": message})
    if layout.n_blocks != profile.n_blocks:
        message = (
            f"{_where(placement)}: the layout has {layout.n_blocks} blocks, the model {profile.n_blocks}; its memory "
            "is not known, so it is stopped before anything starts and the replica is placed anew"
        )
        return False, Reason(kind=ReasonKind.BLOCK_COUNT_MISMATCH, severity=Severity.WARNING, message=message)
    return True, None


def _left_running(
    cluster: Cluster, placement: Placement, profile: MemoryProfile | None
) -> tuple[Claims | None, bool, Reason]:
    """A current placement of a deployment that cannot be planned: its claims if it keeps running
    (its memory known), whether it is stopped first (memory unknown), and the reason to report."""
    where = f"{_where(placement)} (the deployment cannot be planned)"
    missing = reference_reasons(cluster, placement.layout)
    if missing:
        message = f"{where}: {missing[0].message}; it is not running any more"
        return None, False, missing[0].model_copy(update={"severity": Severity.WARNING, "message": message})
    if profile is None or profile.n_blocks != placement.layout.n_blocks:
        why = "the deployment has no memory profile" if profile is None else "its layout has another block count"
        message = f"{where}: its memory is not known ({why}), so it is stopped before anything starts"
        return None, True, Reason(kind=ReasonKind.NO_CANDIDATE, severity=Severity.WARNING, message=message)
    claims = compute_claims(profile, placement.layout, unified_workers(cluster))
    message = f"{where} keeps running where it is; its memory is counted and nothing else is planned into it"
    return claims, False, Reason(kind=ReasonKind.NO_CANDIDATE, severity=Severity.INFO, message=message)


def screen(fleet: Fleet) -> Screened:
    """Separate what can be planned from what cannot, with a reason for every problem."""
    cluster = fleet.cluster
    known: dict[str, MemoryProfile | None] = {}
    unplaceable: dict[str, Reason] = {}
    for deployment in fleet.deployments:
        known[deployment.name], problem = _deployment_problem(cluster, deployment)
        if problem is not None:
            unplaceable[deployment.name] = problem
    profiles = {name: p for name, p in known.items() if p is not None and name not in unplaceable}
    reasons: list[Reason] = list(unplaceable.values())
    current: list[Placement] = []
    running: list[Claims] = []
    stop_first: list[Placement] = []
    for placement in fleet.current:
        if placement.deployment in unplaceable:
            claims, stop, problem = _left_running(cluster, placement, known[placement.deployment])
            running += [claims] if claims is not None else []
        else:
            keep, found = _placement_problem(cluster, placement, profiles[placement.deployment])
            stop, problem = not keep, found
            current += [placement] if keep else []
        stop_first += [placement] if stop else []
        reasons += [problem] if problem is not None else []
    overflow = capacity_reasons(cluster, *running)
    if overflow:
        message = f"the replicas left running outside the plan already overflow the cluster: {overflow[0].message}"
        reasons.append(overflow[0].model_copy(update={"severity": Severity.WARNING, "message": message}))
    for claims in running:
        cluster = subtract(cluster, claims)
    planned = fleet.model_copy(
        update={
            "cluster": cluster,
            "deployments": tuple(d for d in fleet.deployments if d.name not in unplaceable),
            "current": tuple(current),
        }
    )
    return Screened(
        fleet=planned,
        profiles=profiles,
        unplaceable=unplaceable,
        reasons=tuple(reasons),
        stop_first=tuple(stop_first),
    )


def with_stops_first(plan: FleetPlan, stops: Sequence[Placement], cluster: Cluster) -> FleetPlan:
    """The plan with ``stops`` as its first steps: a stopped replica placed again is a move, one that is
    not is stopped for good."""
    if not stops:
        return plan
    stopped = {(p.deployment, p.replica) for p in stops}
    placed = {(p.deployment, p.replica) for p in plan.placements}

    def change(key: tuple[str, int], was: ReplicaChange) -> ReplicaChange:
        return ReplicaChange.MOVED if key in stopped and was is ReplicaChange.STARTED else was

    first = tuple(
        Move(
            step=step,
            action="stop",
            deployment=p.deployment,
            replica=p.replica,
            worker=p.layout.main_worker,
            gpus=gpu_names(cluster, p.layout),
            change=ReplicaChange.MOVED if (p.deployment, p.replica) in placed else ReplicaChange.STOPPED,
        )
        for step, p in enumerate(stops)
    )
    later = tuple(
        m.model_copy(update={"step": m.step + len(first), "change": change((m.deployment, m.replica), m.change)})
        for m in plan.moves
    )
    return plan.model_copy(
        update={
            "moves": first + later,
            "placements": tuple(
                p.model_copy(update={"change": change((p.deployment, p.replica), p.change)}) for p in plan.placements
            ),
            "stopped": (
                *plan.stopped,
                *(ReplicaRef(deployment=d, replica=r) for d, r in sorted(stopped - placed)),
            ),
        }
    )


def pin_conflicts(
    cluster: Cluster,
    pins: Sequence[tuple[Placement, MemoryProfile]],
    deployments: Mapping[str, Deployment] | None = None,
) -> tuple[list[Placement], list[Reason]]:
    """Pins that fit together, in order; each one that would overflow with those before it, or
    (with ``deployments``) leave a pinned replica slower than its deployment's minimum with every
    replica on its GPUs decoding at once (``busy.busy_reasons``), why."""
    unified = unified_workers(cluster)
    accepted: list[Placement] = []
    taken: list[Claims] = []
    reasons: list[Reason] = []
    profiles: dict[str, MemoryProfile] = {}
    for placement, profile in pins:
        profiles[placement.deployment] = profile
        needed = compute_claims(profile, placement.layout, unified)
        overflow = [reason.message for reason in capacity_reasons(cluster, *taken, needed)]
        if not overflow and deployments is not None:
            overflow = busy_reasons(cluster, deployments, profiles, [*accepted, placement])
        if overflow:
            reasons.append(
                Reason(
                    kind=ReasonKind.PIN_BROKEN,
                    severity=Severity.WARNING,
                    worker=placement.layout.main_worker,
                    message=f"pinned replica {placement.replica} of {placement.deployment} does not fit together "
                    f"with the pins before it: {overflow[0]}; it is not enforced",
                )
            )
            continue
        accepted.append(placement)
        taken.append(needed)
    return accepted, reasons
