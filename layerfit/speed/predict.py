"""``predict``: a layout's predicted speed, with every term and every assumption."""

from __future__ import annotations

from collections.abc import Mapping

from layerfit.domain.cluster import Cluster
from layerfit.domain.layout import Layout
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedPrediction, SpeedShape
from layerfit.errors import InputError, expect
from layerfit.speed.decode import DecodeCosts, decode_costs, decode_terms
from layerfit.speed.prompt import prompt_terms
from layerfit.speed.settings import SpeedSettings
from layerfit.speed.work import speed_shape

DEFAULT_SETTINGS = SpeedSettings()


def context_fill(shape: SpeedShape, settings: SpeedSettings) -> tuple[int, tuple[str, ...]]:
    """Tokens cached while decoding: the settings', or half the context (stated)."""
    if settings.context_fill is not None:
        return min(settings.context_fill, shape.ctx), ()
    fill = shape.ctx // 2
    return fill, (f"decode with the cache half full ({fill} of {shape.ctx} tokens): a token reads that much KV cache",)


def layout_costs(
    profile: MemoryProfile,
    layout: Layout,
    cluster: Cluster,
    settings: SpeedSettings = DEFAULT_SETTINGS,
    *,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> tuple[DecodeCosts, SpeedShape, int, tuple[str, ...]]:
    """The decode costs of a layout's devices (``decode.decode_costs``), the speed shape, the fill
    and the assumptions made for them."""
    expect(profile, MemoryProfile, "profile")
    expect(layout, Layout, "layout")
    expect(cluster, Cluster, "cluster")
    if layout.n_blocks != profile.n_blocks:
        raise InputError("layout.n_blocks", f"layout has {layout.n_blocks} blocks, the model has {profile.n_blocks}")
    shape, assumed = speed_shape(profile, settings)
    fill, fill_note = context_fill(shape, settings)
    gpus = [(device.worker, device.gpu_index) for device in layout.devices]
    costs = decode_costs(
        profile, shape, cluster, layout.main_worker, fill=fill, gpus=gpus, threads=settings.threads, sharing=sharing
    )
    uses_host = layout.cpu_blocks > 0 or not layout.output_offloaded or bool(layout.host_expert_blocks)
    host_notes = costs.host_notes if uses_host or profile.host_kv_bytes > 0 else ()
    return costs, shape, fill, tuple(dict.fromkeys((*assumed, *fill_note, *host_notes, *costs.notes)))


def predict(
    profile: MemoryProfile,
    layout: Layout,
    cluster: Cluster,
    settings: SpeedSettings = DEFAULT_SETTINGS,
    *,
    sharing: Mapping[tuple[str, int], int] | None = None,
) -> SpeedPrediction:
    """The predicted decode and prompt speed of one sequence on ``layout``.

    ``sharing`` names GPUs that this many processes use at the same time (the busy case of a fleet:
    they share the GPU's bandwidth and FLOPS); without it the prediction assumes the layout runs
    alone and says so.
    """
    costs, shape, fill, assumed = layout_costs(profile, layout, cluster, settings, sharing=sharing)
    prompt = prompt_terms(
        profile,
        shape,
        cluster,
        layout,
        prompt_tokens=settings.prompt_tokens,
        threads=settings.threads,
        batch_threads=settings.batch_threads,
    )
    shared = {gpu: count for gpu, count in (sharing or {}).items() if count > 1}
    alone = (
        "every GPU and worker busy with this replica alone (another process decoding on them at the same time "
        "shares their bandwidth)"
        if not shared
        else "GPUs shared by several replicas decoding at the same time: "
        + ", ".join(f"{cluster.gpu_id(*gpu)} by {count}" for gpu, count in sorted(shared.items()))
    )
    prompt_note = (
        f"prompt speed: a {settings.prompt_tokens}-token prompt into an empty cache, micro-batches of {shape.n_ubatch}"
    )
    return SpeedPrediction(
        context_fill=fill,
        runs_alone=not shared,
        terms=decode_terms(costs, layout),
        prompt_terms=prompt,
        assumptions=(*assumed, alone, prompt_note),
    )
