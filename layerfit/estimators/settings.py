"""The runtime options that shape memory, as llama.cpp resolves them from its flags and the model:
context, sequences, batch and micro-batch, flash attention, cache types (``resolve_settings``); and
the cache types llama.cpp refuses to create a context with."""

from __future__ import annotations

from layerfit.domain.base import Frozen, PosInt
from layerfit.domain.choices import ModelKind
from layerfit.domain.params import LlamaParams
from layerfit.errors import EstimationError, InputError
from layerfit.estimators import kv
from layerfit.estimators.gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType, Keys
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.runtime import RuntimeCosts

DEFAULT_UBATCH = 512
DEFAULT_BATCH = 2048

class Settings(Frozen):
    """The runtime options that shape memory, resolved from ``LlamaParams`` and the model."""

    ctx: PosInt
    n_seq: PosInt
    unified_kv: bool
    n_batch: PosInt
    n_ubatch: PosInt
    flash_attn: bool
    type_k: GGMLQuantizationType
    type_v: GGMLQuantizationType
    swa_full: bool = False
    """``--swa-full``: sliding-window layers cache the whole context."""
    embedding: bool
    """An embedding or reranking run: no logits (an encoder also runs a whole input per micro-batch)."""

    @property
    def graph_tokens(self) -> int:
        """Tokens of the worst-case graph llama.cpp reserves its compute buffers for."""
        return min(kv.pad(self.ctx), self.n_ubatch)


def resolve_settings(
    shape: ModelShape, params: LlamaParams, kind: ModelKind, runtime: RuntimeCosts
) -> tuple[Settings, tuple[str, ...]]:
    """llama.cpp's effective settings for these options, and what could not be honoured exactly."""
    warnings: list[str] = []
    if params.uses_training_ctx and not shape.context_length:
        raise EstimationError(
            shape.path, Keys.LLM.CONTEXT_LENGTH.format(arch=shape.architecture), "-c 0 needs the training context"
        )
    ctx = params.ctx_for(shape.context_length or 0)
    if shape.context_length and ctx > shape.context_length:
        warnings.append(f"ctx {ctx} exceeds the trained context {shape.context_length}")
    embedding = kind in (ModelKind.EMBEDDING, ModelKind.RERANKER) or not shape.causal
    if not shape.causal and kind is ModelKind.LLM:
        warnings.append(
            f"{shape.architecture} is not causal (an encoder: it serves embeddings, it cannot generate) but the "
            "deployment's kind is llm: estimated as an embedding run; set kind embedding or reranker"
        )
    n_batch, n_ubatch = _batch_sizes(params, ctx, causal=shape.causal, embedding=embedding)
    if embedding and params.ubatch_size is not None and params.ubatch_size < n_ubatch:
        warnings.append(
            f"-ub {params.ubatch_size} in an embedding run: llama-embedding runs {n_ubatch} tokens per micro-batch "
            "whatever -ub says (llama-server honours it): estimated with the larger"
        )
    flash_attn = params.flash_attn != "off"
    type_k = _cache_type(params.cache_type_k)
    type_v = _cache_type(params.cache_type_v)
    _check_cache_types(shape, params, type_k, type_v)
    if kind is ModelKind.IMAGE:
        warnings.append("image models are not estimated by llama.cpp's rules: treated as a language model")
    n_seq = params.parallel or runtime.default_slots
    settings = Settings(
        ctx=ctx,
        n_seq=n_seq,
        unified_kv=params.parallel is None if params.kv_unified is None else params.kv_unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        flash_attn=flash_attn,
        type_k=type_k,
        type_v=type_v,
        swa_full=params.swa_full,
        embedding=embedding,
    )
    return settings, tuple(warnings)


def _batch_sizes(params: LlamaParams, ctx: int, *, causal: bool, embedding: bool) -> tuple[int, int]:
    """``(n_batch, n_ubatch)`` as llama.cpp resolves them.

    A causal model's batch is at most the context (``-c 100``: 100 tokens per micro-batch, not
    512). Embedding runs: llama-embedding raises the batch to the context and sets the micro-batch
    to the batch whatever ``-ub`` says (measured: a causal qwen3 at ``-c 4096 -ub 1024`` runs 4096
    tokens); llama-server lowers the batch to the micro-batch instead. The larger of the two is
    taken, so ``-b``/``-ub`` below the context never shrink an embedding estimate. The graph runs
    ``min(padded ctx, n_ubatch)`` tokens (``Settings.graph_tokens``).
    """
    if embedding:
        n_batch = max(params.batch_size or DEFAULT_BATCH, params.ubatch_size or 0, ctx)
        n_batch = min(n_batch, ctx) if causal else n_batch
        return n_batch, n_batch
    n_batch = min(params.batch_size or DEFAULT_BATCH, ctx) if causal else params.batch_size or DEFAULT_BATCH
    n_ubatch = min(params.ubatch_size or DEFAULT_UBATCH, n_batch)
    return n_batch, n_ubatch


UNQUANTIZED_CACHE = (GGMLQuantizationType.F16, GGMLQuantizationType.F32, GGMLQuantizationType.BF16)


def _check_cache_types(
    shape: ModelShape, params: LlamaParams, type_k: GGMLQuantizationType, type_v: GGMLQuantizationType
) -> None:
    """Refuse the cache types llama.cpp refuses to create a context with ("unable to create context",
    measured: ``-ctv q8_0 -fa off``, and ``-ctk q8_0`` alone on an MLA model)."""
    if type_v not in UNQUANTIZED_CACHE and params.flash_attn == "off":
        raise InputError(
            "-ctv",
            f"a quantized V cache ({params.cache_type_v}) needs flash attention: llama.cpp "
            "refuses to start with -fa off (with -fa auto it turns flash attention on)",
        )
    if shape.mla and type_k != type_v:
        raise InputError(
            "-ctk",
            f"{shape.architecture} caches one latent row (MLA): llama.cpp refuses different K "
            f"({params.cache_type_k}) and V ({params.cache_type_v}) cache types; give both the same",
        )
    if params.flash_attn == "off":
        return
    widths = {
        "-ctk": (type_k, params.cache_type_k, (shape.key_length, shape.key_length_swa)),
        "-ctv": (type_v, params.cache_type_v, (shape.value_length, shape.value_length_swa)),
    }
    for flag, (ggml_type, name, lengths) in widths.items():
        block = GGML_QUANT_SIZES[ggml_type][0]
        uneven = sorted({length for length in lengths if length and length % block})
        if ggml_type not in UNQUANTIZED_CACHE and uneven:
            raise InputError(
                flag,
                f"cache type {name} packs {block} values per block, which does not divide the "
                f"head width {uneven[0]}: llama.cpp refuses it with flash attention (use -fa off or f16)",
            )


def _cache_type(name: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[name.upper()]
