"""``layerfit estimate MODEL.gguf``: the parameters it assumed, per-layer costs and totals.

Totals come from ``layerfit.memory.claims`` on reference layouts (everything on one GPU, the
given ``-ngl`` on one GPU, everything on the CPU), with the experts the tensor overrides keep in host
RAM (``-ncmoe``, ``-cmoe``, ``-ot``) named in them as the planner names them
(``layerfit.memory.experts.attach``), so they are exactly what the planner would charge.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from layerfit.domain import Claims, DeviceAssignment, Layout, LlamaParams, MemoryProfile, format_bytes
from layerfit.domain.base import SCHEMA_VERSION, Frozen, NonNegInt
from layerfit.domain.choices import ModelKind
from layerfit.domain.params import DEFAULT_CTX_SIZE
from layerfit.estimators.estimate import estimate_profile
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.runtime import DEFAULT_RUNTIME, RuntimeCosts
from layerfit.estimators.settings import Settings, resolve_settings
from layerfit.estimators.speed_report import EstimateSpeed, estimate_speed, speed_table
from layerfit.memory import claims, layout_from_flags, make_layout
from layerfit.memory.experts import attach, engine_blocks, profile_with_host_experts

_GPU = "gpu"
_HOST = "host"


def _runs(profile: MemoryProfile) -> Iterator[tuple[int, int, int, int]]:
    """Runs of consecutive blocks with equal weights and KV: (first, last, weights, kv)."""
    start = 0
    pairs = list(zip(profile.block_weight_bytes, profile.block_kv_bytes, strict=True))
    for i in range(1, len(pairs) + 1):
        if i == len(pairs) or pairs[i] != pairs[start]:
            yield start, i - 1, pairs[start][0], pairs[start][1]
            start = i


def _row(label: str, *cells: str) -> str:
    return f"  {label:<14}" + "".join(f"{cell:>14}" for cell in cells)


class AssumedParameters(Frozen):
    """The llama.cpp runtime parameters an estimate was made for, as llama.cpp would resolve them."""

    ctx_size: NonNegInt
    """Context tokens the KV cache holds (``-c``)."""
    training_ctx: bool = False
    """``-c 0``: the context is the training context."""
    training_ctx_size: NonNegInt | None
    """The model's training context (``-c 0`` in llama.cpp); ``None`` when the file does not say."""
    parallel: NonNegInt
    """Sequences (``-np``); 4 auto slots sharing one KV cache when not given (llama-server)."""
    unified_kv: bool
    cache_type_k: str
    cache_type_v: str
    flash_attn: Literal["on", "off", "auto"]
    flash_attn_estimated_on: bool
    """What the estimate assumed for ``-fa``: ``auto`` is estimated as on (CUDA builds enable it)."""
    batch_size: NonNegInt
    ubatch_size: NonNegInt
    mmap: bool
    embedding: bool
    """Embedding or reranking: no logits, a whole input per micro-batch."""
    n_gpu_layers: NonNegInt | None = None
    """``-ngl`` as given (``None``: not given; the estimate then shows full offload and CPU only)."""
    defaults: tuple[str, ...]
    """Fields above the user did not give, filled with the defaults."""


def assumed_parameters(shape: ModelShape, params: LlamaParams, settings: Settings) -> AssumedParameters:
    """Every runtime parameter that shaped the estimate, and which of them are defaults."""
    given = {
        "ctx_size": params.ctx_size is not None,
        "parallel": params.parallel is not None,
        "unified_kv": params.parallel is not None or params.kv_unified is not None,
        "cache_type_k": params.cache_type_k != "f16",
        "cache_type_v": params.cache_type_v != "f16",
        "flash_attn": params.flash_attn != "auto",
        "batch_size": params.batch_size is not None,
        "ubatch_size": params.ubatch_size is not None,
        "mmap": params.load_mode is not None,
    }
    return AssumedParameters(
        ctx_size=settings.ctx,
        training_ctx=params.uses_training_ctx,
        training_ctx_size=shape.context_length or None,
        parallel=settings.n_seq,
        unified_kv=settings.unified_kv,
        cache_type_k=settings.type_k.name.lower(),
        cache_type_v=settings.type_v.name.lower(),
        flash_attn=params.flash_attn,
        flash_attn_estimated_on=settings.flash_attn,
        batch_size=settings.n_batch,
        ubatch_size=settings.n_ubatch,
        mmap=params.mmap,
        embedding=settings.embedding,
        n_gpu_layers=params.n_gpu_layers,
        defaults=tuple(name for name, was_given in given.items() if not was_given),
    )


