"""The context size as a decision: the largest context in a range that keeps the better tiers.

A deployment may give a range instead of a fixed ``-c``: ``ctx_min``/``ctx_max``, or ``ctx_auto``
(what llama.cpp does when no ``-c`` is given: the training context, shrunk to fit down to
``--fit-ctx``, 4096). Context sizes are multiples of 256, as llama.cpp pads them. The tiers, in
order: layers on GPUs, then blocks with experts on GPUs, then workers, then the context, then GPUs
and the tie-break. So a longer context never costs a layer, an expert block or a machine: like
llama.cpp's fit, which shrinks the context before it offloads anything, but across the cluster.
The plan at the smallest context gives the best tiers any context in the range can reach (memory
only grows with the context); a bisection finds the largest context that still reaches them.
An explicit ``-c 0`` is the full training context and is never shrunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import EngineStats, Plan
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError

CTX_PAD = 256
"""llama.cpp pads ``n_ctx`` to a multiple of 256."""
FIT_CTX = 4096
"""llama.cpp's ``--fit-ctx`` default: the smallest context its fit shrinks to."""

PlanAt = Callable[[Deployment, int, bool], Plan]
"""Plan the deployment at one context size (``True``: with explanations)."""


def ctx_bounds(deployment: Deployment, training_ctx: int | None) -> tuple[int, int] | None:
    """The deployment's context range, or ``None`` for a fixed context."""
    if deployment.ctx_auto:
        if training_ctx is None:
            raise InputError(f"deployment[{deployment.name}].ctx_auto", "needs a GGUF file with a training context")
        return min(FIT_CTX, training_ctx), training_ctx
    if deployment.ctx_min is None and deployment.ctx_max is None:
        return None
    high = deployment.ctx_max if deployment.ctx_max is not None else training_ctx
    if high is None:
        raise InputError(
            f"deployment[{deployment.name}].ctx_max", "needed when the model's training context is unknown"
        )
    return deployment.ctx_min or CTX_PAD, high


def ctx_candidates(low: int, high: int) -> list[int]:
    """Multiples of 256 from ``low`` (rounded up) to ``high`` (rounded down)."""
    first, last = -(-low // CTX_PAD) * CTX_PAD, high // CTX_PAD * CTX_PAD
    if first > last:
        raise InputError("ctx_min", f"no multiple of {CTX_PAD} between {low} and {high}")
    return list(range(first, last + 1, CTX_PAD))


def tiers(result: Plan, profile: MemoryProfile) -> tuple[int, int, int] | None:
    """The tiers above the context: layers on GPUs, expert blocks on GPUs, fewer workers."""
    layout = result.layout
    if layout is None:
        return None
    experts_on_gpus = sum(
        1 for block in profile.expert_blocks if block >= layout.cpu_blocks and block not in layout.host_expert_blocks
    )
    return layout.gpu_layers, experts_on_gpus, -len(layout.workers)


def plan_context(deployment: Deployment, values: list[int], plan_at: PlanAt, profile: MemoryProfile) -> Plan:
    """The plan at the largest context of ``values`` whose tiers equal those at the smallest; its
    context stage says ``truncated`` when the wall clock cut any plan the choice compared."""
    started = time.perf_counter()
    smallest = plan_at(deployment, values[0], False)
    compared = [smallest]
    wanted = tiers(smallest, profile)
    if wanted is None:
        compared.append(plan_at(deployment, values[0], True))
        explained = for_range(compared[-1], deployment, values[0], profile)
        return _with_ctx(explained, values[0], compared, started)
    best, chosen = smallest, values[0]
    low, high = 1, len(values) - 1
    while low <= high:
        middle = (low + high) // 2
        compared.append(plan_at(deployment, values[middle], False))
        if tiers(compared[-1], profile) == wanted:
            best, chosen, low = compared[-1], values[middle], middle + 1
        else:
            high = middle - 1
    return _with_ctx(best, chosen, compared, started)


def for_range(result: Plan, deployment: Deployment, least: int, profile: MemoryProfile) -> Plan:
    """A plan at the range's least context, explained: a smaller context is a smaller ``ctx_min``
    (``explain.applied.with_ctx``), which the range's plan scales the profile to, given or not."""
    changed = []
    for relaxation in result.relaxations:
        if relaxation.kind == "ctx_size" and relaxation.value is not None:
            change = (
                f"give ctx_min {relaxation.value} in place of ctx_auto (its least context, {least}, does not fit)"
                if deployment.ctx_auto
                else f"lower ctx_min from {least} to {relaxation.value}"
            )
            layers = f"{relaxation.gpu_layers} of {profile.n_layers} layers on GPUs"
            relaxation = relaxation.model_copy(update={"message": f"{change}: {layers}"})
        changed.append(relaxation)
    return result.model_copy(update={"relaxations": tuple(changed)})


def _with_ctx(result: Plan, ctx: int, compared: list[Plan], started: float) -> Plan:
    """The plan with the context stage's stats: the chosen context, the plans it took, and
    ``truncated`` and ``safety_stops`` (``plans``) when the wall clock cut any of them (another run
    may choose otherwise; a work budget cuts them the same on every run)."""
    cut = any(plan.time_cuts for plan in compared)
    stats = EngineStats(
        engine="context",
        wall_time_s=time.perf_counter() - started,
        status=result.status,
        details={
            "ctx_size": ctx,
            "plans": len(compared),
            "truncated": "plans" if cut else "",
        },
        safety_stops=("plans",) if cut else (),
    )
    return result.model_copy(update={"stats": (*result.stats, stats)})
