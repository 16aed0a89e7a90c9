"""A tie-break search cut short never returns a layout worse than one the solver already knew.

Every tie-break search (the one-worker step's, ``tie_break_stage``'s) is made to stop at its first
solution, found without the hint, and reported unproven: what a time limit does on a loaded
machine, at its worst. The answer's tie-break, in the model's own units (``tie_break_value``), is
then still at least as good as the heuristic's layout whenever that has the answer's strict tiers,
and as the best layout the stage knew before its search (the step's, reassigned: ``_known``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

from hypothesis import event, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model
from test_solver_properties import SLOW, assert_valid, clusters, configs, profiles, tier_key
from test_solver_witness import shared_clusters

from layerfit import heuristics
from layerfit.budget.work import Work
from layerfit.check import check_layout
from layerfit.domain import (
    Cluster,
    Deployment,
    DeviceAssignment,
    Layout,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Policy,
    Status,
)
from layerfit.domain.profile import ComputeBuffer, RoleCosts
from layerfit.solver import solve
from layerfit.solver.model import runner
from layerfit.solver.model.build import BuiltModel, build_model
from layerfit.solver.model.decode import decision_values
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.model.progress import Measure
from layerfit.solver.model.runner import Run
from layerfit.solver.search import steps, tie_break_stage
from layerfit.solver.search.tie_break_stage import tie_break_value
from layerfit.solver.shortcuts.reassign import device_needs, reassigned

_real_run = runner.run
_real_solver_for = runner.solver_for


def _stopping_solver(config: PlannerConfig, time_limit_s: float, **options: int) -> cp_model.CpSolver:
    solver = _real_solver_for(config, time_limit_s, **options)
    solver.parameters.stop_after_first_solution = True
    return solver


def _cut_tie_break(
    built: Any, config: PlannerConfig, work: Work, measure: Measure | None = None, **options: Any
) -> Run:
    """``runner.run``, but a tie-break search stops at its first solution, found without the hint,
    and is not proven."""
    if measure is None or not measure.stage.endswith("tie-break"):
        return _real_run(built, config, work, measure, **options)
    built.model.proto.clear_solution_hint()
    with mock.patch.object(runner, "solver_for", _stopping_solver):
        found = _real_run(built, config, work, measure, **options)
    return replace(found, status=cp_model.FEASIBLE) if found.status == cp_model.OPTIMAL else found


@contextmanager
def _cut_searches(known: list[int]) -> Iterator[None]:
    """Tie-break searches cut at their first solution; each value ``_known`` finds goes to ``known``."""
    real_known: Callable[..., Any] = tie_break_stage._known

    def spy(*args: Any, **kwargs: Any) -> Any:
        found = real_known(*args, **kwargs)
        if found is not None:
            known.append(found.value)
        return found

    with (
        mock.patch.object(steps, "run", _cut_tie_break),
        mock.patch.object(tie_break_stage, "run", _cut_tie_break),
        mock.patch.object(tie_break_stage, "_known", spy),
    ):
        yield


def _as_solution(
    where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout
) -> tuple[Instance, BuiltModel, Run]:
    """``layout`` as a solution of the full model, no symmetry breaking (its decisions fixed)."""
    instance = build_instance(where, dep, profile, config)
    built = build_model(instance, break_symmetry=False)
    values = decision_values(instance, built.variables, layout)
    assert values is not None
    for var, value in values.items():
        built.model.add(var == value)
    found = _real_run(built, config, Work.of(config.time_limit_s))
    assert found.found
    return instance, built, found


def model_units(where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout) -> int:
    """``layout``'s tie-break in the model's units (minimised), in the full model, no symmetry breaking."""
    _, built, found = _as_solution(where, dep, profile, config, layout)
    return tie_break_value(built, found)


def _deployment(profile: MemoryProfile, offload: bool) -> Deployment:
    return Deployment(name="d", profile=profile, cpu_offloading=offload, distributed_inference_across_workers=True)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[MemoryProfile, Cluster, Deployment]:
    """A profile, a cluster (a third random, the rest GPUs shared by the blocks) and a distributed
    deployment of it."""
    profile = draw(profiles(max_blocks=16, unit=16 * MiB))
    if draw(st.integers(0, 2)) == 0:
        where = draw(clusters(max_gpus=12, max_workers=5, top=1200, unit=16 * MiB))
    else:
        where = draw(shared_clusters(profile))
    return profile, where, _deployment(profile, offload=draw(st.booleans()))


@settings(SLOW, max_examples=80)
@given(data=st.data())
def test_a_cut_tie_break_is_never_worse_than_a_known_layout(data: st.DataObject) -> None:
    profile, where, dep = data.draw(_cases())
    config = data.draw(configs())
    hint = heuristics.plan(where, dep, config, profile).layout
    known: list[int] = []
    with _cut_searches(known):
        result = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, result)
    steps_run = str(result.stats.details["steps"])
    searched = "tie-break:" in steps_run or "one-worker-" in steps_run
    event(f"tie-break searched: {searched}, known: {len(known)}")
    if result.best is None or not searched:
        return
    ours = model_units(where, dep, profile, config, result.best.layout)
    if result.status is Status.OPTIMAL:
        event("proven")
    for value in known:
        assert ours <= value, (ours, known, result.stats.details)
    valid_hint = hint is not None and check_layout(where, dep, profile, hint, config) == ()
    if valid_hint and hint is not None and tier_key(hint) == tier_key(result.best.layout):
        theirs = model_units(where, dep, profile, config, hint)
        event(f"hint: {'beaten' if ours < theirs else 'tied'}")
        assert ours <= theirs, (ours, theirs, result.stats.details)


def _reassigned_form(
    where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout
) -> Layout:
    """``layout`` with each worker's devices on the GPUs the policy prefers (``reassign``), its
    devices' needs read from the full model with its decisions fixed."""
    instance, built, found = _as_solution(where, dep, profile, config, layout)
    return reassigned(instance, layout, device_needs(built, found))