class Estimate(Frozen):
    """What ``layerfit estimate --json`` prints: the model, the assumed parameters, the profile, totals."""

    schema_version: Literal[1] = SCHEMA_VERSION
    path: str
    name: str | None
    architecture: str
    parameters: AssumedParameters
    profile: MemoryProfile
    full_offload: Claims
    """Every layer on one GPU (``gpu:0`` of a worker named ``gpu``): its VRAM and the host RAM (the
    experts the tensor overrides keep on the host, in host RAM)."""
    cpu_only: Claims
    """Nothing offloaded and no GPU in use: a CPU build, or ``-ngl 0 --device none`` (what layerfit's
    own commands pass for a layout without GPU layers)."""
    op_offload: Claims | None = None
    """``-ngl 0`` in a GPU build that sees a GPU (no ``--device none``): llama.cpp still runs the host's
    large operations on its first GPU (``gpu:0``), which holds a copy of the output layer, their
    compute buffer and the per-process runtime. ``None`` when the runtime costs are a CPU build's."""
    requested: Claims | None = None
    """The given ``-ngl N`` (N > 0) on one GPU, split as llama.cpp splits it, the tensor overrides'
    experts in host RAM; ``None`` without one."""
    speed: EstimateSpeed | None = None
    """``--gpu NAME``: the predicted speed of the reference layouts on one GPU of that name."""


def estimate_report(
    shape: ModelShape,
    params: LlamaParams = LlamaParams(),
    *,
    kind: ModelKind = ModelKind.LLM,
    runtime: RuntimeCosts = DEFAULT_RUNTIME,
    gpu_name: str | None = None,
) -> Estimate:
    """The full estimate of a model: assumed parameters, profile and the two reference claims; with
    ``gpu_name``, their predicted speed on one GPU of that name."""
    settings, _ = resolve_settings(shape, params, kind, runtime)
    profile = estimate_profile(shape, params, kind=kind, runtime=runtime)
    n = profile.n_blocks
    ngl = params.n_gpu_layers
    op_offload = claims(profile, Layout(main_worker=_GPU, n_blocks=n), op_offload_gpu=(_GPU, 0))
    full = make_layout(_GPU, n, [DeviceAssignment(worker=_GPU, gpu_index=0, blocks=n)])
    return Estimate(
        path=shape.path,
        name=shape.name,
        architecture=shape.architecture,
        parameters=assumed_parameters(shape, params, settings),
        profile=profile,
        full_offload=_with_overrides(profile, full),
        cpu_only=claims(profile, Layout(main_worker=_HOST, n_blocks=n)),
        op_offload=op_offload if op_offload.devices else None,
        requested=_with_overrides(profile, layout_from_flags(_GPU, [(_GPU, 0)], n, ngl)) if ngl else None,
        speed=estimate_speed(profile, params, gpu_name) if gpu_name is not None else None,
    )


def _with_overrides(profile: MemoryProfile, layout: Layout) -> Claims:
    """The claims of ``layout`` with the experts the user's tensor overrides keep in host RAM, as
    the planner prices a layout of that deployment."""
    return attach(profile, layout, engine_blocks(profile))[1]


def _flag(assumed: AssumedParameters, flag: str, name: str) -> str:
    return f"({flag}, default)" if name in assumed.defaults else f"({flag})"


def parameter_lines(assumed: AssumedParameters) -> list[str]:
    """The assumed parameters as text, each with its llama.cpp flag; the context default explained."""
    ctx = f"  ctx {assumed.ctx_size} {_flag(assumed, '-c', 'ctx_size')}"
    training = assumed.training_ctx_size
    if "ctx_size" in assumed.defaults and assumed.ctx_size == DEFAULT_CTX_SIZE:
        ctx += ": GPUStack's default; llama.cpp's own default (-c 0) is the training context"
        ctx += f", {training} for this model" if training else " (not in this file)"
    elif "ctx_size" not in assumed.defaults and assumed.ctx_size == training and assumed.training_ctx:
        ctx += ": the training context (-c 0)"
    elif training and assumed.ctx_size != training:
        ctx += f"; training context {training}"
    slots = "one KV cache shared by the slots" if assumed.unified_kv else "one KV cache per sequence"
    fa = assumed.flash_attn + (", estimated as on" if assumed.flash_attn == "auto" else "")
    mmap = "on" if assumed.mmap else "off"
    return [
        "assumed llama.cpp parameters (give the flags to change them):",
        ctx,
        f"  slots {assumed.parallel} {_flag(assumed, '-np', 'parallel')}, {slots}",
        f"  cache type K {assumed.cache_type_k} {_flag(assumed, '-ctk', 'cache_type_k')},"
        f" V {assumed.cache_type_v} {_flag(assumed, '-ctv', 'cache_type_v')}",
        f"  flash attention {fa} {_flag(assumed, '-fa', 'flash_attn')}",
        f"  batch {assumed.batch_size} {_flag(assumed, '-b', 'batch_size')},"
        f" ubatch {assumed.ubatch_size} {_flag(assumed, '-ub', 'ubatch_size')}",
        f"  mmap {mmap} {_flag(assumed, '-lm', 'mmap')}"
        + (", embedding run: no logits" if assumed.embedding else ""),
    ]


