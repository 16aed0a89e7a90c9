"""check(): one feasible/infeasible pair per rule, each violation typed and located."""

from __future__ import annotations

import pytest

from layerfit.check import check, check_layout
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    Gpu,
    GpuRef,
    Layout,
    LlamaParams,
    MemoryProfile,
    ModelKind,
    OffloadOrder,
    Plan,
    PlannerConfig,
    ReasonKind,
    Status,
    Worker,
)
from layerfit.memory import make_layout
from layerfit.planning.planner import evaluate

# 10 blocks of 100 (weights 90 + KV 10), output 50, every GPU costs 200 fixed + 0 compute.
# Full offload on one GPU: 10*100 + 50 + 200 = 1250. Host RAM: 0 at full offload.
PROFILE = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)


def worker(name: str, *vram: int, ram: int = 10_000, unified: bool = False) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(vram))
    return Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus, unified_memory=unified)


CLUSTER = Cluster(workers=(worker("a", 1250, 700), worker("b", 800), worker("u", 2000, ram=1000, unified=True)))


def dev(w: str, i: int, blocks: int) -> DeviceAssignment:
    return DeviceAssignment(worker=w, gpu_index=i, blocks=blocks)


def deployment(**kwargs: object) -> Deployment:
    return Deployment(name="m", profile=PROFILE, **kwargs)  # type: ignore[arg-type]


def kinds(dep: Deployment, layout: Layout, config: PlannerConfig = PlannerConfig()) -> list[ReasonKind]:
    return [reason.kind for reason in check_layout(CLUSTER, dep, PROFILE, layout, config)]


FULL_A0 = make_layout("a", 10, [dev("a", 0, 10)])


def test_fits_exactly() -> None:
    assert kinds(deployment(), FULL_A0) == []


def test_over_capacity_names_device_and_shortfall() -> None:
    # a:1 has 700: 4 blocks (400) + fixed 200 = 600 fits; a:0 gets 6 blocks + output = 600+50+200 = 850.
    ok = make_layout("a", 10, [dev("a", 1, 4), dev("a", 0, 6)])
    assert kinds(deployment(), ok) == []
    # 5 blocks on a:1: 500 + 200 = 700 still fits; 6 blocks: 800 > 700, short by 100.
    bad = make_layout("a", 10, [dev("a", 1, 6), dev("a", 0, 4)])
    (reason,) = check_layout(CLUSTER, deployment(), PROFILE, bad)
    assert (reason.kind, reason.worker, reason.gpu_index, reason.needed_bytes, reason.available_bytes) == (
        ReasonKind.INSUFFICIENT_VRAM,
        "a",
        1,
        800,
        700,
    )
    assert reason.shortfall_bytes == 100


def test_ram_and_unified_pool() -> None:
    # CPU only: RAM = 10 blocks * 100 + output 50 = 1050 > b's... use a worker with 1000 RAM: u (unified).
    cpu_only = make_layout("u", 10, [])
    assert kinds(deployment(), cpu_only) == [ReasonKind.INSUFFICIENT_UNIFIED_MEMORY]
    # u: full offload on its GPU = 1250 VRAM (fits 2000) but the pool (1000) must hold VRAM + RAM.
    assert kinds(deployment(), make_layout("u", 10, [dev("u", 0, 10)])) == [ReasonKind.INSUFFICIENT_UNIFIED_MEMORY]
    small = Cluster(workers=(worker("a", 1250, ram=100),))
    reasons = check_layout(small, deployment(), PROFILE, make_layout("a", 10, [dev("a", 0, 5)]))
    assert [r.kind for r in reasons] == [ReasonKind.INSUFFICIENT_RAM]


def test_unknown_worker_and_gpu() -> None:
    assert kinds(deployment(), make_layout("z", 10, [])) == [ReasonKind.UNKNOWN_WORKER]
    assert kinds(deployment(), make_layout("a", 10, [dev("a", 7, 10)])) == [ReasonKind.UNKNOWN_GPU]


def test_gpu_layers_honoured() -> None:
    # -ngl 6 (output first) = output + 5 blocks.
    dep = deployment(params=LlamaParams(n_gpu_layers=6))
    assert kinds(dep, make_layout("a", 10, [dev("a", 0, 5)])) == []
    assert kinds(dep, FULL_A0) == [ReasonKind.GPU_LAYERS_NOT_HONOURED]
    # -ngl above the layer count means full offload.
    assert kinds(deployment(params=LlamaParams(n_gpu_layers=999)), FULL_A0) == []


def test_tensor_split_honoured() -> None:
    dep = deployment(params=LlamaParams(tensor_split=(1, 1)))
    # 11 layers over 1:1 -> 6 / 5 layers: 6 blocks / 4 blocks + output.
    assert kinds(dep, make_layout("a", 10, [dev("a", 0, 6), dev("a", 1, 4)])) == []
    # 4 / 6 + output: not the user's ratio, and a:1 (700) cannot hold 6 blocks + output + fixed = 850.
    assert kinds(dep, make_layout("a", 10, [dev("a", 0, 4), dev("a", 1, 6)])) == [
        ReasonKind.TENSOR_SPLIT_NOT_HONOURED,
        ReasonKind.INSUFFICIENT_VRAM,
    ]
    assert kinds(dep, FULL_A0) == [ReasonKind.TENSOR_SPLIT_NOT_HONOURED]


def test_manual_selection_honoured() -> None:
    dep = deployment(gpu_selection=(GpuRef.parse("a:cuda:0"),))
    assert kinds(dep, FULL_A0) == []
    kinds_off = kinds(dep, make_layout("u", 10, [dev("u", 0, 10)]))
    assert ReasonKind.SELECTION_IGNORED in kinds_off


