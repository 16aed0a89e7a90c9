"""Properties of the heuristic on random clusters, profiles and requests.

* Its fast fit test (memoised canonical claims, a building-block pre-check) says exactly what
  ``memory.claims`` + ``check.capacity_reasons`` say.
* The binary search over layer counts on one GPU finds what a scan of every count finds.
* Every plan passes ``check.check``; no input makes ``plan`` raise.
* The first strategy is complete: a single-GPU plan comes back exactly when some GPU holds the
  whole model, and single-GPU partial offload never misses a count one GPU could hold.
"""

from __future__ import annotations

from hypothesis import event, given
from hypothesis import strategies as st

from layerfit.check import capacity_reasons, check
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Gpu,
    Layout,
    LlamaParams,
    MemoryProfile,
    ModelKind,
    OffloadOrder,
    PlannerConfig,
    Policy,
    RoleCosts,
    Status,
    StrategyClass,
    Worker,
)
from layerfit.heuristics import plan
from layerfit.heuristics.evaluate import Evaluator
from layerfit.heuristics.placement import placement
from layerfit.heuristics.search import largest_fitting
from layerfit.heuristics.views import worker_view
from layerfit.memory import claims, layout_from_flags, make_layout

orders = st.sampled_from(list(OffloadOrder))


def _role(draw: st.DrawFn) -> RoleCosts:
    compute = ComputeBuffer(
        full_offload_bytes=draw(st.integers(0, 150)),
        partial_offload_bytes=draw(st.integers(0, 250)),
        multi_device_bytes=draw(st.none() | st.integers(0, 200)),
    )
    return RoleCosts(fixed_bytes=draw(st.integers(0, 300)), compute=compute)


@st.composite
def profiles(draw: st.DrawFn) -> MemoryProfile:
    n = draw(st.integers(1, 8))
    blocks = st.lists(st.integers(0, 300), min_size=n, max_size=n)
    return MemoryProfile(
        block_weight_bytes=tuple(draw(blocks)),
        block_kv_bytes=tuple(draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))),
        block_host_weight_bytes=draw(st.none() | blocks.map(tuple)),
        output_weight_bytes=draw(st.integers(0, 200)),
        token_embedding_bytes=draw(st.integers(0, 100)),
        main=_role(draw),
        local=_role(draw),
        rpc=_role(draw),
        unified=_role(draw) if draw(st.booleans()) else None,
        host_fixed_bytes=draw(st.integers(0, 200)),
        host_compute=ComputeBuffer(
            full_offload_bytes=draw(st.integers(0, 100)), partial_offload_bytes=draw(st.integers(0, 200))
        ),
        rpc_host_fixed_bytes=draw(st.integers(0, 80)),
        extra_main_gpu_bytes=draw(st.integers(0, 60)),
        output_compute_bytes=draw(st.integers(0, 60)),
        first_device_compute_bytes=draw(st.integers(0, 60)),
        host_output_compute_bytes=draw(st.integers(0, 50)),
    )


@st.composite
def clusters(
    draw: st.DrawFn,
    workers_range: tuple[int, int] = (1, 3),
    gpus_range: tuple[int, int] = (0, 3),
    vram_range: tuple[int, int] = (0, 3000),
    ram_range: tuple[int, int] = (0, 4000),
) -> Cluster:
    workers = []
    for position in range(draw(st.integers(*workers_range))):
        vram = draw(st.lists(st.integers(*vram_range), min_size=gpus_range[0], max_size=gpus_range[1]))
        ram = draw(st.integers(*ram_range))
        gpus = tuple(Gpu(index=i, total_vram_bytes=3000, allocatable_vram_bytes=v) for i, v in enumerate(vram))
        unified = draw(st.booleans()) and len(gpus) <= 1
        workers.append(
            Worker(
                id=position,
                name=f"w{position}",
                total_ram_bytes=4000,
                allocatable_ram_bytes=ram,
                gpus=gpus,
                unified_memory=unified,
            )
        )
    return Cluster(workers=tuple(workers))


def _unified(target: Cluster) -> frozenset[str]:
    return frozenset(worker.name for worker in target.workers if worker.unified_memory)


