"""Moves, precisely: first starts are not moves, stops are named, and only replicas with a
current placement count in the moves tier."""

from __future__ import annotations

from test_fleet import model, replay, solve, worker

from layerfit.domain import Cluster
from layerfit.domain.fleet import Fleet, FleetPlan, Placement, ReplicaChange, ReplicaRef


def placements(plan: FleetPlan) -> tuple[Placement, ...]:
    return tuple(Placement(deployment=p.deployment, replica=p.replica, layout=p.layout) for p in plan.placements)


def test_first_starts_are_not_moves() -> None:
    fleet = Fleet(cluster=Cluster(workers=(worker("w", 16, 16),)), deployments=(model("a", 8, replicas=2),))
    plan = solve(fleet)
    assert {p.change for p in plan.placements} == {ReplicaChange.STARTED}
    assert not any(p.moved for p in plan.placements)
    assert {m.change for m in plan.moves} == {ReplicaChange.STARTED} and {m.action for m in plan.moves} == {"start"}
    assert plan.replicas(ReplicaChange.MOVED) == () and plan.stopped == ()
    assert plan.objective[2] == 0  # no replica had a placement, so none moved


def test_a_new_deployment_next_to_running_ones_moves_nothing() -> None:
    cluster = Cluster(workers=(worker("w", 16, 16),))
    first = solve(Fleet(cluster=cluster, deployments=(model("a", 8),)))
    fleet = Fleet(cluster=cluster, deployments=(model("a", 8), model("b", 8)), current=placements(first))
    plan = solve(fleet)
    assert plan.replicas(ReplicaChange.KEPT) == (ReplicaRef(deployment="a", replica=0),)
    assert plan.replicas(ReplicaChange.STARTED) == (ReplicaRef(deployment="b", replica=0),)
    assert [(m.action, m.deployment, m.change) for m in plan.moves] == [("start", "b", ReplicaChange.STARTED)]
    assert plan.objective[2] == 0


def test_replicas_of_a_lost_worker_are_moved_not_started() -> None:
    cluster = Cluster(workers=(worker("w1", 16), worker("w2", 16)))
    first = solve(Fleet(cluster=cluster, deployments=(model("a", 12), model("b", 12))))
    lost = first.placements[0].layout.main_worker
    survivors = Cluster(workers=(worker("w1" if lost == "w2" else "w2", 16, 16),))
    fleet = Fleet(cluster=survivors, deployments=(model("a", 12), model("b", 12)), current=placements(first))
    plan = solve(fleet)
    gone = next(p.deployment for p in first.placements if p.layout.main_worker == lost)
    changes = {p.deployment: p.change for p in plan.placements}
    assert changes[gone] is ReplicaChange.MOVED
    assert [m.change for m in plan.moves if m.deployment == gone] == [ReplicaChange.MOVED]


def test_scaled_down_replicas_are_stopped_and_counted() -> None:
    cluster = Cluster(workers=(worker("w", 16, 16),))
    first = solve(Fleet(cluster=cluster, deployments=(model("a", 8, replicas=2),)))
    fleet = Fleet(cluster=cluster, deployments=(model("a", 8, replicas=1),), current=placements(first))
    plan = solve(fleet)
    assert plan.stopped == (ReplicaRef(deployment="a", replica=1),)
    assert plan.replicas(ReplicaChange.KEPT) == (ReplicaRef(deployment="a", replica=0),)
    assert [(m.action, m.replica, m.change) for m in plan.moves] == [("stop", 1, ReplicaChange.STOPPED)]
    assert plan.objective[2] == 0  # a replica the deployment no longer has stops; that is no move
    replay(fleet, plan)


def test_a_swap_is_two_moves() -> None:
    # a (12) on GPU 0, b (4) on GPU 1 of sizes 8 and 16: after GPU 0 shrinks to 8, a must go to GPU 1,
    # and b, which fits either, may stay or move; the plan moves only a.
    first = solve(Fleet(cluster=Cluster(workers=(worker("w", 16, 8),)), deployments=(model("a", 12), model("b", 4))))
    shrunk = Cluster(workers=(worker("w", 8, 16),))
    plan = solve(Fleet(cluster=shrunk, deployments=(model("a", 12), model("b", 4)), current=placements(first)))
    moved = plan.replicas(ReplicaChange.MOVED)
    assert ReplicaRef(deployment="a", replica=0) in moved
    assert plan.objective[2] == -len(moved)
    assert all(m.change is ReplicaChange.MOVED for m in plan.moves)
