"""Shapes of well-known models and of the synthetic models measured in ``shared/ground-truth``."""

from __future__ import annotations

from layerfit.testing.synthetic_spec import ModelSpec, Q


def _llama(
    name: str, blocks: int, d: int, ffn: int, heads: int, heads_kv: int, head_dim: int, **kw: object
) -> ModelSpec:
    fields: dict[str, object] = {
        "name": name,
        "architecture": "llama",
        "block_count": blocks,
        "embedding_length": d,
        "feed_forward_length": ffn,
        "head_count": heads,
        "head_count_kv": heads_kv,
        "head_dim": head_dim,
        "vocab_size": 128256,
        "context_length": 131072,
    }
    fields.update(kw)
    return ModelSpec.model_validate(fields)


LLAMA_2: dict[str, object] = {
    "vocab_size": 32000,
    "context_length": 4096,
    "weight_type": Q.Q4_K,
    "embedding_type": Q.Q6_K,
}
"""What the Llama-2 models share: a 32,000-token vocabulary and a 4,096-token context."""

REAL_MODELS: dict[str, ModelSpec] = {
    "llama-2-7b": _llama("Llama-2-7B", 32, 4096, 11008, 32, 32, 128, **LLAMA_2),
    "llama-2-13b": _llama("Llama-2-13B", 40, 5120, 13824, 40, 40, 128, **LLAMA_2),
    "llama-2-70b": _llama("Llama-2-70B", 80, 8192, 28672, 64, 8, 128, **LLAMA_2),
    "llama-3.2-1b": _llama("Llama-3.2-1B", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True),
    "llama-3.1-8b": _llama("Llama-3.1-8B", 32, 4096, 14336, 32, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K),
    "llama-3.1-70b": _llama("Llama-3.1-70B", 80, 8192, 28672, 64, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K),
    "llama-3.1-405b": _llama(
        "Llama-3.1-405B", 126, 16384, 53248, 128, 8, 128, weight_type=Q.Q4_K, embedding_type=Q.Q6_K
    ),
    "mixtral-8x7b": _llama(
        "Mixtral-8x7B",
        32,
        4096,
        14336,
        32,
        8,
        128,
        vocab_size=32000,
        context_length=32768,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=8,
        expert_used_count=2,
        expert_feed_forward_length=14336,
    ),
    "qwen3-30b-a3b": ModelSpec(
        name="Qwen3-30B-A3B",
        architecture="qwen3moe",
        block_count=48,
        embedding_length=2048,
        feed_forward_length=6144,
        head_count=32,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=768,
        qk_norm=True,
    ),
    "qwen3-235b-a22b": ModelSpec(
        name="Qwen3-235B-A22B",
        architecture="qwen3moe",
        block_count=94,
        embedding_length=4096,
        feed_forward_length=12288,
        head_count=64,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=1536,
        qk_norm=True,
    ),
    "deepseek-v3": ModelSpec(
        name="DeepSeek-V3",
        architecture="deepseek2",
        block_count=61,
        embedding_length=7168,
        feed_forward_length=18432,
        head_count=128,
        head_count_kv=128,
        head_dim=192,
        value_dim=128,
        vocab_size=129280,
        context_length=163840,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        expert_count=256,
        expert_used_count=8,
        expert_feed_forward_length=2048,
        expert_shared_feed_forward_length=2048,
        leading_dense_block_count=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        rope_dim=64,
    ),
    "gemma-3-27b": ModelSpec(
        name="Gemma-3-27B",
        architecture="gemma3",
        block_count=62,
        embedding_length=5376,
        feed_forward_length=21504,
        head_count=32,
        head_count_kv=16,
        head_dim=128,
        vocab_size=262208,
        context_length=131072,
        tied_embeddings=True,
        weight_type=Q.Q4_K,
        embedding_type=Q.Q6_K,
        sliding_window=1024,
        qk_norm=True,
        post_norms=True,
    ),
    "gpt-oss-120b": ModelSpec(
        name="gpt-oss-120b",
        architecture="gpt-oss",
        block_count=36,
        embedding_length=2880,
        feed_forward_length=0,
        head_count=64,
        head_count_kv=8,
        head_dim=64,
        vocab_size=201088,
        context_length=131072,
        weight_type=Q.F16,
        expert_type=Q.MXFP4,
        expert_count=128,
        expert_used_count=4,
        expert_feed_forward_length=2880,
        sliding_window=128,
        attention_bias=True,
        post_norms=False,
    ),
}
"""Shapes of well-known models (the usual Q4_K_M-style mix: Q4_K weights, Q6_K embeddings)."""

GROUND_TRUTH_MODELS: dict[str, ModelSpec] = {
    "llama1b-f16": _llama("llama1b-f16", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True),
    "llama1b-q8": _llama("llama1b-q8", 16, 2048, 8192, 32, 8, 64, tied_embeddings=True, weight_type=Q.Q8_0),
    "llama8b-q4": _llama("llama8b-q4", 32, 4096, 14336, 32, 8, 128, weight_type=Q.Q4_0),
    "llama70b-q4": _llama("llama70b-q4", 80, 8192, 28672, 64, 8, 128, weight_type=Q.Q4_0),
    "qwen30b-q4": ModelSpec(
        name="qwen30b-q4",
        architecture="qwen3moe",
        block_count=48,
        embedding_length=2048,
        feed_forward_length=6144,
        head_count=32,
        head_count_kv=4,
        head_dim=128,
        vocab_size=151936,
        context_length=40960,
        weight_type=Q.Q4_0,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=768,
        qk_norm=True,
    ),
}
"""The synthetic models measured in ``shared/ground-truth`` (all 2-D weights in one type)."""
