"""The moves and GPUs tiers' bounds over all layouts, against brute force on fleets small enough
to list every layout (``test_fleet_bounds``): never above the best count among the plans at least
as good as the plan on the earlier tiers, and equal to it whenever the gap closes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model
from test_fleet import worker
from test_fleet_bounds import PLANNER, WITH_CG, all_columns, deployment, small_fleets

from layerfit.check import capacity_reasons
from layerfit.domain import Cluster
from layerfit.domain.fleet import Fleet, FleetPlan, Placement, TierBound
from layerfit.fleet import plan_fleet
from layerfit.fleet.master import Master
from layerfit.fleet.plan import current_counts


def fewest(fleet: Fleet, plan: FleetPlan, tier: str) -> int:
    """The fewest replicas moved (``tier`` "moves") or GPUs and workers used ("gpus") over every
    layout, among the plans at least as good as ``plan`` on the earlier tiers."""
    columns = all_columns(fleet)
    master = Master(fleet.cluster, fleet.deployments, columns, current_counts(fleet), {})
    placed, layers, moved = plan.objective[0], plan.objective[1], -plan.objective[2]
    master.model.add(master.placed >= placed)
    master.model.add(master.layers >= layers)
    if tier == "gpus":
        master.model.add(master.moved <= moved)
    master.model.minimize(master.moved if tier == "moves" else master.footprint)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = 30.0
    assert solver.solve(master.model) == cp_model.OPTIMAL
    best = round(solver.objective_value)
    # GPUs x (workers + 1) + workers, with fewer workers than workers + 1: the GPUs are the quotient
    return best if tier == "moves" else best // (len(fleet.cluster.workers) + 1)


@st.composite
def fleets_running(draw: st.DrawFn) -> Fleet:
    """A small fleet with some replicas running where they fit together (any valid layout)."""
    fleet = draw(small_fleets())
    current: list[Placement] = []
    claims = []
    for running, options in zip(fleet.deployments, all_columns(fleet), strict=True):
        for replica in range(running.replicas):
            if not options or not draw(st.booleans()):
                continue
            layout, claim = options[draw(st.integers(0, len(options) - 1))]
            if not capacity_reasons(fleet.cluster, *claims, claim):
                claims.append(claim)
                current.append(Placement(deployment=running.name, replica=replica, layout=layout))
    return fleet.model_copy(update={"current": tuple(current)})


def check_tier(bound: TierBound, optimum: int) -> None:
    assert optimum <= bound.value
    if bound.bound is None:  # no bound beyond the trivial one
        assert not bound.proven
        return
    assert bound.bound <= optimum + 1e-6, (bound, optimum)
    if bound.gap == 0:
        assert bound.proven and bound.value == optimum


@settings(max_examples=60)
@given(fleets_running())
def test_later_bounds_against_brute_force(fleet: Fleet) -> None:
    plan = plan_fleet(fleet, WITH_CG, PLANNER)
    assert plan.stats[0].status.value == "optimal" and len(plan.bounds) == 4  # the master proved its tiers
    assert (plan.status.value == "optimal") == all(bound.proven for bound in plan.bounds)
    moves, gpus = plan.bounds[2:]
    if gpus.over == "all layouts":
        assert gpus.rounds + gpus.closed > 0
        assert (gpus.placed_floor, gpus.layers_floor, gpus.moved_ceiling) == (*plan.objective[:2], moves.value)
        check_tier(gpus, fewest(fleet, plan, "gpus"))
    else:  # the bound over all layouts was 0: the master's own, over the candidates, is shown
        assert gpus.bound is not None and 0 < gpus.bound <= gpus.value
    if moves.over == "all layouts":
        check_tier(moves, fewest(fleet, plan, "moves"))


def test_gpus_bound_closes_over_all_layouts() -> None:
    # Workers of 24 + 12 and 24 GiB; a and b (10.5 GiB each) share one 24 GiB GPU. The LP over all
    # layouts proves one GPU with no gap.
    cluster = Cluster(workers=(worker("w", 24, 12), worker("v", 24)))
    fleet = Fleet(cluster=cluster, deployments=(deployment("a", 10, 1, 0), deployment("b", 10, 1, 0)))
    plan = plan_fleet(fleet, WITH_CG, PLANNER)
    gpus = plan.bounds[3]
    assert gpus.value == 1 and gpus.over == "all layouts" and gpus.proven and gpus.bound == 1
