"""What keeps plan_fleet within its time limit on large fleets: the fast paths give what the
straightforward ones gave, and the stages that may run long consult the deadline."""

from __future__ import annotations

import random
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerfit.check import capacity_reasons
from layerfit.domain import Cluster, Deployment, DeviceAssignment, GiB, Gpu, Layout, LlamaParams, MemoryProfile, Worker
from layerfit.domain.fleet import Move, ReplicaChange
from layerfit.domain.layout import Claims
from layerfit.errors import SolverError
from layerfit.fleet import order_moves, pricing_bound
from layerfit.fleet.moves import gpu_names
from layerfit.fleet.pricing import Prices
from layerfit.fleet.pricing_bound import relaxed_bound
from layerfit.memory import claims, make_layout

Replica = tuple[str, int, Layout, Claims]


def _cluster(rng: random.Random, workers: int) -> Cluster:
    return Cluster(
        workers=tuple(
            Worker(
                id=w,
                name=f"w{w}",
                total_ram_bytes=64 * GiB,
                allocatable_ram_bytes=rng.choice([8, 16, 64]) * GiB,
                unified_memory=rng.random() < 0.2,
                gpus=tuple(
                    Gpu(index=g, total_vram_bytes=24 * GiB, allocatable_vram_bytes=rng.choice([8, 12, 24]) * GiB)
                    for g in range(rng.choice([1, 2, 3]))
                ),
            )
            for w in range(workers)
        )
    )


