"""The GPUStack-order heuristic: each strategy, each skip rule, the seed's defects, messages, scores.

Every row uses one small model so the expected placements can be worked out by hand:

    10 blocks of 100 bytes (90 weights + 10 KV), output layer 50, every GPU costs 200 fixed,
    no compute buffers, host fixed 100, token embedding 0.

    One GPU, full offload (11 layers):   200 + 10*100 + 50 = 1250 VRAM, RAM 100.
    One GPU, L layers (output first):    200 + 50 + 100*(L-1) = 150 + 100*L VRAM,
                                         RAM 100 + 100*(11-L) (blocks 0 .. 10-L stay on the host).
    CPU only:                            RAM 100 + 10*90 + 10*10 + 50 = 1150.

llama.cpp splits ``-ngl L`` layers over devices by cumulative share: layer ``t`` (0 = first
offloaded, the output layer last) goes to the device whose share interval holds ``t / L``.
Every plan a test makes is also run through ``layerfit.check.check``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from layerfit.check import check
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    GiB,
    Gpu,
    GpuRef,
    LlamaParams,
    MemoryProfile,
    ModelKind,
    OffloadOrder,
    Plan,
    PlannerConfig,
    Policy,
    ReasonKind,
    Severity,
    Status,
    StrategyClass,
    Worker,
)
from layerfit.errors import LayerfitError
from layerfit.gpustack.messages import gpustack_messages
from layerfit.heuristics import plan
from layerfit.heuristics.notes import Action
from layerfit.planning.planner import plan as planner_plan

PROFILE = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200, host_fixed_bytes=100)


def worker(name: str, *vram: int, ram: int = 10_000, unified: bool = False) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=max(v, 1), allocatable_vram_bytes=v) for i, v in enumerate(vram))
    return Worker(
        id=name, name=name, total_ram_bytes=max(ram, 1), allocatable_ram_bytes=ram, gpus=gpus, unified_memory=unified
    )


def cluster(*workers: Worker) -> Cluster:
    return Cluster(workers=workers)


def deployment(
    *,
    ngl: int | None = None,
    ts: tuple[float, ...] | None = None,
    select: tuple[str, ...] | None = None,
    **kwargs: object,
) -> Deployment:
    params = LlamaParams(n_gpu_layers=ngl, tensor_split=ts)
    return Deployment(name="m", profile=PROFILE, params=params, gpu_selection=select, **kwargs)  # type: ignore[arg-type]


def run(target: Cluster, dep: Deployment, config: PlannerConfig = PlannerConfig()) -> Plan:
    result = plan(target, dep, config)
    assert check(target, dep, result, PROFILE, config) == ()
    return result


def placed(result: Plan) -> tuple[StrategyClass | None, tuple[tuple[str, int, int], ...], bool]:
    """(strategy, ((worker, gpu, blocks), ...), output offloaded) of the best candidate."""
    if result.best is None:
        return None, (), False
    layout = result.best.layout
    devices = tuple((device.worker, device.gpu_index, device.blocks) for device in layout.devices)
    return result.best.strategy, devices, layout.output_offloaded


def kinds(result: Plan, strategy: Action | None = None) -> set[ReasonKind]:
    return {reason.kind for reason in result.reasons if strategy is None or reason.strategy == strategy.value}


@dataclass(frozen=True)
class Row:
    name: str
    cluster: Cluster
    deployment: Deployment
    strategy: StrategyClass | None
    devices: tuple[tuple[str, int, int], ...] = ()
    output: bool = True
    config: PlannerConfig = field(default_factory=PlannerConfig)


SINGLE, MULTI, DIST = StrategyClass.SINGLE_GPU, StrategyClass.MULTI_GPU, StrategyClass.DISTRIBUTED
PARTIAL, CPU = StrategyClass.PARTIAL_OFFLOAD, StrategyClass.CPU_ONLY

ROWS = [
    # -- strategy 1: one GPU ------------------------------------------------------------------
    # Both GPUs hold 1250; binpack prefers the fuller one: a 1250/1250 beats b 1250/1300.
    Row(
        "single GPU, tightest fit wins",
        cluster(worker("a", 1250), worker("b", 1300)),
        deployment(),
        SINGLE,
        (("a", 0, 10),),
    ),
    # Defect (a): a:0 is the largest GPU but worker a has RAM 50 < 100. GPUStack stops the whole
    # search there; b:0 (1300) is a valid single-GPU layout.
    Row(
        "single GPU: a worker short of RAM does not hide other workers",
        cluster(worker("a", 2000, ram=50), worker("b", 1300)),
        deployment(),
        SINGLE,
        (("b", 0, 10),),
    ),
    # -- strategy 2: several GPUs of one worker ----------------------------------------------
    # 800+800, split 1:1 over 11 layers: t/11 < 0.5 for t = 0..5 -> a0 blocks 0-5 (200+600 = 800),
    # a1 blocks 6-9 + output (200+400+50 = 650).
    Row("two GPUs of one worker", cluster(worker("a", 800, 800)), deployment(), MULTI, (("a", 0, 6), ("a", 1, 4))),
    # a needs 2 GPUs, b 3 (600 each: 4/4/2 blocks + output -> 600/600/450); fewest GPUs win.
    Row(
        "multi GPU: fewest GPUs across workers",
        cluster(worker("a", 800, 800), worker("b", 600, 600, 600)),
        deployment(),
        MULTI,
        (("a", 0, 6), ("a", 1, 4)),
    ),
    # Defect (c): -ts 1,1 maps onto a:0, a:1 and goes through llama.cpp's split (same as above).
    # GPUStack adds 1+1 = 2 "bytes" up against 1250 and never finds a layout for a user split.
    Row(
        "tensor split honoured on one worker",
        cluster(worker("a", 800, 800)),
        deployment(ts=(1, 1)),
        MULTI,
        (("a", 0, 6), ("a", 1, 4)),
    ),
    # -ts 0,1,1 skips the busy GPU 0 (GPUStack's positional mapping; the workaround its users write).
    Row(
        "tensor split with a zero share",
        cluster(worker("a", 100, 800, 800)),
        deployment(ts=(0, 1, 1)),
        MULTI,
        (("a", 1, 6), ("a", 2, 4)),
    ),
    # -ts skips the single-GPU strategy even though a:0 alone would hold the model.
    Row(
        "tensor split skips single GPU",
        cluster(worker("a", 1300, 1300)),
        deployment(ts=(1, 1)),
        MULTI,
        (("a", 0, 6), ("a", 1, 4)),
    ),
    # -- strategy 3: RPC servers ---------------------------------------------------------------
    # Main a (ties go to the first worker) with its GPU last; b:0 as RPC server takes blocks 0-5.
    Row(
        "distributed over two workers",
        cluster(worker("a", 800), worker("b", 800)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
        DIST,
        (("b", 0, 6), ("a", 0, 4)),
    ),
    # With CPU offloading allowed, distribution still comes before partial offload (GPUStack's order).
    Row(
        "distributed before partial offload",
        cluster(worker("a", 800), worker("b", 800)),
        deployment(distributed_inference_across_workers=True),
        DIST,
        (("b", 0, 6), ("a", 0, 4)),
    ),
    # Three 600s: one RPC server is not enough (b would need 6 blocks = 800); two are:
    # 11 layers over 1:1:1 -> b blocks 0-3 (600), c blocks 4-7 (600), a blocks 8-9 + output (450).
    Row(
        "distributed grows the server count",
        cluster(worker("a", 600), worker("b", 600), worker("c", 600)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
        DIST,
        (("b", 0, 4), ("c", 0, 4), ("a", 0, 2)),
    ),
    # Defect (b): a has the most VRAM (two 800s) but RAM 50 < the main's 100, so it cannot be the
    # main worker (GPUStack picks it and every combination fails on RAM). b becomes main and a:0
    # serves as RPC server (an rpc-server costs no RAM here).
    Row(
        "distributed main worker needs RAM",
        cluster(worker("a", 800, 800, ram=50), worker("b", 800), worker("c", 800)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
        DIST,
        (("a", 0, 6), ("b", 0, 4)),
    ),
    # -- strategy 4: partial offload -----------------------------------------------------------
    # 150 + 100*L <= 800 -> L = 6: output + blocks 5-9 on a:0; RAM 100 + 5*100 = 600.
    Row("partial offload on one GPU", cluster(worker("a", 800)), deployment(), PARTIAL, (("a", 0, 5),)),
    # One GPU: 150 + 100*L <= 500 -> L = 3. Two GPUs 1:1, L = 6 (output + blocks 5-9): t/6 < 0.5
    # for t = 0..2 -> a0 blocks 5-7 (200+300 = 500), a1 blocks 8-9 + output (200+200+50 = 450).
    # L = 7..10 would put at least 4 blocks on a0 (600).
    Row(
        "partial offload on two GPUs", cluster(worker("a", 500, 500)), deployment(), PARTIAL, (("a", 0, 3), ("a", 1, 2))
    ),
    # -ngl 4: output + blocks 7-9 on a:0 (550).
    Row("partial offload with --gpu-layers", cluster(worker("a", 800)), deployment(ngl=4), PARTIAL, (("a", 0, 3),)),
    # Four 400s with -ngl 7: pairs put 4 blocks on the first GPU (600) and triples 3 (500);
    # quads 2/2/2 blocks + output alone (400/400/400/250). GPUStack stops after pairs.
    Row(
        "partial offload with --gpu-layers tries more than two GPUs",
        cluster(worker("a", 400, 400, 400, 400)),
        deployment(ngl=7),
        PARTIAL,
        (("a", 0, 2), ("a", 1, 2), ("a", 2, 2), ("a", 3, 0)),
    ),
    # Older llama.cpp (output last): L blocks cost 200 + 100*L -> 6 blocks (800); output on the host.
    Row(
        "partial offload, output layer last",
        cluster(worker("a", 800)),
        deployment(),
        PARTIAL,
        (("a", 0, 6),),
        output=False,
        config=PlannerConfig(offload_order=OffloadOrder.OUTPUT_LAST),
    ),
    # -- strategy 5: CPU only ------------------------------------------------------------------
    # 1150 RAM; binpack prefers b (1150/1500) over a (1150/2000).
    Row("CPU only", cluster(worker("a", ram=2000), worker("b", ram=1500)), deployment(), CPU, (), output=False),
    # llama.cpp ignores -ts when no layer is on a GPU, so a split never rules out CPU only.
    Row("CPU only with a tensor split", cluster(worker("a", ram=2000)), deployment(ts=(1, 1)), CPU, (), output=False),
    Row("--gpu-layers 0 means CPU only", cluster(worker("a", 2000)), deployment(ngl=0), CPU, (), output=False),
    # GPUs exist but none has allocatable VRAM: CPU only.
    Row("no allocatable VRAM", cluster(worker("a", 0, 0)), deployment(), CPU, (), output=False),
    # Unified memory: the pool must hold VRAM and RAM. Single GPU needs 1250 + 100 = 1350 > 1300;
    # partial offload needs 1350 at every layer count (blocks move between parts of one pool);
    # CPU only needs 1150.
    Row("unified memory pool", cluster(worker("u", 2000, ram=1300, unified=True)), deployment(), CPU, (), output=False),
    Row(
        "same worker without unified memory",
        cluster(worker("u", 2000, ram=1300)),
        deployment(),
        SINGLE,
        (("u", 0, 10),),
    ),
    # -- manual selection -------------------------------------------------------------------
    Row(
        "selection of one GPU",
        cluster(worker("a", 1300), worker("b", 1300)),
        deployment(select=("b:cuda:0",)),
        SINGLE,
        (("b", 0, 10),),
    ),
    Row(
        "selection of two GPUs of one worker",
        cluster(worker("a", 800, 800, 800)),
        deployment(select=("a:cuda:1", "a:cuda:2")),
        MULTI,
        (("a", 1, 6), ("a", 2, 4)),
    ),
    Row(
        "selection across workers",
        cluster(worker("a", 800), worker("b", 800), worker("c", 2000)),
        deployment(select=("a:cuda:0", "b:cuda:0"), distributed_inference_across_workers=True),
        DIST,
        (("b", 0, 6), ("a", 0, 4)),
    ),
    # The selection is never left (GPUStack lets -ts override it): over one selected GPU llama.cpp
    # reads only the first share, so everything goes to b:0.
    Row(
        "tensor split never leaves the selection",
        cluster(worker("a", 800, 800), worker("b", 1300)),
        deployment(ts=(1, 1), select=("b:cuda:0",)),
        SINGLE,
        (("b", 0, 10),),
    ),
    # -ts maps onto the selected GPUs in index order, not onto GPUs 0..n-1.
    Row(
        "tensor split over a selection",
        cluster(worker("a", 800, 800, 800)),
        deployment(ts=(1, 1), select=("a:cuda:2", "a:cuda:1")),
        MULTI,
        (("a", 1, 6), ("a", 2, 4)),
    ),
    # -- --gpu-layers -------------------------------------------------------------------------
    # 99 is capped at the 11 layers, i.e. full offload.
    Row("--gpu-layers above the layer count", cluster(worker("a", 1250)), deployment(ngl=99), SINGLE, (("a", 0, 10),)),
    Row("--gpu-layers 11 on one GPU", cluster(worker("a", 1250)), deployment(ngl=11), SINGLE, (("a", 0, 10),)),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_scenarios(row: Row) -> None:
    result = run(row.cluster, row.deployment, row.config)
    assert result.status is (Status.FEASIBLE if row.strategy else Status.INFEASIBLE)
    assert placed(result) == (row.strategy, row.devices, row.output)


# -- skip rules and infeasible requests --------------------------------------------------------


SKIP_ROWS = [
    # (name, cluster, deployment, strategy whose skip is expected, reason kind, resource)
    (
        "image model: single GPU only",
        cluster(worker("a", 800, 800)),
        deployment(kind=ModelKind.IMAGE),
        Action.MULTI_GPU,
        ReasonKind.IMAGE_MODEL_SPLIT,
        "kind",
    ),
    (
        "no CPU offloading: no partial",
        cluster(worker("a", 800)),
        deployment(cpu_offloading=False),
        Action.PARTIAL,
        ReasonKind.CPU_OFFLOAD_NOT_ALLOWED,
        "cpu_offloading",
    ),
    (
        "no CPU offloading: no CPU only",
        cluster(worker("a", 800)),
        deployment(cpu_offloading=False),
        Action.CPU_ONLY,
        ReasonKind.CPU_OFFLOAD_NOT_ALLOWED,
        "cpu_offloading",
    ),
    (
        "no distribution",
        cluster(worker("a", 800), worker("b", 800)),
        deployment(cpu_offloading=False),
        Action.DISTRIBUTED,
        ReasonKind.DISTRIBUTION_NOT_ALLOWED,
        "distributed_inference_across_workers",
    ),
    (
        "--gpu-layers = total: no partial",
        cluster(worker("a", 800)),
        deployment(ngl=11),
        Action.PARTIAL,
        ReasonKind.STRATEGY_SKIPPED,
        "n_gpu_layers",
    ),
    (
        "--gpu-layers = total: no CPU only",
        cluster(worker("a", 800)),
        deployment(ngl=11),
        Action.CPU_ONLY,
        ReasonKind.STRATEGY_SKIPPED,
        "n_gpu_layers",
    ),
    (
        "selection: no CPU only",
        cluster(worker("a", 800)),
        deployment(select=("a:cuda:0",), ngl=0),
        Action.CPU_ONLY,
        ReasonKind.STRATEGY_SKIPPED,
        "gpu_selection",
    ),
    (
        "one usable GPU: no multi-GPU",
        cluster(worker("a", 800, 0)),
        deployment(cpu_offloading=False),
        Action.MULTI_GPU,
        ReasonKind.STRATEGY_SKIPPED,
        "vram",
    ),
    # 600:600 puts 6 blocks (800) on a:0, so multi-GPU fails and distribution is considered.
    (
        "one GPU worker: no distribution",
        cluster(worker("a", 600, 600)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
        Action.DISTRIBUTED,
        ReasonKind.STRATEGY_SKIPPED,
        "workers",
    ),
]


@pytest.mark.parametrize(
    ("name", "target", "dep", "action", "kind", "resource"), SKIP_ROWS, ids=[r[0] for r in SKIP_ROWS]
)
def test_skip_rules(
    name: str, target: Cluster, dep: Deployment, action: Action, kind: ReasonKind, resource: str
) -> None:
    result = run(target, dep)
    skipped = [reason for reason in result.reasons if reason.strategy == action.value and reason.kind is kind]
    assert [(reason.resource, reason.severity) for reason in skipped] == [(resource, Severity.INFO)]


def test_image_model_fits_only_on_one_gpu() -> None:
    # Two 800s hold the model split (see above), but an image model may not be split.
    result = run(cluster(worker("a", 800, 800)), deployment(kind=ModelKind.IMAGE))
    assert result.status is Status.INFEASIBLE
    assert ReasonKind.IMAGE_MODEL_SPLIT in kinds(result, Action.MULTI_GPU)


def test_gpu_layers_need_cpu_offloading() -> None:
    result = run(cluster(worker("a", 2000)), deployment(ngl=5, cpu_offloading=False))
    assert result.status is Status.INFEASIBLE
    assert len(result.messages) == 1 and "--gpu-layers 5" in result.messages[0]
    assert ReasonKind.CPU_OFFLOAD_NOT_ALLOWED in kinds(result)


def test_gpu_layers_above_total_is_capped_with_a_note() -> None:
    result = run(cluster(worker("a", 1250)), deployment(ngl=99))
    capped = [reason for reason in result.reasons if reason.kind is ReasonKind.INVALID_PARAMETER]
    assert [(r.resource, r.severity) for r in capped] == [("n_gpu_layers", Severity.INFO)]
    assert result.best is not None and result.best.layout.gpu_layers == 11


def test_full_gpu_layers_without_room_is_infeasible() -> None:
    # -ngl 11 asks for full offload; 800 holds only 6 layers and partial offload is skipped.
    result = run(cluster(worker("a", 800)), deployment(ngl=11))
    assert result.status is Status.INFEASIBLE and result.best is None


def test_nothing_allocatable_is_a_pre_check_error() -> None:
    result = run(cluster(worker("a", 0, ram=0)), deployment())
    assert result.status is Status.INFEASIBLE
    assert result.messages == ("No available resources for workers. Please check workers's available VRAM.",)


def test_no_allocatable_vram_note_shows_when_nothing_fits() -> None:
    # GPU strategies are skipped with GPUStack's pre-check note; CPU only needs 1150 > 1000 RAM.
    # The pre-check note comes first in GPUStack's display order.
    result = run(cluster(worker("a", 0, ram=1000)), deployment())
    assert result.status is Status.INFEASIBLE
    assert result.messages == ("No available resources for workers. Please check workers's available VRAM.",)


# -- bad input: clear reasons, never exceptions -----------------------------------------------


@pytest.mark.parametrize(
    ("select", "kind"),
    [
        (("z:cuda:0",), ReasonKind.UNKNOWN_WORKER),  # no worker z
        (("a:cuda:5",), ReasonKind.UNKNOWN_GPU),  # worker a has GPUs 0-1
        (("a:rocm:0",), ReasonKind.UNKNOWN_GPU),  # GPU 0 of a is a CUDA GPU
        (("a:cuda:1",), ReasonKind.INSUFFICIENT_VRAM),  # 100 < one layer: min(100 + 200, 50 + 200) = 250
    ],
)
def test_bad_selection_is_a_reason(select: tuple[str, ...], kind: ReasonKind) -> None:
    result = run(cluster(worker("a", 2000, 100)), deployment(select=select))
    assert result.status is Status.INFEASIBLE
    errors = [reason for reason in result.reasons if reason.severity is Severity.ERROR and reason.kind is kind]
    assert len(errors) == 1
    # GPUStack's words: with no selected GPU in the cluster, its pre-check stops at the selection's
    # missing VRAM before it looks at each GPU; otherwise at the GPU
    missing = kind in (ReasonKind.UNKNOWN_WORKER, ReasonKind.UNKNOWN_GPU) and select != ("a:rocm:0",)
    shown = "Selected GPUs need at least 0.00 GiB of available VRAM." if missing else errors[0].message
    assert result.messages == (shown,), result.messages


def test_a_selection_naming_a_missing_worker_or_gpu_is_checked_as_gpustack_checks_it() -> None:
    """GPUStack's scheduler passes its selector only the workers it keeps: a selected GPU it does
    not pass has no VRAM there, and a selected worker it does not pass is named when reached."""
    two = cluster(worker("a", 2000, 2000), worker("b", 2000, 2000))
    gone_gpu = run(two, deployment(select=("a:cuda:0", "a:cuda:7")))
    assert gone_gpu.messages == ("Selected GPU a:cuda:7 lacks enough VRAM. At least 0.00 GiB is required.",)
    across = deployment(select=("a:cuda:0", "b:cuda:0", "z:cuda:0"), distributed_inference_across_workers=True)
    gone_worker = run(two, across)
    assert gone_worker.messages == ("Selected GPUs's worker z not found in the workers list.",)
    assert [reason.kind for reason in gone_worker.reasons if reason.severity is Severity.ERROR][:1] == [
        ReasonKind.UNKNOWN_WORKER
    ]


def test_selected_gpu_too_small_names_the_numbers() -> None:
    result = run(cluster(worker("a", 2000, 100)), deployment(select=("a:cuda:1",)))
    reason = next(reason for reason in result.reasons if reason.kind is ReasonKind.INSUFFICIENT_VRAM)
    assert (reason.needed_bytes, reason.available_bytes, reason.worker, reason.gpu_index) == (250, 100, "a", 1)


def test_selection_across_workers_needs_distribution() -> None:
    result = run(cluster(worker("a", 800), worker("b", 800)), deployment(select=("a:cuda:0", "b:cuda:0")))
    assert result.status is Status.INFEASIBLE
    assert ReasonKind.DISTRIBUTION_NOT_ALLOWED in kinds(result)


def test_tensor_split_longer_than_the_gpu_list() -> None:
    # -ts 1,1,1 needs GPUs 0-2 of one worker; a has two. Partial offload cannot use the split
    # either; CPU only remains, since llama.cpp ignores the split without layers on GPUs.
    result = run(cluster(worker("a", 800, 800, ram=4000)), deployment(ts=(1, 1, 1)))
    assert result.strategy is CPU
    assert ReasonKind.TENSOR_SPLIT_NOT_HONOURED in kinds(result, Action.MULTI_GPU)


def test_tensor_split_across_workers_fixes_the_device_count() -> None:
    # -ts 1,1 with distribution: main a has one GPU, so one RPC server (b:0), shares in order.
    result = run(
        cluster(worker("a", 800), worker("b", 800)),
        deployment(ts=(1, 1), distributed_inference_across_workers=True, cpu_offloading=False),
    )
    assert placed(result) == (DIST, (("b", 0, 6), ("a", 0, 4)), True)


def test_tensor_split_needing_more_servers_than_exist() -> None:
    result = run(
        cluster(worker("a", 800), worker("b", 800)),
        deployment(ts=(1, 1, 1, 1), distributed_inference_across_workers=True, cpu_offloading=False),
    )
    assert result.status is Status.INFEASIBLE
    assert ReasonKind.TENSOR_SPLIT_NOT_HONOURED in kinds(result, Action.DISTRIBUTED)


def test_missing_profile_is_an_input_error() -> None:
    dep = Deployment(name="m", gguf_path="/nonexistent/model.gguf")
    with pytest.raises(LayerfitError):
        plan(cluster(worker("a", 800)), dep)


# -- RPC caps -----------------------------------------------------------------------------------


def test_too_many_rpc_candidates_is_a_warning_and_a_skip() -> None:
    # Four remote 800s > the cap of 3: distribution is skipped with a warning; partial offload
    # (6 layers on one 800) answers, and the warning is the only message.
    workers = (worker("a", 800), *(worker(name, 800) for name in "bcde"))
    config = PlannerConfig(max_rpc_candidate_gpus=3)
    result = run(cluster(*workers), deployment(distributed_inference_across_workers=True), config)
    assert placed(result)[0] is PARTIAL
    warning = next(reason for reason in result.reasons if reason.kind is ReasonKind.TOO_MANY_RPC_CANDIDATES)
    assert warning.severity is Severity.WARNING
    assert result.messages == (warning.message,)


def test_max_rpc_servers_caps_the_combination_size() -> None:
    # Three 600s need two RPC servers for full offload (see the rows above); with one allowed
    # there is no distributed layout.
    target = cluster(worker("a", 600), worker("b", 600), worker("c", 600))
    dep = deployment(distributed_inference_across_workers=True, cpu_offloading=False)
    assert run(target, dep, PlannerConfig(max_rpc_servers=2)).status is Status.FEASIBLE
    assert run(target, dep, PlannerConfig(max_rpc_servers=1)).status is Status.INFEASIBLE


def test_selection_needing_more_servers_than_allowed() -> None:
    target = cluster(worker("a", 600), worker("b", 600), worker("c", 600))
    dep = deployment(
        select=("a:cuda:0", "b:cuda:0", "c:cuda:0"), distributed_inference_across_workers=True, cpu_offloading=False
    )
    result = run(target, dep, PlannerConfig(max_rpc_servers=1))
    assert ReasonKind.TOO_MANY_RPC_SERVERS in kinds(result, Action.DISTRIBUTED)


def test_distributed_partial_offload_keeps_the_most_layers() -> None:
    # a(700) main, b(700) RPC: full offload needs 800 on b. CPU offloading allowed: 10 layers
    # (output + blocks 1-9) split 5/5: b blocks 1-5 (700), a blocks 6-9 + output (650).
    result = run(
        cluster(worker("a", 700), worker("b", 700)),
        deployment(distributed_inference_across_workers=True),
    )
    assert placed(result) == (DIST, (("b", 0, 5), ("a", 0, 4)), True)
    assert result.best is not None and result.best.layout.cpu_blocks == 1


# -- reasons and messages ---------------------------------------------------------------------


def test_rejections_are_typed_with_numbers() -> None:
    # Single GPU on a:0 (1000) needs 1250: the reason says so, by strategy.
    result = run(cluster(worker("a", 1000, 300)), deployment(cpu_offloading=False))
    single = [r for r in result.reasons if r.strategy == Action.SINGLE_GPU.value]
    assert [(r.kind, r.resource, r.needed_bytes, r.available_bytes, r.worker, r.gpu_index) for r in single] == [
        (ReasonKind.INSUFFICIENT_VRAM, "vram", 1250, 1000, "a", 0)
    ]


def test_messages_show_the_first_advice_in_display_order() -> None:
    # Single GPU and multi-GPU both fail and both advise; GPUStack shows the multi-GPU advice.
    # Split 1000:300 of 11 layers: t/11 < 0.77 for t = 0..8 -> a0 9 blocks (1100), a1 block 9 +
    # output (350): 1450 VRAM in all, RAM 100; the worker has 1300 VRAM.
    result = run(cluster(worker("a", 1000, 300)), deployment(cpu_offloading=False))
    assert result.messages == (
        "The model requires approximately 0.00 GiB VRAM and 0.00 GiB RAM. "
        "The largest available worker provides 0.00 GiB VRAM and 0.00 GiB RAM.",
    )
    advice = next(r for r in result.reasons if r.strategy == Action.MULTI_GPU.value)
    assert (advice.needed_bytes, advice.available_bytes, advice.gpu_index) == (1100, 1000, 0)


def test_single_gpu_advice_uses_gpustacks_words() -> None:
    # One selected GPU (a:0, 1000) cannot hold the model (1250): GPUStack's single-GPU advice reads
    # "The available GPU has X GiB VRAM and Y GiB RAM." (the worker's RAM), word for word.
    result = run(cluster(worker("a", 1000)), deployment(cpu_offloading=False, select=("a:cuda:0",)))
    assert result.status is Status.INFEASIBLE
    assert any(message.endswith("The available GPU has 0.00 GiB VRAM and 0.00 GiB RAM.") for message in result.messages)


def test_partial_advice_with_gpu_layers() -> None:
    # -ngl 9 on a(500): 150 + 900 = 1050 > 500; GPUStack advises with the layer count.
    result = run(cluster(worker("a", 500)), deployment(ngl=9))
    assert result.status is Status.INFEASIBLE
    assert len(result.messages) == 1
    assert "to offload 9 layers" in result.messages[0] and result.messages[0].endswith(
        "Try offloading fewer layers to lower resource required."
    )


def test_errors_hide_advice() -> None:
    result = run(cluster(worker("a", 800)), deployment(select=("a:cuda:3",)))
    assert all(reason.severity is Severity.ERROR for reason in result.reasons if reason.message in result.messages)
    assert len(result.messages) == 1


# -- scores and alternatives -----------------------------------------------------------------


def test_binpack_score_and_alternatives() -> None:
    # a: (100 * 100/10000 + 200 * 1250/1250) / 3 = 67.0; b: (1 + 200 * 1250/1300) / 3 = 64.44.
    result = run(cluster(worker("a", 1250), worker("b", 1300)), deployment())
    assert result.best is not None
    assert result.best.score == pytest.approx(67.0)
    assert [c.layout.devices[0].worker for c in result.alternatives] == ["b"]
    assert result.alternatives[0].score == pytest.approx((1 + 200 * 1250 / 1300) / 3)


def test_spread_prefers_headroom() -> None:
    result = run(cluster(worker("a", 1250), worker("b", 1300)), deployment(), PlannerConfig(policy=Policy.SPREAD))
    assert placed(result)[1] == (("b", 0, 10),)


def test_alternatives_are_capped_by_config() -> None:
    result = run(cluster(*(worker(name, 1300) for name in "abcde")), deployment(), PlannerConfig(alternatives=2))
    assert len(result.alternatives) == 2
    assert result.stats[0].details["candidates"] == 5


def test_rpc_score_counts_servers_twice() -> None:
    # Main a:0 holds blocks 8-9 + output: 450 of 600, RAM 100 of 10000 -> (1 + 150) / 3.
    # RPC b:0 and c:0 hold 600 of 600 each -> 200 / 3 each, summed: 400 / 3.
    # GPUStack: (main * 5 + rpc_sum * 2 * 1) / (5 + 2).
    result = run(
        cluster(worker("a", 600), worker("b", 600), worker("c", 600)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
    )
    assert result.best is not None
    assert result.best.score == pytest.approx((151 / 3 * 5 + 400 / 3 * 2) / 7)


def test_stats_name_the_engine_and_strategy() -> None:
    result = run(cluster(worker("a", 1250)), deployment())
    stats = result.stats[0]
    assert (stats.engine, stats.status, stats.details["strategy"]) == (
        "heuristic",
        Status.FEASIBLE,
        Action.SINGLE_GPU.value,
    )


def test_explicit_profile_wins_over_the_deployment() -> None:
    # A profile with 20 blocks needs 2250 on one GPU: does not fit where the deployment's would.
    bigger = MemoryProfile.uniform(20, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200, host_fixed_bytes=100)
    target = cluster(worker("a", 1250, ram=100))
    assert plan(target, deployment(), profile=bigger).status is Status.INFEASIBLE
    assert plan(target, deployment()).status is Status.FEASIBLE


def test_gpu_selection_by_ref_objects() -> None:
    dep = deployment(select=(GpuRef(worker="b", index=0),))  # type: ignore[arg-type]
    assert placed(run(cluster(worker("a", 1300), worker("b", 1300)), dep))[1] == (("b", 0, 10),)


# -- GPUStack's own words when nothing fits (found by benchmarks/gpustack_diff.py) ---------------

GIB_PROFILE = MemoryProfile.uniform(
    10, 9 * GiB // 10, GiB // 10, output_weight_bytes=GiB // 2, gpu_fixed_bytes=2 * GiB, host_fixed_bytes=GiB
)
"""PROFILE in GiB: a block 1 GiB, the output layer 0.5, each GPU 2 fixed, the host 1 fixed."""


@pytest.mark.parametrize(
    ("workers", "kwargs", "shown"),
    [
        # -ngl 5 of 11 without CPU offloading: GPUStack's pre-check error, plain text.
        (
            (worker("a", 20 * GiB, ram=20 * GiB),),
            {"ngl": 5, "cpu_offloading": False},
            "The parameter --gpu-layers 5 requires CPU offloading. "
            "Please allow CPU offloading in the model configuration.",
        ),
        # -ngl 0 without CPU offloading is no error in GPUStack: every strategy is skipped, and its
        # last word names the full offload on one GPU: 2 + 10 + 0.5 = 12.5 GiB VRAM, 1 GiB RAM.
        (
            (worker("a", 20 * GiB, ram=20 * GiB),),
            {"ngl": 0, "cpu_offloading": False},
            "- The model requires approximately 12.5 GiB VRAM and 1.0 GiB RAM.\n"
            "- Cannot find a suitable worker combination to run the model.",
        ),
        # A selection across workers without distribution: GPUStack skips every strategy.
        (
            (worker("a", 20 * GiB, ram=20 * GiB), worker("b", 20 * GiB, ram=20 * GiB)),
            {"select": ("a:cuda:0", "b:cuda:0")},
            "- The model requires approximately 12.5 GiB VRAM and 1.0 GiB RAM.\n"
            "- Selected GPUs do not meet the requirements to run the model.",
        ),
        # -ngl 5 on a 4 GiB GPU: 2 + 0.5 + 4 blocks = 6.5 GiB VRAM, 1 + 6 blocks = 7 GiB RAM;
        # GPUStack's advice keeps its last sentence on the line before it.
        (
            (worker("a", 4 * GiB, ram=10 * GiB),),
            {"ngl": 5},
            "- The model requires approximately 6.5 GiB VRAM and 7.0 GiB RAM to offload 5 layers.\n"
            "- The largest available worker provides 4.0 GiB VRAM and 10.0 GiB RAM. "
            "Try offloading fewer layers to lower resource required.",
        ),
        # Nothing allocatable anywhere, as GPUStack words it: with a selection, the least VRAM of one
        # layer (-ngl 1: the output layer, 2 + 0.5 = 2.5 GiB); without GPUs, the CPU-only advice
        # (1 + 10 blocks + 0.5 = 11.5 GiB RAM).
        (
            (worker("a", 0, ram=0),),
            {"select": ("a:cuda:0",)},
            "Selected GPUs need at least 2.5 GiB of available VRAM.",
        ),
        (
            (worker("a", ram=0),),
            {},
            "- The model requires approximately 11.5 GiB RAM.\n- The largest available worker provides 0.0 GiB RAM.",
        ),
        # That is the CPU strategy's advice: GPUStack has no such pre-check without GPUs. With -ngl 5
        # its partial strategy advises instead, and with nothing to run its last word is shown
        # (layerfit gave the CPU advice whatever the deployment asked).
        (
            (worker("a", ram=0),),
            {"ngl": 5},
            "- The model requires approximately 6.5 GiB VRAM and 7.0 GiB RAM to offload 5 layers.\n"
            "- The largest available worker provides 0.0 GiB VRAM and 0.0 GiB RAM. "
            "Try offloading fewer layers to lower resource required.",
        ),
        (
            (worker("a", ram=0),),
            {"cpu_offloading": False},
            "- The model requires approximately 12.5 GiB VRAM and 1.0 GiB RAM.\n"
            "- Cannot find a suitable worker combination to run the model.",
        ),
        # No GPU in the cluster, -ngl 5 with CPU offloading: GPUStack's allocatable checks let its
        # partial offload run, and its advice prices -ngl 5 on one device as gguf-parser does
        # without -ts (the case above: 6.5 GiB VRAM, 7 GiB RAM) against the first worker, even
        # one with nothing allocatable (found by benchmarks/gpustack_diff.py, seed 10 #56).
        (
            (worker("a", ram=20 * GiB),),
            {"ngl": 5},
            "- The model requires approximately 6.5 GiB VRAM and 7.0 GiB RAM to offload 5 layers.\n"
            "- The largest available worker provides 0.0 GiB VRAM and 20.0 GiB RAM. "
            "Try offloading fewer layers to lower resource required.",
        ),
        (
            (worker("a", ram=0), worker("b", ram=20 * GiB)),
            {"ngl": 5, "ts": (1.0, 1.0)},
            "- The model requires approximately 6.5 GiB VRAM and 7.0 GiB RAM to offload 5 layers.\n"
            "- The largest available worker provides 0.0 GiB VRAM and 0.0 GiB RAM. "
            "Try offloading fewer layers to lower resource required.",
        ),
        # A selection across workers whose GPU b:0 has nothing left: GPUStack counts GPUs with VRAM
        # (one) before it looks at each selected GPU, so its distributed search is skipped without a
        # word and its last word names the selection (found by benchmarks/gpustack_diff.py, seed 18
        # #3: layerfit said b:0 lacked VRAM).
        (
            (worker("a", 20 * GiB, ram=20 * GiB), worker("b", 0, ram=20 * GiB)),
            {"select": ("a:cuda:0", "b:cuda:0"), "distributed_inference_across_workers": True},
            "- The model requires approximately 12.5 GiB VRAM and 1.0 GiB RAM.\n"
            "- Selected GPUs do not meet the requirements to run the model.",
        ),
        # One worker of GPUs beside a CPU-only one, distributed, -ngl 9: GPUStack counts every worker,
        # so its distributed search runs and finds no RPC server (its one-layer floor: the output
        # layer, offloaded first here, 2 + 0.5 = 2.5 GiB); its advice comes before the partial one.
        # layerfit skipped the search.
        (
            (worker("a", 3 * GiB, 3 * GiB, ram=20 * GiB), worker("b", ram=20 * GiB)),
            {"distributed_inference_across_workers": True, "ngl": 9},
            "- The model requires approximately 2.5 GiB VRAM.\n"
            "- Current GPUs lacks enough VRAM to serve as an RPC server.",
        ),
        # No main worker: no GPU holds one layer (2.5 GiB). With -ngl 5 the full-offload strategies
        # are skipped, and the distributed advice comes before the partial one in GPUStack's order.
        (
            (worker("a", 2 * GiB, ram=20 * GiB), worker("b", 2 * GiB, ram=20 * GiB)),
            {"distributed_inference_across_workers": True, "ngl": 5},
            "- The model requires approximately 2.5 GiB VRAM.\n"
            "- No suitable main server found, current GPUs lack enough VRAM to offload a single layer.",
        ),
        # GPUStack checks resources after the parameters and the selection, and only for strategies
        # those leave: the -ngl error hides a too small selected GPU, and so does a selection across
        # workers without distribution (every strategy skipped: GPUStack's last word).
        (
            (worker("a", 20 * GiB, 2 * GiB, ram=20 * GiB),),
            {"select": ("a:cuda:0", "a:cuda:1"), "ngl": 5, "cpu_offloading": False},
            "The parameter --gpu-layers 5 requires CPU offloading. "
            "Please allow CPU offloading in the model configuration.",
        ),
        (
            (worker("a", 20 * GiB, ram=20 * GiB), worker("b", 2 * GiB, ram=20 * GiB)),
            {"select": ("a:cuda:0", "b:cuda:0")},
            "- The model requires approximately 12.5 GiB VRAM and 1.0 GiB RAM.\n"
            "- Selected GPUs do not meet the requirements to run the model.",
        ),
        # A selected GPU below one layer (2 + 0.5 = 2.5 GiB): GPUStack's plain pre-check error.
        (
            (worker("a", 20 * GiB, 2 * GiB, ram=20 * GiB),),
            {"select": ("a:cuda:1",)},
            "Selected GPU a:cuda:1 lacks enough VRAM. At least 2.5 GiB is required.",
        ),
        # The selected GPU has no allocatable VRAM left: GPUStack counts GPUs with VRAM first and
        # says so, before it looks at the selected GPU (found by benchmarks/gpustack_diff.py).
        (
            (worker("a", 20 * GiB, 0, ram=20 * GiB),),
            {"select": ("a:cuda:1",)},
            "Selected GPUs need at least 2.5 GiB of available VRAM.",
        ),
        # Two too small: GPUStack's pre-check ends at the first, taking the selection grouped by
        # worker (b:0, b:1, then a:0), so b:1 is named, not a:0 (found by benchmarks/gpustack_diff.py).
        (
            (worker("a", 2 * GiB, ram=20 * GiB), worker("b", 20 * GiB, 2 * GiB, ram=20 * GiB)),
            {"select": ("b:cuda:0", "a:cuda:0", "b:cuda:1"), "distributed_inference_across_workers": True},
            "Selected GPU b:cuda:1 lacks enough VRAM. At least 2.5 GiB is required.",
        ),
        # Within a worker GPUStack sorts the selected ids as text: "a:cuda:10" before "a:cuda:2"
        # (found by benchmarks/gpustack_diff.py, seed 20 #123: w05:cuda:1 named before w05:cuda:0).
        (
            (worker("a", *(2 * GiB if i in (2, 10) else 20 * GiB for i in range(11)), ram=20 * GiB),),
            {"select": ("a:cuda:2", "a:cuda:10")},
            "Selected GPU a:cuda:10 lacks enough VRAM. At least 2.5 GiB is required.",
        ),
    ],
)
def test_messages_are_gpustacks_words(workers: tuple[Worker, ...], kwargs: dict[str, object], shown: str) -> None:
    target = cluster(*workers)
    dep = deployment(**kwargs).model_copy(update={"profile": GIB_PROFILE})  # type: ignore[arg-type]
    result = plan(target, dep, PlannerConfig(), GIB_PROFILE)
    assert result.status is Status.INFEASIBLE
    assert check(target, dep, result, GIB_PROFILE, PlannerConfig()) == ()
    selected = None if dep.gpu_selection is None else [str(ref) for ref in dep.gpu_selection]
    assert gpustack_messages(result, selected) == [shown]


def test_one_layer_floor_is_gpustacks() -> None:
    # GPUStack's "single layer VRAM" is what one device needs at -ngl 1, a partial offload: the
    # output layer (offloaded first) 0.5 + 2 fixed + the partial compute buffer 1 = 3.5 GiB. The
    # full-offload buffer (0.25) would make it 2.75, and a 3 GiB selected GPU would pass.
    profile = MemoryProfile.uniform(
        10,
        9 * GiB // 10,
        GiB // 10,
        output_weight_bytes=GiB // 2,
        gpu_fixed_bytes=2 * GiB,
        host_fixed_bytes=GiB,
        compute=ComputeBuffer(full_offload_bytes=GiB // 4, partial_offload_bytes=GiB),
    )
    target = cluster(worker("a", 20 * GiB, 3 * GiB, ram=20 * GiB))
    dep = deployment(select=("a:cuda:1",)).model_copy(update={"profile": profile})
    result = plan(target, dep, PlannerConfig(), profile)
    assert result.messages == ("Selected GPU a:cuda:1 lacks enough VRAM. At least 3.50 GiB is required.",)


def test_distributed_main_gpu_left_idle_by_the_split() -> None:
    # Neither worker holds 11 layers alone (a: 3 GPUs need 600 + 1050 = 1650 > 1550; b: 1250 >
    # 1240), so b's GPU serves RPC and main a uses all its GPUs, split by VRAM [1240, 650, 650, 250].
    # a:2's share 250/2790 is under 1/11, so llama.cpp gives it no layer: b 5 blocks (700 VRAM),
    # a:0 3 blocks (500), a:1 2 blocks and the output layer (450). GPUStack keeps a:2 idle; the
    # heuristic did not try the main worker with fewer GPUs and found nothing.
    result = run(
        cluster(worker("a", 650, 650, 250), worker("b", 1240)),
        deployment(distributed_inference_across_workers=True, cpu_offloading=False),
    )
    assert placed(result) == (StrategyClass.DISTRIBUTED, (("b", 0, 5), ("a", 0, 3), ("a", 1, 2)), True)


def test_selected_gpu_left_empty_by_the_vram_split_takes_a_layer() -> None:
    # -ngl 5 over the selected [2000, 2000, 300]: the VRAM split gives 3, 2 and 0 layers (a:2's
    # share 300/4300 is under 1/5). GPUStack 2.3.0 places this candidate with a:2 reserved and idle
    # (claim 0, see test_gpustack_objects); the heuristic found nothing, since a whole selection's
    # GPUs must all be used. Now a:2 takes a layer from a:0: 2 blocks, 2 blocks (layers 6-9), and
    # the output layer, offloaded first, on a:2 (200 + 50 = 250 <= 300).
    result = run(
        cluster(worker("a", 2000, 2000, 300)),
        deployment(ngl=5, select=("a:cuda:0", "a:cuda:1", "a:cuda:2")),
    )
    assert placed(result) == (StrategyClass.PARTIAL_OFFLOAD, (("a", 0, 2), ("a", 1, 2), ("a", 2, 0)), True)


def test_selected_gpu_left_empty_at_full_offload_takes_a_layer() -> None:
    # 11 layers over the selected [2000, 2000, 150 + 100]: a:2's share 250/4250 is under 1/11, so
    # the VRAM split gives it nothing (6 + 5 layers on a:0, a:1); it takes one from a:0, which
    # holds the most: a:0 5 blocks, a:1 5 blocks, a:2 the output layer (250).
    result = run(
        cluster(worker("a", 2000, 2000, 250)),
        deployment(select=("a:cuda:0", "a:cuda:1", "a:cuda:2"), cpu_offloading=False),
    )
    assert placed(result) == (StrategyClass.MULTI_GPU, (("a", 0, 5), ("a", 1, 5), ("a", 2, 0)), True)


def test_selected_rpc_gpu_left_empty_by_the_vram_split_takes_a_layer() -> None:
    # Selected b:0 (2000) and c:0 (300) as RPC servers for main a [2100], split by VRAM in that
    # order: c's share 300/4400 gives it none of 5 layers (b 3, a 2); GPUStack keeps it idle. Here
    # it takes one from b: b blocks 6-7, c block 8 (200 + 100 = 300), a block 9 and the output.
    result = run(
        cluster(worker("a", 2100), worker("b", 2000), worker("c", 300)),
        deployment(ngl=5, select=("a:cuda:0", "b:cuda:0", "c:cuda:0"), distributed_inference_across_workers=True),
    )
    assert placed(result) == (StrategyClass.DISTRIBUTED, (("b", 0, 2), ("c", 0, 1), ("a", 0, 1)), True)


def test_tensor_split_leaving_a_gpu_empty_at_a_low_ngl() -> None:
    # -ts 1,1,1 -ngl 2 over a's three GPUs: llama.cpp gives block 9 to a:0, the output layer to a:1
    # and nothing to a:2. GPUStack 2.3.0 offers this layout (a:2 reserved at claim 0); the heuristic
    # and the solver offered no layer count that left a device of the split empty. a:2 is idle, not
    # in the layout; the planner's solver finds the same.
    target = cluster(worker("a", 1000, 1000, 1000))
    dep = deployment(ngl=2, ts=(1, 1, 1))
    result = run(target, dep)
    assert placed(result) == (StrategyClass.PARTIAL_OFFLOAD, (("a", 0, 1), ("a", 1, 0)), True)
    solved = planner_plan(target, dep, PlannerConfig(time_limit_s=5), PROFILE)
    assert solved.status is Status.OPTIMAL and solved.best is not None
    assert [device.blocks for device in solved.best.layout.devices] == [1, 0] and solved.best.layout.output_offloaded
