"""Every plan says how fast it runs: the speed of its candidates, from ``layerfit.speed``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedPrediction
from layerfit.speed.deployment import deployment_settings as deployment_settings
from layerfit.speed.deployment import deployment_speed


def layout_speed(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> SpeedPrediction:
    """The predicted speed of one layout of a deployment."""
    return deployment_speed(cluster, deployment, profile, layout, sharing)


def with_speed(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, candidates: Iterable[Candidate]
) -> tuple[Candidate, ...]:
    """The candidates, each with its predicted speed."""
    return tuple(
        candidate.model_copy(update={"speed": deployment_speed(cluster, deployment, profile, candidate.layout)})
        for candidate in candidates
    )
