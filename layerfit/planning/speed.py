"""Every plan says how fast it runs: the speed of its candidates, from ``layerfit.speed``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.plan import Candidate
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedPrediction
from layerfit.speed import SpeedSettings, predict, settings_for


def deployment_settings(deployment: Deployment, profile: MemoryProfile) -> SpeedSettings:
    """The speed settings of a deployment: its ``-t``/``-tb``, and for a profile given as numbers
    the context and micro-batch its parameters say."""
    ctx = profile.speed.ctx if profile.speed is not None else None
    return settings_for(deployment.params, ctx=ctx)


def layout_speed(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    layout: Layout,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> SpeedPrediction:
    """The predicted speed of one layout of a deployment."""
    return predict(profile, layout, cluster, deployment_settings(deployment, profile), sharing=sharing)


def with_speed(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, candidates: Iterable[Candidate]
) -> tuple[Candidate, ...]:
    """The candidates, each with its predicted speed."""
    settings = deployment_settings(deployment, profile)
    return tuple(
        candidate.model_copy(update={"speed": predict(profile, candidate.layout, cluster, settings)})
        for candidate in candidates
    )