def _check_never_worse_than_held(
    where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> tuple[Layout | None, int]:
    """Solve with tie-break searches cut short, recording each layout they found; the answer's
    tie-break, in the model's units, is no worse than any of those, the heuristic's, or any of them
    moved by ``reassign``, that is valid with the answer's strict tiers. The answer, and how many
    layouts other than it were compared."""
    hint = heuristics.plan(where, dep, config, profile).layout
    held: list[Layout] = [] if hint is None else [hint]

    def recording(built: Any, config: PlannerConfig, work: Work, measure: Measure | None = None, **options: Any) -> Run:
        found = _cut_tie_break(built, config, work, measure, **options)
        if found.found and measure is not None and measure.stage.endswith("tie-break"):
            held.append(found.layout(built))
        return found

    with mock.patch.object(steps, "run", recording), mock.patch.object(tie_break_stage, "run", recording):
        result = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, result)
    if result.best is None or not held:
        return None, 0
    answer = result.best.layout
    ours = model_units(where, dep, profile, config, answer)
    every = [answer, *held]
    every += [
        _reassigned_form(where, dep, profile, config, layout)
        for layout in every
        if _valid(where, dep, profile, config, layout)
    ]
    compared = 0
    for layout in every:
        if layout != answer and tier_key(layout) == tier_key(answer) and _valid(where, dep, profile, config, layout):
            compared += 1
            assert ours <= model_units(where, dep, profile, config, layout), (layout, answer, result.stats.details)
    return answer, compared


def test_a_cut_one_worker_search_gives_way_to_its_reassigned_form() -> None:
    """Five 192 MiB blocks on one worker's GPUs of 896, 240 and 224 MiB (binpack): the one-worker
    step's search, cut at its first solution, put a block on the 240 MiB GPU where ``reassign``
    moves it to the 224 MiB one (tie-break 70 against 71 in the model's units); the answer was the
    search's. Found by the property below (random seeds) before the fix."""
    vram = tuple(size * MiB for size in (896, 0, 0, 240, 224))
    where = Cluster.model_validate({"workers": [_worker("w0", 1120 * MiB, vram)]})
    profile = MemoryProfile(block_weight_bytes=(192 * MiB,) * 5, block_kv_bytes=(0,) * 5)
    config = PlannerConfig(policy=Policy.BINPACK, max_rpc_servers=1, alternatives=0, num_search_workers=1, seed=0)
    assert _check_never_worse_than_held(where, _deployment(profile, offload=False), profile, config)[1] > 0


def test_a_rebalanced_layout_is_reassigned_again() -> None:
    """Three 3.03 GiB blocks on a worker's GPUs of 5.04, 7.34 and 9.42 GiB (spread): the cut
    search's layout (1 block on the 7.34 GiB GPU, 2 on the 9.42 GiB one) rebalanced to 2 and 1 with
    a headroom of 16 bytes; its reassigned form, the 9.42 GiB GPU first, keeps 1.59 GiB. One round
    of ``reassign`` then rebalancing stopped at the first."""
    gpus = {"w0": (5419040767,), "w1": (5408555007, 7885291536, 10116661248)}
    ram = {"w0": 2956984320, "w1": 14059307008}
    where = Cluster.model_validate({"workers": [_worker(name, ram[name], sizes) for name, sizes in gpus.items()]})
    profile = MemoryProfile(
        block_weight_bytes=(3254779904,) * 3,
        block_kv_bytes=(687865856,) * 3,
        output_weight_bytes=805306368,
        rpc=RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=1971322879)),
        extra_main_gpu_bytes=503316480,
        output_compute_bytes=922746880,
    )
    config = PlannerConfig(policy=Policy.SPREAD, max_rpc_servers=1, alternatives=0, num_search_workers=1, seed=0)
    assert _check_never_worse_than_held(where, _deployment(profile, offload=False), profile, config)[1] > 0


