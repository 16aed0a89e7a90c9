"""A GGUF header -> ``ModelShape`` (``model_shape``): what it says about a model's memory,
independent of runtime options.

Built from a ``GgufHeader``: hyperparameters from the metadata (per layer where the file gives
arrays), weights per block from the tensor table, and the tensors the host and the output layer
hold. Missing or mistyped required keys raise ``EstimationError`` naming the key.
"""

from __future__ import annotations

from layerfit.errors import EstimationError
from layerfit.estimators import architectures as arch_rules
from layerfit.estimators.gguf_constants import GGMLQuantizationType, Keys
from layerfit.estimators.gguf_reader import GgufHeader, TensorInfo, read_header
from layerfit.estimators.header_access import MetaReader, TensorGroups, output_matrix_elements
from layerfit.estimators.key_check import check_arch_keys, check_keys, check_required, check_tokenizer
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.tensor_check import EXPERT_WIDTH_KEY, check_shape, vocabulary_size
from layerfit.io.files import read_once

_FLOAT_TYPES = frozenset({GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16})
POOLING_RANK = 4
"""``pooling_type`` of rerankers."""


# ---------------------------------------------------------------------------------------------
# Header -> shape
# ---------------------------------------------------------------------------------------------


def read_gguf(path: str, allow_missing_data: bool = True) -> ModelShape:
    """Read a GGUF file's header and tensor table and describe the model's shape (once while it is
    unchanged, within ``files.reading_once``)."""

    def read() -> ModelShape:
        return shape_from_header(read_header(path, allow_missing_data))

    return read_once(path, ("shape", allow_missing_data), read)


def _experts_used(meta: MetaReader, arch: str, n: int) -> int:
    """Experts a block's graph routes to: the most of any block where each block routes its own,
    else block 0's (llama.cpp reads an array for every architecture, but only those route by it)."""
    used = meta.per_layer(Keys.LLM.EXPERT_USED_COUNT, n, 0)
    if not used:
        return 0
    return max(used) if arch in arch_rules.PER_LAYER_EXPERTS_USED else used[0]


