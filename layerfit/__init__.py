"""layerfit: place GGUF models (llama.cpp) on GPU clusters, and prove the placement optimal."""

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
from layerfit.planner import evaluate, plan

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
