"""check(): every way a plan breaks the rules, each as a typed Reason. Independent of any engine.

The memory numbers come from ``layerfit.memory.claims``; this module only compares them with the
cluster's capacities and the deployment's rules.
"""

from __future__ import annotations

from collections import Counter

from layerfit.domain.base import counted, format_bytes
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import OffloadOrder, PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.limits import MAX_DEVICES
from layerfit.domain.plan import Plan, Reason, ReasonKind
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.selection import selection_reasons, tensor_split_in_force, whole_selection
from layerfit.domain.speed import figure
from layerfit.errors import expect
from layerfit.memory import claims as compute_claims
from layerfit.memory import device_blocks, gpu_layers_flag, used_device_blocks
from layerfit.speed.deployment import deployment_speed


def capacity_reasons(cluster: Cluster, *all_claims: Claims) -> tuple[Reason, ...]:
    """Every GPU, worker RAM or unified pool that the claims, added together, overflow."""
    vram: Counter[tuple[str, int]] = Counter()
    ram: Counter[str] = Counter()
    pool: Counter[str] = Counter()
    for claims in all_claims:
        for device in claims.devices:
            vram[(device.worker, device.gpu_index)] += device.total_bytes
        for worker_claim in claims.workers:
            ram[worker_claim.worker] += worker_claim.ram_bytes
            pool[worker_claim.worker] += worker_claim.pool_bytes
    reasons: list[Reason] = []
    for (worker_name, index), needed in vram.items():
        gpu = cluster.worker(worker_name).gpu(index)
        if needed > gpu.allocatable_vram_bytes:
            reasons.append(
                Reason(
                    kind=ReasonKind.INSUFFICIENT_VRAM,
                    message=(
                        f"GPU {worker_name}:{gpu.type}:{gpu.index} needs {format_bytes(needed)} VRAM, "
                        f"{format_bytes(gpu.allocatable_vram_bytes)} allocatable "
                        f"({format_bytes(needed - gpu.allocatable_vram_bytes)} short)"
                    ),
                    resource="vram",
                    needed_bytes=needed,
                    available_bytes=gpu.allocatable_vram_bytes,
                    worker=worker_name,
                    gpu_index=index,
                )
            )
    for worker_name in ram:
        worker = cluster.worker(worker_name)
        needed = pool[worker_name] if worker.unified_memory else ram[worker_name]
        if needed > worker.allocatable_ram_bytes:
            kind = ReasonKind.INSUFFICIENT_UNIFIED_MEMORY if worker.unified_memory else ReasonKind.INSUFFICIENT_RAM
            what = "unified memory (RAM + VRAM)" if worker.unified_memory else "RAM"
            reasons.append(
                Reason(
                    kind=kind,
                    message=(
                        f"worker {worker_name} needs {format_bytes(needed)} {what}, "
                        f"{format_bytes(worker.allocatable_ram_bytes)} allocatable "
                        f"({format_bytes(needed - worker.allocatable_ram_bytes)} short)"
                    ),
                    resource="unified" if worker.unified_memory else "ram",
                    needed_bytes=needed,
                    available_bytes=worker.allocatable_ram_bytes,
                    worker=worker_name,
                )
            )
    return tuple(reasons)


def unified_workers(cluster: Cluster) -> frozenset[str]:
    """Names of the workers with one CPU/GPU memory pool."""
    return cluster.unified_names


