"""A fleet with bad input: each problem is reported with a reason and the rest is planned."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.check import capacity_reasons
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    Layout,
    MemoryProfile,
    PlannerConfig,
    Worker,
)
from layerfit.domain.cluster import GpuRef
from layerfit.domain.fleet import (
    Executor,
    Fleet,
    FleetConfig,
    FleetPlan,
    Placement,
    ReplicaChange,
    ReplicaRef,
)
from layerfit.domain.plan import ReasonKind
from layerfit.fleet import plan_fleet
from layerfit.io.documents import load_file
from layerfit.memory import claims as compute_claims

EXAMPLE = Path(__file__).parent.parent / "examples" / "fleet.yaml"
SERIAL = FleetConfig(executor=Executor.SERIAL)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_file(Fleet, EXAMPLE)


def _plan(fleet: Fleet) -> FleetPlan:
    return plan_fleet(fleet, SERIAL, PlannerConfig(time_limit_s=2.0))


def _pinned_mistral(fleet: Fleet) -> Placement:
    return next(p for p in fleet.current if p.deployment == "mistral-7b")


def _with_current(fleet: Fleet, old: Placement, new: Placement) -> Fleet:
    return fleet.model_copy(update={"current": tuple(new if p is old else p for p in fleet.current)})


def _placed(plan: FleetPlan) -> set[tuple[str, int]]:
    return {(p.deployment, p.replica) for p in plan.placements}


def _all_replicas(fleet: Fleet) -> set[tuple[str, int]]:
    return {(d.name, r) for d in fleet.deployments for r in range(d.replicas)}


def test_a_current_placement_on_a_missing_gpu_is_reported(fleet: Fleet) -> None:
    # qwen-30b replica 0 runs on gpu-c:1, which the cluster no longer has: it moves, and says why.
    plan = _plan(fleet)
    missing = [r for r in plan.reasons if r.kind is ReasonKind.UNKNOWN_GPU]
    assert len(missing) == 1 and "qwen-30b replica 0" in missing[0].message
    assert _placed(plan) == _all_replicas(fleet)


def test_a_current_placement_on_a_missing_worker_is_reported(fleet: Fleet) -> None:
    old = _pinned_mistral(fleet)
    gone = old.layout.model_copy(
        update={
            "main_worker": "gone",
            "devices": tuple(d.model_copy(update={"worker": "gone"}) for d in old.layout.devices),
        }
    )
    plan = _plan(_with_current(fleet, old, old.model_copy(update={"pinned": False, "layout": gone})))
    assert any(r.kind is ReasonKind.UNKNOWN_WORKER and "mistral-7b replica 0" in r.message for r in plan.reasons)
    assert _placed(plan) == _all_replicas(fleet)


def test_a_placement_with_the_wrong_block_count_is_reported_and_the_fleet_planned(fleet: Fleet) -> None:
    old = _pinned_mistral(fleet)
    wrong = old.model_copy(update={"layout": old.layout.model_copy(update={"n_blocks": 31})})
    plan = _plan(_with_current(fleet, old, wrong))  # raised InputError before
    assert any(r.kind is ReasonKind.BLOCK_COUNT_MISMATCH and "mistral-7b" in r.message for r in plan.reasons)
    assert _placed(plan) == _all_replicas(fleet)


def test_a_selection_naming_a_removed_worker_leaves_out_that_deployment_only(fleet: Fleet) -> None:
    deployments = tuple(
        d.model_copy(update={"gpu_selection": (GpuRef.parse("gone:cuda:0"),)}) if d.name == "embedder" else d
        for d in fleet.deployments
    )
    plan = _plan(fleet.model_copy(update={"deployments": deployments}))  # raised InputError before
    assert _placed(plan) == _all_replicas(fleet) - {("embedder", 0)}
    (unplaced,) = plan.unplaced
    assert unplaced.deployment == "embedder" and unplaced.reasons[0].kind is ReasonKind.UNKNOWN_WORKER
    assert "gone:cuda:0" in unplaced.reasons[0].message


def test_two_pins_that_overflow_a_gpu_together_keep_the_first(fleet: Fleet) -> None:
    # Each mistral-7b replica fits gpu-b:0 alone (about 5.8 GiB of 9 GiB), both do not.
    workers = tuple(
        w.model_copy(
            update={
                "gpus": tuple(
                    g.model_copy(update={"allocatable_vram_bytes": 9 * GiB}) if g.index == 0 else g for g in w.gpus
                )
            }
        )
        if w.name == "gpu-b"
        else w
        for w in fleet.cluster.workers
    )
    second = _pinned_mistral(fleet).model_copy(update={"replica": 1})
    squeezed = fleet.model_copy(
        update={"cluster": fleet.cluster.model_copy(update={"workers": workers}), "current": (*fleet.current, second)}
    )
    plan = _plan(squeezed)  # SolverError ("pinned replicas cannot all fit together") before
    broken = [r for r in plan.reasons if r.kind is ReasonKind.PIN_BROKEN]
    assert len(broken) == 1 and "replica 1 of mistral-7b" in broken[0].message
    kept = next(p for p in plan.placements if (p.deployment, p.replica) == ("mistral-7b", 0))
    assert kept.layout == _pinned_mistral(fleet).layout
    assert _placed(plan) == _all_replicas(fleet)


def _one_gpu_fleet(old: Deployment, current: Layout) -> Fleet:
    """One 24 GiB GPU: a replica of ``old`` runs on it, and a 16 GiB deployment wants it."""
    gpu = Gpu(index=0, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB)
    worker = Worker(id=0, name="w0", total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB, gpus=(gpu,))
    new = Deployment(name="new", profile=MemoryProfile.uniform(16, GiB, 0))
    return Fleet(
        cluster=Cluster(workers=(worker,)),
        deployments=(old, new),
        current=(Placement(deployment="old", layout=current),),
    )


def _full_offload(n_blocks: int) -> Layout:
    return Layout(
        main_worker="w0", n_blocks=n_blocks, devices=(DeviceAssignment(worker="w0", gpu_index=0, blocks=n_blocks),)
    )


def test_replicas_of_a_left_out_deployment_keep_their_memory() -> None:
    # Its selection names a worker that is gone: it cannot be planned, but its replica still runs on
    # w0:0 (16 GiB of 24). Before, its memory was ignored and "new" was planned on top of it.
    profile = MemoryProfile.uniform(16, GiB, 0)
    old = Deployment(name="old", profile=profile, gpu_selection=(GpuRef.parse("gone:cuda:0"),))
    fleet = _one_gpu_fleet(old, _full_offload(16))
    plan = _plan(fleet)
    running = compute_claims(profile, _full_offload(16), ())
    assert not capacity_reasons(fleet.cluster, running, *(p.claims for p in plan.placements))
    assert [(u.deployment, u.reasons[0].kind) for u in plan.unplaced] == [("old", ReasonKind.UNKNOWN_WORKER)]
    (placed,) = plan.placements
    assert placed.deployment == "new" and placed.layout.gpu_layers < 16  # partly on the host: 8 GiB are left
    assert any("old replica 0" in r.message and "keeps running" in r.message for r in plan.reasons)
    assert [(m.action, m.deployment) for m in plan.moves] == [("start", "new")] and not plan.stopped


def test_a_left_out_replica_of_unknown_memory_is_stopped_first() -> None:
    # No profile can be estimated (the GGUF file is missing): its memory is not known, so it stops
    # before anything starts. Before, it kept running silently, uncounted, under "new".
    old = Deployment(name="old", gguf_path="/nonexistent/model.gguf")
    plan = _plan(_one_gpu_fleet(old, _full_offload(16)))
    assert plan.stopped == (ReplicaRef(deployment="old", replica=0),)
    assert [(m.action, m.deployment, m.change) for m in plan.moves] == [
        ("stop", "old", ReplicaChange.STOPPED),
        ("start", "new", ReplicaChange.STARTED),
    ]
    assert any("old replica 0" in r.message and "memory is not known" in r.message for r in plan.reasons)


def test_a_placement_of_unknown_memory_is_stopped_before_its_replica_starts_again(fleet: Fleet) -> None:
    old = _pinned_mistral(fleet)
    wrong = old.model_copy(update={"layout": old.layout.model_copy(update={"n_blocks": 31})})
    plan = _plan(_with_current(fleet, old, wrong))
    mistral = [(m.step, m.action, m.change) for m in plan.moves if (m.deployment, m.replica) == ("mistral-7b", 0)]
    assert mistral[0] == (0, "stop", ReplicaChange.MOVED) and mistral[1][1:] == ("start", ReplicaChange.MOVED)
    assert next(p for p in plan.placements if p.deployment == "mistral-7b" and p.replica == 0).moved
    assert [m.step for m in plan.moves] == list(range(len(plan.moves)))
