"""The Python API's entry points refuse arguments of the wrong type by name (``InputError``).

A dict or ``None`` where a ``Cluster``, ``Deployment``, ``Layout`` or config is expected raised
AttributeError or TypeError from deep inside (``'dict' object has no attribute 'params'``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from layerfit import Cluster, Deployment, Fleet, FleetConfig, InputError, MemoryProfile, PlannerConfig, plan, plan_fleet
from layerfit.check import check
from layerfit.domain import GiB
from layerfit.estimators import estimate_profile
from layerfit.io.documents import load_file
from layerfit.memory import claims
from layerfit.planning.planner import evaluate

CLUSTER = load_file(Cluster, Path(__file__).parents[1] / "examples" / "cluster.yaml")
PROFILE = MemoryProfile.uniform(4, GiB, 0)
DEPLOYMENT = Deployment(name="m", profile=PROFILE)
CONFIG = PlannerConfig(time_limit_s=1)


def _layout() -> Any:
    result = plan(CLUSTER, DEPLOYMENT, CONFIG, explain=False)
    assert result.best is not None
    return result.best.layout


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plan({"workers": []}, DEPLOYMENT), "cluster: expected Cluster, got dict"),  # type: ignore[arg-type]
        (lambda: plan(CLUSTER, {"name": "m"}), "deployment: expected Deployment, got dict"),  # type: ignore[arg-type]
        (lambda: plan(CLUSTER, DEPLOYMENT, None), "config: expected PlannerConfig, got NoneType"),  # type: ignore[arg-type]
        (lambda: plan(CLUSTER, DEPLOYMENT, CONFIG, {"n_blocks": 3}), "profile: expected MemoryProfile or NoneType"),  # type: ignore[arg-type]
        (lambda: plan(CLUSTER, DEPLOYMENT, deadline=5), "deadline: expected Deadline or NoneType, got int"),  # type: ignore[arg-type]
        (lambda: evaluate(CLUSTER, DEPLOYMENT, None), "layout: expected Layout, got NoneType"),  # type: ignore[arg-type]
        (lambda: check(CLUSTER, DEPLOYMENT, {"x": 1}, PROFILE), "plan: expected Plan or Layout, got dict"),  # type: ignore[arg-type]
        (lambda: check(CLUSTER, DEPLOYMENT, _layout(), None), "profile: expected MemoryProfile, got NoneType"),  # type: ignore[arg-type]
        (lambda: claims(PROFILE, {"main_worker": "a"}), "layout: expected Layout, got dict"),  # type: ignore[arg-type]
        (lambda: claims({"n_blocks": 4}, _layout()), "profile: expected MemoryProfile, got dict"),  # type: ignore[arg-type]
        (lambda: estimate_profile(None), "model: expected str or PathLike or ModelShape, got NoneType"),  # type: ignore[arg-type]
        (lambda: estimate_profile("x.gguf", {"ctx_size": 5}), "params: expected LlamaParams, got dict"),  # type: ignore[arg-type]
        (lambda: plan_fleet({"cluster": {}}), "fleet: expected Fleet, got dict"),  # type: ignore[arg-type]
        (
            lambda: plan_fleet(Fleet(cluster=CLUSTER, deployments=[DEPLOYMENT]), {"x": 1}),  # type: ignore[arg-type]
            "config: expected FleetConfig, got dict",
        ),
        (
            lambda: plan_fleet(Fleet(cluster=CLUSTER, deployments=[DEPLOYMENT]), FleetConfig(), None),  # type: ignore[arg-type]
            "planner_config: expected PlannerConfig, got NoneType",
        ),
    ],
)
def test_wrong_argument_types_are_refused_naming_the_argument(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        call()