def reference_reasons(cluster: Cluster, layout: Layout) -> tuple[Reason, ...]:
    """Workers or GPUs the layout names that the cluster does not have."""
    reasons: list[Reason] = []
    if not cluster.has_worker(layout.main_worker):
        reasons.append(
            Reason(
                kind=ReasonKind.UNKNOWN_WORKER,
                message=f"main worker {layout.main_worker!r} is not in the cluster",
                worker=layout.main_worker,
            )
        )
    for device in layout.devices:
        if not cluster.has_worker(device.worker):
            reasons.append(
                Reason(
                    kind=ReasonKind.UNKNOWN_WORKER,
                    message=f"worker {device.worker!r} is not in the cluster",
                    worker=device.worker,
                )
            )
        elif not cluster.worker(device.worker).has_gpu(device.gpu_index):
            reasons.append(
                Reason(
                    kind=ReasonKind.UNKNOWN_GPU,
                    message=f"worker {device.worker!r} has no GPU {device.gpu_index}",
                    worker=device.worker,
                    gpu_index=device.gpu_index,
                )
            )
    return tuple(reasons)


def device_cap_reasons(layout: Layout) -> tuple[Reason, ...]:
    """A layout with more devices than one llama.cpp process runs (it aborts at start-up)."""
    count = len(layout.devices)
    if count <= MAX_DEVICES:
        return ()
    message = (
        f"the layout uses {counted(count, 'devices')} ({counted(len(layout.rpc_devices), 'RPC servers')} + "
        f"{counted(len(layout.local_devices), 'local GPUs')}); one llama.cpp process runs at most {MAX_DEVICES}"
    )
    return (Reason(kind=ReasonKind.TOO_MANY_DEVICES, message=message, resource="devices"),)


def offload_order_reasons(layout: Layout, order: OffloadOrder) -> tuple[Reason, ...]:
    """A layout whose output-layer placement llama.cpp (of the configured build) cannot produce."""
    if order is OffloadOrder.OUTPUT_FIRST:
        valid = layout.output_offloaded == bool(layout.devices)
        rule = "current llama.cpp offloads the output layer first whenever any layer is on a GPU"
    else:
        valid = not layout.output_offloaded or layout.cpu_blocks == 0
        rule = "llama.cpp before December 2025 offloads the output layer only after every block"
    if valid:
        return ()
    return (Reason(kind=ReasonKind.OFFLOAD_ORDER, message=f"output layer placement: {rule}"),)


def rule_reasons(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, layout: Layout, config: PlannerConfig
) -> tuple[Reason, ...]:
    """The deployment's rules: -ngl, -ts, selection, switches, RPC cap, image models."""
    reasons: list[Reason] = []
    params = deployment.params
    n_layers = profile.n_layers
    if params.n_gpu_layers is not None:
        wanted = min(params.n_gpu_layers, n_layers)
        got = gpu_layers_flag(layout)
        if got != wanted:
            reasons.append(
                Reason(
                    kind=ReasonKind.GPU_LAYERS_NOT_HONOURED,
                    message=f"--n-gpu-layers {params.n_gpu_layers} asks for {wanted} layers on GPUs, "
                    f"the layout has {got}",
                    resource="n_gpu_layers",
                )
            )
    tensor_split = tensor_split_in_force(deployment, config)
    if tensor_split is not None:
        drops_empty = not whole_selection(deployment, config)
        reasons.extend(_tensor_split_reasons(tensor_split, layout, config.offload_order, drops_empty))
    reasons.extend(selection_reasons(cluster, deployment, layout, config))
    reasons.extend(expert_reasons(profile, layout))
    if not deployment.cpu_offloading and layout.host_expert_blocks:
        reasons.append(
            Reason(
                kind=ReasonKind.CPU_OFFLOAD_NOT_ALLOWED,
                message=f"experts of {counted(len(layout.host_expert_blocks), 'blocks')} stay in host RAM "
                "but CPU offloading is not allowed",
            )
        )
    if not deployment.cpu_offloading and not layout.full_offload:
        reasons.append(
            Reason(
                kind=ReasonKind.CPU_OFFLOAD_NOT_ALLOWED,
                message=f"{_on_cpu(layout)} on the CPU but CPU offloading is not allowed",
            )
        )
    rpc_count = len(layout.rpc_devices)
    if rpc_count and not deployment.distributed_inference_across_workers:
        reasons.append(
            Reason(
                kind=ReasonKind.DISTRIBUTION_NOT_ALLOWED,
                message=f"the layout uses {counted(rpc_count, 'RPC servers')} "
                "but distribution across workers is not allowed",
            )
        )
    if rpc_count > config.max_rpc_servers:
        reasons.append(
            Reason(
                kind=ReasonKind.TOO_MANY_RPC_SERVERS,
                message=f"{counted(rpc_count, 'RPC servers')}, at most {config.max_rpc_servers} allowed",
            )
        )
    if deployment.kind is ModelKind.IMAGE and (
        len(layout.devices) != 1 or not layout.full_offload or layout.rpc_devices
    ):
        reasons.append(
            Reason(
                kind=ReasonKind.IMAGE_MODEL_SPLIT,
                message="image models run fully offloaded on a single GPU of their own worker only",
            )
        )
    return tuple(reasons)


