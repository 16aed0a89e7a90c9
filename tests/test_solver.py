"""CP-SAT solver: one feasible/infeasible pair per constraint family, and the API's behaviour.

Unless a row says otherwise the profile is ``P``: 10 blocks of 100 bytes (weights 90 + KV 10), an
output layer of 50, and 200 of fixed cost on every GPU; no compute buffers, no host costs. So one
GPU holding ``k`` blocks and the output needs ``100k + 250``; without the output ``100k + 200``;
the host keeps ``100`` per block and ``50`` for an output layer left on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from ortools.sat.python import cp_model

from layerfit.check import check, check_layout, unified_workers
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
    PlannerConfig,
    Policy,
    Status,
    Worker,
)
from layerfit.errors import SolverError
from layerfit.memory import claims, make_layout
from layerfit.solver import SolveResult, layout_is_feasible_in_model, solve
from layerfit.solver.model import runner as solver_runner
from layerfit.solver.model.capacity import device_blocks, ordered_layers
from layerfit.solver.model.instance import SlotKind, build_instance
from layerfit.solver.model.scale import MAX_SCALED, choose_scale
from layerfit.solver.shortcuts.prune import prune_dominated

P = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200)

# Blocks of 100, 300, 100, 300 bytes (no KV), no output weights, no fixed costs.
UNEVEN = MemoryProfile(block_weight_bytes=(100, 300, 100, 300), block_kv_bytes=(0, 0, 0, 0))

HOSTED = MemoryProfile.uniform(10, 90, 10, output_weight_bytes=50, gpu_fixed_bytes=200, host_fixed_bytes=100)

CONFIG = PlannerConfig(time_limit_s=10.0, seed=1, alternatives=0)


def worker(name: str, *vram: int, ram: int = 10_000, unified: bool = False) -> Worker:
    gpus = tuple(Gpu(index=i, total_vram_bytes=v, allocatable_vram_bytes=v) for i, v in enumerate(vram))
    return Worker(id=name, name=name, total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus, unified_memory=unified)


def cluster(*workers: Worker) -> Cluster:
    return Cluster(workers=workers)


def deployment(profile: MemoryProfile = P, **kwargs: object) -> Deployment:
    return Deployment(name="m", profile=profile, **kwargs)


def run(where: Cluster, dep: Deployment, config: PlannerConfig = CONFIG, hint: Layout | None = None) -> SolveResult:
    assert dep.profile is not None
    return solve(where, dep, dep.profile, config, hint=hint)


def assert_valid(where: Cluster, dep: Deployment, result: SolveResult, config: PlannerConfig = CONFIG) -> None:
    """Every returned layout passes ``check`` and its claims are the memory model's."""
    assert dep.profile is not None
    for candidate in (*([result.best] if result.best else []), *result.alternatives):
        assert check_layout(where, dep, dep.profile, candidate.layout, config) == ()
        assert candidate.claims == claims(dep.profile, candidate.layout, unified_workers(where))


@dataclass(frozen=True)
class Row:
    name: str
    where: Cluster
    dep: Deployment
    expected: tuple[int, int, int] | None
    """(GPU layers, workers, GPUs) of the optimum; ``None``: infeasible."""
    config: PlannerConfig = CONFIG
    layout: dict[str, object] = field(default_factory=dict)
    """Expected layout details: ``devices`` as (worker, gpu, blocks), ``output``, ``main``."""


