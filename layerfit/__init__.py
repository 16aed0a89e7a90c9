"""layerfit: place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from layerfit.version import __version__ as __version__

if TYPE_CHECKING:
    from layerfit.domain import (
        Claims,
        Cluster,
        Deployment,
        Layout,
        LlamaParams,
        MemoryProfile,
        Plan,
        PlannerConfig,
        Status,
    )
    from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan, Placement
    from layerfit.errors import EstimationError, InputError, LayerfitError, SolverError
    from layerfit.fleet import plan_fleet
    from layerfit.memory import claims
    from layerfit.planning.planner import evaluate, plan

_HOMES = {
    **dict.fromkeys(
        ("Claims", "Cluster", "Deployment", "Layout", "LlamaParams", "MemoryProfile", "Plan", "PlannerConfig"),
        "layerfit.domain",
    ),
    "Status": "layerfit.domain",
    **dict.fromkeys(("Fleet", "FleetConfig", "FleetPlan", "Placement"), "layerfit.domain.fleet"),
    **dict.fromkeys(("EstimationError", "InputError", "LayerfitError", "SolverError"), "layerfit.errors"),
    "plan_fleet": "layerfit.fleet",
    "claims": "layerfit.memory",
    "evaluate": "layerfit.planning.planner",
    "plan": "layerfit.planning.planner",
}
"""Where each public name lives. Imported on first use, so that ``import layerfit.cli`` stays fast
(the solver and fleet planner pull in OR-Tools and pandas)."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'layerfit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "Claims",
    "Cluster",
    "Deployment",
    "EstimationError",
    "Fleet",
    "FleetConfig",
    "FleetPlan",
    "InputError",
    "LayerfitError",
    "Layout",
    "LlamaParams",
    "MemoryProfile",
    "Placement",
    "Plan",
    "PlannerConfig",
    "SolverError",
    "Status",
    "claims",
    "evaluate",
    "plan",
    "plan_fleet",
]
