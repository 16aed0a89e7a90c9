"""A deployment's memory profile: given explicitly or estimated from its GGUF file, and the same at
another context size (a context search, ``explain``'s smaller context)."""

from __future__ import annotations

from layerfit.domain.deployment import Deployment
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError


def resolve_profile(deployment: Deployment) -> MemoryProfile:
    """The deployment's memory profile: given explicitly, or estimated from its GGUF file."""
    if deployment.profile is not None:
        return deployment.profile
    from layerfit.estimators import profile_for

    return profile_for(deployment)


def profile_at_ctx(deployment: Deployment, ctx_size: int) -> MemoryProfile:
    """The deployment's profile at another context size.

    Exact (re-estimated) for a GGUF file; for an explicit profile the KV cache is scaled linearly
    with ctx, which is right for full-attention layers and conservative for sliding-window ones.
    """
    params = deployment.params.model_copy(update={"ctx_size": ctx_size})
    if deployment.gguf_path is not None:
        return resolve_profile(deployment.model_copy(update={"params": params}))
    if deployment.profile is None:
        raise InputError(f"deployment[{deployment.name}]", "has neither gguf_path nor profile")
    base = deployment.params.effective_ctx_size
    kv = tuple(-(-size * ctx_size // base) for size in deployment.profile.block_kv_bytes)
    speed = deployment.profile.speed
    if speed is not None:  # the speed facts' context scales with the cache
        speed = speed.model_copy(update={"ctx": max(-(-speed.ctx * ctx_size // base), 1)})
    return deployment.profile.model_copy(update={"block_kv_bytes": kv, "speed": speed})


def scaled_to_ctx(profile: MemoryProfile, deployment: Deployment, ctx: int) -> MemoryProfile:
    """A given profile at another context: re-estimated from the GGUF file, else KV scaled."""
    if deployment.gguf_path is not None:
        return profile_at_ctx(deployment, ctx)
    return profile_at_ctx(deployment.model_copy(update={"profile": profile}), ctx)
