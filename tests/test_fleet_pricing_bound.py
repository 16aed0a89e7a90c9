"""The pricing relaxation in bytes (``fleet.pricing_bound``) against every valid layout.

Layouts are enumerated on tiny clusters: any main worker, any ordered set of distinct GPUs (of
other workers too when the deployment is distributed), any split of the GPU blocks, blocks kept
on the host, the output layer on a GPU or not; ``check_layout`` keeps the valid ones. The bound
must be at least every valid layout's exact value under the prices, and equal to it where the
relaxation is exact (so a bound made tighter fails).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fleet import worker

from layerfit.check import check_layout, unified_workers
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
    RoleCosts,
)
from layerfit.fleet import pricing_bound
from layerfit.fleet.prices import Prices, claim_value
from layerfit.fleet.pricing import price
from layerfit.fleet.pricing_bound import relaxed_bound
from layerfit.memory import claims

PLANNER = PlannerConfig(time_limit_s=2.0, num_search_workers=1)
N_BLOCKS = 3


def profile(blocks_mib: list[int], fixed_mib: tuple[int, int, int], compute_mib: tuple[int, int]) -> MemoryProfile:
    full, partial = compute_mib
    main, local, rpc = (
        RoleCosts(
            fixed_bytes=f * MiB,
            compute=ComputeBuffer(full_offload_bytes=full * MiB, partial_offload_bytes=(full + partial) * MiB),
        )
        for f in fixed_mib
    )
    return MemoryProfile(
        block_weight_bytes=tuple(b * MiB for b in blocks_mib),
        block_kv_bytes=tuple(b * MiB // 8 for b in blocks_mib),
        output_weight_bytes=300 * MiB,
        token_embedding_bytes=300 * MiB,
        main=main,
        local=local,
        rpc=rpc,
        host_fixed_bytes=100 * MiB,
        host_compute=ComputeBuffer(full_offload_bytes=20 * MiB, partial_offload_bytes=40 * MiB),
        rpc_host_fixed_bytes=50 * MiB,
    )


def every_layout(cluster: Cluster, deployment: Deployment) -> list[Layout]:
    """Every layout shape on ``cluster`` (valid or not: ``check_layout`` decides)."""
    gpus = [(w.name, g.index) for w in cluster.workers for g in w.gpus]
    layouts = []
    for main in cluster.workers:
        usable = [g for g in gpus if deployment.distributed_inference_across_workers or g[0] == main.name]
        layouts += [Layout(main_worker=main.name, n_blocks=N_BLOCKS)]  # every layer on the host
        for k in range(1, len(usable) + 1):
            for chosen in itertools.permutations(usable, k):
                for gpu_blocks in range(k, N_BLOCKS + 1):
                    for cuts in itertools.product(range(1, gpu_blocks + 1), repeat=k):
                        if sum(cuts) != gpu_blocks:
                            continue
                        devices = tuple(
                            DeviceAssignment(worker=w, gpu_index=i, blocks=b)
                            for (w, i), b in zip(chosen, cuts, strict=True)
                        )
                        for output in (False, True):
                            try:
                                layout = Layout(
                                    main_worker=main.name, n_blocks=N_BLOCKS, devices=devices, output_offloaded=output
                                )
                            except ValueError:  # not a layout at all (RPC servers after local GPUs, ...)
                                continue
                            layouts.append(layout)
    return layouts


def best_value(cluster: Cluster, deployment: Deployment, prices: Prices) -> float | None:
    assert deployment.profile is not None
    unified = unified_workers(cluster)
    values = [
        claim_value(cluster, prices, layout, claims(deployment.profile, layout, unified))
        for layout in every_layout(cluster, deployment)
        if not check_layout(cluster, deployment, deployment.profile, layout, PLANNER)
    ]
    return max(values, default=None)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Cluster, Deployment, Prices]:
    sizes = [draw(st.lists(st.sampled_from([2, 3, 4, 6]), min_size=1, max_size=2)) for _ in range(2)]
    cluster = Cluster(workers=tuple(worker(f"w{i}", *gib) for i, gib in enumerate(sizes)))
    blocks = draw(st.lists(st.sampled_from([300, 700, 1200]), min_size=N_BLOCKS, max_size=N_BLOCKS))
    fixed = draw(st.tuples(*(st.sampled_from([100, 400]) for _ in range(3))))
    compute = draw(st.tuples(st.sampled_from([0, 200]), st.sampled_from([0, 300])))
    deployment = Deployment(
        name="d",
        profile=profile(blocks, fixed, compute),
        cpu_offloading=draw(st.booleans()),
        distributed_inference_across_workers=draw(st.booleans()),
    )
    gpus = [(w.name, g.index) for w in cluster.workers for g in w.gpus]
    per_mib = st.sampled_from([0.0, 0.0, 1e-4, 1e-3, 4e-3])
    opening = st.sampled_from([0.0, 0.0, 0.5, 2.0])
    prices = Prices(
        gpu={gpu: draw(per_mib) for gpu in gpus},
        worker={w.name: draw(per_mib) for w in cluster.workers},
        layer_value=draw(st.sampled_from([0.0, 1.0, 3.0])),
        gpu_open={gpu: draw(opening) for gpu in gpus},
        worker_open={w.name: draw(opening) for w in cluster.workers},
    )
    return cluster, deployment, prices


@settings(max_examples=60, deadline=None)
@given(cases())
def test_relaxation_bounds_every_valid_layout(case: tuple[Cluster, Deployment, Prices]) -> None:
    cluster, deployment, prices = case
    assert deployment.profile is not None
    bound = relaxed_bound(cluster, deployment, deployment.profile, prices)
    # the fractional knapsack (used on many GPUs) bounds the one in whole blocks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pricing_bound, "EXACT_GPUS", 0)
        assert relaxed_bound(cluster, deployment, deployment.profile, prices) >= bound - 1e-9
    best = best_value(cluster, deployment, prices)
    if best is None:
        return
    assert bound >= best - 1e-9, (bound, best)
    # and never above what a layer is worth with nothing priced
    assert bound <= prices.layer_value * deployment.profile.n_layers + 1e-9


def test_relaxation_is_exact_on_one_gpu() -> None:
    # One GPU, a full offload that fills it exactly: the only valid layout pays the GPU's price on
    # every byte the relaxation counts (fixed, compute, blocks, output): the bound is its value.
    # A bound made tighter (a byte more per block, the fixed cost paid twice) falls below it.
    p = profile([500, 500, 500], (400, 400, 400), (200, 0))
    need = 3 * 500 * MiB + 3 * (500 * MiB // 8) + 400 * MiB + 200 * MiB + 300 * MiB
    gpu = worker("w", 8).gpus[0].model_copy(update={"allocatable_vram_bytes": need})
    cluster = Cluster(workers=(worker("w", 8).model_copy(update={"gpus": (gpu,)}),))
    deployment = Deployment(name="d", profile=p, cpu_offloading=False)
    prices = Prices(gpu={("w", 0): 2e-3}, layer_value=1.0, gpu_open={("w", 0): 0.25}, worker_open={"w": 0.5})
    best = best_value(cluster, deployment, prices)
    assert best is not None
    assert abs(relaxed_bound(cluster, deployment, p, prices) - best) < 1e-9
    # more room on the GPU changes nothing (the blocks it can hold are capped by the model's)
    roomy = Cluster(workers=(worker("w", 8),))
    assert abs(relaxed_bound(roomy, deployment, p, prices) - best_value(roomy, deployment, prices)) < 1e-9  # type: ignore[operator]


def test_relaxation_tightens_pricing_of_a_distributed_deployment() -> None:
    # Every GPU priced at about one layer per block: CP-SAT's own bound on a distributed
    # deployment's pricing problem stays near the trivial one (every layer, nothing paid) when cut
    # short; the relaxation bounds it by what a layer is worth beyond its bytes.
    clusters = Cluster(workers=tuple(worker(f"w{i}", 4, 4) for i in range(3)))
    p = profile([700, 700, 700], (400, 400, 400), (200, 300))
    deployment = Deployment(name="d", profile=p, cpu_offloading=False, distributed_inference_across_workers=True)
    gpus = {(w.name, g.index): 1.0 / (700 + 700 // 8) for w in clusters.workers for g in w.gpus}
    prices = Prices(gpu=gpus, layer_value=1.0)
    priced = price(clusters, deployment, p, PLANNER, prices, 1e-4)
    best = best_value(clusters, deployment, prices)
    assert best is not None and priced.bound >= best - 1e-9
    assert priced.bound <= relaxed_bound(clusters, deployment, p, prices) < 1.0
    assert priced.bound < prices.layer_value * p.n_layers / 2  # far below the trivial 4
