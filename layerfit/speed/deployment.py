"""A deployment's predicted speed: its settings (``-t``, ``-tb``, the context), and a layout's speed
as the deployment runs it (a stand-in profile's host experts counted on the host).

Every engine asks here: the check of ``min_decode_tokens_per_s``, the heuristic's ranking under
``objective: speed``, the solver's costs, the planner's and the fleet's reports.
"""

from __future__ import annotations

from collections.abc import Mapping

from layerfit.domain.cluster import Cluster
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedPrediction
from layerfit.speed.predict import predict
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


def decode_limit_ms(deployment: Deployment) -> float | None:
    """The slowest decode time per token the deployment accepts (``min_decode_tokens_per_s``), in ms."""
    minimum = deployment.min_decode_tokens_per_s
    return None if minimum is None else 1000.0 / minimum
