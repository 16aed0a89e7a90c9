"""Frozen pydantic domain types shared by every part of layerfit."""

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