def shape_from_header(header: GgufHeader) -> ModelShape:
    arch = header.architecture
    if arch == "clip":
        problem = "a multimodal projector, not a language model: pass it as --mmproj"
        raise EstimationError(header.path, Keys.General.ARCHITECTURE, problem)
    check_keys(header.path, arch, header.metadata, header.key_types)
    meta = MetaReader(header.path, header.metadata, arch)
    warnings: list[str] = []
    if arch not in arch_rules.KNOWN_ARCHITECTURES:
        warnings.append(f"architecture {arch!r} is not modelled: generic estimate from tensor sizes and head counts")
    n = meta.integer(Keys.LLM.BLOCK_COUNT)
    if n > len(header.tensors):
        raise EstimationError(
            header.path,
            meta.key(Keys.LLM.BLOCK_COUNT),
            f"{n} blocks, but the file has only {len(header.tensors)} tensors",
        )
    n_embd = meta.integer(Keys.LLM.EMBEDDING_LENGTH)
    check_required(header.path, arch, header.metadata)
    check_arch_keys(header.path, arch, header.metadata, header.key_types)
    check_tokenizer(header.path, arch, header.metadata, header.key_types)  # llama.cpp: the vocabulary after the hparams
    tensors = TensorGroups(header.tensors, n)
    if tensors.stray:
        warnings.append(f"{len(tensors.stray)} tensors name blocks beyond block_count {n}; kept on the host")
    recurrent = _recurrent_layers(meta, arch, n)
    heads, heads_kv, key_length, value_length = _attention(meta, tensors, arch, n, n_embd, recurrent, warnings)
    file_window = meta.integer(Keys.Attention.SLIDING_WINDOW) if meta.has(Keys.Attention.SLIDING_WINDOW) else None
    window = arch_rules.effective_window(arch, n, file_window)
    swa = arch_rules.swa_layers(arch, n, window, meta.pattern(Keys.Attention.SLIDING_WINDOW_PATTERN))
    if len(swa) != n:
        raise EstimationError(
            header.path, meta.key(Keys.Attention.SLIDING_WINDOW_PATTERN), f"has {len(swa)} entries for {n} blocks"
        )
    kv_lora_rank = meta.integer(Keys.Attention.KV_LORA_RANK, 0)
    causal = arch not in arch_rules.NON_CAUSAL and meta.flag(Keys.Attention.CAUSAL, True)
    pooling = meta.integer(Keys.LLM.POOLING_TYPE, 0) if meta.has(Keys.LLM.POOLING_TYPE) else None
    output_weight = tensors.outputs.get("output.weight")
    token_embd = tensors.inputs.get("token_embd.weight")
    tied = output_weight is None and token_embd is not None and causal
    nextn = min(meta.integer(Keys.LLM.NEXTN_PREDICT_LAYERS, 0), n)
    if nextn:
        warnings.append(f"{nextn} multi-token-prediction blocks: weights counted, no KV cache (llama.cpp skips them)")
    output_extra = sum(t.n_bytes for name, t in tensors.outputs.items() if name != "output.weight")
    matrices = [t for block in tensors.blocks for t in block.values()] + list(tensors.outputs.values())
    if tied and token_embd is not None:
        matrices.append(token_embd)
    dense_elements, expert_elements = tensors.matrix_elements()
    shape = ModelShape(
        path=header.path,
        files=header.files,
        architecture=arch,
        name=meta.text(Keys.General.NAME),
        file_type=meta.integer(Keys.General.FILE_TYPE, 0) if meta.has(Keys.General.FILE_TYPE) else None,
        block_count=n,
        embedding_length=n_embd,
        context_length=meta.integer(Keys.LLM.CONTEXT_LENGTH, 0) or None,
        vocab_size=_vocab_size(meta, token_embd, output_weight),
        head_count=heads,
        head_count_kv=heads_kv,
        key_length=key_length,
        value_length=value_length,
        key_length_swa=meta.integer(Keys.Attention.KEY_LENGTH_SWA, 0) or None,
        value_length_swa=meta.integer(Keys.Attention.VALUE_LENGTH_SWA, 0) or None,
        sliding_window=window if any(swa) else 0,
        swa_layers=swa,
        mla=arch in arch_rules.MLA and kv_lora_rank > 0,
        kv_lora_rank=kv_lora_rank,
        rope_dimension_count=meta.integer(Keys.Rope.DIMENSION_COUNT, 0),
        expert_count=meta.integer(Keys.LLM.EXPERT_COUNT, 0),
        expert_used_count=_experts_used(meta, arch, n),
        expert_shared_count=meta.integer(Keys.LLM.EXPERT_SHARED_COUNT, 0),
        expert_feed_forward_length=_expert_width(meta, tensors, arch, n),
        leading_dense_block_count=meta.integer(Keys.LLM.LEADING_DENSE_BLOCK_COUNT, 0),
        ffn_width=tuple(tensors.ffn_width(i, arch in arch_rules.FUSED_GATE_UP) for i in range(n)),
        recurrent_layers=recurrent,
        ssm_conv_kernel=meta.integer(Keys.SSM.CONV_KERNEL, 0),
        ssm_inner_size=meta.integer(Keys.SSM.INNER_SIZE, 0),
        ssm_state_size=meta.integer(Keys.SSM.STATE_SIZE, 0),
        ssm_group_count=meta.integer(Keys.SSM.GROUP_COUNT, 0),
        wkv_head_size=meta.integer(Keys.WKV.HEAD_SIZE, 0),
        token_shift_count=meta.integer(Keys.LLM.TOKEN_SHIFT_COUNT, 0),
        shared_kv_layers=_shared_kv_layers(meta, arch, n),
        per_layer_input_width=tensors.inputs["per_layer_token_embd.weight"].shape[0]
        if "per_layer_token_embd.weight" in tensors.inputs
        else 0,
        nextn_predict_layers=nextn,
        causal=causal,
        reranker=any(name.startswith("cls.") for name in tensors.outputs) or pooling == POOLING_RANK,
        pooling_type=pooling,
        block_bytes=tensors.block_bytes(),
        block_expert_bytes=tensors.expert_bytes(),
        block_dense_elements=dense_elements,
        block_expert_elements=expert_elements,
        output_elements=output_matrix_elements(token_embd if tied else output_weight),
        token_embd_bytes=token_embd.n_bytes if token_embd is not None else 0,
        input_bytes=sum(t.n_bytes for t in tensors.inputs.values()),
        output_weight_bytes=output_weight.n_bytes if output_weight is not None else 0,
        output_extra_bytes=output_extra,
        tied_embeddings=tied,
        gated_ffn=_gated(tensors, arch),
        position_embeddings="position_embd.weight" in tensors.inputs,
        float_matrix_weights=any(len(t.shape) >= 2 and t.ggml_type in _FLOAT_TYPES for t in matrices),
        tensor_count=len(header.tensors),
        tensor_sizes=tuple((tensor.name, tensor.n_bytes) for tensor in header.tensors),
        tensor_bytes=header.tensor_bytes,
        file_bytes=header.file_bytes,
        header_bytes=header.header_bytes,
        warnings=tuple(warnings),
    )
    check_shape(shape, meta, tensors)
    return shape


