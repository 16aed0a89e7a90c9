"""The changes to the request explain tries: CPU offloading, distribution, experts in host RAM, a
smaller context. Each is planned with the change applied (``applied``), and offered only when that
plan places the model."""

from __future__ import annotations

from collections.abc import Callable

from layerfit.domain.base import format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Plan, Relaxation
from layerfit.domain.profile import MemoryProfile
from layerfit.llamacpp.expert_launch import expert_args
from layerfit.memory.experts import expertless_blocks
from layerfit.planning.explain.applied import with_ctx, with_host_experts
from layerfit.planning.explain.budget import MIN_CTX

PlanFunction = Callable[[Cluster, Deployment, PlannerConfig, MemoryProfile], Plan]
ProfileOf = Callable[[Deployment], MemoryProfile]
"""The profile a re-plan of a changed deployment uses (an explicit one as given, else estimated)."""


def _placed(plan: Plan) -> Layout | None:
    return plan.layout


def block_ranges(blocks: tuple[int, ...]) -> str:
    """``0–23, 30`` for blocks 0 to 23 and 30."""
    runs: list[list[int]] = []
    for block in blocks:
        if runs and block == runs[-1][-1] + 1:
            runs[-1].append(block)
        else:
            runs.append([block])
    return ", ".join(f"{run[0]}–{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def on_gpus(layout: Layout, profile: MemoryProfile) -> str:
    """``71 of 81 layers on GPUs``, and the experts a layout keeps in host RAM."""
    text = f"{layout.gpu_layers} of {profile.n_layers} layers on GPUs"
    if layout.host_expert_blocks:
        text += f", the experts of blocks {block_ranges(layout.host_expert_blocks)} in host RAM"
    return text


def switch_relaxations(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, plan: PlanFunction
) -> list[Relaxation]:
    """Turning on CPU offloading or distribution, when that alone places the deployment (the
    profile does not depend on either switch)."""
    found = []
    if not deployment.cpu_offloading:
        layout = _placed(plan(cluster, deployment.model_copy(update={"cpu_offloading": True}), config, profile))
        if layout is not None:
            message = f"allow CPU offloading: {on_gpus(layout, profile)}"
            found.append(Relaxation(kind="allow_cpu_offloading", message=message, gpu_layers=layout.gpu_layers))
    if not deployment.distributed_inference_across_workers and len(cluster.workers) > 1:
        relaxed = deployment.model_copy(update={"distributed_inference_across_workers": True})
        layout = _placed(plan(cluster, relaxed, config, profile))
        if layout is not None:
            message = f"allow distribution across workers: {on_gpus(layout, profile)}"
            found.append(Relaxation(kind="allow_distribution", message=message, gpu_layers=layout.gpu_layers))
    return found


def expert_relaxation(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    plan: PlanFunction,
    profile_of: ProfileOf,
) -> Relaxation | None:
    """The experts of some blocks in host RAM, where the settings kept them with their blocks
    (``expert_offload`` off, as for GPUStack): the flags that keep them there (``--n-cpu-moe``,
    ``-ot``) added to a GGUF file's parameters, or an explicit profile's ``fixed_host_experts``,
    with CPU offloading where it is off (experts in host RAM need it). With expert offload on,
    allowing CPU offloading is that change (``switch_relaxations``)."""
    if not profile.is_moe or profile.fixed_host_experts is not None or config.expert_offload:
        return None
    relaxed = deployment.model_copy(update={"cpu_offloading": True})
    layout = _placed(plan(cluster, relaxed, config.model_copy(update={"expert_offload": True}), profile))
    if layout is None or not layout.host_expert_blocks:
        return None
    flags = expert_args(layout, expertless_blocks(profile))
    if flags[0] == "--n-cpu-moe":
        blocks = tuple(block for block in profile.expert_blocks if block < int(flags[1]))
    else:
        blocks = layout.host_expert_blocks
    explicit = deployment.profile is not None
    change = Relaxation(
        kind="experts_on_host",
        message="",
        value=len(blocks),
        host_expert_blocks=blocks,
        parameters=() if explicit else flags,
        cpu_offloading=not deployment.cpu_offloading,
    )
    changed = with_host_experts(deployment, change)
    placed = _placed(plan(cluster, changed, config, profile_of(changed)))
    if placed is None:
        return None
    how = (
        f"the profile is given: set its fixed_host_experts to {list(blocks)}"
        if explicit
        else f"add {' '.join(flags)} to the backend parameters"
    )
    also = "allow CPU offloading and " if change.cpu_offloading else ""
    message = f"{also}keep the experts of blocks {block_ranges(blocks)} in host RAM ({how}): {on_gpus(placed, profile)}"
    return change.model_copy(update={"message": message, "gpu_layers": placed.gpu_layers})


def ctx_relaxation(
    cluster: Cluster, deployment: Deployment, config: PlannerConfig, plan: PlanFunction, profile_of: ProfileOf
) -> Relaxation | None:
    """The largest context size (a multiple of 256) that places the deployment, found by bisection;
    each step plans the deployment as the change leaves it (``with_ctx``: an explicit profile's KV
    cache with it)."""
    from layerfit.estimators.estimate import deployment_ctx_size

    ctx = deployment_ctx_size(deployment)
    low, high = MIN_CTX, ctx - MIN_CTX
    best: tuple[int, Layout, MemoryProfile] | None = None
    while low <= high:
        middle = (low + high) // 2 // MIN_CTX * MIN_CTX
        middle = max(middle, low)
        smaller = with_ctx(deployment, middle)
        at_middle = profile_of(smaller)
        layout = _placed(plan(cluster, smaller, config, at_middle))
        if layout is not None:
            best, low = (middle, layout, at_middle), middle + MIN_CTX
        else:
            high = middle - MIN_CTX
    if best is None:
        return None
    size, layout, at_size = best
    change = f"reduce --ctx-size from {ctx} to {size}"
    if deployment.profile is not None:
        change += " and " + _kv_change(deployment.profile, at_size)
    return Relaxation(
        kind="ctx_size",
        message=f"{change}: {on_gpus(layout, at_size)}",
        value=size,
        gpu_layers=layout.gpu_layers,
    )


def _kv_change(given: MemoryProfile, smaller: MemoryProfile) -> str:
    """What an explicit profile's KV cache becomes at the smaller context: the planner takes the
    profile as given, so ``--ctx-size`` alone changes nothing it plans."""
    before, after = set(given.block_kv_bytes), set(smaller.block_kv_bytes)
    if len(before) == 1 and len(after) == 1:
        sizes = f"from {format_bytes(before.pop())} to {format_bytes(after.pop())} a block"
    else:
        sizes = "each block's in proportion"
    return f"the profile's block_kv_bytes with it ({sizes}; the profile is taken as given, not re-estimated)"
