"""Reasons ``plan()`` gives before or instead of a search: rules no layout can keep."""

from __future__ import annotations

from layerfit.domain.base import counted, spans
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Reason, ReasonKind, SpeedShortfall


def stranded_experts(deployment: Deployment, fixed: tuple[int, ...]) -> tuple[Reason, ...]:
    """Why nothing can keep the rules when the user's tensor overrides (or a profile's
    ``fixed_host_experts``) keep experts in host RAM and CPU offloading is off (empty otherwise)."""
    if not fixed or deployment.cpu_offloading:
        return ()
    blocks = f"{counted(len(fixed), 'blocks')} ({spans(fixed)})"
    return (
        Reason(
            kind=ReasonKind.CPU_OFFLOAD_NOT_ALLOWED,
            resource="cpu_offloading",
            message=f"the experts of {blocks} stay in host RAM (the tensor overrides -ot, --n-cpu-moe or "
            "--cpu-moe, or the profile's fixed_host_experts), which needs CPU offloading, and cpu_offloading is false",
        ),
    )


def slow_reason(slow: SpeedShortfall) -> Reason:
    """The first reason of a deployment too slow on every layout that fits: what the fastest reaches."""
    return Reason(kind=ReasonKind.TOO_SLOW, message=slow.message, resource="min_decode_tokens_per_s")