def _expert_width(meta: MetaReader, tensors: TensorGroups, arch: str, n: int) -> int:
    """The routed experts' width: the key where llama.cpp sizes them by it, else their tensors."""
    from_tensors = max((tensors.dim(i, "ffn_up_exps.weight", 1) for i in range(n)), default=0)
    if arch in EXPERT_WIDTH_KEY or not from_tensors:
        widths = meta.per_layer(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, n, 0)  # block 0's sizes every block
        key_width = max(widths, default=0) if arch in arch_rules.PER_LAYER_FFN else (widths or (0,))[0]
        return key_width or from_tensors
    return from_tensors


def _shared_kv_layers(meta: MetaReader, arch: str, n: int) -> int:
    """Trailing layers that reuse an earlier layer's cache: fixed by llama.cpp for gemma3n, else the key."""
    if arch in arch_rules.KV_LAYERS_FROM_START:
        return max(n - arch_rules.KV_LAYERS_FROM_START[arch], 0)
    return meta.integer(Keys.Attention.SHARED_KV_LAYERS, 0)


def _gated(tensors: TensorGroups, arch: str) -> bool:
    """Any block with a gated feed-forward (or none with a feed-forward at all)."""
    has_ffn = [b for b in tensors.blocks if "ffn_up.weight" in b or "ffn_gate.weight" in b]
    if not has_ffn or arch in arch_rules.FUSED_GATE_UP:
        return True
    return any("ffn_gate.weight" in b for b in has_ffn)


def _recurrent_layers(meta: MetaReader, arch: str, n: int) -> tuple[bool, ...]:
    if arch in arch_rules.RECURRENT or arch in arch_rules.PARALLEL_HYBRID:
        return (True,) * n
    interval = meta.integer(Keys.LLM.FULL_ATTENTION_INTERVAL, 0) if arch in arch_rules.FULL_ATTENTION_INTERVAL else 0
    if interval:
        return tuple((layer + 1) % interval != 0 for layer in range(n))
    if arch in arch_rules.HYBRID:
        heads_kv = meta.per_layer(Keys.Attention.HEAD_COUNT_KV, n, 0)
        ffn = meta.per_layer(Keys.LLM.FEED_FORWARD_LENGTH, n, 0) if arch in arch_rules.FFN_ONLY_LAYERS else (0,) * n
        return tuple(h == 0 and f == 0 for h, f in zip(heads_kv, ffn, strict=True))
    return (False,) * n


