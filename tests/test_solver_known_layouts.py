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
from layerfit.domain import Cluster, Deployment, Layout, MemoryProfile, MiB, PlannerConfig, Status
from layerfit.solver import solve
from layerfit.solver.model import runner
from layerfit.solver.model.build import build_model
from layerfit.solver.model.decode import decision_values
from layerfit.solver.model.instance import build_instance
from layerfit.solver.model.progress import Measure
from layerfit.solver.model.runner import Run
from layerfit.solver.search import steps, tie_break_stage
from layerfit.solver.search.tie_break_stage import tie_break_value

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


def model_units(where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, layout: Layout) -> int:
    """``layout``'s tie-break in the model's units (minimised), in the full model, no symmetry breaking."""
    instance = build_instance(where, dep, profile, config)
    built = build_model(instance, break_symmetry=False)
    values = decision_values(instance, built.variables, layout)
    assert values is not None
    for var, value in values.items():
        built.model.add(var == value)
    found = _real_run(built, config, Work.of(config.time_limit_s))
    assert found.found
    return tie_break_value(built, found)


def _deployment(profile: MemoryProfile, offload: bool) -> Deployment:
    return Deployment(name="d", profile=profile, cpu_offloading=offload, distributed_inference_across_workers=True)


@settings(SLOW, max_examples=80)
@given(data=st.data())
def test_a_cut_tie_break_is_never_worse_than_a_known_layout(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=16, unit=16 * MiB))
    if data.draw(st.integers(0, 2)) == 0:
        where = data.draw(clusters(max_gpus=12, max_workers=5, top=1200, unit=16 * MiB))
    else:
        where = data.draw(shared_clusters(profile))
    dep = _deployment(profile, offload=data.draw(st.booleans()))
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
