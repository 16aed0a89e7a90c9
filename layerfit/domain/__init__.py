"""Frozen pydantic domain types shared by every part of layerfit.

Names are imported on first use, so that importing one domain module (or the enumerations in
``choices``, which the command line needs for ``--help``) does not build every pydantic model."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerfit.domain.base import GiB, MiB, format_bytes
    from layerfit.domain.cluster import GPU_TYPES, Cluster, Gpu, GpuRef, Worker
    from layerfit.domain.config import OffloadOrder, PlannerConfig, Policy
    from layerfit.domain.deployment import Deployment, ModelKind
    from layerfit.domain.layout import Claims, DeviceAssignment, DeviceClaim, Layout, WorkerClaim
    from layerfit.domain.params import DEFAULT_CTX_SIZE, LlamaParams
    from layerfit.domain.plan import (
        Candidate,
        Command,
        EngineStats,
        Plan,
        Reason,
        ReasonKind,
        Relaxation,
        Severity,
        Status,
        StrategyClass,
    )
    from layerfit.domain.profile import ComputeBuffer, DeviceRole, MemoryProfile, RoleCosts

_HOMES = {
    "GiB": "layerfit.domain.base",
    "MiB": "layerfit.domain.base",
    "format_bytes": "layerfit.domain.base",
    "GPU_TYPES": "layerfit.domain.cluster",
    "Cluster": "layerfit.domain.cluster",
    "Gpu": "layerfit.domain.cluster",
    "GpuRef": "layerfit.domain.cluster",
    "Worker": "layerfit.domain.cluster",
    "OffloadOrder": "layerfit.domain.config",
    "PlannerConfig": "layerfit.domain.config",
    "Policy": "layerfit.domain.config",
    "Deployment": "layerfit.domain.deployment",
    "ModelKind": "layerfit.domain.deployment",
    "Claims": "layerfit.domain.layout",
    "DeviceAssignment": "layerfit.domain.layout",
    "DeviceClaim": "layerfit.domain.layout",
    "Layout": "layerfit.domain.layout",
    "WorkerClaim": "layerfit.domain.layout",
    "DEFAULT_CTX_SIZE": "layerfit.domain.params",
    "LlamaParams": "layerfit.domain.params",
    "Candidate": "layerfit.domain.plan",
    "Command": "layerfit.domain.plan",
    "EngineStats": "layerfit.domain.plan",
    "Plan": "layerfit.domain.plan",
    "Reason": "layerfit.domain.plan",
    "ReasonKind": "layerfit.domain.plan",
    "Relaxation": "layerfit.domain.plan",
    "Severity": "layerfit.domain.plan",
    "Status": "layerfit.domain.plan",
    "StrategyClass": "layerfit.domain.plan",
    "ComputeBuffer": "layerfit.domain.profile",
    "DeviceRole": "layerfit.domain.profile",
    "MemoryProfile": "layerfit.domain.profile",
    "RoleCosts": "layerfit.domain.profile",
}


__all__ = [
    "DEFAULT_CTX_SIZE",
    "GPU_TYPES",
    "Candidate",
    "Claims",
    "Cluster",
    "Command",
    "ComputeBuffer",
    "Deployment",
    "DeviceAssignment",
    "DeviceClaim",
    "DeviceRole",
    "EngineStats",
    "GiB",
    "Gpu",
    "GpuRef",
    "Layout",
    "LlamaParams",
    "MemoryProfile",
    "MiB",
    "ModelKind",
    "OffloadOrder",
    "Plan",
    "PlannerConfig",
    "Policy",
    "Reason",
    "ReasonKind",
    "Relaxation",
    "RoleCosts",
    "Severity",
    "Status",
    "StrategyClass",
    "Worker",
    "WorkerClaim",
    "format_bytes",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'layerfit.domain' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
