"""Every plan says how fast it runs: the speed of its candidates, from ``layerfit.speed``."""

from __future__ import annotations

from collections.abc import Iterable

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.speed.deployment import deployment_settings as deployment_settings
from layerfit.speed.deployment import deployment_speed


def with_speed(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, candidates: Iterable[Candidate]
) -> tuple[Candidate, ...]:
    """The candidates, each with its predicted speed."""
    return tuple(
        candidate.model_copy(update={"speed": deployment_speed(cluster, deployment, profile, candidate.layout)})
        for candidate in candidates
    )
