"""A manual GPU selection is never left by any engine, also with a user -ts; used whole by default.

Property: on random clusters, selections, splits and switches, no plan of the heuristic, the
planner (heuristic + solver) or the fleet planner puts a device outside the selection or its main
process on an unselected worker; with the default semantics every plan uses every selected GPU
(or, with a -ts, exactly as many devices as the shares llama.cpp reads over the selection).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_heuristic_properties import clusters, profiles

from layerfit import heuristics
from layerfit.check import check_layout
from layerfit.domain import Cluster, Deployment, GiB, Gpu, LlamaParams, MemoryProfile, PlannerConfig, Worker
from layerfit.domain.fleet import Fleet
from layerfit.domain.layout import Layout
from layerfit.domain.plan import ReasonKind
from layerfit.domain.selection import tensor_split_in_force
from layerfit.fleet import plan_fleet
from layerfit.memory import device_blocks
from layerfit.planning import planner

CONFIG = PlannerConfig(time_limit_s=2.0)


@st.composite
def selected(draw: st.DrawFn) -> tuple[Cluster, Deployment, PlannerConfig]:
    cluster = draw(clusters(workers_range=(1, 3), gpus_range=(1, 3), vram_range=(100, 3000), ram_range=(500, 4000)))
    gpus = [f"{worker.name}:cuda:{gpu.index}" for worker in cluster.workers for gpu in worker.gpus]
    chosen = draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=len(gpus), unique=True))
    share_lists = st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=1, max_size=len(chosen) + 2)
    shares = draw(st.none() | share_lists.filter(any))
    deployment = Deployment(
        name="m",
        profile=draw(profiles()),
        gpu_selection=tuple(chosen),
        params=LlamaParams(tensor_split=None if shares is None else tuple(shares)),
        cpu_offloading=draw(st.booleans()),
        distributed_inference_across_workers=draw(st.booleans()),
    )
    return cluster, deployment, CONFIG.model_copy(update={"selection_is_pool": draw(st.booleans())})


def assert_within(deployment: Deployment, layout: Layout | None, config: PlannerConfig) -> None:
    if layout is None:
        return
    refs = deployment.gpu_selection or ()
    chosen = {(ref.worker, ref.index) for ref in refs}
    assert {(device.worker, device.gpu_index) for device in layout.devices} <= chosen
    assert layout.main_worker in deployment.selected_workers
    if not config.selection_is_pool:
        split = tensor_split_in_force(deployment, config)
        wanted = len(chosen) if split is None else sum(1 for share in split if share > 0)
        assert len(layout.devices) == wanted


@settings(max_examples=max(10, settings.default.max_examples // 8))  # 50 under the ci profile
@given(selected())
def test_no_engine_leaves_the_selection(case: tuple[Cluster, Deployment, PlannerConfig]) -> None:
    cluster, deployment, config = case
    quick = heuristics.plan(cluster, deployment, config)
    full = planner.plan(cluster, deployment, config, explain=False)
    for result in (quick, full):
        for candidate in (*((result.best,) if result.best else ()), *result.alternatives):
            assert_within(deployment, candidate.layout, config)
    fleet = plan_fleet(Fleet(cluster=cluster, deployments=(deployment,)), planner_config=config)
    for placed in fleet.placements:
        assert_within(deployment, placed.layout, config)


def _cluster() -> Cluster:
    gpus = tuple(Gpu(index=i, total_vram_bytes=24 * GiB, allocatable_vram_bytes=24 * GiB) for i in range(4))
    worker = Worker(id=0, name="w", total_ram_bytes=256 * GiB, allocatable_ram_bytes=256 * GiB, gpus=gpus)
    other = worker.model_copy(update={"id": 1, "name": "v"})
    return Cluster(workers=(worker, other))


SMALL = MemoryProfile.uniform(10, 1 * GiB, 64 << 20, output_weight_bytes=1 * GiB, gpu_fixed_bytes=256 << 20)


def test_a_tensor_split_no_longer_moves_a_plan_off_the_selection() -> None:
    # GPUStack (and layerfit before) let -ts override the selection and map onto w:0, w:1.
    deployment = Deployment(
        name="m", profile=SMALL, gpu_selection=("v:cuda:2", "v:cuda:3"), params=LlamaParams(tensor_split=(1.0, 1.0))
    )
    result = planner.plan(_cluster(), deployment, CONFIG)
    assert result.layout is not None
    assert [(d.worker, d.gpu_index) for d in result.layout.devices] == [("v", 2), ("v", 3)]


def test_every_selected_gpu_is_used_unless_the_selection_is_a_pool() -> None:
    deployment = Deployment(name="m", profile=SMALL, gpu_selection=("w:cuda:0", "w:cuda:1", "w:cuda:2"))
    whole = planner.plan(_cluster(), deployment, CONFIG)
    assert whole.layout is not None and len(whole.layout.devices) == 3  # the model fits on one GPU
    pool = planner.plan(_cluster(), deployment, CONFIG.model_copy(update={"selection_is_pool": True}))
    assert pool.layout is not None and len(pool.layout.devices) == 1
    reasons = check_layout(_cluster(), deployment, SMALL, pool.layout, CONFIG)
    assert [reason.kind for reason in reasons] == [ReasonKind.SELECTION_IGNORED]


def test_extra_shares_are_dropped_as_llama_cpp_does() -> None:
    # Over two selected GPUs llama.cpp reads the first two shares of 3,1,5.
    deployment = Deployment(
        name="m", profile=SMALL, gpu_selection=("w:cuda:0", "w:cuda:1"), params=LlamaParams(tensor_split=(3, 1, 5))
    )
    assert tensor_split_in_force(deployment, CONFIG) == (3, 1)
    result = planner.plan(_cluster(), deployment, CONFIG)
    expected, _ = device_blocks(SMALL.n_blocks, SMALL.n_layers, (3, 1))
    assert result.layout is not None and tuple(d.blocks for d in result.layout.devices) == expected
    assert expected != device_blocks(SMALL.n_blocks, SMALL.n_layers, (3, 1, 5))[0][:2]


def test_a_tensor_split_never_rules_out_cpu_only() -> None:
    no_gpus = Cluster(workers=(Worker(id=0, name="w", total_ram_bytes=64 * GiB, allocatable_ram_bytes=64 * GiB),))
    deployment = Deployment(name="m", profile=SMALL, params=LlamaParams(tensor_split=(1.0, 1.0)))
    result = planner.plan(no_gpus, deployment, CONFIG)
    assert result.layout is not None and not result.layout.devices


def test_a_tensor_split_does_not_let_a_whole_selection_go_cpu_only() -> None:
    # -ngl 0 over a selection used whole: without -ts every engine refused, with -ts the planner
    # answered a CPU-only layout that uses none of the selected GPUs.
    cluster = _cluster()
    for split in (None, (1.0, 1.0)):
        deployment = Deployment(
            name="m",
            profile=SMALL,
            gpu_selection=("w:cuda:0", "w:cuda:1"),
            params=LlamaParams(n_gpu_layers=0, tensor_split=split),
        )
        assert heuristics.plan(cluster, deployment, CONFIG).best is None
        assert planner.plan(cluster, deployment, CONFIG, explain=False).layout is None
        cpu_only = Layout(main_worker="w", n_blocks=SMALL.n_blocks, devices=())
        reasons = check_layout(cluster, deployment, SMALL, cpu_only, CONFIG)
        assert ReasonKind.SELECTION_IGNORED in [reason.kind for reason in reasons]
        pool = CONFIG.model_copy(update={"selection_is_pool": True})
        pooled = check_layout(cluster, deployment, SMALL, cpu_only, pool)
        assert ReasonKind.SELECTION_IGNORED not in [reason.kind for reason in pooled]
