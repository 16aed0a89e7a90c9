"""``-ngl 0`` with GPUs in sight: what layerfit prints models llama.cpp's op offload, or prevents it.

A GPU build run with ``-ngl 0`` and without ``--device none`` still computes the host's large
operations on its first GPU (``memory.claims(op_offload_gpu=)``, matched with the H200 records in
``test_estimator_ground_truth``). ``layerfit estimate`` shows that case beside CPU only; a plan
with every layer on the host runs with ``--device none``, so its claims hold no GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

from layerfit.domain import Cluster, Deployment, LlamaParams, PlannerConfig, format_bytes
from layerfit.domain.layout import Layout
from layerfit.estimators import RuntimeCosts, read_gguf
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.report import estimate_report, estimate_table
from layerfit.io.documents import load_file
from layerfit.memory import claims, layout_from_flags
from layerfit.planning.planner import plan

EXAMPLES = Path(__file__).parent.parent / "examples"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("op-offload"), data="header")


@pytest.fixture(scope="module")
def shape(model: Path) -> ModelShape:
    return read_gguf(str(model))


def test_estimate_shows_the_op_offload_gpu_of_ngl_0(shape: ModelShape) -> None:
    params = LlamaParams.from_args(["-c", "4096", "-ngl", "0"])
    report = estimate_report(shape, params)
    assert report.op_offload is not None and report.requested is None
    expected = claims(report.profile, Layout(main_worker="gpu", n_blocks=4), op_offload_gpu=("gpu", 0))
    assert report.op_offload == expected
    gpu = expected.devices[0]
    assert gpu.weight_bytes == 0 and gpu.compute_bytes == report.profile.op_offload_compute_bytes > 0
    # the host computes less than in a CPU-only run, the GPU pays its runtime
    assert expected.workers[0].compute_bytes < report.cpu_only.workers[0].compute_bytes
    assert gpu.fixed_bytes == report.profile.main.fixed_bytes
    text = estimate_table(shape, report)
    assert "-ngl 0 in a GPU build without --device none (as given)" in text
    assert f"VRAM {format_bytes(gpu.total_bytes)} = compute with a copy of the output layer" in text
    assert f"host RAM {format_bytes(expected.workers[0].ram_bytes)}; add --device none" in text


def test_estimate_places_a_given_ngl_on_one_gpu(shape: ModelShape) -> None:
    report = estimate_report(shape, LlamaParams.from_args(["-ngl", "3"]))
    assert report.parameters.n_gpu_layers == 3 and report.requested is not None
    layout = layout_from_flags("gpu", [("gpu", 0)], 4, 3)
    assert layout.cpu_blocks == 2 and report.requested == claims(report.profile, layout)
    text = estimate_table(shape, report)
    assert f"-ngl 3 on one GPU:\n  VRAM {format_bytes(report.requested.devices[0].total_bytes)}" in text
    assert "(as given)" not in text


def test_a_cpu_build_has_no_op_offload(shape: ModelShape) -> None:
    report = estimate_report(shape, LlamaParams.from_args(["-ngl", "0"]), runtime=RuntimeCosts(backend="cpu"))
    assert report.op_offload is None
    assert "without --device none" not in estimate_table(shape, report)


def test_an_all_cpu_plan_on_a_gpu_cluster_keeps_the_gpus_idle(model: Path) -> None:
    cluster = load_file(Cluster, EXAMPLES / "cluster.yaml")
    assert any(worker.gpus for worker in cluster.workers)
    deployment = Deployment(name="tiny", gguf_path=str(model), params=LlamaParams.from_args(["-ngl", "0"]))
    result = plan(cluster, deployment, PlannerConfig(time_limit_s=2.0), explain=False)
    assert result.best is not None and not result.best.layout.devices
    assert result.best.claims.devices == ()  # no GPU claimed ...
    server = result.commands[-1]
    device = server.argv[server.argv.index("--device") + 1]
    assert device == "none"  # ... because the command hides them from llama.cpp