def _attention(
    meta: MetaReader,
    tensors: TensorGroups,
    arch: str,
    n: int,
    n_embd: int,
    recurrent: tuple[bool, ...],
    warnings: list[str],
) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """Heads and KV heads per layer, key and value lengths."""
    if not meta.has(Keys.Attention.HEAD_COUNT):
        if arch in arch_rules.RECURRENT:
            return (0,) * n, (0,) * n, 0, 0
        return _attention_from_tensors(meta, tensors, n, n_embd, warnings)
    heads = meta.per_layer(Keys.Attention.HEAD_COUNT, n, None)
    if arch in arch_rules.KNOWN_ARCHITECTURES and arch not in arch_rules.PER_LAYER_HEADS and len(set(heads)) > 1:
        warnings.append(
            f"{meta.key(Keys.Attention.HEAD_COUNT)} varies by layer: llama.cpp runs every layer with {heads[0]}"
        )
        heads = (heads[0],) * n
    heads_kv = meta.per_layer(Keys.Attention.HEAD_COUNT_KV, n, -1) if meta.has(Keys.Attention.HEAD_COUNT_KV) else heads
    if arch in arch_rules.NON_CAUSAL - arch_rules.PER_LAYER_HEADS and len(set(heads_kv)) > 1:
        warnings.append(
            f"{meta.key(Keys.Attention.HEAD_COUNT_KV)} varies by layer: llama.cpp runs every layer of this encoder"
            f" with {heads_kv[0]}"
        )
        heads_kv = (heads_kv[0],) * n
    if arch in arch_rules.RECURRENT:
        heads_kv = (0,) * n
    elif arch in arch_rules.HYBRID or arch in arch_rules.FULL_ATTENTION_INTERVAL:
        heads_kv = tuple(0 if is_recurrent else h for h, is_recurrent in zip(heads_kv, recurrent, strict=True))
    if arch in arch_rules.FFN_ONLY_LAYERS:  # a feed-forward layer gets no KV cache, whatever its heads
        widths = meta.per_layer(Keys.LLM.FEED_FORWARD_LENGTH, n, 0)
        heads_kv = tuple(0 if width else h for h, width in zip(heads_kv, widths, strict=True))
    first_heads = next((h for h in heads if h), 0)
    default_length = n_embd // first_heads if first_heads else 0
    key_length = meta.integer(Keys.Attention.KEY_LENGTH, default_length)
    value_length = meta.integer(Keys.Attention.VALUE_LENGTH, default_length)
    return heads, heads_kv, key_length, value_length


def _attention_from_tensors(
    meta: MetaReader, tensors: TensorGroups, n: int, n_embd: int, warnings: list[str]
) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """No head counts in the file: size the KV cache from the key and value projections."""
    key_width = max((tensors.dim(i, "attn_k.weight", 1) for i in range(n)), default=0)
    value_width = max((tensors.dim(i, "attn_v.weight", 1) for i in range(n)), default=0)
    query_width = max((tensors.dim(i, "attn_q.weight", 1) for i in range(n)), default=0)
    if key_width == 0:
        warnings.append(f"{meta.key(Keys.Attention.HEAD_COUNT)} missing and no attn_k tensors: no KV cache estimated")
        return (0,) * n, (0,) * n, 0, 0
    warnings.append(f"{meta.key(Keys.Attention.HEAD_COUNT)} missing: KV cache sized from the attn_k/attn_v tensors")
    heads_kv = tuple(1 if tensors.dim(i, "attn_k.weight", 1) else 0 for i in range(n))
    heads = max(1, query_width // key_width) if query_width else max(1, n_embd // 128)
    return (heads,) * n, heads_kv, key_width, value_width or key_width


def _vocab_size(meta: MetaReader, token_embd: TensorInfo | None, output: TensorInfo | None) -> int:
    """llama.cpp's vocabulary: the token list (``vocab_size`` without one), else the embedding's rows."""
    vocab = vocabulary_size(meta)
    if vocab is not None:
        return vocab[1]
    for tensor in (output, token_embd):
        if tensor is not None and len(tensor.shape) >= 2:
            return tensor.shape[1]
    return 0
