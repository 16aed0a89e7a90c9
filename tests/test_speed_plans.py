"""Every plan reports its speed, and it is ``speed.predict`` for its layout (one definition): the
planner's best and alternatives, ``evaluate``, the fleet's placements, the CLI's table and JSON,
``estimate --gpu`` and the GPUStack adapter's cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny
from test_gpustack import INSTANCES, WORKERS

from layerfit.cli import EXIT_BAD_INPUT, EXIT_PLACED, main
from layerfit.domain import Cluster, Deployment, DeviceAssignment, PlannerConfig
from layerfit.domain.fleet import Fleet
from layerfit.domain.params import LlamaParams
from layerfit.domain.plan import Plan
from layerfit.estimators import estimate_profile
from layerfit.estimators.report import estimate_report
from layerfit.estimators.shape import read_gguf
from layerfit.estimators.speed_report import WORKER, reference_cluster
from layerfit.fleet import plan_fleet
from layerfit.gpustack import cluster_from_gpustack
from layerfit.io.documents import load_file
from layerfit.memory import make_layout
from layerfit.planning.planner import evaluate, plan
from layerfit.planning.profiles import resolve_profile
from layerfit.planning.speed import deployment_settings
from layerfit.speed import SpeedSettings, predict
from layerfit.speed.deployment import deployment_speed

EXAMPLES = Path(__file__).parent.parent / "examples"
CONFIG = PlannerConfig(time_limit_s=5.0, alternatives=2)


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return load_file(Cluster, EXAMPLES / "cluster.yaml")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_the_best_layout_and_each_alternative_carry_their_prediction(tmp_path: Path, cluster: Cluster) -> None:
    # a small model fits on either RTX 4090 of gpu-a: the other is an equally good alternative
    deployment = Deployment(name="tiny", gguf_path=str(write_tiny(tmp_path)))
    result = plan(cluster, deployment, CONFIG)
    profile = resolve_profile(deployment)
    assert result.best is not None and result.alternatives
    for candidate in (result.best, *result.alternatives):
        assert candidate.speed == predict(profile, candidate.layout, cluster, deployment_settings(deployment, profile))


def test_a_gguf_deployments_speed_uses_its_header_facts_and_its_threads(tmp_path: Path, cluster: Cluster) -> None:
    path = write_tiny(tmp_path)
    deployment = Deployment(name="tiny", gguf_path=str(path), params=LlamaParams.from_args(["-c", "2048", "-t", "3"]))
    result = plan(cluster, deployment, CONFIG)
    assert result.best is not None and result.best.speed is not None
    profile = estimate_profile(path, deployment.params)
    expected = predict(profile, result.best.layout, cluster, SpeedSettings(threads=3, batch_threads=3, ctx=2048))
    assert result.best.speed == expected
    assert not any("given as numbers" in text for text in result.best.speed.assumptions)


def test_an_evaluated_layout_carries_its_prediction(cluster: Cluster) -> None:
    deployment = load_file(Deployment, EXAMPLES / "deployment.yaml")
    profile = resolve_profile(deployment)
    layout = make_layout("gpu-a", 80, [])  # everything on gpu-a's CPU
    result = evaluate(cluster, deployment, layout, CONFIG)
    assert result.best is not None and result.best.speed == deployment_speed(cluster, deployment, profile, layout)
    assert {term.where for term in result.best.speed.terms} == {"host gpu-a", "main process"}


def test_the_cli_table_names_the_speed_and_its_largest_terms(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--deployment", str(EXAMPLES / "deployment.yaml"))
    code, out = _run(capsys, *args)
    assert code == EXIT_PLACED
    line = next(line for line in out.splitlines() if line.startswith("  predicted: "))
    code, dumped = _run(capsys, *args, "--json")
    best = Plan.model_validate_json(dumped).best
    assert best is not None and best.speed is not None
    rate = f"~{best.speed.decode_tokens_per_s:,.0f} tokens/s decode (one sequence"
    assert rate in line and f"~{best.speed.prompt_tokens_per_s:,.0f} tokens/s prompt" in line
    assert all(term.where in line for term in best.speed.largest_terms())
    assert all(f"    assumed: {text}" in out for text in best.speed.assumptions)
    data = json.loads(dumped)
    assert {"decode_tokens_per_s", "prompt_tokens_per_s", "decode_ms_per_token", "terms", "assumptions"} <= set(
        data["best"]["speed"]
    )
    assert all(alternative["speed"]["terms"] for alternative in data["alternatives"])


def test_every_fleet_placement_has_its_speed_alone_and_busy() -> None:
    fleet = load_file(Fleet, EXAMPLES / "fleet.yaml")
    result = plan_fleet(fleet)
    deployments = {deployment.name: deployment for deployment in fleet.deployments}
    users: dict[tuple[str, int], int] = {}
    for placed in result.placements:
        for device in placed.layout.devices:
            users[(device.worker, device.gpu_index)] = users.get((device.worker, device.gpu_index), 0) + 1
    assert result.placements
    for placed in result.placements:
        deployment = deployments[placed.deployment]
        profile = resolve_profile(deployment)
        assert placed.speed == deployment_speed(fleet.cluster, deployment, profile, placed.layout)
        assert placed.speed is not None and placed.speed.runs_alone
        sharing = {(d.worker, d.gpu_index): users[(d.worker, d.gpu_index)] for d in placed.layout.devices}
        if max(sharing.values(), default=1) > 1:
            assert placed.busy_speed == deployment_speed(fleet.cluster, deployment, profile, placed.layout, sharing)
            assert placed.busy_speed is not None and not placed.busy_speed.runs_alone
            assert placed.busy_speed.decode_tokens_per_s < placed.speed.decode_tokens_per_s
        else:
            assert placed.busy_speed is None


def test_estimate_gpu_predicts_its_reference_layouts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_tiny(tmp_path)
    params = LlamaParams.from_args(["-ngl", "3"])
    report = estimate_report(read_gguf(str(path)), params, gpu_name="NVIDIA GeForce RTX 4090")
    assert report.speed is not None and report.speed.requested is not None
    assert reference_cluster("NVIDIA GeForce RTX 4090").worker(WORKER).gpus[0].type == "cuda"
    assert reference_cluster("Apple M2 Ultra").worker(WORKER).unified_memory
    assert report.speed.full_offload.terms[0].where == "gpu:cuda:0 (NVIDIA GeForce RTX 4090)"
    assert {term.where for term in report.speed.cpu_only.terms} == {"host gpu", "main process"}
    assert report.speed.full_offload.decode_tokens_per_s > report.speed.requested.decode_tokens_per_s
    assert report.speed.requested.decode_tokens_per_s > report.speed.cpu_only.decode_tokens_per_s
    code, out = _run(capsys, "estimate", str(path), "-ngl", "3", "--gpu", "NVIDIA GeForce RTX 4090")
    assert code == EXIT_PLACED and "predicted speed on one NVIDIA GeForce RTX 4090" in out and "-ngl 3" in out
    code, out = _run(capsys, "estimate", str(path), "--gpu", "Mystery GPU", "--json")
    speed = json.loads(out)["speed"]
    assert any("'Mystery GPU') is not in the GPU table" in text for text in speed["full_offload"]["assumptions"])


@pytest.mark.parametrize("name", ["", "bad\nname", "x" * 201])
def test_estimate_refuses_a_gpu_name_that_is_no_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code = main(["estimate", str(write_tiny(tmp_path)), "--gpu", name])
    assert code == EXIT_BAD_INPUT and "--gpu" in capsys.readouterr().err


def test_the_gpustack_adapter_passes_the_gpu_names_on() -> None:
    gpustack = cluster_from_gpustack(WORKERS, INSTANCES)
    assert [gpu.name for gpu in gpustack.worker("gpustack-a").gpus] == ["NVIDIA GeForce RTX 4090"] * 2
    profile = resolve_profile(load_file(Deployment, EXAMPLES / "deployment.yaml"))
    small = profile.model_copy(update={"block_weight_bytes": (10**8,) * 80})
    layout = make_layout("gpustack-a", 80, [DeviceAssignment(worker="gpustack-a", gpu_index=0, blocks=80)])
    speed = predict(small, layout, gpustack)
    assert speed.terms[0].where == "gpustack-a:cuda:0 (NVIDIA GeForce RTX 4090)"
    assert "(ada)" in speed.terms[0].why and not any("GPU table" in text for text in speed.assumptions)


def test_the_fleet_table_names_each_replicas_speed(capsys: pytest.CaptureFixture[str]) -> None:
    fleet = str(EXAMPLES / "fleet.yaml")
    json_code, dumped = _run(capsys, "replan", fleet, "--time-limit", "3", "--json")
    text_code, out = _run(capsys, "replan", fleet, "--time-limit", "3")
    assert json_code == text_code == EXIT_PLACED
    for placed in json.loads(dumped)["placements"]:
        line = next(
            line for line in out.splitlines() if line.startswith(f"    {placed['deployment']}#{placed['replica']}:")
        )
        rate = placed["speed"]["decode_tokens_per_s"]
        assert (f"~{rate:,.0f} tokens/s alone" if rate >= 10 else f"~{rate:.1f} tokens/s alone") in line
        assert ("with its GPUs' other replicas busy" in line) == (placed["busy_speed"] is not None)
