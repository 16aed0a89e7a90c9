"""Replicas that share a GPU: the busy case of ``min_decode_tokens_per_s``, and the busy decode
time that ``objective: speed`` minimises in the fleet.

A GPU shared by ``n`` processes decoding at once gives each ``1/n`` of its bandwidth and FLOPS
(``speed.rates``): a device's roofline time (``max(bytes / bandwidth, FLOPs / FLOPS)``; on ggml's
CPU backend their sum) scales by ``n``, its fixed cost per layer, copies and round trips do not.
So a layout's decode time with ``n_g`` replicas on each of its GPUs ``g`` (itself among them) is
linear in them:

    t(n) = rest + sum over its GPUs g of share_g * n_g

with ``share_g`` = the time with ``g`` shared by two less the time alone, both from the speed
model (``speed.deployment.deployment_decode_ms``), and ``rest`` = the time alone less every share.
Here they are in whole microseconds rounded up, and the limit (``min_decode_tokens_per_s``) in
whole microseconds rounded down, so a plan whose integer times keep the limit keeps it in the
speed model too (``busy_reasons`` checks that in floating point, at the end of every plan).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import Objective, PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.fleet import PlacedReplica, Placement
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.speed.deployment import decode_limit_ms, deployment_decode_ms, deployment_speed, layout_speed_key

GpuKey = tuple[str, int]
US_PER_MS = 1000
ROUNDING_US = 1e-3
"""Added before rounding up, so that the floating point error of a difference cannot round a
share below its value."""
BUSY_TIER = "busy decode time"
"""The tier ``objective: speed`` adds to the fleet's (``fleet.tiers``)."""


@dataclass(frozen=True)
class BusyTime:
    """One layout's decode time per token as a function of the replicas on its GPUs, in µs."""

    shares_us: tuple[tuple[GpuKey, int], ...]
    """Per GPU of the layout: the µs each replica decoding on it (this one included) adds."""
    rest_us: int
    """What does not depend on the sharing."""

    def time_us(self, on: Mapping[GpuKey, int]) -> int:
        """The time with ``on[g]`` replicas on each GPU ``g`` (at least this one: 1 where missing)."""
        return self.rest_us + sum(share * max(1, on.get(gpu, 0)) for gpu, share in self.shares_us)


def _up_us(ms: float) -> int:
    return max(0, math.ceil(ms * US_PER_MS + ROUNDING_US))


def layout_gpus(layout: Layout) -> tuple[GpuKey, ...]:
    return tuple((device.worker, device.gpu_index) for device in layout.devices)


def busy_time(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    known: dict[object, tuple[tuple[int, ...], int]] | None = None,
) -> BusyTime:
    """The layout's ``BusyTime`` (``known``: by deployment and ``layout_speed_key``, what was
    computed before: layouts with the same key take the same time on the same shares)."""
    key = (deployment.name, layout_speed_key(cluster, layout))
    if known is None or key not in known:
        alone = deployment_decode_ms(cluster, deployment, profile, layout)
        shares = [
            deployment_decode_ms(cluster, deployment, profile, layout, sharing={gpu: 2}) - alone
            for gpu in layout_gpus(layout)
        ]
        found = (tuple(_up_us(share) for share in shares), _up_us(alone - sum(shares)))
        if known is None:
            return BusyTime(tuple(zip(layout_gpus(layout), found[0], strict=True)), found[1])
        known[key] = found
    shares_us, rest_us = known[key]
    return BusyTime(tuple(zip(layout_gpus(layout), shares_us, strict=True)), rest_us)


def limit_us(deployment: Deployment) -> int | None:
    """``min_decode_tokens_per_s`` as the most whole µs per token a replica may take."""
    limit = decode_limit_ms(deployment)
    return None if limit is None else math.floor(limit * US_PER_MS)


