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
from layerfit.errors import EstimationError, InputError, LayerfitError, SolverError
from layerfit.memory import claims

__all__ = [
    "Claims",
    "Cluster",
    "Deployment",
    "EstimationError",
    "InputError",
    "LayerfitError",
    "Layout",
    "LlamaParams",
    "MemoryProfile",
    "Plan",
    "PlannerConfig",
    "SolverError",
    "Status",
    "claims",
]
