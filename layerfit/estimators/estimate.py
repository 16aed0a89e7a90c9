"""ModelShape + llama.cpp options -> MemoryProfile.

Weights per block come from the tensor table; the KV cache from ``kv``; compute buffers from
``compute``; the runtime's own costs (CUDA context and cuBLAS per process and GPU, host libraries)
from ``RuntimeCosts`` (``runtime``), measured defaults that callers may override; the options
llama.cpp resolves from its flags from ``settings``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from layerfit.domain.choices import ModelKind
from layerfit.domain.params import LlamaParams
from layerfit.domain.profile import FlashAttnFallback, MemoryProfile, RoleCosts
from layerfit.errors import EstimationError, expect
from layerfit.estimators import kv, kv_offload, overrides
from layerfit.estimators.compute import (
    Activations,
    Backend,
    ComputeEstimate,
    activations,
    compute_buffers,
    flash_attn_off_splits,
)
from layerfit.estimators.gguf_constants import Keys
from layerfit.estimators.gguf_reader import MetaValue, read_header
from layerfit.estimators.layer_kinds import kinds_compute, layer_kinds, scan_crossings
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.runtime import DEFAULT_RUNTIME, RuntimeCosts
from layerfit.estimators.settings import UNQUANTIZED_CACHE, Settings, resolve_settings
from layerfit.estimators.shape import read_gguf
from layerfit.estimators.speed_facts import speed_shape
from layerfit.io.files import read_once

if TYPE_CHECKING:  # the estimate path does not load the deployment (and cluster) models
    from layerfit.domain.deployment import Deployment

VOCAB_ENTRY_BYTES = 96
"""Host RAM per vocabulary entry for the tokenizer's tables."""


