"""plan(): the full chain on the bundled examples, and explanations that really make things fit."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.check import check
from layerfit.domain import Cluster, Deployment, Gpu, PlannerConfig, Status, StrategyClass
from layerfit.io.documents import load_file
from layerfit.planning.planner import plan
from layerfit.planning.profiles import resolve_profile

EXAMPLES = Path(__file__).parent.parent / "examples"
CONFIG = PlannerConfig(time_limit_s=5.0)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return load_file(Cluster, EXAMPLES / "cluster.yaml")


def test_example_is_placed_optimally_and_passes_check(cluster: Cluster) -> None:
    deployment = load_file(Deployment, EXAMPLES / "deployment.yaml")
    result = plan(cluster, deployment, CONFIG)
    assert result.status is Status.OPTIMAL and result.best is not None
    # about 42 GiB fits on gpu-a's two 22 GiB GPUs: one worker beats distribution
    assert result.strategy is StrategyClass.MULTI_GPU and result.best.layout.full_offload
    assert check(cluster, deployment, result, resolve_profile(deployment), CONFIG) == ()
    assert result.commands[-1].program == "llama-server" and "--fit" in result.commands[-1].argv
    assert [s.engine for s in result.stats] == ["heuristic", "cp-sat"]


def test_too_big_explains_each_way_out_and_each_way_works(cluster: Cluster) -> None:
    deployment = load_file(Deployment, EXAMPLES / "too-big.yaml")
    result = plan(cluster, deployment, CONFIG)
    assert result.status is Status.INFEASIBLE and result.best is None and result.messages
    by_kind = {r.kind: r for r in result.relaxations}
    assert set(by_kind) == {"allow_cpu_offloading", "allow_distribution", "ctx_size", "more_hardware"}
    fixed = {
        "allow_cpu_offloading": deployment.model_copy(update={"cpu_offloading": True}),
        "allow_distribution": deployment.model_copy(update={"distributed_inference_across_workers": True}),
    }
    for kind, relaxed in fixed.items():
        again = plan(cluster, relaxed, CONFIG, explain=False)
        assert again.best is not None and again.best.layout.gpu_layers == by_kind[kind].gpu_layers
    # the suggested ctx fits, and one step (256) more does not
    from layerfit.planning.planner import profile_at_ctx

    ctx = by_kind["ctx_size"].value
    assert ctx is not None
    for size, fits in ((ctx, True), (ctx + 256, False)):
        params = deployment.params.model_copy(update={"ctx_size": size})
        smaller = deployment.model_copy(update={"params": params, "profile": profile_at_ctx(deployment, size)})
        assert (plan(cluster, smaller, CONFIG, explain=False).best is not None) is fits
    # GPUs with the memory named, in place of gpu-a's, hold it (its 24 GiB ones cannot)
    lacking = by_kind["more_hardware"]
    assert lacking.worker == "gpu-a" and all(need.needed_bytes > need.total_bytes for need in lacking.memory)
    sizes = {need.gpu_index: need.needed_bytes for need in lacking.memory}

    def grown_gpu(gpu: Gpu) -> Gpu:
        size = sizes[gpu.index]
        return gpu.model_copy(update={"total_vram_bytes": size, "allocatable_vram_bytes": size})

    workers = tuple(
        w.model_copy(update={"gpus": tuple(grown_gpu(g) for g in w.gpus)}) if w.name == lacking.worker else w
        for w in cluster.workers
    )
    assert plan(cluster.model_copy(update={"workers": workers}), deployment, CONFIG, explain=False).best is not None
