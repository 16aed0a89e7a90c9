"""A single solve reports progress tier by tier, in each tier's units (never in objective points)."""

from __future__ import annotations

import io
import re

import pytest

from layerfit.budget.progress import LineReporter, reporting
from layerfit.domain import Cluster, Deployment, Gpu, MemoryProfile, PlannerConfig, Policy, Worker
from layerfit.solver import solve
from layerfit.solver.model.progress import Tier, tiered_progress

TIERS = (
    Tier("layers on GPUs", "layers", 0, 100, True, 0, 20),
    Tier("workers", "workers", 0, 10, False, 1, 4),
    Tier("GPUs", "GPUs", 0, 1, False, 0, 9),
)
"""Weights and ranges only: 10 layers, 1 worker and 1 GPU weigh 100 * 10 - 10 * 1 - 1 = 989; the
tiers below the layers add between -(10 * 4 + 9) = -49 and -10."""


@pytest.mark.parametrize(
    ("values", "bound", "stage", "best", "tier_bound"),
    [
        ((8, 2, 3), 989, "layers on GPUs", 8, 10),  # (989 + 49) / 100: no plan has more than 10 layers
        ((8, 2, 3), 951, "layers on GPUs", 8, 10),  # 951 + 49 = 1000: 10 layers with 4 workers, 9 GPUs
        ((10, 2, 3), 989, "workers", 2, 1),  # layers settled; 1000 - 989 = 11 leaves room for 1 worker
        ((10, 1, 3), 989, "GPUs", 3, 1),  # workers settled; 11 - 10 leaves 1 GPU
        ((10, 1, 1), 989, "GPUs", 1, 1),  # proven
        ((10, 2, 2), 978, "GPUs", 2, 2),  # 1000 - 978 = 22: 2 workers and 2 GPUs are the best possible
    ],
)
def test_the_combined_bound_is_read_tier_by_tier(
    values: tuple[int, int, int], bound: float, stage: str, best: int, tier_bound: int
) -> None:
    progress = tiered_progress("cp-sat for m", TIERS, values, bound, 1.0)
    assert progress.stage == f"cp-sat for m: {stage}"
    assert (progress.best, progress.bound) == (best, tier_bound)
    assert progress.unit == {"layers on GPUs": "layers", "workers": "workers", "GPUs": "GPUs"}[stage]


def test_a_tier_bound_never_leaves_the_tier_s_range() -> None:
    progress = tiered_progress("s", TIERS, (3, 1, 1), 10**6, 1.0)
    assert (progress.best, progress.bound) == (3, 20)


def _worker(name: str, *vram: int) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(vram))
    return Worker(id=name, name=name, total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=gpus)


@pytest.mark.parametrize("policy", [Policy.BINPACK, Policy.SPREAD])
def test_a_solve_reports_in_layers_workers_gpus_and_tie_break_units(policy: Policy) -> None:
    profile = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)
    deployment = Deployment(name="m", profile=profile, distributed_inference_across_workers=True)
    cluster = Cluster(workers=(_worker("a", 700, 700), _worker("b", 800, 600), _worker("c", 900)))
    stream = io.StringIO()
    with reporting(LineReporter(stream)):
        # without shortcuts: the two-worker step runs CP-SAT (its greedy witness would prove it)
        config = PlannerConfig(time_limit_s=10.0, seed=1, policy=policy)
        result = solve(cluster, deployment, profile, config, shortcuts=False)
    assert result.best is not None
    lines = stream.getvalue().splitlines()
    assert lines, "a solve with a reporter installed reports something"
    assert all("objective points" not in line for line in lines)
    unit = r"(layers|workers|GPUs|units of [a-zA-Z ]+)"
    figures = rf"best -?\d+ {unit}, bound -?[0-9.]+ {unit}, gap "
    pattern = re.compile(rf"^\[ *[0-9.]+ s\] cp-sat for m[^,]*(, tie-break)?, {figures}")
    assert all(pattern.match(line) for line in lines), lines
    assert any(re.search(r"best \d+ (layers|workers|GPUs),", line) for line in lines)


def test_the_strict_solve_reports_each_tier_in_its_units() -> None:
    """The weighted strict solve (run when the per-worker-count search cannot settle a layout)."""
    from layerfit.budget.work import Work
    from layerfit.solver.model.build import build_model
    from layerfit.solver.model.instance import build_instance
    from layerfit.solver.model.objective import strict_tiers
    from layerfit.solver.model.progress import strict_measure
    from layerfit.solver.model.runner import run

    profile = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)
    deployment = Deployment(name="m", profile=profile, distributed_inference_across_workers=True)
    cluster = Cluster(workers=(_worker("a", 700, 700), _worker("b", 800, 600), _worker("c", 900)))
    config = PlannerConfig(time_limit_s=10.0, seed=1)
    built = build_model(build_instance(cluster, deployment, profile, config))
    tiers = strict_tiers(built.instance, built.variables)
    built.model.maximize(tiers.combined)
    stream = io.StringIO()
    with reporting(LineReporter(stream)):
        result = run(built, config, Work.of(10.0), strict_measure("cp-sat for m", built.instance, tiers))
    assert result.proven
    lines = stream.getvalue().splitlines()
    tier = r"(layers on GPUs|workers|GPUs), best \d+ (layers|workers|GPUs), "
    stages = re.compile(rf"^\[ *[0-9.]+ s\] cp-sat for m: {tier}")
    assert lines and all(stages.match(line) for line in lines), lines
    # the last report is the optimum's: its values are the solution's, tier by tier
    values = (tiers.layers, tiers.workers, tiers.gpus)
    best = {unit: result.value(tier) for unit, tier in zip(("layers", "workers", "GPUs"), values, strict=True)}
    reported = re.search(r"best (\d+) (layers|workers|GPUs)", lines[-1])
    assert reported is not None and int(reported.group(1)) == best[reported.group(2)]
    assert f"{best['layers']} layers proven" in lines[-1] or reported.group(2) == "layers"