@dataclass(frozen=True)
class BusyTable:
    """Per deployment of a master and per candidate: its ``BusyTime`` where it matters (the
    deployment sets a minimum or is planned under ``objective: speed``), the limit, and which
    deployments' busy time the speed tier minimises."""

    times: tuple[tuple[BusyTime | None, ...], ...]
    limits: tuple[int | None, ...]
    speedy: tuple[bool, ...]

    @property
    def has_limits(self) -> bool:
        return any(limit is not None for limit in self.limits)

    @property
    def has_speed_tier(self) -> bool:
        return any(self.speedy)

    def violated(self, layouts: Sequence[Sequence[Layout]], counts: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
        """The placed candidates whose busy time breaks their deployment's minimum."""
        on = replicas_on(layouts, counts)
        return [
            (d, c)
            for d, row in enumerate(counts)
            if (limit := self.limits[d]) is not None
            for c, n in enumerate(row)
            if n and (time := self.times[d][c]) is not None and time.time_us(on) > limit
        ]

    def total_us(self, layouts: Sequence[Sequence[Layout]], counts: Sequence[Sequence[int]]) -> int:
        """The speed tier's value: the busy decode time of every replica of a speed deployment, summed."""
        on = replicas_on(layouts, counts)
        return sum(
            n * time.time_us(on)
            for d, row in enumerate(counts)
            if self.speedy[d]
            for c, n in enumerate(row)
            if n and (time := self.times[d][c]) is not None
        )


def busy_table(
    cluster: Cluster,
    deployments: Sequence[Deployment],
    profiles: Mapping[str, MemoryProfile],
    layouts: Sequence[Sequence[Layout]],
    config: PlannerConfig,
) -> BusyTable:
    """The ``BusyTable`` of a master's candidates (``layouts``: per deployment, in fleet order)."""
    known: dict[object, tuple[tuple[int, ...], int]] = {}
    speedy = tuple(config.objective_for(deployment) is Objective.SPEED for deployment in deployments)
    limits = tuple(limit_us(deployment) for deployment in deployments)
    times = tuple(
        tuple(busy_time(cluster, deployment, profiles[deployment.name], layout, known) for layout in row)
        if fast or limit is not None
        else (None,) * len(row)
        for deployment, row, fast, limit in zip(deployments, layouts, speedy, limits, strict=True)
    )
    return BusyTable(times, limits, speedy)


def replicas_on(layouts: Sequence[Sequence[Layout]], counts: Sequence[Sequence[int]]) -> Counter[GpuKey]:
    """Replicas placed on each GPU by a solution given as replicas per candidate."""
    on: Counter[GpuKey] = Counter()
    for row, row_counts in zip(layouts, counts, strict=True):
        for layout, n in zip(row, row_counts, strict=True):
            if n:
                for gpu in layout_gpus(layout):
                    on[gpu] += n
    return on


def gpu_sharing(placements: Iterable[PlacedReplica | Placement]) -> Counter[GpuKey]:
    """How many placed replicas use each GPU."""
    return Counter(gpu for placed in placements for gpu in layout_gpus(placed.layout))


def busy_reasons(
    cluster: Cluster,
    deployments: Mapping[str, Deployment],
    profiles: Mapping[str, MemoryProfile],
    placements: Sequence[PlacedReplica | Placement],
) -> list[str]:
    """Placed replicas whose predicted speed with every replica on their GPUs decoding at once
    (``deployment_speed`` with the plan's sharing) is below their deployment's minimum."""
    shared = gpu_sharing(placements)
    broken = []
    for placed in placements:
        deployment = deployments[placed.deployment]
        minimum = deployment.min_decode_tokens_per_s
        if minimum is None:
            continue
        sharing = {gpu: shared[gpu] for gpu in layout_gpus(placed.layout)}
        speed = deployment_speed(cluster, deployment, profiles[placed.deployment], placed.layout, sharing)
        if speed.decode_tokens_per_s < minimum:
            broken.append(
                f"{placed.deployment}#{placed.replica}: {speed.decode_tokens_per_s:.4g} tokens/s with its GPUs busy, "
                f"below min_decode_tokens_per_s {minimum:g}"
            )
    return broken
