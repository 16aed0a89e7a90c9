"""When memory is not the problem: layouts fit, but every one is predicted slower than the
deployment's ``min_decode_tokens_per_s``.

The fastest layout that fits is the deployment planned without the minimum under ``objective:
speed`` (``fastest_fitting``: the planner, no arithmetic of its own); ``shortfall`` says its speed
against the minimum and the term of the speed model that dominates it. The changes that would meet
the minimum are planned with the change made, the minimum kept, and offered only when that plan
places the model (as every change of explain): the minimum lowered to what the fastest layout
reaches, rounded down (``lower_minimum``); a deployment's flags that keep experts on the host
taken out or reduced (``experts_on_gpus``); beyond this hardware, a GPU with the memory bandwidth
the dominant GPU would need (``faster_gpu``: found by re-predicting the layout with the cluster
file's ``memory_bandwidth_gbps`` on that GPU, then planned on the cluster so changed).
"""

from __future__ import annotations

import math

from layerfit.domain.choices import Objective
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate, Plan, Relaxation, SpeedShortfall, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import MAX_FIGURE, SpeedPrediction, SpeedTerm
from layerfit.llamacpp.expert_flags import parse_expert_flags
from layerfit.llamacpp.expert_launch import expert_args
from layerfit.memory.experts import expertless_blocks
from layerfit.planning.explain.applied import applied, with_bandwidth, without_expert_flags
from layerfit.planning.explain.changes import PlanFunction, ProfileOf, on_gpus
from layerfit.speed.deployment import deployment_speed
from layerfit.speed.devices import gpu_facts

SHOWN_DIGITS = 3
"""Significant digits of a minimum offered (rounded down) and of a bandwidth asked for (rounded up)."""
ROUNDING_TRIES = 3
"""Minimums (bandwidths) tried, each one step of the last shown digit below (above) the one before:
the solver keeps a margin for its rounding (``solver.model.speed_costs``, ``speed_rounding_us``),
so a layout a hair within the minimum may be found only at the next step."""


def fastest_fitting(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, plan: PlanFunction
) -> Plan | None:
    """The deployment planned without its ``min_decode_tokens_per_s`` under ``objective: speed``,
    when that places it (layouts fit in memory); ``None`` when it sets no minimum or nothing fits."""
    if deployment.min_decode_tokens_per_s is None:
        return None
    free = deployment.model_copy(update={"min_decode_tokens_per_s": None, "objective": Objective.SPEED})
    result = plan(cluster, free, config, profile)
    return result if result.best is not None and result.best.speed is not None else None


def _speed(candidate: Candidate) -> SpeedPrediction:
    assert candidate.speed is not None  # every planned candidate carries its speed (planning.speed)
    return candidate.speed


def rate(speed: SpeedPrediction) -> str:
    """``21.2 tokens/s (47.2 ms a token)``."""
    digits = SHOWN_DIGITS
    return f"{speed.decode_tokens_per_s:.{digits}g} tokens/s ({speed.decode_ms_per_token:.{digits}g} ms a token)"


def placed_as(layout: Layout, profile: MemoryProfile, speed: SpeedPrediction | None) -> str:
    """``81 of 81 layers on GPUs, predicted 30.1 tokens/s (33.2 ms a token)``."""
    text = on_gpus(layout, profile)
    return text if speed is None else f"{text}, predicted {rate(speed)}"


def dominant_term(speed: SpeedPrediction) -> SpeedTerm:
    return speed.largest_terms(1)[0]


def shortfall(fastest: Plan, deployment: Deployment, profile: MemoryProfile, cluster: Cluster) -> SpeedShortfall:
    """The fastest layout that fits against the minimum, and the term that dominates its time."""
    assert fastest.best is not None and deployment.min_decode_tokens_per_s is not None
    minimum = deployment.min_decode_tokens_per_s
    best = fastest.best
    speed = _speed(best)
    top = dominant_term(speed)
    proven = fastest.status is Status.OPTIMAL
    which = "the fastest layout that fits" if proven else "the fastest layout found that fits (not proven fastest)"
    gpus = ", ".join(cluster.gpu_id(device.worker, device.gpu_index) for device in best.layout.devices) or "the host"
    message = (
        f"memory is not the problem: {which} ({best.strategy.value} on {gpus}: {on_gpus(best.layout, profile)}) "
        f"is predicted at {rate(speed)} against min_decode_tokens_per_s {minimum:g} "
        f"({1000.0 / minimum:.{SHOWN_DIGITS}g} ms a token); most of its time is {top.where}: "
        f"{top.ms:.{SHOWN_DIGITS}g} ms of {speed.decode_ms_per_token:.{SHOWN_DIGITS}g} ms ({top.why})"
    )
    return SpeedShortfall(minimum_tokens_per_s=minimum, fastest=best, proven=proven, dominant=top, message=message)