def estimate_table(shape: ModelShape, report: Estimate) -> str:
    """Assumed parameters, per-layer table and totals (full-offload VRAM, CPU-only RAM, per-layer cost)."""
    profile = report.profile
    n = profile.n_blocks
    full, cpu = report.full_offload, report.cpu_only
    lines = [
        f"{shape.name or shape.path} ({shape.architecture}): {n} blocks, {format_bytes(shape.tensor_bytes)} of weights"
        f" in {len(shape.files)} file{'s' if len(shape.files) > 1 else ''}",
        "",
        *parameter_lines(report.parameters),
        "",
        _row("layers", "weights", "KV/state", "per layer"),
    ]
    for first, last, weights, kv in _runs(profile):
        label = f"{first}" if first == last else f"{first}-{last}"
        lines.append(_row(label, format_bytes(weights), format_bytes(kv), format_bytes(weights + kv)))
    lines.append(
        _row("output", format_bytes(profile.output_weight_bytes), "-", format_bytes(profile.output_weight_bytes))
    )
    lines.append(_row("embedding", format_bytes(profile.token_embedding_bytes), "-", "host RAM"))
    if profile.host_kv_bytes:
        lines.append(_row("KV (-nkvo)", "-", format_bytes(profile.host_kv_bytes), "host RAM"))
    on_gpu = profile_with_host_experts(profile, engine_blocks(profile))
    per_layer = [w + kv for w, kv in zip(on_gpu.block_weight_bytes, on_gpu.block_kv_bytes, strict=True)]
    experts = _experts_note(profile)
    lines += ["", *_gpu_lines(f"full offload, one GPU{experts}:", full)]
    lines.append(f"CPU only: RAM {format_bytes(cpu.workers[0].ram_bytes)} (a CPU build, or -ngl 0 --device none)")
    if report.op_offload is not None:
        lines += _op_offload_lines(report.op_offload, given=report.parameters.n_gpu_layers == 0)
    if report.requested is not None:
        lines += _gpu_lines(f"-ngl {report.parameters.n_gpu_layers} on one GPU{experts}:", report.requested)
    lines.append(
        f"per layer on a GPU: {format_bytes(min(per_layer))} to {format_bytes(max(per_layer))}"
        f" (mean {format_bytes(sum(per_layer) // n)}){experts}"
    )
    if report.speed is not None:
        lines += ["", *speed_table(report.speed, report.parameters.n_gpu_layers)]
    if profile.warnings:
        lines += ["", "warnings:", *(f"  - {warning}" for warning in profile.warnings)]
    return "\n".join(lines)


def _experts_note(profile: MemoryProfile) -> str:
    """``, experts of 24 blocks in host RAM (-ot/-cmoe/-ncmoe)`` when the tensor overrides keep some there."""
    blocks = engine_blocks(profile)
    return f", experts of {len(blocks)} blocks in host RAM (-ot/-cmoe/-ncmoe)" if blocks else ""


def _gpu_lines(title: str, claimed: Claims) -> list[str]:
    """A layout on one GPU: its VRAM by part and the host RAM."""
    gpu = claimed.devices[0]
    return [
        title,
        f"  VRAM {format_bytes(gpu.total_bytes)} = weights {format_bytes(gpu.weight_bytes)}"
        f" + output {format_bytes(gpu.output_bytes)} + KV {format_bytes(gpu.kv_bytes)}"
        f" + compute {format_bytes(gpu.compute_bytes)}"
        f" + runtime {format_bytes(gpu.fixed_bytes)}"
        + (f" + extras {format_bytes(gpu.extra_bytes)}" if gpu.extra_bytes else ""),
        f"  host RAM {format_bytes(claimed.workers[0].ram_bytes)}",
    ]


def _op_offload_lines(claimed: Claims, *, given: bool) -> list[str]:
    """``-ngl 0`` in a GPU build without ``--device none``: the first GPU still computes (op offload)."""
    gpu = claimed.devices[0]
    return [
        "-ngl 0 in a GPU build without --device none"
        + (" (as given)" if given else "")
        + ": llama.cpp still computes the host's large operations on its first GPU",
        f"  VRAM {format_bytes(gpu.total_bytes)} = compute with a copy of the output layer"
        f" {format_bytes(gpu.compute_bytes)} + runtime {format_bytes(gpu.fixed_bytes)}"
        + (f" + extras {format_bytes(gpu.extra_bytes)}" if gpu.extra_bytes else ""),
        f"  host RAM {format_bytes(claimed.workers[0].ram_bytes)}; add --device none to leave the GPU idle",
    ]