def estimate_profile(
    model: str | os.PathLike[str] | ModelShape,
    params: LlamaParams = LlamaParams(),
    *,
    kind: ModelKind = ModelKind.LLM,
    runtime: RuntimeCosts = DEFAULT_RUNTIME,
) -> MemoryProfile:
    """Estimate what llama.cpp allocates for this model under these options."""
    expect(model, (str, os.PathLike, ModelShape), "model")
    expect(params, LlamaParams, "params")
    expect(kind, ModelKind, "kind")
    shape = model if isinstance(model, ModelShape) else read_gguf(os.fspath(model))
    if shape.block_count == 0:
        raise EstimationError(
            shape.path, Keys.LLM.BLOCK_COUNT.format(arch=shape.architecture), "the model has no blocks"
        )
    settings, setting_warnings = resolve_settings(shape, params, kind, runtime)
    cache = kv.geometry(settings.ctx, settings.n_seq, settings.unified_kv, settings.n_ubatch, settings.swa_full)
    act = activations(shape, cache, n_ubatch=settings.graph_tokens, flash_attn=settings.flash_attn, logits=shape.causal)
    if not params.kv_offload:
        kv_offload.check_modelled(shape, settings.embedding)
    try:
        compute = compute_buffers(act, runtime.backend)
        if not params.kv_offload:
            device = compute_buffers(kv_offload.device_activations(act), runtime.backend)
            compute = kv_offload.combine(device, compute, act)
    except ValidationError as exc:  # buffers past the size cap: a hostile or broken header, or huge -c/-ub/-np
        raise _beyond_the_size_cap(shape, settings, exc, "compute.") from None

    def part_compute(part: ModelShape) -> ComputeEstimate:
        logits = not settings.embedding
        part_act = activations(
            part, cache, n_ubatch=settings.graph_tokens, flash_attn=settings.flash_attn, logits=logits
        )
        return compute_buffers(
            part_act if params.kv_offload else kv_offload.device_activations(part_act), runtime.backend
        )

    block_kinds, by_kinds = kinds_compute(shape, part_compute)
    fallback = _flash_attn_fallback(shape, params, settings, cache, runtime.backend, (act, compute))
    cublas = shape.float_matrix_weights or not settings.flash_attn
    role = RoleCosts(fixed_bytes=runtime.gpu_fixed_for(cublas=cublas), compute=compute.device)
    projector_bytes, projector_warnings = _projector(params, settings.flash_attn)
    host_output = shape.host_output_layer_bytes
    experts, fixed_experts, override_warnings = _host_parts(shape, params)
    block_kv = kv.block_kv_bytes(shape, cache, settings.type_k, settings.type_v)
    host_kv = 0 if params.kv_offload else sum(block_kv)
    kv_warnings = (kv_offload.GPU_BUILD_WARNING,) if host_kv and runtime.backend == "cuda" else ()
    try:
        return MemoryProfile(
            block_weight_bytes=shape.block_bytes,
            block_kv_bytes=(0,) * len(block_kv) if host_kv else block_kv,
            host_kv_bytes=host_kv,
            block_expert_bytes=experts,
            fixed_host_experts=fixed_experts,
            output_weight_bytes=shape.output_layer_bytes,
            host_output_weight_bytes=host_output if host_output != shape.output_layer_bytes else None,
            token_embedding_bytes=shape.input_bytes,
            main=role,
            local=role,
            rpc=role,
            host_fixed_bytes=_host_fixed(shape, settings, runtime),
            host_compute=compute.host,
            rpc_host_fixed_bytes=runtime.rpc_host_fixed,
            extra_main_gpu_bytes=projector_bytes,
            output_compute_bytes=compute.output,
            output_compute=compute.output_by_state,
            first_device_compute_bytes=compute.first_device,
            pipeline_parallel=params.kv_offload and not params.expert_flags().patterns(),
            host_output_compute_bytes=compute.host_output,
            op_offload_compute_bytes=compute.op_offload + shape.output_layer_bytes if compute.op_offload else 0,
            op_offload_host_compute_bytes=compute.op_offload_host,
            host_experts_compute_bytes=compute.host_experts or None,
            flash_attn_fallback=fallback,
            block_kinds=block_kinds,
            kinds_compute=by_kinds,
            scan_bytes=compute.scan,
            scan_crossings=scan_crossings(layer_kinds(shape)) if compute.scan else (),
            speed=speed_shape(shape, settings),
            warnings=(*shape.warnings, *setting_warnings, *projector_warnings, *override_warnings, *kv_warnings),
        )
    except ValidationError as exc:  # sizes no real model has (a hostile or broken header, or huge -c/-ub/-np)
        raise _beyond_the_size_cap(shape, settings, exc) from None


def _beyond_the_size_cap(
    shape: ModelShape, settings: Settings, exc: ValidationError, prefix: str = ""
) -> EstimationError:
    """The first size of a profile that failed validation, with the settings it was estimated at."""
    first = exc.errors()[0]
    where = prefix + ".".join(str(part) for part in first["loc"])
    at = f"ctx {settings.ctx}, ubatch {settings.n_ubatch}, {settings.n_seq} sequences"
    return EstimationError(shape.path, where, f"{first['msg']} (estimated at {at}: lower -c, -ub or -np)")


def _flash_attn_fallback(
    shape: ModelShape,
    params: LlamaParams,
    settings: Settings,
    cache: kv.CacheGeometry,
    backend: Backend,
    flash: tuple[Activations, ComputeEstimate],
) -> FlashAttnFallback | None:
    """What the splits that turn flash attention ``auto`` off add (``FlashAttnFallback``)."""
    splits = flash_attn_off_splits(shape)
    if params.flash_attn != "auto" or settings.type_v not in UNQUANTIZED_CACHE or not splits:
        return None  # a quantized V cache makes llama.cpp turn flash attention on, not leave it to auto
    on_act, on = flash
    off_act = activations(shape, cache, n_ubatch=settings.graph_tokens, flash_attn=False, logits=shape.causal)
    off = compute_buffers(off_act, backend)
    device = off.device.partial_offload_bytes - on.device.partial_offload_bytes
    return FlashAttnFallback(
        host_blocks=splits,
        device_extra_bytes=max(device, 0),
        output_device_extra_bytes=max(device + off.output - on.output, 0),
        host_extra_bytes=max(off_act.mask - on_act.mask, 0),
    )


