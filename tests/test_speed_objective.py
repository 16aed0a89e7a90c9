"""``objective: speed`` end to end: the field and its bad values, the planner, the heuristic, the
CLI, the GPUStack adapter, and ``min_decode_tokens_per_s`` as a rule.

The example pair (``examples/speed-cluster.yaml``, ``speed-deployment.yaml``): the 70B model
reads about 38.8 GB a token; on ws-big's RTX A6000 (768 GB/s x 0.916, ampere) that is ~60 ms, on
ws-fast's two RTX 4090 (1008 GB/s x 1.0, ada) ~42 ms with a synchronisation more; GPUStack's
order takes the single GPU, the speed objective the two.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit import heuristics
from layerfit.check import check_layout
from layerfit.cli import main
from layerfit.cli.common import EXIT_BAD_INPUT, EXIT_NO_FIT, EXIT_PLACED
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    GiB,
    Gpu,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Status,
    Worker,
)
from layerfit.domain.config import Objective
from layerfit.domain.plan import ReasonKind
from layerfit.errors import InputError
from layerfit.gpustack import deployment_from_gpustack
from layerfit.heuristics.moe import stand_in as moe_stand_in
from layerfit.io.documents import load_file, load_model
from layerfit.memory.experts import profile_with_host_experts
from layerfit.planning.planner import plan
from layerfit.speed import predict
from layerfit.speed.deployment import deployment_speed, speed_layout

EXAMPLES = Path(__file__).parent.parent / "examples"
CLUSTER = load_file(Cluster, EXAMPLES / "speed-cluster.yaml")
DEPLOYMENT = load_file(Deployment, EXAMPLES / "speed-deployment.yaml")
SPEED = DEPLOYMENT.model_copy(update={"objective": Objective.SPEED})


def test_the_layers_order_and_the_speed_objective_pick_different_layouts() -> None:
    layers = plan(CLUSTER, DEPLOYMENT)
    fastest = plan(CLUSTER, SPEED)
    assert layers.status is Status.OPTIMAL and fastest.status is Status.OPTIMAL
    assert layers.layout is not None and fastest.layout is not None
    assert (layers.layout.main_worker, len(layers.layout.devices)) == ("ws-big", 1)
    assert (fastest.layout.main_worker, len(fastest.layout.devices)) == ("ws-fast", 2)
    assert layers.best is not None and fastest.best is not None
    assert layers.best.speed is not None and fastest.best.speed is not None
    assert fastest.best.speed.decode_ms_per_token < 0.8 * layers.best.speed.decode_ms_per_token
    solver = next(stats for stats in fastest.stats if stats.engine == "cp-sat")
    assert solver.details["objective"] == "speed" and solver.details["proof"] == "cp-sat"


def test_the_config_objective_applies_unless_the_deployment_sets_one() -> None:
    config = PlannerConfig(objective=Objective.SPEED)
    assert config.objective_for(DEPLOYMENT) is Objective.SPEED
    assert config.objective_for(DEPLOYMENT.model_copy(update={"objective": Objective.LAYERS})) is Objective.LAYERS
    found = plan(CLUSTER, DEPLOYMENT, config)
    assert found.layout is not None and found.layout.main_worker == "ws-fast"


def test_the_heuristic_ranks_by_predicted_time_under_the_speed_objective() -> None:
    layers = heuristics.plan(CLUSTER, DEPLOYMENT)
    fastest = heuristics.plan(CLUSTER, SPEED)
    assert layers.layout is not None and layers.layout.main_worker == "ws-big"
    assert fastest.layout is not None and fastest.layout.main_worker == "ws-fast"
    assert fastest.stats[0].details["strategy"] == "Single-Worker Multi-GPU Full Offloading"


@pytest.mark.parametrize(
    ("update", "field", "problem"),
    [
        ({"objective": "fast"}, "objective", "Input should be 'layers' or 'speed'"),
        ({"min_decode_tokens_per_s": 0}, "min_decode_tokens_per_s", "greater than 0"),
        ({"min_decode_tokens_per_s": -3}, "min_decode_tokens_per_s", "greater than 0"),
        ({"min_decode_tokens_per_s": "fast"}, "min_decode_tokens_per_s", "valid number"),
        ({"min_decode_tokens_per_s": True}, "min_decode_tokens_per_s", "expected a number"),
        ({"min_decode_tokens_per_s": float("nan")}, "min_decode_tokens_per_s", "finite number"),
    ],
)
def test_bad_objective_and_minimum_speed_are_refused_naming_the_field(update: dict, field: str, problem: str) -> None:
    data = {**DEPLOYMENT.model_dump(exclude_none=True), **update}
    with pytest.raises(InputError) as raised:
        load_model(Deployment, data, "deployment file")
    assert f"{field}: " in str(raised.value) and problem in str(raised.value)


def test_a_bad_config_objective_is_refused() -> None:
    with pytest.raises(InputError, match="objective: Input should be 'layers' or 'speed'"):
        load_model(PlannerConfig, {"objective": "quick"}, "config")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


BASE = (
    "plan",
    "--cluster",
    str(EXAMPLES / "speed-cluster.yaml"),
    "--deployment",
    str(EXAMPLES / "speed-deployment.yaml"),
)


def test_the_cli_objective(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, *BASE, "--objective", "speed")
    assert code == EXIT_PLACED
    assert "main worker ws-fast" in out and "objective speed: the fastest predicted decode" in out
    code, out, _ = run(capsys, *BASE)
    assert code == EXIT_PLACED and "main worker ws-big" in out and "objective speed" not in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--objective", "fast"), "invalid choice: 'fast'"),
        (("--min-decode-tokens-per-s", "20"), "--min-decode-tokens-per-s: applies to --model only"),
        (("--min-decode-tokens-per-s", "0"), "--min-decode-tokens-per-s: applies to --model only"),
    ],
)
def test_the_cli_refuses_bad_speed_options(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    code, _, err = run(capsys, *BASE, *extra)
    assert code == EXIT_BAD_INPUT and message in err


def test_the_cli_refuses_an_objective_contradicting_the_deployment_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "speed.yaml"
    path.write_text((EXAMPLES / "speed-deployment.yaml").read_text() + "objective: speed\n")
    cluster = str(EXAMPLES / "speed-cluster.yaml")
    code, _, err = run(capsys, "plan", "--cluster", cluster, "--deployment", str(path), "--objective", "layers")
    assert code == EXIT_BAD_INPUT and "--objective: layers contradicts the deployment's objective: speed" in err
    code, out, _ = run(capsys, "plan", "--cluster", cluster, "--deployment", str(path), "--objective", "speed")
    assert code == EXIT_PLACED and "main worker ws-fast" in out


def test_a_minimum_speed_is_a_rule(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # ~16 tokens/s on the A6000, ~22 on the two 4090s: 20 leaves only ws-fast, 30 nothing
    cluster = str(EXAMPLES / "speed-cluster.yaml")
    for minimum, code_wanted, worker in ((20, EXIT_PLACED, "ws-fast"), (30, EXIT_NO_FIT, None)):
        path = tmp_path / f"min{minimum}.yaml"
        path.write_text((EXAMPLES / "speed-deployment.yaml").read_text() + f"min_decode_tokens_per_s: {minimum}\n")
        code, out, _ = run(capsys, "plan", "--cluster", cluster, "--deployment", str(path))
        assert code == code_wanted
        if worker is not None:
            assert f"main worker {worker}" in out
        else:
            assert "below min_decode_tokens_per_s 30" in out or "min_decode_tokens_per_s" in out


def test_check_names_a_layout_predicted_slower_than_the_minimum() -> None:
    slow = Layout(
        main_worker="ws-big",
        n_blocks=80,
        devices=(DeviceAssignment(worker="ws-big", gpu_index=0, blocks=80),),
        output_offloaded=True,
    )
    profile = DEPLOYMENT.profile
    assert profile is not None
    assert check_layout(CLUSTER, DEPLOYMENT, profile, slow) == ()
    strict = DEPLOYMENT.model_copy(update={"min_decode_tokens_per_s": 20.0})
    (reason,) = check_layout(CLUSTER, strict, profile, slow)
    assert reason.kind is ReasonKind.TOO_SLOW and reason.resource == "min_decode_tokens_per_s"
    rate = deployment_speed(CLUSTER, DEPLOYMENT, profile, slow).decode_tokens_per_s
    assert 15 < rate < 20  # the A6000 at ~63 ms a token
    assert reason.message.startswith(f"predicted {rate:.3g} tokens/s decode, below min_decode_tokens_per_s 20")
    just_met = strict.model_copy(update={"min_decode_tokens_per_s": rate * 0.999})
    assert check_layout(CLUSTER, just_met, profile, slow) == ()
    missed = strict.model_copy(update={"min_decode_tokens_per_s": rate * 1.001})
    (reason,) = check_layout(CLUSTER, missed, profile, slow)
    assert reason.kind is ReasonKind.TOO_SLOW


def test_a_stand_in_profile_counts_its_host_experts_on_the_host() -> None:
    profile = MemoryProfile(
        block_weight_bytes=(400 * 2**20,) * 4,
        block_kv_bytes=(0,) * 4,
        block_expert_bytes=(300 * 2**20,) * 4,
    )
    deployment = Deployment(name="moe", profile=profile)
    stand_in = moe_stand_in(deployment, profile, (0, 1))
    assert stand_in.stand_in_host_experts == (0, 1)
    assert profile_with_host_experts(profile, (0, 1)).stand_in_host_experts == (0, 1)
    layout = Layout(
        main_worker="ws-fast",
        n_blocks=4,
        devices=(DeviceAssignment(worker="ws-fast", gpu_index=0, blocks=3),),
        output_offloaded=True,
    )
    seen = speed_layout(stand_in, layout)
    assert seen.host_expert_blocks == (1,)  # block 0 is on the host, whole; block 1's experts are
    expected = predict(profile, layout.with_host_experts((1,)), CLUSTER)
    assert deployment_speed(CLUSTER, deployment, stand_in, layout).decode_ms_per_token == pytest.approx(
        expected.decode_ms_per_token
    )
    assert speed_layout(profile, layout) is layout


@pytest.mark.parametrize(
    ("meta", "objective", "minimum"),
    [
        (None, None, None),
        ({"owner": "team-a"}, None, None),
        ({"layerfit.objective": "speed"}, Objective.SPEED, None),
        ({"layerfit.objective": "layers", "layerfit.min_decode_tokens_per_s": 12.5}, Objective.LAYERS, 12.5),
    ],
)
def test_a_gpustack_model_asks_for_the_speed_objective_in_its_meta(
    meta: dict | None, objective: Objective | None, minimum: float | None
) -> None:
    found = deployment_from_gpustack({"name": "m", "meta": meta}, profile=DEPLOYMENT.profile)
    assert (found.objective, found.min_decode_tokens_per_s) == (objective, minimum)


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"layerfit.objective": "fast"}, "layerfit.objective: Input should be 'layers' or 'speed'"),
        ({"layerfit.min_decode_tokens_per_s": 0}, "layerfit.min_decode_tokens_per_s: Input should be greater than 0"),
        ({"layerfit.objetive": "speed"}, "layerfit.objetive: Extra inputs are not permitted"),
    ],
)
def test_a_gpustack_model_meta_with_bad_layerfit_entries_is_refused(meta: dict, message: str) -> None:
    with pytest.raises(InputError, match="GPUStack model meta") as raised:
        deployment_from_gpustack({"name": "m", "meta": meta}, profile=DEPLOYMENT.profile)
    assert message in str(raised.value)


def test_the_speed_heuristic_tries_the_fastest_gpus_as_rpc_layouts() -> None:
    # GPUStack's distributed strategy takes the worker with the most VRAM (big's A6000) as main;
    # under objective: speed the layouts over the fastest GPUs are tried too: the two 4090s
    def worker(name: str, gpu: str, total: int, free: int) -> Worker:
        card = Gpu(index=0, name=gpu, total_vram_bytes=total * GiB, allocatable_vram_bytes=free * GiB)
        return Worker(id=name, name=name, total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB, gpus=(card,))

    cluster = Cluster(
        workers=(
            worker("big", "NVIDIA RTX A6000", 48, 30),
            worker("f1", "NVIDIA GeForce RTX 4090", 24, 22),
            worker("f2", "NVIDIA GeForce RTX 4090", 24, 22),
        )
    )
    profile = MemoryProfile.uniform(40, 900 * MiB, 16 * MiB, output_weight_bytes=500 * MiB, gpu_fixed_bytes=600 * MiB)
    deployment = Deployment(name="m", profile=profile, distributed_inference_across_workers=True, cpu_offloading=False)
    layers = heuristics.plan(cluster, deployment, PlannerConfig(), profile).layout
    fast = heuristics.plan(cluster, deployment, PlannerConfig(objective=Objective.SPEED), profile).layout
    assert layers is not None and fast is not None
    assert layers.main_worker == "big" and set(layers.workers) == {"big", "f1"}
    assert set(fast.workers) == {"f1", "f2"}
    times = [deployment_speed(cluster, deployment, profile, layout).decode_ms_per_token for layout in (layers, fast)]
    assert times[1] < times[0] * 0.9