def _replica(rng: random.Random, cluster: Cluster, name: str, replica: int, gib: int) -> Replica:
    worker = rng.choice(cluster.workers)
    gpu = rng.choice(worker.gpus)
    profile = MemoryProfile.uniform(4, gib * GiB // 4, 0)
    layout = make_layout(worker.name, 4, [DeviceAssignment(worker=worker.name, gpu_index=gpu.index, blocks=4)])
    return name, replica, layout, claims(profile, layout, cluster.unified_names)


def _reference(cluster: Cluster, current: list[Replica], target: list[Replica]) -> tuple[Move, ...]:
    """The ordering as it was written first: every start tried in order against every running replica."""
    running = {(d, r): c for d, r, _, c in current}
    layout_of = {(d, r): lay for d, r, lay, _ in current}
    wanted = {(d, r): (lay, c) for d, r, lay, c in target}
    placed_before = set(running)

    def changes(key: tuple[str, int]) -> bool:
        return key not in wanted or wanted[key][0] != layout_of.get(key)

    stops = [key for key in running if changes(key)]
    starts = [key for key in wanted if key not in running or changes(key)]
    moves: list[Move] = []
    first: set[tuple[str, int]] = set()

    def record(action: Literal["stop", "start"], key: tuple[str, int], layout: Layout) -> None:
        stopping = action == "stop"
        change = ReplicaChange.MOVED if (key in wanted if stopping else key in placed_before) else ReplicaChange.STARTED
        change = ReplicaChange.STOPPED if stopping and key not in wanted else change
        moves.append(
            Move(
                step=len(moves),
                action=action,
                deployment=key[0],
                replica=key[1],
                worker=layout.main_worker,
                gpus=gpu_names(cluster, layout),
                change=change,
                downtime=not stopping and key in first,
            )
        )

    def stop(key: tuple[str, int]) -> None:
        record("stop", key, layout_of[key])
        del running[key]
        stops.remove(key)

    while starts:
        ready = next((k for k in starts if not capacity_reasons(cluster, *running.values(), wanted[k][1])), None)
        if ready is None:
            blocker = next((k for k in starts if k in stops), None) or (stops[0] if stops else None)
            if blocker is None:
                raise SolverError("does not fit")
            stop(blocker)
            first.add(blocker)
            continue
        record("start", ready, wanted[ready][0])
        starts.remove(ready)
        if ready in stops:
            stop(ready)
        running[ready] = wanted[ready][1]
    for key in list(stops):
        stop(key)
    return tuple(moves)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_moves_are_ordered_as_by_trying_every_start_in_turn(seed: int) -> None:
    rng = random.Random(seed)
    cluster = _cluster(rng, rng.randint(1, 4))
    sizes = {f"d{i}": rng.choice([2, 4, 6, 10]) for i in range(4)}
    current = [_replica(rng, cluster, name, r, gib) for name, gib in sizes.items() for r in range(rng.randint(0, 3))]
    target: list[Replica] = []
    for name, gib in sizes.items():  # a target that fits: replicas kept or placed where they fit
        for r in range(rng.randint(0, 3)):
            kept = [c for c in current if c[:2] == (name, r)]
            option = kept[0] if kept and rng.random() < 0.5 else _replica(rng, cluster, name, r, gib)
            if not capacity_reasons(cluster, *(t[3] for t in target), option[3]):
                target.append(option)
    try:
        expected = _reference(cluster, current, target)
    except SolverError:
        with pytest.raises(SolverError):
            order_moves(cluster, current, target)
        return
    assert order_moves(cluster, current, target) == expected


def _priced(rng: random.Random, workers: int) -> tuple[Cluster, Deployment, Prices]:
    cluster = _cluster(rng, workers)
    profile = MemoryProfile.uniform(rng.choice([2, 4, 8]), rng.choice([1, 2, 3]) * GiB, 64 * 2**20)
    deployment = Deployment(
        name="d",
        profile=profile,
        cpu_offloading=rng.random() < 0.5,
        distributed_inference_across_workers=workers > 6,
        params=LlamaParams(n_gpu_layers=rng.choice([None, 1, 3, 9])),
    )
    gpus = [(w.name, g.index) for w in cluster.workers for g in w.gpus]
    prices = Prices(
        gpu={gpu: rng.choice([0.0, 0.0, 1e-4, 1e-3]) for gpu in gpus},
        layer_value=rng.choice([0.0, 1.0, 3.0]),
        gpu_open={gpu: rng.choice([0.0, 0.0, 0.5]) for gpu in gpus},
        worker_open={w.name: rng.choice([0.0, 0.0, 0.5, 2.0]) for w in cluster.workers},
    )
    return cluster, deployment, prices


def _rules(deployment: Deployment) -> tuple[int | None, bool, tuple[bool, ...]]:
    """``relaxed_bound``'s target layers, full offload and offload states."""
    profile = deployment.profile
    assert profile is not None
    target = None if deployment.params.n_gpu_layers is None else min(deployment.params.n_gpu_layers, profile.n_layers)
    full = not deployment.cpu_offloading
    return target, full, (False,) if full or target == profile.n_layers else (False, True)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_pricing_relaxation_passes_over_only_workers_that_cannot_be_best(seed: int) -> None:
    rng = random.Random(seed)
    cluster, deployment, prices = _priced(rng, rng.randint(1, 6))
    profile = deployment.profile
    assert profile is not None
    target, full, partial = _rules(deployment)
    values = [
        pricing_bound._best(pricing_bound._gpus(worker, profile, prices, partial), profile, prices, target, full)
        - prices.worker_open.get(worker.name, 0.0)
        for worker in cluster.workers
    ]
    ceilings = pricing_bound.worker_ceilings(cluster, profile, prices, partial, target, full)
    assert all(ceiling >= value - 1e-9 for ceiling, value in zip(ceilings, values, strict=True))
    # the same value as the best of every worker looked at in turn
    assert relaxed_bound(cluster, deployment, profile, prices) == max(values)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_relaxation_over_many_gpus_from_arrays_is_the_one_gpu_by_gpu(seed: int) -> None:
    rng = random.Random(seed)
    cluster, deployment, prices = _priced(rng, 40)  # distributed; past EXACT_GPUS usable GPUs or not
    profile = deployment.profile
    assert profile is not None
    target, full, partial = _rules(deployment)
    gpus = [gpu for worker in cluster.workers for gpu in pricing_bound._gpus(worker, profile, prices, partial)]
    opened = min(prices.worker_open.get(w.name, 0.0) for w in cluster.workers)
    expected = pricing_bound._best(gpus, profile, prices, target, full) - opened
    assert relaxed_bound(cluster, deployment, profile, prices) == pytest.approx(expected, rel=1e-12, abs=1e-9)