def _on_cpu(layout: Layout) -> str:
    """``3 blocks and the output layer stay``, ``1 block stays``, ``the output layer stays``."""
    parts = [counted(layout.cpu_blocks, "blocks")] if layout.cpu_blocks else []
    parts += [] if layout.output_offloaded else ["the output layer"]
    return " and ".join(parts) + (" stays" if len(parts) == 1 and layout.cpu_blocks <= 1 else " stay")


def expert_reasons(profile: MemoryProfile, layout: Layout) -> tuple[Reason, ...]:
    """Experts kept on the host must exist, and must be where the user's tensor overrides put them."""
    dense = [block for block in layout.host_expert_blocks if profile.expert_bytes(block) == 0]
    if dense:
        message = f"blocks {dense} keep experts on the host but have no expert tensors"
        return (Reason(kind=ReasonKind.EXPERTS_NOT_HONOURED, message=message, resource="host_expert_blocks"),)
    if profile.fixed_host_experts is None:
        return ()
    wanted = tuple(block for block in profile.fixed_host_experts if block >= layout.cpu_blocks)
    if layout.host_expert_blocks == wanted:
        return ()
    message = (
        f"the tensor overrides keep experts of GPU blocks {list(wanted)} on the host, "
        f"the layout those of {list(layout.host_expert_blocks)}"
    )
    return (Reason(kind=ReasonKind.EXPERTS_NOT_HONOURED, message=message, resource="override_tensor"),)


def _tensor_split_reasons(
    tensor_split: tuple[float, ...], layout: Layout, order: OffloadOrder, drops_empty: bool
) -> tuple[Reason, ...]:
    """The layout must be what llama.cpp makes of the user's split over the layout's devices.

    Zero shares name devices that get nothing; the remaining shares map, in order, onto the layout's
    devices. With ``drops_empty`` a device the split leaves without a layer at the layout's ``-ngl``
    is not among them either (``memory.used_device_blocks``); over a selection used whole, llama.cpp
    is given every selected GPU, so each must hold a layer.
    """
    if not layout.devices:
        return ()  # llama.cpp ignores -ts when no layer is on a GPU
    shares = tuple(share for share in tensor_split if share > 0)
    layers = gpu_layers_flag(layout)
    if drops_empty:
        per_device, output_device = used_device_blocks(layout.n_blocks, layers, shares, order)
        count = f"gives layers to {counted(len(per_device), 'GPUs')} at -ngl {layers}"
    else:
        per_device, output_device = device_blocks(layout.n_blocks, layers, shares, order)
        count = f"has {counted(len(shares), 'non-zero shares')}"
    if len(per_device) != len(layout.devices):
        return (
            Reason(
                kind=ReasonKind.TENSOR_SPLIT_NOT_HONOURED,
                message=f"--tensor-split {count}, the layout uses {counted(len(layout.devices), 'GPUs')}",
                resource="tensor_split",
            ),
        )
    expected_output = len(layout.devices) - 1 if layout.output_offloaded else None
    if per_device != tuple(device.blocks for device in layout.devices) or output_device != expected_output:
        return (
            Reason(
                kind=ReasonKind.TENSOR_SPLIT_NOT_HONOURED,
                message=f"--tensor-split {','.join(f'{s:g}' for s in tensor_split)} gives blocks {list(per_device)}, "
                f"the layout has {[device.blocks for device in layout.devices]}",
                resource="tensor_split",
            ),
        )
    return ()