def rounded_down(value: float, digits: int = SHOWN_DIGITS) -> tuple[float, float]:
    """``value`` rounded down to ``digits`` significant digits, and the step of its last digit."""
    exponent = math.floor(math.log10(value)) - digits + 1
    step = 10.0**exponent
    shown = round(math.floor(value / step) * step, max(0, -exponent))
    if shown > value:  # the decimal nearest the float lies above it
        shown = round(shown - step, max(0, -exponent))
    return shown, step


def rounded_up(value: float, digits: int = SHOWN_DIGITS) -> tuple[int, int]:
    """A whole number at or above ``value`` with at most ``digits`` significant digits (past the
    point), and the step of its last digit."""
    exponent = max(0, math.floor(math.log10(value)) - digits + 1)
    step = 10**exponent
    return math.ceil(value / step) * step, step


def lower_minimum(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    fastest: SpeedPrediction,
) -> Relaxation | None:
    """``min_decode_tokens_per_s`` lowered to what the fastest layout that fits reaches, rounded
    down, when the deployment planned with it places (a step lower where the solver's margin for
    its rounding needs it)."""
    assert deployment.min_decode_tokens_per_s is not None
    shown, step = rounded_down(fastest.decode_tokens_per_s)
    for attempt in range(ROUNDING_TRIES):
        value = round(shown - attempt * step, 12)
        if value <= 0:
            return None
        changed = deployment.model_copy(update={"min_decode_tokens_per_s": value})
        result = plan(cluster, changed, config, profile)
        if result.best is not None:
            message = (
                f"lower min_decode_tokens_per_s from {deployment.min_decode_tokens_per_s:g} to {value:g}, what the "
                f"fastest layout that fits reaches: {placed_as(result.best.layout, profile, result.best.speed)}"
            )
            return Relaxation(
                kind="min_decode_tokens_per_s",
                message=message,
                tokens_per_s=value,
                gpu_layers=result.best.layout.gpu_layers,
            )
    return None


def _removed(extra: tuple[str, ...], rest: tuple[str, ...]) -> tuple[str, ...]:
    """The tokens of ``extra`` that ``rest`` (a subsequence of it, in order) leaves out."""
    removed, kept = [], iter(rest)
    following = next(kept, None)
    for token in extra:
        if token == following:
            following = next(kept, None)
        else:
            removed.append(token)
    return tuple(removed)


def experts_on_gpus(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_of: ProfileOf,
) -> Relaxation | None:
    """Fewer experts on the host than the deployment's flags (or its profile's ``fixed_host_experts``)
    force: the flags taken out, planned under ``objective: speed`` with the minimum kept and expert
    offload on, give the fastest layout's host experts (none, or fewer); the change puts the flags
    for those in place of the deployment's, and is offered when the deployment so changed places."""
    forced = profile.fixed_host_experts
    if not profile.is_moe or not forced:
        return None
    free = without_expert_flags(deployment)
    decided = config.model_copy(update={"expert_offload": True})
    fast = plan(cluster, free.model_copy(update={"objective": Objective.SPEED}), decided, profile_of(free))
    if fast.best is None or len(fast.best.layout.host_expert_blocks) >= len(forced):
        return None
    blocks = fast.best.layout.host_expert_blocks
    explicit = deployment.profile is not None
    flags = () if explicit or not blocks else expert_args(fast.best.layout, expertless_blocks(profile))
    removed = () if explicit else _removed(deployment.params.extra, parse_expert_flags(deployment.params.extra)[1])
    change = Relaxation(
        kind="experts_on_gpus",
        message="",
        value=len(blocks),
        host_expert_blocks=blocks,
        parameters=flags,
        removed_parameters=removed,
    )
    _, changed = applied(cluster, deployment, change)
    result = plan(cluster, changed, config, profile_of(changed))
    if result.best is None:
        return None
    if explicit:
        how = f"set the profile's fixed_host_experts from {list(forced)} to {list(blocks)}"
    elif flags:
        how = f"replace {' '.join(removed)} with {' '.join(flags)} in the backend parameters"
    else:
        how = f"take {' '.join(removed)} out of the backend parameters"
    kept = f"the experts of {len(blocks)} blocks" if blocks else "no experts"
    message = (
        f"{how} ({kept} on the host, not {len(forced)}): {placed_as(result.best.layout, profile, result.best.speed)}"
    )
    return change.model_copy(update={"message": message, "gpu_layers": result.best.layout.gpu_layers})