@given(clusters(), profiles(), orders, st.data())
def test_fast_fit_equals_claims_and_capacity(
    target: Cluster, profile: MemoryProfile, order: OffloadOrder, data: st.DataObject
) -> None:
    views = [worker_view(worker, None) for worker in target.workers]
    with_gpus = [view for view in views if view.all_gpus]
    if not with_gpus:
        return
    main = data.draw(st.sampled_from(with_gpus))
    local = data.draw(st.lists(st.sampled_from(main.all_gpus), min_size=1, unique=True))
    remote_pool = [gpu for view in views if view.name != main.name for gpu in view.all_gpus]
    remote = data.draw(st.lists(st.sampled_from(remote_pool), unique=True)) if remote_pool else []
    devices = (*remote, *local)
    shares = data.draw(st.none() | st.lists(st.integers(1, 5), min_size=len(devices), max_size=len(devices)))
    where = placement(main, devices, None if shares is None else tuple(float(s) for s in shares))
    layers = data.draw(st.integers(1, profile.n_layers))
    evaluator = Evaluator(profile, order)
    verdict = evaluator.evaluate(where, layers)
    if not any(share > 0 for share in where.shares):
        assert not verdict.fits  # nothing allocatable on any of the GPUs
        return
    layout = evaluator.layout(where, layers)
    needed = claims(profile, layout, _unified(target))
    # devices without a share (no allocatable VRAM) take no layer: the placement is the smaller one
    with_share = sum(1 for share in where.shares if share > 0)
    every_device_used = with_share > 0 and len(layout.devices) == with_share
    event(f"fits={verdict.fits}, claims computed={verdict.need is not None}")
    assert verdict.fits == (every_device_used and not capacity_reasons(target, needed))
    if verdict.need is not None:
        by_gpu = {(claim.worker, claim.gpu_index): claim.total_bytes for claim in needed.devices}
        assert verdict.need.device_bytes == tuple(by_gpu.get((gpu.worker, gpu.index), 0) for gpu in devices)
        assert verdict.need.main_ram_bytes == needed.workers[0].ram_bytes
    elif every_device_used:
        # The building-block pre-check rejected it: claims must agree that a GPU overflows.
        assert any(reason.resource == "vram" for reason in capacity_reasons(target, needed))


@given(profiles(), orders, st.integers(0, 3000), st.integers(0, 4000))
def test_bisect_on_one_gpu_equals_a_scan(profile: MemoryProfile, order: OffloadOrder, vram: int, ram: int) -> None:
    gpu = Gpu(index=0, total_vram_bytes=3000, allocatable_vram_bytes=vram)
    view = worker_view(Worker(id=0, name="w", total_ram_bytes=4000, allocatable_ram_bytes=ram, gpus=(gpu,)), None)
    where = placement(view, view.all_gpus)
    evaluator = Evaluator(profile, order)
    top = profile.n_layers - 1
    found = largest_fitting(lambda n: evaluator.evaluate(where, n), 1, top, monotone=True, hopeless=lambda v: False)
    scanned = next((n for n in range(top, 0, -1) if evaluator.evaluate(where, n).fits), None)
    assert (found.n_gpu_layers if found else None) == scanned