def check_layout(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    config: PlannerConfig = PlannerConfig(),
) -> tuple[Reason, ...]:
    """Every violation of a layout: references, llama.cpp's offload order, rules, capacities."""
    return checked_claims(cluster, deployment, profile, layout, config)[0]


def checked_claims(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    config: PlannerConfig = PlannerConfig(),
) -> tuple[tuple[Reason, ...], Claims | None]:
    """``check_layout``'s violations, and the layout's claims when its references are sound."""
    missing = reference_reasons(cluster, layout)
    if missing:
        return missing, None
    if layout.n_blocks != profile.n_blocks:
        return (
            Reason(
                kind=ReasonKind.BLOCK_COUNT_MISMATCH,
                message=f"layout has {layout.n_blocks} blocks, the model has {profile.n_blocks}",
            ),
        ), None
    needed = compute_claims(profile, layout, unified_workers(cluster))
    reasons = (
        *device_cap_reasons(layout),
        *offload_order_reasons(layout, config.offload_order),
        *rule_reasons(cluster, deployment, profile, layout, config),
        *capacity_reasons(cluster, needed),
    )
    if reasons or deployment.min_decode_tokens_per_s is None:
        return reasons, needed
    return speed_reasons(cluster, deployment, profile, layout), needed


def speed_reasons(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, layout: Layout
) -> tuple[Reason, ...]:
    """A layout predicted to decode slower than the deployment's ``min_decode_tokens_per_s`` (the
    replica alone on its GPUs: a fleet checks the busy case in its master)."""
    minimum = deployment.min_decode_tokens_per_s
    if minimum is None:
        return ()
    predicted = deployment_speed(cluster, deployment, profile, layout)
    if predicted.decode_tokens_per_s >= minimum:
        return ()
    largest = predicted.largest_text(2)
    message = (
        f"predicted {figure(predicted.decode_tokens_per_s)} tokens/s decode, below min_decode_tokens_per_s "
        f"{minimum:g} ({figure(predicted.decode_ms_per_token)} ms per token; most in {largest})"
    )
    return (Reason(kind=ReasonKind.TOO_SLOW, message=message, resource="min_decode_tokens_per_s"),)


def check(
    cluster: Cluster,
    deployment: Deployment,
    plan: Plan | Layout,
    profile: MemoryProfile,
    config: PlannerConfig = PlannerConfig(),
) -> tuple[Reason, ...]:
    """Every violation of a plan (its best layout and every alternative), or of a bare layout.

    A plan's stated claims must also equal what the memory model computes for its layout.
    """
    expect(cluster, Cluster, "cluster")
    expect(deployment, Deployment, "deployment")
    expect(plan, (Plan, Layout), "plan")
    expect(profile, MemoryProfile, "profile")
    expect(config, PlannerConfig, "config")
    if isinstance(plan, Layout):
        return check_layout(cluster, deployment, profile, plan, config)
    reasons: list[Reason] = []
    candidates = ([plan.best] if plan.best is not None else []) + list(plan.alternatives)
    for candidate in candidates:
        layout_reasons = check_layout(cluster, deployment, profile, candidate.layout, config)
        reasons.extend(layout_reasons)
        if not layout_reasons and candidate.claims != compute_claims(
            profile, candidate.layout, unified_workers(cluster)
        ):
            reasons.append(
                Reason(
                    kind=ReasonKind.CLAIMS_MISMATCH,
                    message="the plan's claims differ from the memory model's claims for its layout",
                )
            )
    return tuple(reasons)