def _worker(name: str, ram: int, vram: tuple[int, ...], *, unified: bool = True) -> dict[str, Any]:
    gpus = [
        {"index": i, "type": "cuda", "total_vram_bytes": v, "allocatable_vram_bytes": v} for i, v in enumerate(vram)
    ]
    worker = {"id": name, "name": name, "unified_memory": unified, "total_ram_bytes": ram, "allocatable_ram_bytes": ram}
    return {**worker, "gpus": gpus}


def test_a_reassigned_layout_keeps_its_first_gpu() -> None:
    """Five 3.23 GiB blocks on one worker's GPUs of 9.14, 9.14 (less 640 KiB) and 10.54 GiB
    (spread), with 784 MiB of compute on the first device: the reassigned layout puts the smaller
    9.14 GiB GPU first, and its completion as a solution of the symmetric model sorted that GPU
    behind the other, moving the first device's compute with it (320 KiB less headroom)."""
    where = Cluster.model_validate(
        {"workers": [_worker("w0", 5305794560, (9815326720, 9814671360, 11313692192), unified=False)]}
    )
    profile = MemoryProfile(
        block_weight_bytes=(3472883712,) * 5,
        block_kv_bytes=(771751936,) * 5,
        output_weight_bytes=16 * MiB,
        local=RoleCosts(fixed_bytes=MiB - 1, compute=ComputeBuffer(multi_device_bytes=496419298)),
        extra_main_gpu_bytes=608 * MiB,
        output_compute_bytes=640 * MiB,
        first_device_compute_bytes=784 * MiB,
    )
    config = PlannerConfig(policy=Policy.SPREAD, max_rpc_servers=1, alternatives=0, num_search_workers=1, seed=0)
    dep = _deployment(profile, offload=False)
    answer, _ = _check_never_worse_than_held(where, dep, profile, config)
    smaller_first = ((1, 1), (0, 2), (2, 2))
    best = Layout(
        main_worker="w0",
        n_blocks=5,
        devices=tuple(DeviceAssignment(worker="w0", gpu_index=g, blocks=b) for g, b in smaller_first),
        output_offloaded=True,
    )
    assert answer is not None
    assert model_units(where, dep, profile, config, answer) <= model_units(where, dep, profile, config, best)


def test_a_hint_moved_beats_a_cut_one_worker_search() -> None:
    """Five uneven blocks (three of 16 MiB, 3.36 and 4.69 GiB, each with 960 MiB of KV) on one
    worker's GPUs of 16 MiB, 2.56 and 12.78 GiB (binpack): the cut one-worker search and the
    heuristic's layout (every block on the 12.78 GiB GPU, the output on the 2.56 GiB one) tie; the
    heuristic's moved by ``reassign`` (the output on the 16 MiB GPU) is better, and only the
    search's was moved."""
    where = Cluster.model_validate({"workers": [_worker("w0", 0, (16 * MiB, 2751463424, 13723762688), unified=False)]})
    profile = MemoryProfile(
        block_weight_bytes=(16 * MiB, 16 * MiB, 16 * MiB, 3607101440, 5033164800),
        block_kv_bytes=(960 * MiB,) * 5,
        main=RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=1)),
    )
    config = PlannerConfig(policy=Policy.BINPACK, max_rpc_servers=1, alternatives=0, num_search_workers=1, seed=0)
    assert _check_never_worse_than_held(where, _deployment(profile, offload=False), profile, config)[1] > 0


@settings(SLOW, max_examples=120)
@given(data=st.data())
def test_the_answer_is_never_worse_than_a_layout_the_engine_held(data: st.DataObject) -> None:
    """Every layout a tie-break search found, the heuristic's, and each of those moved to the GPUs
    the policy prefers (``reassign``), when valid with the answer's strict tiers: none has a better
    tie-break, in the model's units, than the answer. A search cut short found a solution that
    ``reassign`` improves; it was kept without being compared with its reassigned form."""
    profile, where, dep = data.draw(_cases())
    _, compared = _check_never_worse_than_held(where, dep, profile, data.draw(configs()))
    event(f"layouts compared: {min(compared, 3)}")


def _valid(where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout) -> bool:
    return check_layout(where, dep, profile, layout, config) == ()
