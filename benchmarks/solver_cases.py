"""The seeded cases of ``solver_bench.py``: clusters of 4 to 1,024 GPUs and one deployment each.

Every case is a cluster (8-, 4-, 2- and 1-GPU workers with 24 to 141 GiB GPUs, some unified-memory
workers, existing load on many GPUs and on RAM) and one deployment (a model from 1B to 671B
parameters with uneven block sizes, a random context size, and random switches: distribution
across workers, CPU offloading, a fixed ``-ngl``, a manual GPU selection, the placement policy).
The stress set has 1,024 GPUs of at most 48 GiB and a 123B-671B model, so that several workers
must share it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    GiB,
    Gpu,
    GpuRef,
    LlamaParams,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Policy,
    RoleCosts,
    Worker,
)

FULL_SUITE = {4: 40, 16: 40, 64: 40, 256: 16, 1024: 20}
QUICK_SUITE = {4: 8, 16: 8, 64: 8, 1024: 3}
FULL_STRESS = 8
QUICK_STRESS = 2
STRESS_GPUS = 1024
STRESS_MODELS = ("123B", "405B", "671B")

FLAVOURS = {
    # GPU sizes (GiB), GPUs per worker, share of unified-memory workers
    "datacenter": ((24, 48, 80, 141), (8, 8, 8, 4, 4, 2, 1), 0.05),
    "consumer": ((16, 24, 24, 48), (4, 2, 2, 1, 1), 0.2),
}


@dataclass(frozen=True)
class Model:
    """A model shape: blocks, Q4-class bytes per block (uneven: every fourth block is larger, as
    when some tensors keep a wider quant type), KV bytes per block per 1k tokens, output layer."""

    name: str
    blocks: int
    block_mib: int
    kv_mib_per_1k: float
    output_mib: int


MODELS = (
    Model("1B", 16, 45, 2.0, 260),
    Model("8B", 32, 130, 4.0, 280),
    Model("14B", 48, 175, 8.0, 420),
    Model("32B", 64, 285, 8.0, 420),
    Model("70B", 80, 480, 10.0, 560),
    Model("123B", 88, 780, 11.0, 640),
    Model("405B", 126, 1720, 16.0, 1180),
    Model("671B", 61, 6400, 9.0, 950),
)


@dataclass(frozen=True)
class Case:
    gpus: int
    index: int
    cluster: Cluster
    deployment: Deployment
    profile: MemoryProfile
    config: PlannerConfig
    model: str
    stress: bool = False
    """Part of the distributed stress set, reported apart from the main suite."""


# ---------------------------------------------------------------------------------------------
# The suite
# ---------------------------------------------------------------------------------------------


def make_profile(model: Model, ctx_k: int, rng: random.Random) -> MemoryProfile:
    weights = tuple(
        (model.block_mib * (5 if i % 4 == 3 else 4) // 4 + rng.randrange(4)) * MiB for i in range(model.blocks)
    )
    kv = round(model.kv_mib_per_1k * ctx_k * MiB)
    role = RoleCosts(
        fixed_bytes=650 * MiB,
        compute=ComputeBuffer(
            full_offload_bytes=(280 + ctx_k) * MiB,
            partial_offload_bytes=(560 + 4 * ctx_k) * MiB,
            multi_device_bytes=(300 + ctx_k) * MiB,
        ),
    )
    return MemoryProfile(
        block_weight_bytes=weights,
        block_kv_bytes=(kv,) * model.blocks,
        output_weight_bytes=model.output_mib * MiB,
        token_embedding_bytes=model.output_mib * MiB,
        main=role.model_copy(update={"fixed_bytes": 700 * MiB}),
        local=role,
        rpc=role,
        unified=RoleCosts(compute=role.compute),
        host_fixed_bytes=300 * MiB,
        host_compute=ComputeBuffer(full_offload_bytes=60 * MiB, partial_offload_bytes=(300 + 8 * ctx_k) * MiB),
        rpc_host_fixed_bytes=120 * MiB,
        output_compute_bytes=(20 + ctx_k // 2) * MiB,
        first_device_compute_bytes=40 * MiB,
    )


def loaded(total: int, rng: random.Random, busy: float) -> int:
    """Allocatable after existing load: a share of devices carries 10-90 % load, in whole MiB."""
    if rng.random() >= busy:
        return total
    return total - int(total * rng.uniform(0.1, 0.9)) // MiB * MiB


def make_cluster(n_gpus: int, rng: random.Random) -> Cluster:
    """A datacenter fleet (8-GPU nodes of 24-141 GiB) or a consumer fleet (1-4 GPUs of 16-48 GiB,
    more Macs), with no, some or much existing load."""
    sizes, shapes, unified_share = FLAVOURS[rng.choice(("datacenter", "datacenter", "consumer"))]
    workers: list[Worker] = []
    left = n_gpus
    busy = rng.choice((0.0, 0.3, 0.6))
    while left:
        name = f"w{len(workers):04d}"
        if rng.random() < unified_share:
            workers.append(unified_worker(name, rng, busy))
            left -= 1
            continue
        count = min(left, rng.choice(shapes))
        size = rng.choice(sizes) * GiB
        gpus = tuple(
            Gpu(index=i, total_vram_bytes=size, allocatable_vram_bytes=loaded(size, rng, busy)) for i in range(count)
        )
        ram = rng.choice((128, 256, 512, 1024)) * GiB
        workers.append(
            Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=loaded(ram, rng, busy), gpus=gpus)
        )
        left -= count
    return Cluster(workers=tuple(workers))


def unified_worker(name: str, rng: random.Random, busy: float) -> Worker:
    """An Apple-style worker: one GPU on a shared pool, three quarters of it usable as VRAM."""
    pool = rng.choice((64, 128, 192, 512)) * GiB
    vram = pool * 3 // 4
    gpu = Gpu(index=0, type="metal", total_vram_bytes=vram, allocatable_vram_bytes=loaded(vram, rng, busy))
    return Worker(
        id=name,
        name=name,
        unified_memory=True,
        total_ram_bytes=pool,
        allocatable_ram_bytes=loaded(pool, rng, busy),
        gpus=(gpu,),
    )


def make_deployment(where: Cluster, profile: MemoryProfile, rng: random.Random) -> Deployment:
    selection = None
    if rng.random() < 0.1:
        chosen = rng.sample(where.workers, k=min(len(where.workers), rng.choice((1, 1, 2))))
        refs = [GpuRef(worker=w.name, type=g.type, index=g.index) for w in chosen for g in w.gpus]
        selection = tuple(rng.sample(refs, k=min(len(refs), rng.randint(1, 4))))
    ngl = rng.randint(1, profile.n_layers) if rng.random() < 0.1 else None
    return Deployment(
        name="bench",
        profile=profile,
        params=LlamaParams(n_gpu_layers=ngl),
        cpu_offloading=rng.random() < 0.8,
        distributed_inference_across_workers=rng.random() < 0.5
        or (selection is not None and len({r.worker for r in selection}) > 1),
        gpu_selection=selection,
    )


def make_stress(count: int, seed: int, time_limit_s: float) -> list[Case]:
    """1,024 GPUs of at most 48 GiB and a large model: only several workers together hold it."""
    cases = []
    sizes, shapes, _ = FLAVOURS["consumer"]
    for index in range(count):
        rng = random.Random(f"{seed}-stress-{index}")
        model = rng.choice([m for m in MODELS if m.name in STRESS_MODELS])
        profile = make_profile(model, rng.choice((8, 16, 32)), rng)
        busy = rng.choice((0.0, 0.3, 0.6))
        workers: list[Worker] = []
        left = STRESS_GPUS
        while left:
            count_here = min(left, rng.choice(shapes))
            size = rng.choice(sizes) * GiB
            name = f"w{len(workers):04d}"
            gpus = tuple(
                Gpu(index=i, total_vram_bytes=size, allocatable_vram_bytes=loaded(size, rng, busy))
                for i in range(count_here)
            )
            ram = rng.choice((128, 256)) * GiB
            workers.append(
                Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=loaded(ram, rng, busy), gpus=gpus)
            )
            left -= count_here
        deployment = Deployment(
            name="stress", profile=profile, distributed_inference_across_workers=True, cpu_offloading=rng.random() < 0.5
        )
        config = PlannerConfig(policy=rng.choice(list(Policy)), time_limit_s=time_limit_s, seed=seed, alternatives=0)
        cluster = Cluster(workers=tuple(workers))
        cases.append(Case(STRESS_GPUS, index, cluster, deployment, profile, config, model.name, stress=True))
    return cases


def make_suite(sizes: dict[int, int], seed: int, time_limit_s: float) -> list[Case]:
    cases = []
    for n_gpus, count in sizes.items():
        for index in range(count):
            rng = random.Random(f"{seed}-{n_gpus}-{index}")
            model = rng.choice(MODELS)
            profile = make_profile(model, rng.choice((4, 8, 16, 32)), rng)
            where = make_cluster(n_gpus, rng)
            config = PlannerConfig(
                policy=rng.choice(list(Policy)), time_limit_s=time_limit_s, seed=seed, alternatives=rng.choice((0, 3))
            )
            cases.append(Case(n_gpus, index, where, make_deployment(where, profile, rng), profile, config, model.name))
    return cases
