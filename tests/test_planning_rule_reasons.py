"""Rules no layout can keep, said before a search: experts the user's tensor overrides keep in host
RAM while CPU offloading is off (the engines plan over a stand-in profile without those experts, so
they would return a layout that breaks the rule)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.cli import EXIT_NO_FIT, main
from layerfit.domain import Cluster, Deployment, GiB, Gpu, MemoryProfile, MiB, PlannerConfig, RoleCosts, Status, Worker
from layerfit.domain.base import spans
from layerfit.domain.plan import ReasonKind
from layerfit.planning.planner import plan
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

CLUSTER = Cluster(
    workers=(
        Worker(
            id=1,
            name="a",
            total_ram_bytes=64 * GiB,
            allocatable_ram_bytes=64 * GiB,
            gpus=(Gpu(index=0, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB),),
        ),
    )
)


def test_spans_writes_runs_of_blocks() -> None:
    assert spans((3, 4, 41, 42, 43, 47)) == "3-4, 41-43, 47"
    assert spans((5,)) == "5"


def test_fixed_host_experts_without_cpu_offloading_place_nothing_and_say_why() -> None:
    profile = MemoryProfile(
        block_weight_bytes=(110 * MiB,) * 4,
        block_kv_bytes=(0,) * 4,
        block_expert_bytes=(100 * MiB,) * 4,
        output_weight_bytes=5 * MiB,
        main=RoleCosts(),
        local=RoleCosts(),
        rpc=RoleCosts(),
        fixed_host_experts=(1, 2),
    )
    deployment = Deployment(name="m", profile=profile, cpu_offloading=False)
    result = plan(CLUSTER, deployment, PlannerConfig(time_limit_s=5))  # raised SolverError before
    assert result.status is Status.INFEASIBLE and result.layout is None
    first = result.reasons[0]
    assert first.kind is ReasonKind.CPU_OFFLOAD_NOT_ALLOWED and first.resource == "cpu_offloading"
    assert "experts of 2 blocks (1-2) stay in host RAM" in first.message
    assert [r.kind for r in result.relaxations] == ["allow_cpu_offloading"]
    allowed = plan(CLUSTER, deployment.model_copy(update={"cpu_offloading": True}), PlannerConfig(time_limit_s=5))
    assert allowed.layout is not None and allowed.layout.host_expert_blocks == (1, 2)


def test_n_cpu_moe_without_cpu_offloading_exits_one_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "qwen3-30b-a3b.gguf"
    write_gguf(model, REAL_MODELS["qwen3-30b-a3b"])
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "workers:\n  - {id: 1, name: a, total_ram_bytes: 64 GiB, allocatable_ram_bytes: 64 GiB,\n"
        "     gpus: [{index: 0, total_vram_bytes: 24 GiB, allocatable_vram_bytes: 24 GiB}]}\n"
    )
    args = ["plan", "--cluster", str(cluster), "--no-cpu-offloading", "--model", str(model), "-c", "4096"]
    code = main([*args, "--n-cpu-moe", "8"])
    out = capsys.readouterr().out
    assert code == EXIT_NO_FIT
    assert "experts of 8 blocks (0-7) stay in host RAM" in out and "cpu_offloading is false" in out