ROWS = [
    # --- per-device VRAM -------------------------------------------------------------------
    # 10 blocks + output on one GPU: 1000 + 50 + 200 = 1250.
    Row("vram: exactly full", cluster(worker("a", 1250)), deployment(), (11, 1, 1)),
    # 1249: the output is always offloaded (output-first), so 9 blocks + output = 1150 fit: 10 layers.
    Row("vram: one byte short", cluster(worker("a", 1249)), deployment(), (10, 1, 1)),
    Row("vram: one byte short, no cpu offload", cluster(worker("a", 1249)), deployment(cpu_offloading=False), None),
    # Two GPUs of 700: the first holds <= 5 blocks (700), the last <= 4 blocks + output (650): 10 layers.
    Row("vram: two small gpus", cluster(worker("a", 700, 700)), deployment(), (10, 1, 2)),
    # 750 and 700: the 700 GPU first with 5 blocks (700), the 750 GPU last with 5 + output (750): full.
    Row(
        "vram: device order is free",
        cluster(worker("a", 750, 700)),
        deployment(),
        (11, 1, 2),
        layout={"devices": (("a", 1, 5), ("a", 0, 5)), "output": True},
    ),
    # GPUStack's main worker uses all its GPUs; one 1250 GPU is enough here.
    Row("vram: main worker uses a subset", cluster(worker("a", 1250, 1250, 1250)), deployment(), (11, 1, 1)),
    # --- contiguity with blocks of different sizes (UNEVEN) ----------------------------------
    # 350 + 450: no split of 100|300|100|300 into a prefix and a suffix fits both GPUs in any order;
    # keeping block 0 on the host, 300 goes on the 350 GPU and 100 + 300 on the 450 GPU: 3 blocks + output.
    Row(
        "blocks: uneven sizes",
        cluster(worker("a", 350, 450)),
        deployment(UNEVEN),
        (4, 1, 2),
        layout={"devices": (("a", 0, 1), ("a", 1, 2)), "output": True},
    ),
    # 400 + 400: 100 + 300 on one and 100 + 300 on the other: full offload.
    Row("blocks: uneven sizes fit", cluster(worker("a", 400, 400)), deployment(UNEVEN), (5, 1, 2)),
    # --- per-worker RAM ----------------------------------------------------------------------
    # CPU only: 10 blocks + output in RAM = 1050.
    Row("ram: cpu only fits", cluster(worker("c", ram=1050)), deployment(), (0, 1, 0)),
    Row("ram: cpu only one byte short", cluster(worker("c", ram=1049)), deployment(), None),
    # A 700 GPU holds 4 blocks + output (650); the host keeps 6 blocks (600): RAM 600 fits, 599 does not.
    Row("ram: partial offload fits", cluster(worker("a", 700, ram=600)), deployment(), (5, 1, 1)),
    Row("ram: partial offload short", cluster(worker("a", 700, ram=599)), deployment(), None),
    # --- unified memory pool -----------------------------------------------------------------
    # Pool 1250 holds the GPU's 1250 at full offload (no host cost).
    Row(
        "unified: full offload fits the pool",
        cluster(worker("u", 2000, ram=1250, unified=True)),
        deployment(),
        (11, 1, 1),
    ),
    # Pool 1249: any split costs GPU 100k + 250 plus host 100(10 - k) = 1250; CPU only costs 1050.
    Row("unified: pool one byte short", cluster(worker("u", 2000, ram=1249, unified=True)), deployment(), (0, 1, 0)),
    # The same worker without a shared pool: VRAM and RAM are separate.
    Row("unified: separate memories", cluster(worker("n", 2000, ram=1249)), deployment(), (11, 1, 1)),
    # --- -ngl ---------------------------------------------------------------------------------
    # -ngl 5 = the output layer + the last 4 blocks.
    Row(
        "ngl: exact count",
        cluster(worker("a", 1250)),
        deployment(params=LlamaParams(n_gpu_layers=5)),
        (5, 1, 1),
        layout={"devices": (("a", 0, 4),), "output": True},
    ),
    Row("ngl: zero is cpu only", cluster(worker("a", 1250)), deployment(params=LlamaParams(n_gpu_layers=0)), (0, 1, 0)),
    Row(
        "ngl: capped at the layer count",
        cluster(worker("a", 1250)),
        deployment(params=LlamaParams(n_gpu_layers=99)),
        (11, 1, 1),
    ),
    Row(
        "ngl: partial without cpu offload",
        cluster(worker("a", 1250)),
        deployment(params=LlamaParams(n_gpu_layers=5), cpu_offloading=False),
        None,
    ),
    # 1249 cannot take 11 layers, so -ngl 11 has no layout.
    Row("ngl: more than fits", cluster(worker("a", 1249)), deployment(params=LlamaParams(n_gpu_layers=11)), None),
    # --- -ts ----------------------------------------------------------------------------------
    # -ts 1,1 over 11 layers: layer i goes to device 0 while i/11 < 0.5, i.e. blocks 0..5 (6 blocks,
    # 800) on the first device and blocks 6..9 + output (650) on the second.
    Row(
        "ts: even split",
        cluster(worker("a", 850, 850)),
        deployment(params=LlamaParams(tensor_split=(1.0, 1.0))),
        (11, 1, 2),
        layout={"devices": (("a", 0, 6), ("a", 1, 4)), "output": True},
    ),
    # -ts 3,1 at 11 layers puts 9 blocks (1100) on the first device; at 9 layers 7 blocks (900);
    # at 8 layers 6 blocks (800) and 1 block + output (350): 8 layers.
    Row(
        "ts: uneven split",
        cluster(worker("a", 850, 850)),
        deployment(params=LlamaParams(tensor_split=(3.0, 1.0))),
        (8, 1, 2),
    ),
    Row(
        "ts: uneven split without cpu offload",
        cluster(worker("a", 850, 850)),
        deployment(params=LlamaParams(tensor_split=(3.0, 1.0)), cpu_offloading=False),
        None,
    ),
    # Zero shares name no device: -ts 0,1,1 is -ts 1,1 over two devices.
    Row(
        "ts: zero share",
        cluster(worker("a", 850, 850, 850)),
        deployment(params=LlamaParams(tensor_split=(0.0, 1.0, 1.0))),
        (11, 1, 2),
    ),
    # --- manual selection ---------------------------------------------------------------------
    # Binpack alone would take GPU 0 (the smaller); the selection forces GPU 1.
    Row(
        "selection: forces a gpu",
        cluster(worker("a", 1250, 2000)),
        deployment(gpu_selection=(GpuRef(worker="a", index=1),)),
        (11, 1, 1),
        layout={"devices": (("a", 1, 10),)},
    ),
    Row(
        "selection: selected gpu too small",
        cluster(worker("a", 1249, 2000)),
        deployment(gpu_selection=(GpuRef(worker="a", index=0),), cpu_offloading=False),
        None,
    ),
    # --- distribution across workers ----------------------------------------------------------
    # Together: b (700) serves 5 blocks and a (800) holds 5 + output (750), or a serves 6 (800) and
    # b holds 4 + output (650); both are full offloads on two workers.
    Row(
        "rpc: distribution allowed",
        cluster(worker("a", 800), worker("b", 700)),
        deployment(distributed_inference_across_workers=True),
        (11, 2, 2),
    ),
    # Not allowed: a alone holds 5 blocks + output (750): 6 layers.
    Row("rpc: distribution not allowed", cluster(worker("a", 800), worker("b", 700)), deployment(), (6, 1, 1)),
    # Three 600 GPUs: 4 + 4 blocks and 3 + output (550) give full offload with 2 RPC servers.
    Row(
        "rpc: three workers",
        cluster(worker("a", 600), worker("b", 600), worker("c", 600)),
        deployment(distributed_inference_across_workers=True),
        (11, 3, 3),
    ),
    # At most one RPC server: 4 blocks + 3 blocks + output: 8 layers.
    Row(
        "rpc: max rpc servers",
        cluster(worker("a", 600), worker("b", 600), worker("c", 600)),
        deployment(distributed_inference_across_workers=True),
        (8, 2, 2),
        config=CONFIG.model_copy(update={"max_rpc_servers": 1}),
    ),
    # HOSTED adds 100 of host RAM to the main process. a (RAM 50) cannot run it, b (no GPU) can:
    # b is main and a's GPU serves as an RPC server with everything (RPC fixed cost 200: 1250).
    Row(
        "main: main worker without a gpu",
        cluster(worker("a", 1250, ram=50), worker("b")),
        deployment(HOSTED, distributed_inference_across_workers=True),
        (11, 2, 1),
        layout={"devices": (("a", 0, 10),), "main": "b"},
    ),
    # Without distribution only b can be main: CPU only, RAM 100 + 1000 + 50.
    Row("main: cpu only main", cluster(worker("a", 1250, ram=50), worker("b")), deployment(HOSTED), (0, 1, 0)),
    # --- image models -------------------------------------------------------------------------
    Row("image: two gpus are not allowed", cluster(worker("a", 700, 700)), deployment(kind=ModelKind.IMAGE), None),
    Row("image: one gpu", cluster(worker("a", 1250)), deployment(kind=ModelKind.IMAGE), (11, 1, 1)),
    # The GPU must be the main worker's own: a (RAM 50) cannot run the main process, and an RPC
    # server for b (see the "main:" rows) is not allowed for image models.
    Row(
        "image: no rpc gpu",
        cluster(worker("a", 1250, ram=50), worker("b")),
        deployment(HOSTED, kind=ModelKind.IMAGE, distributed_inference_across_workers=True),
        None,
    ),
    # --- offload order ------------------------------------------------------------------------
    # Older llama.cpp offloads the output layer last: 10 blocks without it (1200) fit 1249.
    Row(
        "order: output last",
        cluster(worker("a", 1249)),
        deployment(),
        (10, 1, 1),
        config=CONFIG.model_copy(update={"offload_order": OffloadOrder.OUTPUT_LAST}),
        layout={"devices": (("a", 0, 10),), "output": False},
    ),
    Row(
        "order: output first",
        cluster(worker("a", 1249)),
        deployment(),
        (10, 1, 1),
        layout={"devices": (("a", 0, 9),), "output": True},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_constraint_rows(row: Row) -> None:
    result = run(row.where, row.dep, row.config)
    assert_valid(row.where, row.dep, result, row.config)
    if row.expected is None:
        assert result.status is Status.INFEASIBLE
        assert result.best is None
        return
    assert result.status is Status.OPTIMAL
    assert result.tiers is not None and result.best is not None
    assert (result.tiers.gpu_layers, result.tiers.workers, result.tiers.gpus) == row.expected
    layout = result.best.layout
    assert (layout.gpu_layers, len(layout.workers), len(layout.devices)) == row.expected
    if "devices" in row.layout:
        assert tuple((d.worker, d.gpu_index, d.blocks) for d in layout.devices) == row.layout["devices"]
    if "output" in row.layout:
        assert layout.output_offloaded == row.layout["output"]
    if "main" in row.layout:
        assert layout.main_worker == row.layout["main"]


# ---------------------------------------------------------------------------------------------
# layout_is_feasible_in_model: the CP model accepts exactly the valid layouts
# ---------------------------------------------------------------------------------------------


def dev(w: str, i: int, blocks: int) -> DeviceAssignment:
    return DeviceAssignment(worker=w, gpu_index=i, blocks=blocks)


TWO_SIZES = cluster(worker("a", 750, 700), worker("b", 700))

FEASIBILITY_ROWS = [
    # a:1 (700) first with 5 blocks (700), a:0 (750) last with 5 + output (750).
    ("valid order", deployment(), make_layout("a", 10, [dev("a", 1, 5), dev("a", 0, 5)]), True),
    # Swapped: a:1 last needs 750 > 700.
    ("swapped order overflows", deployment(), make_layout("a", 10, [dev("a", 0, 5), dev("a", 1, 5)]), False),
    ("unknown gpu", deployment(), make_layout("a", 10, [dev("a", 7, 5)]), False),
    # b as RPC server: valid only when distribution is allowed.
    (
        "rpc allowed",
        deployment(distributed_inference_across_workers=True),
        make_layout("a", 10, [dev("b", 0, 5), dev("a", 0, 5)]),
        True,
    ),
    ("rpc not allowed", deployment(), make_layout("a", 10, [dev("b", 0, 5), dev("a", 0, 5)]), False),
    # -ngl 5 wants 5 GPU layers; 4 blocks + output has 5, 5 blocks + output has 6.
    ("ngl honoured", deployment(params=LlamaParams(n_gpu_layers=5)), make_layout("a", 10, [dev("a", 0, 4)]), True),
    ("ngl not honoured", deployment(params=LlamaParams(n_gpu_layers=5)), make_layout("a", 10, [dev("a", 0, 5)]), False),
    # Output-first llama.cpp cannot keep the output layer on the host while a GPU is used.
    (
        "output kept on host",
        deployment(),
        Layout(main_worker="a", n_blocks=10, devices=(dev("a", 0, 5),), output_offloaded=False),
        False,
    ),
]


@pytest.mark.parametrize(
    ("dep", "layout", "accepted"), [row[1:] for row in FEASIBILITY_ROWS], ids=[row[0] for row in FEASIBILITY_ROWS]
)
def test_layout_is_feasible_in_model(dep: Deployment, layout: Layout, accepted: bool) -> None:
    assert layout_is_feasible_in_model(TWO_SIZES, dep, P, CONFIG, layout) is accepted
    assert (check_layout(TWO_SIZES, dep, P, layout, CONFIG) == ()) is accepted


# ---------------------------------------------------------------------------------------------
# Hints, determinism, alternatives, policies, limits, errors
# ---------------------------------------------------------------------------------------------

THREE_WORKERS = cluster(worker("a", 1300), worker("b", 1250), worker("c", 1400, 600))


@pytest.mark.parametrize(
    ("hint", "detail", "state"),
    [
        # a valid single-GPU hint holding every layer proves the strict tiers without CP-SAT
        (make_layout("c", 10, [dev("c", 0, 10)]), "proof", "single-gpu-enumeration"),
        (make_layout("c", 10, [dev("c", 1, 10)]), "hint", "rejected"),  # 1250 on a 600 GPU
        (make_layout("z", 10, [dev("z", 0, 10)]), "hint", "outside-model"),
    ],
)
def test_hint_does_not_change_the_answer(hint: Layout, detail: str, state: str) -> None:
    plain = run(THREE_WORKERS, deployment())
    hinted = run(THREE_WORKERS, deployment(), hint=hint)
    assert hinted.stats.details[detail] == state
    assert hinted.tiers == plain.tiers
    assert hinted.best is not None and plain.best is not None
    assert hinted.best.layout == plain.best.layout


def test_same_input_same_answer() -> None:
    config = CONFIG.model_copy(update={"alternatives": 3})
    first = run(THREE_WORKERS, deployment(), config)
    second = run(THREE_WORKERS, deployment(), config)
    assert first.best == second.best
    assert first.alternatives == second.alternatives


def test_alternatives_are_distinct_equally_good_and_ordered() -> None:
    # Single GPU full offload fits b:0 (1250), a:0 (1300) and c:0 (1400); binpack prefers the smallest.
    config = CONFIG.model_copy(update={"alternatives": 5})
    result = run(THREE_WORKERS, deployment(), config)
    assert result.best is not None
    found = [result.best, *result.alternatives]
    assert [(c.layout.devices[0].worker, c.layout.devices[0].gpu_index) for c in found] == [
        ("b", 0),
        ("a", 0),
        ("c", 0),
    ]
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    assert all(len(c.layout.devices) == 1 and c.layout.full_offload for c in found)
    assert_valid(THREE_WORKERS, deployment(), result, config)


@pytest.mark.parametrize(("vram", "skipped"), [((800, 800), True), ((800, 800, 900), False)])
def test_no_re_solve_when_the_only_main_worker_has_no_other_gpu_set(vram: tuple[int, ...], skipped: bool) -> None:
    # The model needs two GPUs: with two, their set is the only one; a third makes another.
    where = cluster(worker("a", *vram))
    config = CONFIG.model_copy(update={"alternatives": 3, "policy": Policy.BINPACK})
    dep = deployment()
    result = run(where, dep, config)
    assert dep.profile is not None
    full = solve(where, dep, dep.profile, config, shortcuts=False)
    assert result.tiers is not None and result.tiers.gpus == 2
    assert ("no-other-gpu-set" in str(result.stats.details["shortcuts"])) is skipped
    assert len(result.alternatives) == len(full.alternatives) == (0 if skipped else 1)
    assert_valid(where, dep, result, config)


def test_no_alternatives_when_not_asked() -> None:
    assert run(THREE_WORKERS, deployment()).alternatives == ()


@pytest.mark.parametrize(("policy", "gpu"), [(Policy.BINPACK, 0), (Policy.SPREAD, 1)])
def test_policy_tie_break(policy: Policy, gpu: int) -> None:
    # Both GPUs hold everything (1250); binpack keeps the big one free, spread keeps 750 headroom.
    where = cluster(worker("a", 1250, 2000))
    result = run(where, deployment(), CONFIG.model_copy(update={"policy": policy}))
    assert result.best is not None
    assert result.best.layout.devices[0].gpu_index == gpu
    assert result.status is Status.OPTIMAL


def test_spread_balances_headroom() -> None:
    # Two GPUs of 800 are needed (1 cannot hold 1250). Spread maximises the smaller headroom:
    # 5 blocks (700, headroom 100) first and 5 + output (750, headroom 50) last, or 6 (800, 0) and
    # 4 + output (650, 150): the best smaller headroom is 50.
    where = cluster(worker("a", 800, 800))
    result = run(where, deployment(), CONFIG.model_copy(update={"policy": Policy.SPREAD}))
    assert result.tiers is not None
    assert result.tiers.tie_break == pytest.approx(50 / 1024**2)


def test_time_limit_without_answer_is_unknown() -> None:
    where = cluster(*(worker(f"w{i}", *(700 + 10 * j for j in range(4))) for i in range(8)))
    config = CONFIG.model_copy(update={"time_limit_s": 1e-9})
    result = run(where, deployment(distributed_inference_across_workers=True), config)
    assert result.status is Status.UNKNOWN
    assert result.best is None


def test_a_valid_hint_is_the_answer_when_time_runs_out() -> None:
    where = cluster(*(worker(f"w{i}", *(700 + 10 * j for j in range(4))) for i in range(8)))
    dep = deployment(distributed_inference_across_workers=True)
    hint = make_layout("w0", 10, [dev("w1", 0, 4), dev("w0", 0, 3), dev("w0", 1, 3)])
    assert check_layout(where, dep, P, hint, CONFIG) == ()
    result = run(where, dep, CONFIG.model_copy(update={"time_limit_s": 1e-9}), hint=hint)
    assert result.status is Status.FEASIBLE and not result.strict_optimal
    assert result.best is not None and result.best.layout == hint
    assert result.tiers is not None and (result.tiers.workers, result.tiers.gpus) == (2, 3)
    assert result.bound is not None and result.objective is not None and result.bound >= result.objective
    assert result.stats.details["incumbent"] == "kept" and result.stats.details["proof"] == "none"


def test_result_reports_tiers_objective_and_stats() -> None:
    result = run(THREE_WORKERS, deployment())
    assert result.status is Status.OPTIMAL
    assert result.objective is not None and result.objective == result.bound
    assert result.stats.engine == "cp-sat"
    assert result.stats.status is result.status
    assert result.deployment == "m"


def test_invalid_model_raises_solver_error_naming_the_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    real_run = solver_runner.run

    def broken(built, config, time_limit_s, measure=None, **options):  # type: ignore[no-untyped-def]
        huge = built.model.new_int_var(0, 2**62, "huge")
        built.model.add(huge * 2**62 + huge * 2**62 >= 1)  # overflows: CP-SAT rejects the model
        return real_run(built, config, time_limit_s, measure, **options)

    for module in ("solve", "steps", "tie_break_stage"):
        monkeypatch.setattr(f"layerfit.solver.search.{module}.run", broken)
    with pytest.raises(SolverError, match="deployment m"):
        run(THREE_WORKERS, deployment())


def test_check_of_a_whole_result_plan() -> None:
    # The solver's candidates pass ``check`` as plain layouts too (claims recomputed there).
    result = run(THREE_WORKERS, deployment(), CONFIG.model_copy(update={"alternatives": 2}))
    assert result.best is not None
    for candidate in (result.best, *result.alternatives):
        assert check(THREE_WORKERS, deployment(), candidate.layout, P, CONFIG) == ()


# ---------------------------------------------------------------------------------------------
# Scaling
# ---------------------------------------------------------------------------------------------


def test_scale_is_exact_when_a_common_unit_exists() -> None:
    scale = choose_scale([1024, 2048, 3072, 0])
    assert (scale.unit_bytes, scale.exact) == (1024, True)
    assert (scale.claim(3072), scale.capacity(3072)) == (3, 3)


def test_scale_rounds_claims_up_and_capacities_down_when_inexact() -> None:
    scale = choose_scale([2**60 + 1, 3])
    assert not scale.exact
    assert (2**60 + 1) // scale.unit_bytes <= MAX_SCALED
    assert scale.claim(3) == 1  # 3 bytes round up to one unit
    assert scale.capacity(scale.unit_bytes - 1) == 0


def test_huge_sizes_still_give_valid_layouts() -> None:
    # Sizes of 2**47 + odd bytes force an inexact unit; every answer is still checked in bytes.
    block = 2**47 + 7
    profile = MemoryProfile.uniform(4, block, 3, output_weight_bytes=11, gpu_fixed_bytes=5)
    where = cluster(worker("a", 2 * block + 100, 2 * block + 100, ram=2**50))
    dep = deployment(profile)
    result = run(where, dep)
    assert result.stats.details["exact_units"] == 0
    assert_valid(where, dep, result)
    assert result.tiers is not None and result.tiers.gpu_layers >= 3


def test_cp_sat_statuses_map_to_results() -> None:
    assert cp_model.OPTIMAL != cp_model.FEASIBLE  # the runner distinguishes them
    infeasible = run(cluster(worker("a", 100, ram=0)), deployment())
    assert infeasible.status is Status.INFEASIBLE and infeasible.tiers is None


# ---------------------------------------------------------------------------------------------
# Building blocks: bounds and dominance pruning
# ---------------------------------------------------------------------------------------------


def test_device_blocks_counts_contiguous_runs() -> None:
    # UNEVEN blocks 100, 300, 100, 300: the lightest run of 2 blocks costs 400, not 100 + 100.
    # A 250 GPU holds one block; a 450 GPU two (400); an 800 GPU all four.
    instance = build_instance(cluster(worker("a", 250, 450, 800)), deployment(UNEVEN), UNEVEN, CONFIG)
    scaled = [instance.scale.capacity(size) for size in (99, 250, 450, 800)]
    assert [device_blocks(instance, capacity, SlotKind.LOCAL) for capacity in scaled] == [0, 1, 2, 4]


def test_ordered_layers_is_tighter_than_per_device_runs_with_uneven_blocks() -> None:
    # Blocks 300, 100, 100, 300: a 200 room holds the two light blocks, a 400 room a light and a
    # heavy one, so per-device runs add up to all 4 blocks; in llama.cpp's contiguous order the
    # 400 device takes the last two blocks, the 200 device one more, and block 0 stays: 3 blocks.
    profile = MemoryProfile(block_weight_bytes=(300, 100, 100, 300), block_kv_bytes=(0, 0, 0, 0))
    instance = build_instance(cluster(worker("a", 400, 200)), deployment(profile), profile, CONFIG)
    rooms = tuple(instance.scale.capacity(size) for size in (200, 400))
    per_device = sum(device_blocks(instance, instance.scale.capacity(size), SlotKind.LOCAL) for size in (200, 400))
    assert per_device == 4
    assert ordered_layers(instance, rooms) == 3 + 1  # three blocks and the output layer (free here)


def test_dominated_workers_are_pruned_beyond_what_a_layout_can_use() -> None:
    # Four identical 600 workers, a 900 worker b, at most one RPC server: a layout uses two workers,
    # so a worker with two dominators goes. b dominates every a, a0 dominates the later a's: a0
    # has one dominator and stays, a1..a3 have two or more and go, b has none.
    where = cluster(worker("a0", 600), worker("a1", 600), worker("b", 900), worker("a2", 600), worker("a3", 600))
    config = CONFIG.model_copy(update={"max_rpc_servers": 1})
    instance = build_instance(where, deployment(distributed_inference_across_workers=True), P, config)
    pruned = prune_dominated(instance)
    assert [view.name for view in pruned.workers if view.main_ok] == ["a0", "b"]
    assert [view.name for view in pruned.workers if view.rpc_ok] == ["a0", "b"]
    # The optimum survives: an a-worker serves 4 blocks (600), b holds 6 + output (850 <= 900).
    result = run(where, deployment(distributed_inference_across_workers=True), config)
    assert result.tiers is not None
    assert (result.tiers.gpu_layers, result.tiers.workers, result.tiers.gpus) == (11, 2, 2)


def test_empty_cluster_is_infeasible() -> None:
    result = run(Cluster(), deployment())
    assert result.status is Status.INFEASIBLE
