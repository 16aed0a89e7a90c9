"""Pricing never makes the plan worse than planning without it: the master over the candidates
gets the same work budget with column generation as without, and pricing's own work (its rounds
and the master over all columns) comes from a budget of its own."""

from __future__ import annotations

from typing import Any

import pytest
from test_fleet_deadline import CONFIG, PLANNER, fleet

from layerfit.domain.fleet import FleetPlan
from layerfit.fleet import plan as fleet_plan
from layerfit.fleet import plan_fleet

CHOOSE = fleet_plan.choose


def masters(monkeypatch: pytest.MonkeyPatch, column_generation: bool) -> tuple[list[float], FleetPlan]:
    """The work budget (nominal seconds) of every master solved, and the plan."""
    choose = CHOOSE
    budgets: list[float] = []

    def recording(*args: Any, **kwargs: Any) -> FleetPlan:
        budgets.append(kwargs["budget"].nominal_s)
        return choose(*args, **kwargs)

    monkeypatch.setattr(fleet_plan, "choose", recording)
    config = CONFIG.model_copy(update={"column_generation": column_generation})
    return budgets, plan_fleet(fleet(), config, PLANNER)


def test_the_master_keeps_its_budget_with_pricing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The seed does not place everything here (pricing has something to find): the master over
    # the candidates used to get half its budget, and then could end worse than without pricing.
    without, plain = masters(monkeypatch, False)
    with_pricing, priced = masters(monkeypatch, True)
    assert len(without) == 1 and len(with_pricing) == 2  # pricing added a layout: the master again
    assert with_pricing[0] == pytest.approx(without[0])
    assert priced.objective >= plain.objective
    assert len(priced.placements) > len(plain.placements)  # the layout no generator proposes
