"""Context ranges in a fleet: each ranged deployment is planned at one context the fleet picks.

The single-deployment tiers put the context below layers, expert blocks on GPUs and workers; in
a fleet, placing the replicas comes first. So a ranged deployment (``ctx_auto``, ``ctx_min``/
``ctx_max``) is first planned at the context its own plan picks on the whole cluster alone (the
largest that keeps its tiers, ``layerfit.planning.context_range``). When that fleet leaves a replica unplaced or
layers or experts on the host, the fleet is planned again with every ranged deployment at the smallest
context of its range, and that plan wins when it is better on the fleet's first two tiers
(priority weight placed, layers on GPUs); otherwise the larger contexts stay. Each of the two
fleet plans gets half the fleet's time limit; each ranged deployment's own context choice takes
the planner's time limit on top, and a choice that limit cut is a safety stop of the plan
(``CONTEXT_STAGE``).
"""

from __future__ import annotations

from collections.abc import Callable

from layerfit.budget.fleet import with_safety_stop
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import Fleet, FleetPlan

PlanFleet = Callable[[Fleet], FleetPlan]


def fixed_at(deployment: Deployment, ctx: int) -> Deployment:
    """The deployment with a fixed context (its explicit profile re-estimated or KV scaled)."""
    from layerfit.planning.profiles import profile_at_ctx

    params = deployment.params.model_copy(update={"ctx_size": ctx})
    profile = None if deployment.profile is None else profile_at_ctx(deployment, ctx)
    return deployment.model_copy(
        update={"params": params, "profile": profile, "ctx_auto": False, "ctx_min": None, "ctx_max": None}
    )


CONTEXT_STAGE = "the context choice of {names} (the single-deployment planner's time limit)"
"""The safety stop a ranged deployment's context choice names when a time limit cut its plans."""


def chosen_context(fleet: Fleet, deployment: Deployment, config: PlannerConfig) -> tuple[int, bool]:
    """The context the deployment's own plan picks on the whole cluster, and whether a time limit
    cut a plan that choice compared (``planner.time_cuts``: another run may choose otherwise)."""
    from layerfit.planning.planner import plan

    result = plan(fleet.cluster, deployment, config, explain=False)
    stats = next(s for s in result.stats if s.engine == "context")
    return int(stats.details["ctx_size"]), bool(result.time_cuts)


def smallest_context(deployment: Deployment) -> int:
    """The smallest context of the deployment's range."""
    from layerfit.planning.context_range import ctx_bounds, ctx_candidates

    training = None
    if deployment.gguf_path is not None:
        from layerfit.estimators.shape import read_gguf

        training = read_gguf(deployment.gguf_path).context_length
    bounds = ctx_bounds(deployment, training)
    assert bounds is not None
    return ctx_candidates(*bounds)[0]


def ctx_key(name: str) -> str:
    """Where the fleet plan's stats record the context chosen for a ranged deployment."""
    return f"ctx_size[{name}]"


def resolved(fleet: Fleet, plan: FleetPlan) -> Fleet:
    """The fleet with each ranged deployment at the context ``plan`` chose for it."""
    details = plan.stats[0].details if plan.stats else {}
    return _with_contexts(fleet, {d.name: int(details[ctx_key(d.name)]) for d in fleet.deployments if d.has_ctx_range})


def _with_contexts(fleet: Fleet, contexts: dict[str, int]) -> Fleet:
    deployments = tuple(fixed_at(d, contexts[d.name]) if d.name in contexts else d for d in fleet.deployments)
    return fleet.model_copy(update={"deployments": deployments})


def _planned(fleet: Fleet, contexts: dict[str, int], plan_fixed: PlanFleet) -> FleetPlan:
    result = plan_fixed(_with_contexts(fleet, contexts))
    if not result.stats:
        return result
    details = {**result.stats[0].details, **{ctx_key(name): ctx for name, ctx in contexts.items()}}
    first = result.stats[0].model_copy(update={"details": details})
    return result.model_copy(update={"stats": (first, *result.stats[1:])})


def plan_with_contexts(fleet: Fleet, config: PlannerConfig, plan_fixed: PlanFleet) -> FleetPlan:
    """The fleet plan with every context range resolved (see the module docstring); the stats
    record each chosen context (``ctx_key``)."""
    ranged = [d for d in fleet.deployments if d.has_ctx_range]
    chosen = {d.name: chosen_context(fleet, d, config) for d in ranged}
    first = _planned(fleet, {name: ctx for name, (ctx, _) in chosen.items()}, plan_fixed)
    wanted = sum(d.replicas for d in fleet.deployments)
    whole = all(p.layout.full_offload and not p.layout.host_expert_blocks for p in first.placements)
    if len(first.placements) == wanted and whole:
        best = first
    else:
        smallest = _planned(fleet, {d.name: smallest_context(d) for d in ranged}, plan_fixed)
        best = smallest if tuple(smallest.objective[:2]) > tuple(first.objective[:2]) else first
    cut = [name for name, (_, was_cut) in chosen.items() if was_cut]
    return with_safety_stop(best, CONTEXT_STAGE.format(names=", ".join(cut))) if cut else best