def test_switches_rpc_cap_and_image_models() -> None:
    partial = make_layout("a", 10, [dev("a", 0, 5)])
    assert kinds(deployment(cpu_offloading=False), partial) == [ReasonKind.CPU_OFFLOAD_NOT_ALLOWED]
    distributed = make_layout("a", 10, [dev("b", 0, 5), dev("a", 0, 5)])
    assert kinds(deployment(distributed_inference_across_workers=True), distributed) == []
    assert kinds(deployment(), distributed) == [ReasonKind.DISTRIBUTION_NOT_ALLOWED]
    capped = PlannerConfig(max_rpc_servers=0 + 1)
    two_rpc = make_layout("a", 10, [dev("b", 0, 3), dev("u", 0, 3), dev("a", 0, 4)])
    dep = deployment(distributed_inference_across_workers=True)
    assert ReasonKind.TOO_MANY_RPC_SERVERS in kinds(dep, two_rpc, capped)
    image = deployment(kind=ModelKind.IMAGE)
    assert kinds(image, FULL_A0) == []
    assert kinds(image, make_layout("a", 10, [dev("a", 1, 4), dev("a", 0, 6)])) == [ReasonKind.IMAGE_MODEL_SPLIT]
    # one GPU, but behind an rpc-server of another worker: not for image models
    remote = make_layout("b", 10, [dev("a", 0, 10)])
    assert kinds(deployment(kind=ModelKind.IMAGE, distributed_inference_across_workers=True), remote) == [
        ReasonKind.IMAGE_MODEL_SPLIT
    ]


def test_offload_order() -> None:
    no_output = Layout(main_worker="a", n_blocks=10, devices=(dev("a", 0, 5),), output_offloaded=False)
    assert kinds(deployment(), no_output) == [ReasonKind.OFFLOAD_ORDER]
    legacy = PlannerConfig(offload_order=OffloadOrder.OUTPUT_LAST)
    assert kinds(deployment(), no_output, legacy) == []
    assert kinds(deployment(), make_layout("a", 10, [dev("a", 0, 5)]), legacy) == [ReasonKind.OFFLOAD_ORDER]


def test_check_plan_catches_wrong_claims() -> None:
    plan = evaluate(CLUSTER, deployment(), FULL_A0)
    assert plan.status is Status.FEASIBLE and check(CLUSTER, deployment(), plan, PROFILE) == ()
    assert plan.best is not None
    other = evaluate(CLUSTER, deployment(), make_layout("a", 10, [dev("a", 0, 9)]))
    assert other.best is not None
    forged = Plan(
        deployment="m", status=Status.FEASIBLE, best=plan.best.model_copy(update={"claims": other.best.claims})
    )
    assert [r.kind for r in check(CLUSTER, deployment(), forged, PROFILE)] == [ReasonKind.CLAIMS_MISMATCH]


@pytest.mark.parametrize("layout", [FULL_A0, make_layout("a", 10, [dev("b", 0, 5), dev("a", 0, 5)])])
def test_check_accepts_bare_layouts(layout: Layout) -> None:
    dep = deployment(distributed_inference_across_workers=True)
    assert check(CLUSTER, dep, layout, PROFILE) == check_layout(CLUSTER, dep, PROFILE, layout)


def test_tensor_split_output_layer_on_the_device_llama_cpp_chooses() -> None:
    # -ts 10,1 with -ngl 11 over 10 blocks: splits [10/11, 1]; positions 0..9 (the blocks) fall below
    # 10/11 and go to the first device, position 10 (the output layer) goes to the second...
    dep = deployment(params=LlamaParams(tensor_split=(10, 1)))
    good = make_layout("a", 10, [dev("a", 0, 10), dev("a", 1, 0)])
    assert kinds(dep, good) == []
    # ...but with -ts 20,1 the output layer lands on the first device too, so a layout that puts it
    # alone on a second device is not what llama.cpp would build.
    dep = deployment(params=LlamaParams(tensor_split=(20, 1)))
    assert kinds(dep, good) == [ReasonKind.TENSOR_SPLIT_NOT_HONOURED]


def test_tensor_split_device_left_empty_at_a_low_ngl() -> None:
    # -ts 1,1,1 -ngl 2: llama.cpp puts block 9 on the first device and the output layer on the
    # second (fractions 0 and 1/2 against splits 1/3, 2/3, 1); the third holds nothing, so the
    # layout is the first two devices. Over a selection used whole llama.cpp is given all three
    # GPUs, and each selected GPU must hold a layer.
    dep = deployment(params=LlamaParams(tensor_split=(1, 1, 1), n_gpu_layers=2))
    two = make_layout("a", 10, [dev("a", 0, 1), dev("a", 1, 0)])
    assert kinds(dep, two) == []
    assert kinds(dep, make_layout("a", 10, [dev("a", 0, 1)])) == [ReasonKind.TENSOR_SPLIT_NOT_HONOURED]
    whole = dep.model_copy(update={"gpu_selection": (GpuRef.parse("a:cuda:0"), GpuRef.parse("a:cuda:1"))})
    assert kinds(whole, two) == []  # the selection's two GPUs read the first two shares: 1, 1
    three = Cluster(workers=(worker("a", 1250, 700, 700),))
    selected = tuple(GpuRef.parse(f"a:cuda:{i}") for i in range(3))
    reasons = check_layout(three, dep.model_copy(update={"gpu_selection": selected}), PROFILE, two)
    assert [reason.kind for reason in reasons] == [ReasonKind.TENSOR_SPLIT_NOT_HONOURED]
