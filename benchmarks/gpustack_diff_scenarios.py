"""Random scenarios for ``gpustack_diff.py``: GPUStack ``Worker``/``Model``/``ModelInstance`` data
(1-20 workers, mixed GPU counts and sizes, unified-memory and CPU-only workers, running instances,
system reserves), deployments with distribution and CPU offloading on or off, manual selections,
``-ngl``/``-ts``/``-c``/``--parallel``/``-ctk``, dense and MoE shapes, and each one's memory profile
(layerfit's estimate of a header-only GGUF under the scenario's flags)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpustack.schemas.models import (
    ComputedResourceClaim,
    DistributedServers,
    ModelInstance,
    ModelInstanceSubordinateWorker,
)

from layerfit.domain import GiB, LlamaParams, MemoryProfile
from layerfit.estimators.estimate import estimate_profile
from layerfit.testing.synthetic import REAL_MODELS

GPU_SIZES = (8, 12, 16, 24, 32, 48, 80)
RAM_SIZES = (16, 32, 64, 128, 256, 512)


@dataclass
class Scenario:
    number: int
    workers: list[dict[str, Any]]
    instances: list[dict[str, Any]]
    model: dict[str, Any]
    shape: str
    profile: MemoryProfile
    tags: list[str] = field(default_factory=list)


def _worker_data(rng: random.Random, number: int, kind: str) -> dict[str, Any]:
    ram = rng.choice(RAM_SIZES)
    if kind == "cpu":
        gpus: list[int] = []
        gpu_type = "cuda"
    elif kind == "unified":
        ram = rng.choice((32, 64, 128, 192))
        gpus = [ram * rng.choice((3, 4)) // 4]
        gpu_type = "mps" if rng.random() < 0.8 else "cuda"
    else:
        count = rng.choice((1, 1, 2, 2, 4, 8))
        alike = rng.random() < 0.6
        gpus = [rng.choice(GPU_SIZES)] * count if alike else [rng.choice(GPU_SIZES) for _ in range(count)]
        gpu_type = "cuda"
    reserve = rng.random() < 0.5
    return {
        "id": number + 1,
        "name": f"w{number:02d}",
        "ram": ram * GiB,
        "gpus": [g * GiB for g in gpus],
        "type": gpu_type,
        # GPUStack's detector flags Apple workers unified; an unflagged mps worker (layerfit: unified
        # all the same, a documented difference) is rare, and a flagged CUDA one is a Jetson/GB10.
        "unified": kind == "unified" and rng.random() < 0.9,
        "reserved": (rng.choice((1, 2, 4)) * GiB, rng.choice((0, GiB // 2, GiB))) if reserve else (0, 0),
    }


def _instances(rng: random.Random, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    running = []
    for number in range(rng.choice((0, 0, 1, 2, 4))):
        main = rng.choice(workers)
        gpus = [i for i in range(len(main["gpus"])) if rng.random() < 0.5]
        subs = []
        others = [w for w in workers if w is not main and w["gpus"]]
        if others and rng.random() < 0.3:
            sub = rng.choice(others)
            subs.append({"worker_id": sub["id"], "gpu_indexes": [0], "vram": {0: rng.randrange(sub["gpus"][0] // 2)}})
        running.append(
            {
                "id": number + 1,
                "worker_id": main["id"],
                "gpu_indexes": gpus,
                "ram": rng.randrange(main["ram"] // 4 + 1),
                "vram": {i: rng.randrange(main["gpus"][i] // 2 + 1) for i in gpus},
                "subs": subs,
            }
        )
    return running


def _selection(rng: random.Random, workers: list[dict[str, Any]]) -> tuple[list[str] | None, str]:
    with_gpus = [w for w in workers if w["gpus"]]
    if not with_gpus or rng.random() < 0.75:
        return None, ""
    mode = rng.choice(("one", "several", "across"))
    if mode == "across" and len(with_gpus) >= 2:
        chosen = rng.sample(with_gpus, rng.randint(2, min(3, len(with_gpus))))
        ids = []
        for worker in chosen:
            picked = rng.sample(range(len(worker["gpus"])), rng.randint(1, min(2, len(worker["gpus"]))))
            ids += [f"{worker['name']}:{worker['type']}:{i}" for i in picked]
        return ids, "select-across"
    worker = rng.choice(with_gpus)
    if mode == "several" and len(worker["gpus"]) >= 2:
        picked = rng.sample(range(len(worker["gpus"])), rng.randint(2, len(worker["gpus"])))
        return [f"{worker['name']}:{worker['type']}:{i}" for i in picked], "select-several"
    return [f"{worker['name']}:{worker['type']}:{rng.randrange(len(worker['gpus']))}"], "select-one"


def scenario(number: int, rng: random.Random, gguf_dir: Path) -> Scenario:
    n_workers = rng.choice((1, 1, 2, 2, 3, 4, 5, 6, 8, 12, 20))
    kinds = rng.choices(("gpu", "unified", "cpu"), weights=(7, 2, 1), k=n_workers)
    workers = [_worker_data(rng, i, kind) for i, kind in enumerate(kinds)]
    tags = sorted({f"{kind}-worker" for kind in kinds})
    if any(w["type"] == "mps" and not w["unified"] for w in workers):
        tags.append("mps-unflagged")
    distributed = rng.random() < 0.4
    remote = sum(len(w["gpus"]) for w in workers) - max(len(w["gpus"]) for w in workers)
    if distributed and 9 <= remote <= 16:
        # GPUStack's exhaustive RPC search (up to 39,203 combinations, each an estimator call) is
        # too slow for a batch: trim the cluster to at most 8 candidate RPC GPUs.
        while sum(len(w["gpus"]) for w in workers) - max(len(w["gpus"]) for w in workers) > 8:
            workers.pop()
    selection, selection_tag = _selection(rng, workers)
    shape = rng.choice(list(REAL_MODELS))
    params = []
    flags: dict[str, Any] = {}
    if rng.random() < 0.5:
        flags["-c"] = str(rng.choice((512, 2048, 4096, 8192, 16384, 32768)))
    if rng.random() < 0.2:
        flags["--parallel"] = str(rng.choice((1, 2, 4)))
    if rng.random() < 0.2:
        flags["-ctk"] = rng.choice(("f16", "q8_0", "q4_0"))
        if rng.random() < 0.5:
            flags["-ctv"] = flags["-ctk"]
            flags["-fa"] = "on"
    for flag, value in flags.items():
        params += [f"{flag}={value}"] if rng.random() < 0.5 else [flag, value]
    path = gguf_dir / f"{shape}.gguf"
    if "-ctk" in flags and "-ctv" not in flags and REAL_MODELS[shape].kv_lora_rank:
        params += ["-ctv", flags["-ctk"]]  # MLA takes one type for K and V (llama.cpp refuses two); no draw
    profile = estimate_profile(path, LlamaParams.from_args(params))
    n_layers = profile.n_blocks + 1
    if rng.random() < 0.2:
        layers = rng.choice((0, n_layers, n_layers + 3, rng.randint(1, n_layers - 1), rng.randint(1, n_layers - 1)))
        params += [f"--gpu-layers={layers}"] if rng.random() < 0.5 else ["-ngl", str(layers)]
        tags.append("ngl-" + ("0" if layers == 0 else "all" if layers >= n_layers else "some"))
    if rng.random() < 0.12:
        split = [rng.randint(1, 4) for _ in range(rng.randint(2, 4))]
        params += ["--tensor-split=" + ",".join(str(s) for s in split)]
        tags.append("ts")
    model: dict[str, Any] = {
        "name": f"m{number}",
        "backend_parameters": params,
        "cpu_offloading": rng.random() < 0.6,
        "distributed_inference_across_workers": distributed,
        "placement_strategy": rng.choice(("spread", "binpack")),
    }
    if selection is not None:
        model["gpu_selector"] = {"gpu_ids": selection}
        tags.append(selection_tag)
    tags += ["distributed" if distributed else "single-worker", "cpu-offload" if model["cpu_offloading"] else "no-cpu"]
    if profile.block_expert_bytes is not None:
        tags.append("moe")
    return Scenario(number, workers, _instances(rng, workers), model, shape, profile, tags)


def gpustack_instance(data: dict[str, Any]) -> ModelInstance:
    return ModelInstance(
        id=data["id"],
        name=f"running-{data['id']}",
        model_id=100 + data["id"],
        model_name=f"running-{data['id']}",
        worker_id=data["worker_id"],
        gpu_indexes=data["gpu_indexes"],
        computed_resource_claim=ComputedResourceClaim(ram=data["ram"], vram=data["vram"]),
        distributed_servers=DistributedServers(
            subordinate_workers=[
                ModelInstanceSubordinateWorker(
                    worker_id=sub["worker_id"],
                    gpu_indexes=sub["gpu_indexes"],
                    computed_resource_claim=ComputedResourceClaim(ram=0, vram=sub["vram"]),
                )
                for sub in data["subs"]
            ]
        ),
    )
