"""A deployment's predicted speed: its settings (``-t``, ``-tb``, the context), and a layout's speed
as the deployment runs it (a stand-in profile's host experts counted on the host).

Every engine asks here: the check of ``min_decode_tokens_per_s``, the heuristic's ranking under
``objective: speed``, the solver's costs, the planner's and the fleet's reports.
"""

from __future__ import annotations

from collections.abc import Mapping

from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedPrediction
from layerfit.speed.decode import decode_ms
from layerfit.speed.devices import gpu_facts, host_facts
from layerfit.speed.predict import layout_costs, predict
from layerfit.speed.settings import SpeedSettings, settings_for


def deployment_settings(deployment: Deployment, profile: MemoryProfile) -> SpeedSettings:
    """The speed settings of a deployment: its ``-t``/``-tb``, and for a profile given as numbers
    the context and micro-batch its parameters say."""
    ctx = profile.speed.ctx if profile.speed is not None else None
    return settings_for(deployment.params, ctx=ctx)


def speed_layout(profile: MemoryProfile, layout: Layout) -> Layout:
    """The layout as the speed model must see it: the host experts of a stand-in profile
    (``MemoryProfile.stand_in_host_experts``) named in it."""
    if not profile.stand_in_host_experts:
        return layout
    return layout.with_host_experts({*profile.stand_in_host_experts, *layout.host_expert_blocks})


def deployment_speed(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> SpeedPrediction:
    """The predicted speed of one layout of a deployment (``sharing``: GPUs that many processes
    decode on at once)."""
    return predict(
        profile, speed_layout(profile, layout), cluster, deployment_settings(deployment, profile), sharing=sharing
    )


def deployment_decode_ms(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> float:
    """The predicted decode time per token of one layout of a deployment (``deployment_speed``'s,
    without the prompt's terms): what the heuristic ranks by under ``objective: speed``."""
    seen = speed_layout(profile, layout)
    costs, _, _, _ = layout_costs(profile, seen, cluster, deployment_settings(deployment, profile), sharing=sharing)
    return decode_ms(costs, seen)


def gpu_key(gpu: Gpu) -> tuple[object, ...]:
    """What a GPU's facts are made of (``devices.gpu_facts``): its name, type and figures."""
    return (gpu.name, gpu.type, gpu.memory_bandwidth_gbps, gpu.fp16_tflops)


def host_key(worker: Worker, threads: int | None) -> tuple[object, ...]:
    """What a worker's CPU figures are (``devices.host_facts``), with ``threads`` (``-t``) if given."""
    facts = host_facts(worker, threads)
    return (facts.ram_bandwidth_gbps, facts.threads, facts.batch_threads)


def speed_key(worker: Worker, gpu: Gpu) -> tuple[object, ...]:
    """What a GPU's speed depends on: its facts, and for ggml's CPU backend behind an rpc-server
    its worker's CPU (two GPUs of one worker with the same key run every layout alike)."""
    return (*gpu_key(gpu), host_key(worker, None) if gpu_facts("", gpu).on_cpu else None)


def worker_speed_key(worker: Worker) -> tuple[object, ...]:
    """What a worker's own speed depends on: its CPU and its network."""
    return (worker.ram_bandwidth_gbps, worker.cpu_threads, worker.network)


def layout_speed_key(cluster: Cluster, layout: Layout) -> tuple[object, ...]:
    """What a layout's predicted decode time depends on beyond the deployment: two layouts with the
    same key take the same time (its main worker's CPU and network, each device's speed, role,
    blocks and, for an rpc-server, its worker's network; what stays on the host)."""
    main = cluster.worker(layout.main_worker)
    devices = tuple(
        (
            speed_key(cluster.worker(device.worker), cluster.worker(device.worker).gpu(device.gpu_index)),
            None if device.worker == layout.main_worker else cluster.worker(device.worker).network,
            device.blocks,
        )
        for device in layout.devices
    )
    return (worker_speed_key(main), devices, layout.cpu_blocks, layout.output_offloaded, layout.host_expert_blocks)


def decode_limit_ms(deployment: Deployment) -> float | None:
    """The slowest decode time per token the deployment accepts (``min_decode_tokens_per_s``), in ms."""
    minimum = deployment.min_decode_tokens_per_s
    return None if minimum is None else 1000.0 / minimum
