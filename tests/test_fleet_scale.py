"""The fleet's CP-SAT models at realistic sizes (10**10..10**12 bytes): exact in bytes, and every
number in them under ``solver.scale.MAX_SCALED`` (CP-SAT 9.15's presolve proved feasible models
infeasible with sizes of ~2**33).

The master counted sizes in MiB, claims rounded up and capacities down: a plan that fits by less
than a MiB per replica was left out, and the plan still said it was optimal."""

from __future__ import annotations

import random
from typing import Any

import pytest
from ortools.sat.python import cp_model

from layerfit.check import capacity_reasons
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Status,
    Worker,
)
from layerfit.domain.fleet import Executor, Fleet, FleetConfig
from layerfit.fleet import plan_fleet
from layerfit.fleet.prices import Prices, claim_value
from layerfit.fleet.pricing import price, priced_model
from layerfit.memory import claims, make_layout
from layerfit.solver.model.scale import MAX_SCALED, RADIX, add_at_most, largest_number

CONFIG = FleetConfig(time_limit_s=30.0, executor=Executor.SERIAL, num_search_workers=1)
PLANNER = PlannerConfig(time_limit_s=5.0)


def model_profile(blocks: int, block_bytes: int) -> MemoryProfile:
    """A dense model with sizes that share no large factor (as estimates from a GGUF file do)."""
    return MemoryProfile.uniform(
        blocks,
        block_bytes,
        block_bytes // 37,
        output_weight_bytes=1_234_567_891,
        gpu_fixed_bytes=987_654_321,
        host_fixed_bytes=555_555_557,
    )


def worker(name: str, gpu_bytes: list[int], ram_bytes: int = 2_000_000_000_033) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(gpu_bytes))
    return Worker(id=name, name=name, total_ram_bytes=ram_bytes, allocatable_ram_bytes=ram_bytes, gpus=gpus)


def one_gpu_claim(profile: MemoryProfile) -> int:
    """VRAM a full offload on one GPU claims, in bytes."""
    layout = make_layout("w0", profile.n_blocks, [DeviceAssignment(worker="w0", gpu_index=0, blocks=profile.n_blocks)])
    return claims(profile, layout, ()).devices[0].total_bytes


def test_a_plan_that_fits_by_a_few_bytes_is_found() -> None:
    # Two replicas of a ~40 GB model fill an ~80 GB GPU to 5 bytes; two such GPUs take all four.
    # In MiB each claim rounded up by 0.59 MiB and the two no longer fitted: 2 of 4 placed, "optimal"
    profile = model_profile(80, 456_789_013)
    claim = one_gpu_claim(profile)
    assert 3 * 10**10 < claim < 5 * 10**10 and claim % MiB
    cluster = Cluster(workers=tuple(worker(f"w{i}", [2 * claim + 5]) for i in range(2)))
    fleet = Fleet(cluster=cluster, deployments=(Deployment(name="a", profile=profile, replicas=4),))
    plan = plan_fleet(fleet, CONFIG, PLANNER)
    assert plan.status is Status.OPTIMAL and len(plan.placements) == 4 and not plan.unplaced
    assert capacity_reasons(cluster, *(p.claims for p in plan.placements)) == ()


def large_fleet() -> Fleet:
    """Six workers of two ~80 GB GPUs (odd byte counts) and ~2 TB of RAM; models of 10**10 to
    1.9 * 10**11 bytes, one of them larger than any worker (distributed), two priorities."""
    rng = random.Random(7)
    workers = tuple(worker(f"w{i}", [80 * 10**9 - rng.randrange(10**9) for _ in range(2)]) for i in range(6))
    sizes = [(40, 300_000_007, 3), (60, 611_111_119, 2), (80, 456_789_013, 3), (32, 1_000_000_007, 1)]
    deployments = [
        Deployment(name=f"d{i}", profile=model_profile(blocks, size), replicas=replicas, priority=i % 2)
        for i, (blocks, size, replicas) in enumerate(sizes)
    ]
    big = model_profile(96, 1_900_000_009)  # ~1.9e11 bytes: more than one worker's two GPUs
    deployments.append(Deployment(name="big", profile=big, distributed_inference_across_workers=True))
    return Fleet(cluster=Cluster(workers=workers), deployments=tuple(deployments))


def test_every_cp_sat_model_of_a_large_fleet_stays_in_range(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []
    real = cp_model.CpSolver.solve

    def spy(self: cp_model.CpSolver, model: cp_model.CpModel, *args: Any, **options: Any) -> Any:
        names = {var.name.split("_")[0] for var in model.proto.variables}
        kind = "master" if "x" in names else "group" if "y" in names else "priced" if "priced" in names else "other"
        seen.append((kind, largest_number(model)))
        return real(self, model, *args, **options)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    plan = plan_fleet(large_fleet(), CONFIG, PLANNER)
    assert len(plan.placements) == 10 and not plan.unplaced
    assert any(p.deployment == "big" and len(p.layout.workers) > 1 for p in plan.placements)
    assert {"master", "group", "priced", "other"} <= {kind for kind, _ in seen}  # tiers, groups, pricing, planner
    assert max(largest for _, largest in seen) <= MAX_SCALED, sorted(seen, key=lambda s: -s[1])[:3]


def test_pricing_rows_stay_in_range_when_the_unit_is_two_gib() -> None:
    # Every size a multiple of 2 GiB makes the pricing model's unit 2 GiB, and its MiB rows carried
    # that unit as a coefficient (2**31); the row is now divided by the unit's and MiB's common factor
    profile = MemoryProfile.uniform(8, 4 * GiB, 2 * GiB, output_weight_bytes=2 * GiB)
    cluster = Cluster(workers=(worker("w0", [32 * GiB, 32 * GiB], 128 * GiB), worker("w1", [64 * GiB], 128 * GiB)))
    deployment = Deployment(name="x", profile=profile, distributed_inference_across_workers=True)
    prices = Prices(gpu={("w0", 0): 0.01, ("w1", 0): 0.02}, worker={"w0": 0.001, "w1": 0.002}, layer_value=1.0)
    built, _ = priced_model(cluster, deployment, profile, PLANNER, prices)
    assert built.instance.scale.unit_bytes == 2 * GiB
    assert largest_number(built.model) <= MAX_SCALED
    found = price(cluster, deployment, profile, PLANNER, prices, 1.0)
    assert found.proven and found.complete and found.layouts
    layout, needed = found.layouts[0]
    assert claim_value(cluster, prices, layout, needed) == pytest.approx(found.bound, abs=1e-3)  # its best, in bytes


def test_a_capacity_row_split_in_two_is_exact_in_bytes() -> None:
    rng = random.Random(3)
    for _ in range(200):
        sizes = [rng.randrange(1, 10**11) for _ in range(rng.randrange(1, 5))]
        counts = [rng.randrange(0, 4) for _ in sizes]
        total = sum(s * n for s, n in zip(sizes, counts, strict=True))
        capacity = total + rng.choice([-RADIX, -1, 0, 1, RADIX // 2, -(total % RADIX)])
        model = cp_model.CpModel()
        xs = [model.new_int_var(n, n, f"x{i}") for i, n in enumerate(counts)]
        add_at_most(model, [(s, x, 3) for s, x in zip(sizes, xs, strict=True)], capacity, "row")
        assert largest_number(model) <= MAX_SCALED
        status = cp_model.CpSolver().solve(model)
        assert (status == cp_model.OPTIMAL) is (total <= capacity), (sizes, counts, capacity)
