"""Tier bounds and gaps as printed: in each tier's own units, only where they mean something."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fleet_deadline import CONFIG, PLANNER, fleet

from layerfit.cli import EXIT_PLACED, main
from layerfit.cli.render import render_fleet
from layerfit.domain import Status
from layerfit.fleet import plan_fleet
from layerfit.fleet.gaps import gap, gpus_bound, tier_bound, with_proven_status
from layerfit.fleet.master import Master
from layerfit.fleet.plan import candidate_bounds
from layerfit.fleet.tiers import TierOutcome

EXAMPLES = Path(__file__).parent.parent / "layerfit" / "examples"


@given(st.integers(0, 2000), st.integers(0, 300), st.data())
def test_gpus_bound_of_a_footprint_is_its_gpu_count(gpus: int, n_workers: int, data: st.DataObject) -> None:
    workers = data.draw(st.integers(0, n_workers))
    footprint = gpus * (n_workers + 1) + workers
    assert gpus_bound(footprint, n_workers) == gpus
    # a lower bound on the footprint gives a lower bound on the GPUs
    assert gpus_bound(data.draw(st.integers(0, footprint)), n_workers) <= gpus


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.booleans())
def test_gaps_are_between_zero_and_one(value: int, other: int, maximised: bool) -> None:
    low, high = sorted((value, other))
    plan_value, bound = (low, high) if maximised else (high, low)
    assert 0 <= gap(plan_value, bound, maximised) <= 1
    assert (gap(plan_value, bound, maximised) == 0) == (plan_value == bound)


def test_a_trivial_bound_on_a_minimised_tier_is_no_bound() -> None:
    # the GPUs tier cut short: CP-SAT's bound 0 against 343 GPUs is no bound, not a 100 % gap
    cut = tier_bound("GPUs and workers used", "GPUs", 343, 0.0, maximised=False, proven=False)
    assert cut.bound is None and cut.gap is None and not cut.proven
    assert "no bound" in cut.text and "%" not in cut.text and "343 GPUs" in cut.text
    some = tier_bound("GPUs and workers used", "GPUs", 343, 300.0, maximised=False, proven=False)
    assert some.bound == 300 and some.gap is not None and abs(some.gap - 43 / 343) < 1e-9
    assert "at least 300" in some.text and "12.5%" in some.text
    assert tier_bound("replicas moved", "replicas", 0, 0.0, maximised=False, proven=True).proven


def test_a_tier_cut_short_has_no_bound_and_says_so() -> None:
    plan = plan_fleet(fleet(), CONFIG, PLANNER)
    assert plan.status is Status.OPTIMAL
    master = Master(fleet().cluster, fleet().deployments, [(), (), ()], {}, {})
    assert master.n_workers == 2
    cut = TierOutcome(
        Status.FEASIBLE, [[], [], []], (3, 48, 0), "GPUs and workers used", (3.0, 48.0, 0.0), (True, True, True)
    )
    bounds = candidate_bounds(master, cut)
    assert [b.proven for b in bounds] == [True, True, True, False]
    assert bounds[3].bound is None and bounds[3].gap is None and bounds[3].value == 0
    cut_plan = plan.model_copy(update={"bounds": bounds, "gap": None, "gap_tier": bounds[3].tier})
    shown = render_fleet(cut_plan, fleet().cluster)
    assert "GPUs and workers used: 0 GPUs, not proven, no bound" in shown and "%" not in shown
    # the whole plan: every tier proven, in its own units
    assert all(b.proven for b in plan.bounds)
    assert "GPUs and workers used: 4 GPUs, proven best over all layouts" in render_fleet(plan, fleet().cluster)


def test_a_tier_line_names_its_unit_once() -> None:
    """The value's unit is written once: not ``priority weight placed 23 priority weight``."""
    placed = tier_bound("priority weight placed", "priority weight", 23, 23.0, maximised=True, proven=True)
    assert placed.text == "priority weight placed: 23, proven best over candidates"
    moved = tier_bound("replicas moved", "replicas", 1, 1.0, maximised=False, proven=True)
    assert moved.text.startswith("replicas moved: 1,")
    one_gpu = tier_bound("GPUs and workers used", "GPUs", 1, 1.0, maximised=False, proven=True)
    assert one_gpu.text.startswith("GPUs and workers used: 1 GPU,")
    open_layers = tier_bound("layers on GPUs", "layers", 40, 48.0, maximised=True, proven=False)
    assert open_layers.text == ("layers on GPUs: 40, not proven: best possible at most 48 over candidates (gap 16.7%)")


def test_a_plan_is_optimal_only_when_every_tier_is_proven(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/fleet.yaml: the master proves every tier over its candidates, but the GPUs tier's
    bound over all layouts is 2 against the plan's 3 GPUs; the plan is feasible, not optimal, and
    its first line says which tiers are proven."""
    assert main(["replan", str(EXAMPLES / "fleet.yaml"), "--json"]) == EXIT_PLACED
    data = json.loads(capsys.readouterr().out)
    unproven = [bound["tier"] for bound in data["bounds"] if not bound["proven"]]
    assert unproven == ["GPUs and workers used"]
    assert data["stats"][0]["status"] == "optimal"  # over the candidates
    assert data["status"] == "feasible" and data["gap_tier"] == "GPUs and workers used"
    assert main(["replan", str(EXAMPLES / "fleet.yaml")]) == EXIT_PLACED
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "fleet: feasible (proven: priority weight placed, layers on GPUs, replicas moved; "
        "not proven: GPUs and workers used (gap 33.3%))"
    )


def test_every_tier_proven_is_optimal_and_says_over_what() -> None:
    plan = plan_fleet(fleet(), CONFIG, PLANNER)
    assert all(bound.proven for bound in plan.bounds) and plan.status is Status.OPTIMAL
    assert render_fleet(plan, fleet().cluster).splitlines()[0] == (
        "fleet: optimal (every tier proven best over all layouts)"
    )
    open_gpus = plan.bounds[3].model_copy(update={"proven": False, "gap": 0.25})
    demoted = with_proven_status(plan.model_copy(update={"bounds": (*plan.bounds[:3], open_gpus)}))
    assert demoted.status is Status.FEASIBLE and demoted.gap_tier == "GPUs and workers used" and demoted.gap == 0.25
