"""The GPUStack selector finds a model's memory from the model's own source (local path, Hugging
Face, ModelScope), reads a remote header without blocking the event loop, and gives Apple
unified-memory workers their own costs. GPUStack's objects as dicts (no gpustack needed)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from http_fixtures import REPO, Server, serve_header, sparse_model

from layerfit.domain import GiB, MemoryProfile
from layerfit.errors import InputError
from layerfit.estimators import profile_for
from layerfit.gpustack import (
    LayerfitGGUFSelector,
    cluster_from_gpustack,
    deployment_from_gpustack,
    schedule_candidates,
)
from layerfit.gpustack.sources import model_location, with_unified_costs
from layerfit.memory import claims

FIXTURES = Path(__file__).parent / "fixtures"
WORKERS = json.loads((FIXTURES / "gpustack_workers.json").read_text())
MODEL = json.loads((FIXTURES / "gpustack_model.json").read_text())
MAC = [worker for worker in WORKERS if worker["name"] == "gpustack-mac"]


def hf_model(**fields: Any) -> dict[str, Any]:
    return {
        **MODEL,
        "source": "huggingface",
        "huggingface_repo_id": REPO,
        "huggingface_filename": "llama8b.gguf",
        **fields,
    }


@pytest.mark.parametrize(
    ("fields", "location"),
    [
        (
            {"source": "huggingface", "huggingface_repo_id": "a/b", "huggingface_filename": "m-Q4.gguf"},
            "hf://a/b/m-Q4.gguf",
        ),
        (
            {"source": "model_scope", "model_scope_model_id": "a/b", "model_scope_file_path": "q/m.gguf"},
            "ms://a/b/q/m.gguf",
        ),
    ],
)
def test_hub_sources_become_locations(fields: dict[str, Any], location: str) -> None:
    assert model_location({**MODEL, **fields}) == location


def test_local_path_source(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    assert model_location({**MODEL, "source": "local_path", "local_path": str(path)}) == str(path)
    assert model_location({**MODEL, "local_path": str(path)}) == str(path)  # no source: GPUStack's default


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"source": "ollama_library", "ollama_library_model_name": "llama3"},
            "an Ollama library model is not supported",
        ),
        ({"ollama_library_model_name": "llama3"}, "GPUStack 2.3.0 resolves no Ollama model"),
        (
            {"source": "huggingface", "huggingface_repo_id": "a/b"},
            "huggingface_filename: missing for source huggingface",
        ),
        ({"source": "huggingface", "huggingface_filename": "m.gguf"}, "huggingface_repo_id: missing"),
        (
            {"source": "huggingface", "huggingface_repo_id": "a/b", "huggingface_filename": "*Q4_K_M*.gguf"},
            "is a pattern",
        ),
        ({"source": "model_scope", "model_scope_model_id": "a/b"}, "model_scope_file_path: missing"),
        ({"source": "s3"}, "unknown source 's3'"),
        ({"source": "local_path", "local_path": "/nonexistent.gguf"}, "no readable GGUF file"),
    ],
)
def test_unsupported_sources_are_named(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(InputError, match=problem.replace("*", r"\*")):
        model_location({**MODEL, **fields})


def test_selector_reads_a_hugging_face_model_by_its_header(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    local, size, header_bytes = sparse_model(tmp_path, "llama8b-q4")
    serve_header(hub, local, "llama8b.gguf", size, header_bytes)
    selector = LayerfitGGUFSelector(hf_model(), [], None, output="dicts")
    found = asyncio.run(selector.select_candidates(WORKERS))
    assert found and selector.plan is not None and selector.plan.best is not None
    assert header_bytes <= cdn.body_bytes <= header_bytes + (4 << 20)
    # the same placement as from the local file
    local_selector = LayerfitGGUFSelector(hf_model(), [], None, gguf_path=str(local), output="dicts")
    assert asyncio.run(local_selector.select_candidates(WORKERS)) == found
    fetched = cdn.body_bytes
    asyncio.run(LayerfitGGUFSelector(hf_model(), [], None, output="dicts").select_candidates(WORKERS))
    assert cdn.body_bytes == fetched  # the second schedule: the cached header, one 304


def test_the_header_is_read_off_the_event_loop(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    local, size, header_bytes = sparse_model(tmp_path, "llama1b-f16")
    serve_header(hub, local, "llama8b.gguf", size, header_bytes)
    cdn.fault = "delay"  # 0.5 s before each reply

    async def both() -> tuple[list[Any], int]:
        ticks = 0
        selector = LayerfitGGUFSelector(hf_model(), [], None, output="dicts")
        task = asyncio.create_task(selector.select_candidates(WORKERS))
        started = time.monotonic()
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1 if time.monotonic() - started < 0.5 else 0
        return await task, ticks

    found, ticks = asyncio.run(both())
    assert found and ticks >= 20  # the loop went on while the header was fetched (0.5 s: ~50 ticks)


def test_an_async_profile_hook_is_awaited() -> None:
    profile = MemoryProfile.uniform(4, GiB, 0)
    seen: list[str] = []

    async def hook(model: Any) -> MemoryProfile:
        await asyncio.sleep(0)
        seen.append(model["name"])
        return profile

    selector = LayerfitGGUFSelector(MODEL, [], None, profile=hook, output="dicts")
    assert asyncio.run(selector.select_candidates(WORKERS)) and seen == [MODEL["name"]]


def test_apple_unified_workers_get_their_own_costs(tmp_path: Path) -> None:
    local, _, _ = sparse_model(tmp_path, "llama8b-q4")
    estimated = profile_for(deployment_from_gpustack(MODEL, gguf_path=str(local)))  # -c 8192 -np 2
    mac = cluster_from_gpustack(MAC)
    unified = with_unified_costs(estimated, mac)
    assert estimated.unified is None and estimated.main.fixed_bytes > 500 * 2**20  # the CUDA context and cuBLAS
    assert unified.unified is not None and unified.unified.fixed_bytes == 0
    assert unified.unified.compute == estimated.main.compute
    cuda = cluster_from_gpustack([WORKERS[0]])
    assert with_unified_costs(estimated, cuda) is estimated
    cuda_unified = [
        {
            **MAC[0],
            "status": {**MAC[0]["status"], "gpu_devices": [{**MAC[0]["status"]["gpu_devices"][0], "type": "cuda"}]},
        }
    ]
    assert with_unified_costs(estimated, cluster_from_gpustack(cuda_unified)) is estimated  # GB10: CUDA runs there
    # the selector charges the Mac its own costs: the discrete ones less the CUDA runtime
    found, plan = schedule_candidates(MAC, hf_model(), gguf_path=str(local))
    assert found and plan.best is not None
    layout = plan.best.layout
    ours = plan.best.claims.vram_bytes("gpustack-mac", 0)
    assert ours == claims(unified, layout, {"gpustack-mac"}).vram_bytes("gpustack-mac", 0)
    assert claims(estimated, layout, {"gpustack-mac"}).vram_bytes("gpustack-mac", 0) - ours == (
        estimated.main.fixed_bytes
    )
    given = MemoryProfile.uniform(4, GiB, 0, gpu_fixed_bytes=GiB)
    _, as_given = schedule_candidates(MAC, MODEL, profile=given)
    assert as_given.best is not None and as_given.best.claims.vram_bytes("gpustack-mac", 0) == 5 * GiB