def _host_parts(
    shape: ModelShape, params: LlamaParams
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None, tuple[str, ...]]:
    """Per block, what may stay in host RAM apart from the rest of it (the experts, or what the
    user's tensor overrides match); the blocks the overrides fix there; the overrides' warnings."""
    flags = params.expert_flags()
    experts = shape.block_expert_bytes
    if not flags.given:
        return (experts if any(experts) else None), None, ()
    resolved = overrides.resolve(shape, flags)
    parts = tuple(host or expert for host, expert in zip(resolved.block_bytes, experts, strict=True))
    return (parts if any(parts) else None), resolved.blocks, resolved.warnings


def output_buffer_bytes(shape: ModelShape, settings: Settings) -> int:
    """llama.cpp's host output buffer: logits (or embeddings) for one token per sequence."""
    per_output = shape.embedding_length if settings.embedding else shape.vocab_size
    return per_output * 4 * settings.n_seq


def _host_fixed(shape: ModelShape, settings: Settings, runtime: RuntimeCosts) -> int:
    tokenizer = shape.header_bytes + shape.vocab_size * VOCAB_ENTRY_BYTES
    return output_buffer_bytes(shape, settings) + tokenizer + runtime.host_runtime


def _projector(params: LlamaParams, flash_attn: bool) -> tuple[int, tuple[str, ...]]:
    """Weights and compute of a multimodal projector (``--mmproj``), held by the main GPU."""
    mmproj = params.mmproj
    if mmproj is None:
        return 0, ()
    header = read_once(mmproj, ("header",), lambda: read_header(mmproj))  # a URL: fetched once per plan
    meta = header.metadata
    image_size = _meta_int(meta, Keys.ClipVision.IMAGE_SIZE)
    patch_size = _meta_int(meta, Keys.ClipVision.PATCH_SIZE)
    width = _meta_int(meta, Keys.ClipVision.EMBEDDING_LENGTH)
    heads = _meta_int(meta, Keys.ClipVision.Attention.HEAD_COUNT)
    if not (image_size and patch_size and width):
        return header.tensor_bytes, (f"projector {params.mmproj}: no vision image/patch size, compute not estimated",)
    patches = (image_size // patch_size) ** 2
    scores = patches * patches * (2 if flash_attn else heads * 4)
    compute = patches * width * 4 * 8 + scores
    return header.tensor_bytes + compute, (
        f"projector {params.mmproj}: compute approximated from image size {image_size}",
    )


def _meta_int(meta: Mapping[str, MetaValue], key: str) -> int:
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def deployment_ctx_size(deployment: Deployment) -> int:
    """The context size the deployment runs with; ``-c 0`` reads the training context from its GGUF file."""
    if not deployment.params.uses_training_ctx or deployment.gguf_path is None:
        return deployment.params.effective_ctx_size
    shape = read_gguf(deployment.gguf_path)
    return resolve_settings(shape, deployment.params, deployment.kind, DEFAULT_RUNTIME)[0].ctx


def profile_for(deployment: Deployment, runtime: RuntimeCosts = DEFAULT_RUNTIME) -> MemoryProfile:
    """The deployment's own profile if it has one, else an estimate from its GGUF file."""
    if deployment.profile is not None:
        return deployment.profile
    if deployment.gguf_path is None:
        raise EstimationError(f"deployment[{deployment.name}]", "gguf_path", "no profile and no GGUF file to estimate")
    return estimate_profile(deployment.gguf_path, deployment.params, kind=deployment.kind, runtime=runtime)
