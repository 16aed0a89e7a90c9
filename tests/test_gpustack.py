"""The GPUStack adapter on hand-written GPUStack-shaped fixtures (dicts and attribute objects)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from layerfit.domain import GiB, MemoryProfile, ModelKind
from layerfit.errors import InputError
from layerfit.gpustack import candidate_to_gpustack, cluster_from_gpustack, deployment_from_gpustack
from layerfit.memory import make_layout
from layerfit.planner import evaluate

FIXTURES = Path(__file__).parent / "fixtures"
WORKERS = json.loads((FIXTURES / "gpustack_workers.json").read_text())
MODEL = json.loads((FIXTURES / "gpustack_model.json").read_text())


def as_objects(value: Any) -> Any:
    """The same data as attribute objects, the way GPUStack's own classes expose it."""
    if isinstance(value, dict):
        return SimpleNamespace(**{key: as_objects(item) for key, item in value.items()})
    if isinstance(value, list):
        return [as_objects(item) for item in value]
    return value


@pytest.mark.parametrize("shape", ["dicts", "objects"])
def test_workers_to_cluster(shape: str) -> None:
    workers = WORKERS if shape == "dicts" else as_objects(WORKERS)
    cluster = cluster_from_gpustack(workers)
    a, b, mac = cluster.workers
    # a: RAM 64 GiB - 4 allocated - 2 reserved = 58; GPU 0: 24 - 0 - 1 reserved = 23; GPU 1: 24 - 10 - 1 = 13
    assert a.allocatable_ram_bytes == 58 * GiB and a.address == "192.168.1.11" and a.labels == {"gpu": "4090"}
    assert [g.allocatable_vram_bytes for g in a.gpus] == [23 * GiB, 13 * GiB]
    assert b.allocatable_ram_bytes == 32 * GiB and b.gpus[0].allocatable_vram_bytes == 16 * GiB
    # unified: GPU 48 - 1 reserved = 47; the pool (RAM 64) loses the reserved VRAM (1) and allocated VRAM (0)
    assert mac.unified_memory and mac.gpus[0].type == "metal"
    assert (mac.gpus[0].allocatable_vram_bytes, mac.allocatable_ram_bytes) == (47 * GiB, 63 * GiB)


def test_model_to_deployment() -> None:
    profile = MemoryProfile.uniform(4, GiB, 0)
    deployment = deployment_from_gpustack(as_objects(MODEL), profile=profile)
    assert deployment.name == "llama-70b-q4" and deployment.params.ctx_size == 8192 and deployment.params.parallel == 2
    assert deployment.distributed_inference_across_workers and deployment.cpu_offloading
    selected = deployment_from_gpustack(
        {**MODEL, "gpu_selector": {"gpu_ids": ["gpustack-a:cuda:1"]}, "categories": ["image"]}, profile=profile
    )
    assert selected.gpu_selection is not None and str(selected.gpu_selection[0]) == "gpustack-a:cuda:1"
    assert selected.kind is ModelKind.IMAGE


def test_bad_gpustack_input_names_the_field() -> None:
    with pytest.raises(InputError, match=r"status\.memory\.total"):
        cluster_from_gpustack([{"name": "x", "status": {}}])
    with pytest.raises(InputError, match="malformed GPU id"):
        deployment_from_gpustack(
            {**MODEL, "gpu_selector": {"gpu_ids": ["nonsense"]}}, profile=MemoryProfile.uniform(1, 1, 0)
        )


def test_candidate_shape() -> None:
    cluster = cluster_from_gpustack(WORKERS)
    profile = MemoryProfile.uniform(10, GiB, 0, output_weight_bytes=GiB // 2, rpc_host_fixed_bytes=100)
    deployment = deployment_from_gpustack(MODEL, profile=profile)
    from layerfit.domain import DeviceAssignment as Dev

    layout = make_layout(
        "gpustack-a",
        10,
        [Dev(worker="gpustack-b", gpu_index=0, blocks=4), Dev(worker="gpustack-a", gpu_index=0, blocks=6)],
    )
    plan = evaluate(cluster, deployment, layout)
    assert plan.best is not None
    candidate = candidate_to_gpustack(plan.best, cluster, {w["name"]: w for w in WORKERS})
    assert candidate["worker"]["id"] == 11 and candidate["gpu_indexes"] == [0]
    claim = candidate["computed_resource_claim"]
    # 11 layers on GPUs of 11; -ts as integer layer counts in llama.cpp order (RPC first)
    assert (claim["offload_layers"], claim["total_layers"], claim["tensor_split"]) == (11, 11, [4, 7])
    assert claim["vram"] == {0: 6 * GiB + GiB // 2}
    (sub,) = candidate["subordinate_workers"]
    assert (sub["worker_id"], sub["worker_ip"], sub["gpu_indexes"]) == (12, "192.168.1.12", [0])
    assert sub["computed_resource_claim"]["vram"] == {0: 4 * GiB}
    assert sub["computed_resource_claim"]["ram"] == 100
