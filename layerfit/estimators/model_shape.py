"""ModelShape: what a GGUF header says about a model's memory, independent of runtime options.

The type alone, so that the checks of a header (``key_check``, ``tensor_*``) and the reader that
builds it (``shape``) both import it without importing each other.
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from layerfit.domain.base import Frozen, NonNegInt
from layerfit.errors import EstimationError
from layerfit.estimators import architectures as arch_rules


class ModelShape(Frozen):
    """The memory-relevant shape of one model file. Per-layer tuples have ``block_count`` entries."""

    path: str
    files: tuple[str, ...]
    architecture: str
    name: str | None = None
    file_type: int | None = None
    block_count: NonNegInt
    embedding_length: NonNegInt
    context_length: NonNegInt | None = None
    vocab_size: NonNegInt
    head_count: tuple[NonNegInt, ...]
    head_count_kv: tuple[NonNegInt, ...]
    """0 in a layer without KV cache (recurrent or convolution layers)."""
    key_length: NonNegInt
    value_length: NonNegInt
    key_length_swa: NonNegInt | None = None
    value_length_swa: NonNegInt | None = None
    sliding_window: NonNegInt = 0
    swa_layers: tuple[bool, ...]
    mla: bool = False
    """Multi-head latent attention: the cache keeps one row of ``kv_lora_rank + rope_dimension_count``."""
    kv_lora_rank: NonNegInt = 0
    rope_dimension_count: NonNegInt = 0
    expert_count: NonNegInt = 0
    expert_used_count: NonNegInt = 0
    expert_shared_count: NonNegInt = 0
    expert_feed_forward_length: NonNegInt = 0
    leading_dense_block_count: NonNegInt = 0
    ffn_width: tuple[NonNegInt, ...]
    """Width of each block's dense feed-forward (shared experts included); 0 for pure MoE blocks."""
    recurrent_layers: tuple[bool, ...]
    ssm_conv_kernel: NonNegInt = 0
    ssm_inner_size: NonNegInt = 0
    ssm_state_size: NonNegInt = 0
    ssm_group_count: NonNegInt = 0
    wkv_head_size: NonNegInt = 0
    token_shift_count: NonNegInt = 0
    per_layer_input_width: NonNegInt = 0
    """gemma3n: the per-layer inputs of all blocks together (rows of ``per_layer_token_embd``)."""
    shared_kv_layers: NonNegInt = 0
    """Trailing layers that reuse an earlier layer's KV cache (gemma3n)."""
    nextn_predict_layers: NonNegInt = 0
    """Trailing multi-token-prediction blocks: counted in ``block_count``, never given a KV cache."""
    causal: bool = True
    reranker: bool = False
    pooling_type: int | None = None
    block_bytes: tuple[NonNegInt, ...]
    block_expert_bytes: tuple[NonNegInt, ...]
    """Bytes of the routed-expert tensors (``ffn_{up,down,gate,gate_up}_{exps,chexps}``) of each block."""
    block_dense_elements: tuple[NonNegInt, ...]
    """Elements of each block's weight matrices but the routed experts' (one multiply-add per token each)."""
    block_expert_elements: tuple[NonNegInt, ...]
    """Elements of each block's routed-expert matrices, all experts together."""
    output_elements: NonNegInt = 0
    """Elements of the output projection (the token embedding where tied)."""
    token_embd_bytes: NonNegInt
    input_bytes: NonNegInt
    """Tensors that always stay on the host: token embedding, position/type embeddings, rope factors."""
    output_weight_bytes: NonNegInt = 0
    """``output.weight`` (0 when absent)."""
    output_extra_bytes: NonNegInt = 0
    """Output norm, output bias and classifier head."""
    tied_embeddings: bool = False
    """No ``output.weight``: llama.cpp copies the token embedding as the output projection."""
    gated_ffn: bool = True
    """The feed-forward has a gate (``ffn_gate`` or gate and up fused); false: GELU-style up/down."""
    position_embeddings: bool = False
    """Learned absolute positions (``position_embd``) instead of rope."""
    float_matrix_weights: bool = True
    """A matrix (2-D or more) in the blocks or the output layer is F32/F16/BF16: on a GPU its
    products go through cuBLAS, which costs the process more (``RuntimeCosts``)."""
    tensor_count: NonNegInt
    tensor_sizes: tuple[tuple[str, NonNegInt], ...] = ()
    """Every tensor's name and bytes, in file order (what ``-ot`` patterns are matched against)."""
    tensor_bytes: NonNegInt
    file_bytes: NonNegInt
    header_bytes: NonNegInt
    """Metadata, tokenizer and tensor table: everything but tensor data."""
    warnings: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _per_layer_lengths(self) -> Self:
        n = self.block_count
        for field in (
            "head_count",
            "head_count_kv",
            "swa_layers",
            "ffn_width",
            "recurrent_layers",
            "block_bytes",
            "block_expert_bytes",
            "block_dense_elements",
            "block_expert_elements",
        ):
            if len(getattr(self, field)) != n:
                raise EstimationError(self.path, field, f"has {len(getattr(self, field))} entries for {n} blocks")
        return self

    @property
    def output_layer_bytes(self) -> int:
        """What the device holding the output layer stores: projection (or embedding copy) and norms."""
        projection = self.token_embd_bytes if self.tied_embeddings else self.output_weight_bytes
        return projection + self.output_extra_bytes

    @property
    def host_output_layer_bytes(self) -> int:
        """RAM of the output layer when it stays on the host (a tied embedding is not copied there)."""
        return self.output_layer_bytes - (self.token_embd_bytes if self.tied_embeddings else 0)

    @property
    def max_head_count(self) -> int:
        return max(self.head_count, default=0)

    @property
    def is_moe(self) -> bool:
        return self.expert_count > 0 and self.expert_used_count > 0

    @property
    def known_architecture(self) -> bool:
        return self.architecture in arch_rules.KNOWN_ARCHITECTURES