def _gpu_term(cluster: Cluster, layout: Layout, speed: SpeedPrediction) -> tuple[str, int, SpeedTerm] | None:
    """The GPU of the layout whose term takes the most time (not ggml's CPU backend behind an
    rpc-server: its speed is its worker's)."""
    by_where = {term.where: term for term in speed.terms}
    found: list[tuple[str, int, SpeedTerm]] = []
    for device in layout.devices:
        facts = gpu_facts(
            cluster.gpu_id(device.worker, device.gpu_index), cluster.worker(device.worker).gpu(device.gpu_index)
        )
        term = by_where.get(facts.where)
        if term is not None and not facts.on_cpu:
            found.append((device.worker, device.gpu_index, term))
    return max(found, key=lambda item: item[2].ms, default=None)


def faster_gpu(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    fastest: Candidate,
) -> Relaxation | None:
    """Beyond this hardware: the memory bandwidth the fastest layout's slowest GPU would need for the
    layout to meet the minimum (the least whole GB/s, by bisection on the speed model's prediction
    with that GPU's ``memory_bandwidth_gbps`` overridden, then rounded up), offered when the
    deployment planned on the cluster with that GPU places (a step or two higher where the
    solver's rounding margin needs it: ``ROUNDING_TRIES``). ``None`` when no bandwidth would do
    (other terms alone take longer than the minimum allows)."""
    minimum = deployment.min_decode_tokens_per_s
    assert minimum is not None
    layout = fastest.layout
    found = _gpu_term(cluster, layout, _speed(fastest))
    if found is None:
        return None
    worker, index, term = found
    gpu = cluster.worker(worker).gpu(index)
    facts = gpu_facts(cluster.gpu_id(worker, index), gpu)

    def meets(gbps: float) -> bool:
        grown = with_bandwidth(cluster, worker, index, gbps)
        return deployment_speed(grown, deployment, profile, layout).decode_tokens_per_s >= minimum

    if not meets(MAX_FIGURE):
        return None
    low, high = math.floor(facts.bandwidth_gbps), int(MAX_FIGURE)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    shown, step = rounded_up(high)
    for attempt in range(ROUNDING_TRIES):
        needed = min(shown + attempt * step, int(MAX_FIGURE))
        grown = with_bandwidth(cluster, worker, index, needed)
        predicted = deployment_speed(grown, deployment, profile, layout)
        if predicted.decode_tokens_per_s >= minimum and plan(grown, deployment, config, profile).best is not None:
            return _faster_gpu(cluster, minimum, (worker, index), needed, term, predicted, layout)
    return None


def _faster_gpu(
    cluster: Cluster,
    minimum: float,
    where: tuple[str, int],
    needed: int,
    term: SpeedTerm,
    predicted: SpeedPrediction,
    layout: Layout,
) -> Relaxation:
    worker, index = where
    gpu = cluster.worker(worker).gpu(index)
    gpu_id = cluster.gpu_id(worker, index)
    facts = gpu_facts(gpu_id, gpu)
    named = (
        f"{gpu_id} ({gpu.name}, {facts.bandwidth_gbps:,.0f} GB/s)"
        if gpu.name
        else f"{gpu_id} ({facts.bandwidth_gbps:,.0f} GB/s)"
    )
    message = (
        f"needs a GPU of the same size with at least {needed:,} GB/s memory bandwidth in place of {named} to reach "
        f"min_decode_tokens_per_s {minimum:g}: its term, {term.ms:.{SHOWN_DIGITS}g} ms, then takes "
        f"{_term_at(predicted, facts.where):.{SHOWN_DIGITS}g} ms and that layout {rate(predicted)} "
        f"(at the share of its bandwidth the speed model takes for the {facts.family} family)"
    )
    return Relaxation(
        kind="faster_gpu",
        message=message,
        value=needed,
        worker=worker,
        gpu_index=index,
        gpu_layers=layout.gpu_layers,
        layout=layout,
    )


def _term_at(speed: SpeedPrediction, where: str) -> float:
    return sum(term.ms for term in speed.terms if term.where == where)