def _one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (``integers`` would favour its bounds)."""
    return st.sampled_from([True] + [False] * (n - 1))


@st.composite
def requests(draw: st.DrawFn, target: Cluster, profile: MemoryProfile) -> Deployment:
    refs = [f"{worker.name}:cuda:{gpu.index}" for worker in target.workers for gpu in worker.gpus]
    selection = None
    if refs and draw(_one_in(4)):
        pool = [*refs, "ghost:cuda:0"] if draw(_one_in(5)) else refs
        selection = tuple(draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)))
    tensor_split = None
    if draw(_one_in(5)):
        tensor_split = tuple(float(s) for s in draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
        if sum(tensor_split) == 0:
            tensor_split = (1.0, *tensor_split[1:])
    gpu_layers = draw(st.integers(0, profile.n_layers + 2)) if draw(_one_in(3)) else None
    params = LlamaParams(n_gpu_layers=gpu_layers, tensor_split=tensor_split)
    return Deployment(
        name="m",
        profile=profile,
        params=params,
        gpu_selection=selection,
        cpu_offloading=not draw(_one_in(4)),
        distributed_inference_across_workers=draw(st.booleans()),
        kind=ModelKind.IMAGE if draw(_one_in(10)) else ModelKind.LLM,
    )


configs = st.builds(
    PlannerConfig,
    offload_order=orders,
    policy=st.sampled_from(list(Policy)),
    max_rpc_servers=st.integers(1, 3),
    max_rpc_candidate_gpus=st.integers(1, 4),
    alternatives=st.integers(0, 3),
)


@given(clusters(), profiles(), configs, st.data())
def test_every_plan_passes_check(
    target: Cluster, profile: MemoryProfile, config: PlannerConfig, data: st.DataObject
) -> None:
    dep = data.draw(requests(target, profile))
    result = plan(target, dep, config)
    event(f"strategy={result.strategy}")
    assert check(target, dep, result, profile, config) == ()
    assert (result.status is Status.FEASIBLE) == (result.best is not None)
    assert len(result.alternatives) <= config.alternatives
    if result.best is None:
        assert result.messages and result.reasons


@given(
    clusters(workers_range=(2, 4), gpus_range=(1, 2), vram_range=(200, 1200), ram_range=(1000, 4000)),
    profiles(),
    configs,
    st.data(),
)
def test_distributed_plans_pass_check(
    target: Cluster, profile: MemoryProfile, config: PlannerConfig, data: st.DataObject
) -> None:
    dep = data.draw(requests(target, profile))
    update: dict[str, object] = {"distributed_inference_across_workers": True, "kind": ModelKind.LLM}
    if data.draw(st.booleans()):
        update["params"] = LlamaParams()
    dep = dep.model_copy(update=update)
    result = plan(target, dep, config)
    event(f"strategy={result.strategy}")
    assert check(target, dep, result, profile, config) == ()


@given(clusters(), profiles(), orders)
def test_single_gpu_found_exactly_when_one_gpu_holds_the_model(
    target: Cluster, profile: MemoryProfile, order: OffloadOrder
) -> None:
    dep = Deployment(name="m", profile=profile)
    result = plan(target, dep, PlannerConfig(offload_order=order))
    n = profile.n_blocks
    fitting = [
        (worker.name, gpu.index)
        for worker in target.workers
        for gpu in worker.gpus
        if gpu.allocatable_vram_bytes > 0
        and not capacity_reasons(
            target,
            claims(
                profile,
                make_layout(
                    worker.name, n, [DeviceAssignment(worker=worker.name, gpu_index=gpu.index, blocks=n)], order
                ),
                _unified(target),
            ),
        )
    ]
    assert (result.strategy is StrategyClass.SINGLE_GPU) == bool(fitting)
    if fitting:
        assert result.best is not None
        chosen = (result.best.layout.main_worker, result.best.layout.devices[0].gpu_index)
        assert chosen in fitting


@given(clusters(), profiles(), orders)
def test_partial_offload_holds_at_least_what_any_one_gpu_holds(
    target: Cluster, profile: MemoryProfile, order: OffloadOrder
) -> None:
    dep = Deployment(name="m", profile=profile)
    result = plan(target, dep, PlannerConfig(offload_order=order))
    if result.strategy is not StrategyClass.PARTIAL_OFFLOAD:
        return
    assert result.best is not None
    unified = _unified(target)
    for worker in target.workers:
        for gpu in worker.gpus:
            if gpu.allocatable_vram_bytes == 0:
                continue
            for layers in range(1, profile.n_layers):
                layout = _single_gpu_layout(worker.name, gpu.index, profile.n_blocks, layers, order)
                if not capacity_reasons(target, claims(profile, layout, unified)):
                    assert layers <= result.best.layout.gpu_layers


def _single_gpu_layout(worker: str, index: int, n_blocks: int, layers: int, order: OffloadOrder) -> Layout:
    return layout_from_flags(worker, [(worker, index)], n_blocks, layers, None, order)
