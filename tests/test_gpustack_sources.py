"""The GPUStack selector finds a model's memory from the model's own source (local path, Hugging
Face, ModelScope: the repository listed as GPUStack lists it, for a file-name pattern and the
projector it adds), reads a remote header without blocking the event loop, and gives Apple
unified-memory workers their own costs. GPUStack's objects as dicts (no gpustack needed)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from fixtures_gguf import write_projector
from gpustack_fixtures import MODEL, WORKERS
from http_fixtures import REPO, Server, serve_header, serve_model, serving, sparse_model

from layerfit.domain import GiB, MemoryProfile
from layerfit.errors import EstimationError, InputError
from layerfit.estimators import profile_for
from layerfit.gpustack import (
    LayerfitGGUFSelector,
    cluster_from_gpustack,
    deployment_from_gpustack,
    schedule_candidates,
)
from layerfit.gpustack.sources import ModelFiles, model_files, with_unified_costs
from layerfit.memory import claims
from layerfit.remote.listing import repo_files

MAC = [worker for worker in WORKERS if worker["name"] == "gpustack-mac"]


def hf_model(**fields: Any) -> dict[str, Any]:
    return {
        **MODEL,
        "source": "huggingface",
        "huggingface_repo_id": REPO,
        "huggingface_filename": "llama8b.gguf",
        **fields,
    }


def _repo(hub: tuple[Server, Server], tmp_path: Path, *names: str) -> Path:
    """Serve ``names`` (GGUF headers of llama1b-f16; a name with ``mmproj``: a projector) in REPO."""
    local, size, header_bytes = sparse_model(tmp_path, "llama1b-f16")
    projector = tmp_path / "mmproj.gguf"
    write_projector(projector)
    for name in names:
        if "mmproj" in name:
            for server in hub:
                server.add_hub(REPO, name, projector)
        else:
            serve_header(hub, local, name, size, header_bytes)
    return local


def test_hub_sources_become_locations(
    hub: tuple[Server, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, _ = hub
    _repo(hub, tmp_path, "m-Q4_K_M.gguf", "m-Q8_0.gguf", "sub/m-Q4_K_M.gguf")
    exact = hf_model(huggingface_filename="m-Q8_0.gguf")
    assert model_files(exact) == ModelFiles(model=f"hf://{REPO}/m-Q8_0.gguf")
    assert front.log[-1].path == f"/api/models/{REPO}/tree/main?recursive=true"  # GPUStack lists it too
    # a pattern: GPUStack's first match in sorted order (the folder's file sorts after)
    assert model_files(hf_model(huggingface_filename="*Q4_K_M*.gguf")).model == f"hf://{REPO}/m-Q4_K_M.gguf"
    assert model_files(hf_model(huggingface_filename="sub/*.gguf")).model == f"hf://{REPO}/sub/m-Q4_K_M.gguf"
    with serving(Server()) as modelscope:
        for path, file in list(front.files.items()):
            modelscope.files[path.replace(f"/{REPO}/resolve/main/", f"/models/{REPO}/resolve/master/")] = file
        monkeypatch.setenv("MODELSCOPE_URL_SCHEME", "http://")
        monkeypatch.setenv("MODELSCOPE_DOMAIN", f"127.0.0.1:{modelscope.port}")
        fields = {"source": "model_scope", "model_scope_model_id": REPO, "model_scope_file_path": "*Q8_0.gguf"}
        assert model_files({**MODEL, **fields}).model == f"ms://{REPO}/m-Q8_0.gguf"
        assert modelscope.log[-1].path == f"/api/v1/models/{REPO}/repo/files?Revision=master&Recursive=true"


def test_a_listing_in_pages_is_followed(
    hub: tuple[Server, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, _ = hub
    front.page_size = 2
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    names = [f"m-{i}.gguf" for i in range(5)]
    _repo(hub, tmp_path, *names)
    listing = repo_files("hf", REPO)
    assert listing.files == tuple(names) and listing.complete
    pages = [entry for entry in front.log if entry.path.startswith("/api/")]
    assert len(pages) == 3 and all(page.headers.get("authorization") == "Bearer hf_secret_token" for page in pages)
    assert model_files(hf_model(huggingface_filename="m-4*")).model == f"hf://{REPO}/m-4.gguf"


def test_the_projector_gpustack_adds_is_counted(hub: tuple[Server, Server], tmp_path: Path) -> None:
    local = _repo(hub, tmp_path, "m.gguf", "mmproj-model-f16.gguf", "mmproj-other.gguf")
    weights = write_projector(tmp_path / "weights-of-the-projector.gguf")
    model = hf_model(huggingface_filename="m.gguf")
    files = model_files(model)
    assert files == ModelFiles(model=f"hf://{REPO}/m.gguf", mmproj=f"hf://{REPO}/mmproj-model-f16.gguf")
    named = hf_model(huggingface_filename="m.gguf", backend_parameters=["--mmproj=mmproj-other.gguf", "-c", "4096"])
    assert model_files(named).mmproj == f"hf://{REPO}/mmproj-other.gguf"
    kept = hf_model(huggingface_filename="m.gguf", backend_parameters=["--mmproj", "/models/p.gguf"])
    assert model_files(kept).mmproj is None  # a path stays as given
    plain = profile_for(deployment_from_gpustack(model, gguf_path=str(local)))
    counted = profile_for(deployment_from_gpustack(model, gguf_path=files.model, mmproj=files.mmproj))
    assert counted.extra_main_gpu_bytes - plain.extra_main_gpu_bytes > weights  # weights and compute
    # the selector plans with that profile: its claims are the projector's profile's, not the plain one's
    selector = LayerfitGGUFSelector(model, [], None, output="dicts")
    assert asyncio.run(selector.select_candidates(WORKERS))
    assert selector.plan is not None and selector.plan.best is not None
    best = selector.plan.best
    cluster = cluster_from_gpustack(WORKERS)
    unified = {worker.name for worker in cluster.workers if worker.unified_memory}

    def claimed(profile: MemoryProfile) -> object:
        return claims(with_unified_costs(profile, cluster), best.layout, unified)

    assert best.claims == claimed(counted) != claimed(plain)


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        ("listing-401", "a gated or private repository: set HF_TOKEN"),
        ("listing-not-json", "the listing is not JSON"),
        ("listing-huge", "announced 17,825,794 bytes, more than 16,777,216"),
        ("listing-huge-unannounced", "sent more than 16,777,216 bytes"),
        ("listing-next-elsewhere", "the next page of the listing lies on another host (http://elsewhere.invalid:80)"),
    ],
)
def test_a_listing_that_fails_is_named(
    fault: str, problem: str, hub: tuple[Server, Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    front, _ = hub
    front.listing_fault, front.page_size = fault, 1
    _repo(hub, tmp_path, "a.gguf", "b.gguf")
    with pytest.raises(EstimationError) as caught:
        model_files(hf_model(huggingface_filename="a.gguf"))
    message = str(caught.value)
    assert message.startswith(f"hf://{REPO}@main (its file listing): http: ") and problem in message, message
    selector = LayerfitGGUFSelector(hf_model(huggingface_filename="a.gguf"), [], None, output="dicts")
    with pytest.raises(EstimationError, match=re.escape(problem)):
        asyncio.run(selector.select_candidates(WORKERS))


def test_local_path_source(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    assert model_files({**MODEL, "source": "local_path", "local_path": str(path)}) == ModelFiles(model=str(path))
    assert model_files({**MODEL, "local_path": str(path)}).model == str(path)  # no source: GPUStack's default


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
            {"source": "huggingface", "huggingface_repo_id": "a/b/c", "huggingface_filename": "m.gguf"},
            "huggingface_repo_id: expected ORG/REPO",
        ),
        ({"source": "model_scope", "model_scope_model_id": "a/b"}, "model_scope_file_path: missing"),
        ({"source": "s3"}, "unknown source 's3'"),
        ({"source": "local_path", "local_path": "/nonexistent.gguf"}, "no readable GGUF file"),
    ],
)
def test_unsupported_sources_are_named(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        model_files({**MODEL, **fields})


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"huggingface_filename": "*Q2_K*.gguf"}, f"huggingface_filename: no file of {REPO} matches '*Q2_K*.gguf'"),
        ({"huggingface_filename": "m-Q2_K.gguf"}, f"huggingface_filename: 'm-Q2_K.gguf' is not a file of {REPO}"),
        (
            {"huggingface_filename": "m.gguf", "backend_parameters": ["--mmproj", "mmproj-x.gguf"]},
            f"backend_parameters --mmproj: 'mmproj-x.gguf' is not a file of {REPO}",
        ),
    ],
)
def test_a_file_the_repository_lacks_is_named(
    fields: dict[str, Any], problem: str, hub: tuple[Server, Server], tmp_path: Path
) -> None:
    _repo(hub, tmp_path, "m.gguf")
    with pytest.raises(InputError, match=re.escape(problem)):
        model_files(hf_model(**fields))


def test_selector_reads_a_hugging_face_model_by_its_header(hub: tuple[Server, Server], tmp_path: Path) -> None:
    _, cdn = hub
    local, _, header_bytes = serve_model(hub, tmp_path, "llama8b-q4", "llama8b.gguf")
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
    serve_model(hub, tmp_path, "llama1b-f16", "llama8b.gguf")
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
