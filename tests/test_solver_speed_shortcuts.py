"""The speed search's shortcuts on clusters too large for brute force: with every shortcut (the
one-worker bound, dominance pruning with the hint's workers kept, the first search over the fastest
workers, the smaller tie-break) the proven optimum's time is the one the search finds without them,
and on a cluster where only two fast workers together beat every single worker, the first search
over the fastest workers finds them."""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW

from layerfit import heuristics
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, PlannerConfig, Status, Worker
from layerfit.domain.cluster import Network
from layerfit.domain.config import Objective
from layerfit.solver import SolveResult, solve
from layerfit.solver.search.speed_steps import FAST_WORKERS_SEED

FAST, SLOW_GPU = "NVIDIA GeForce RTX 4090", "Tesla T4"
LAN = Network(bandwidth_gbps=10, rtt_ms=0.2)


def _worker(name: str, gpu: str, count: int, free_gib: int) -> Worker:
    gpus = tuple(
        Gpu(index=i, name=gpu, total_vram_bytes=24 * GiB, allocatable_vram_bytes=free_gib * GiB) for i in range(count)
    )
    return Worker(
        id=name, name=name, total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB, gpus=gpus, network=LAN
    )


def _model(blocks: int, block_mib: int) -> Deployment:
    profile = MemoryProfile.uniform(blocks, block_mib * MiB, 8 * MiB, output_weight_bytes=300 * MiB)
    return Deployment(
        name="m",
        profile=profile,
        objective=Objective.SPEED,
        cpu_offloading=True,
        distributed_inference_across_workers=True,
    )


def test_two_fast_workers_found_among_many_slow_ones() -> None:
    # 28 workers with one T4 each that hold the model with much of it on their CPU, and two with an
    # RTX 4090 each that hold half of it: together the two are much faster than any one worker
    slow = [_worker(f"slow{i:02d}", SLOW_GPU, 1, 15) for i in range(28)]
    fast = [_worker(f"fast{i}", FAST, 1, 12) for i in range(2)]
    cluster = Cluster(workers=(*slow, *fast))
    deployment = _model(40, 450)  # 18 GiB of blocks
    config = PlannerConfig(objective=Objective.SPEED, time_limit_s=10.0, seed=1, alternatives=0)
    result = solve(cluster, deployment, deployment.profile, config)  # type: ignore[arg-type]
    assert result.status is Status.OPTIMAL and result.best is not None
    assert result.best.layout.workers == ("fast0", "fast1") or set(result.best.layout.workers) == {"fast0", "fast1"}
    assert FAST_WORKERS_SEED in str(result.stats.details.get("shortcuts"))


@st.composite
def _clusters(draw: st.DrawFn) -> Cluster:
    workers = []
    for i in range(draw(st.integers(25, 30))):
        gpu = draw(st.sampled_from([FAST, SLOW_GPU, "NVIDIA RTX A6000"]))
        workers.append(_worker(f"w{i:02d}", gpu, draw(st.integers(1, 2)), draw(st.sampled_from([4, 8, 12, 20]))))
    return Cluster(workers=tuple(workers))


def solved_both_ways(cluster: Cluster, deployment: Deployment) -> tuple[SolveResult, SolveResult]:
    """The deployment solved under ``objective: speed`` with the heuristic's hint, with every
    shortcut and with none."""
    profile = deployment.profile
    assert profile is not None
    config = PlannerConfig(objective=Objective.SPEED, time_limit_s=30.0, seed=1, alternatives=0)
    hint = heuristics.plan(cluster, deployment, config, profile).layout
    fast = solve(cluster, deployment, profile, config, hint=hint)
    plain = solve(cluster, deployment, profile, config, hint=hint, shortcuts=False)
    return fast, plain


def speed_tiers_of(result: SolveResult) -> tuple[int | None, int, int]:
    """The strict speed tiers of a result: decode time, workers, GPUs."""
    assert result.tiers is not None
    return result.tiers.decode_us, result.tiers.workers, result.tiers.gpus


@settings(SLOW, max_examples=6)
@given(cluster=_clusters(), blocks=st.integers(8, 24), block_mib=st.sampled_from([1200, 2000, 3000]))
def test_the_shortcuts_keep_the_fastest_time(cluster: Cluster, blocks: int, block_mib: int) -> None:
    fast, plain = solved_both_ways(cluster, _model(blocks, block_mib))
    if not (fast.strict_optimal and plain.strict_optimal):
        event("cut short")
        return  # one of them cut short: nothing proven to compare
    event(f"compared, {len(fast.best.layout.workers) if fast.best else 0} workers")
    assert speed_tiers_of(fast) == speed_tiers_of(plain)
