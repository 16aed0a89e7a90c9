"""Out-of-sample variants of the models whose compute terms were fitted on their own runs.

gemma3n's per-layer-input term ``P``, the encoder rules (bert, nomic-bert) and the MoE encoder's
first-device term were fitted to the runs of one model each (``arch_fixtures``,
``arch_fixtures_recurrent``, ``arch_fixtures_decoders``). Each variant here changes what those
terms scale with — hidden width, block count, feed-forward width, vocabulary, heads, experts —
and is recorded at other contexts and (decoders) another micro-batch, so that its runs test the
rules instead of refitting them. The tensor tables are the architectures' own.
"""

from __future__ import annotations

from gguf import Keys

from layerfit.testing.arch_fixtures_decoders import MODELS as DECODERS
from layerfit.testing.synthetic import ModelSpec

_ENCODER: dict[str, object] = {"vocab_size": 20000, "context_length": 4096}
_HEADS_12 = {"embedding_length": 768, "head_count": 12, "head_count_kv": 12}

VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "gemma3n-30l-q8_0": (
        "gemma3n-q8_0",
        {
            "block_count": 30,
            "embedding_length": 768,
            "feed_forward_length": 3072,
            "head_count": 4,
            "head_count_kv": 2,
            "vocab_size": 16000,
            "sliding_window": 1024,
            "metadata": {**DECODERS["gemma3n-q8_0"].metadata, Keys.Attention.SHARED_KV_LAYERS: 10},
        },
    ),
    "bert-w768-f16": ("bert-f16", {**_ENCODER, **_HEADS_12, "block_count": 6, "feed_forward_length": 2048}),
    "nomic-bert-w512-f16": (
        "nomic-bert-f16",
        {
            **_ENCODER,
            "block_count": 8,
            "embedding_length": 512,
            "head_count": 8,
            "head_count_kv": 8,
            "feed_forward_length": 1536,
        },
    ),
    "nomic-bert-moe-w768-f16": (
        "nomic-bert-moe-f16",
        {**_ENCODER, **_HEADS_12, "block_count": 6, "feed_forward_length": 1024, "expert_used_count": 3},
    ),
}
"""Each variant's name: the fitted model it departs from and the fields it changes."""


def variant_models(fitted: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
    """The variants, each a copy of its fitted model with its own fields."""
    return {
        name: ModelSpec.model_validate({**fitted[base].model_dump(), **fields, "name": name})
        for name, (base, fields) in VARIANTS.items()
    }


VARIANT_CONTEXTS: dict[str, tuple[int, int]] = {
    "gemma3n-30l-q8_0": (3072, 12288),
    "bert-w768-f16": (1024, 3072),
    "nomic-bert-w512-f16": (1024, 3072),
    "nomic-bert-moe-w768-f16": (1024, 3072),
}
"""The two contexts recorded (the fitted models used 2048/8192, encoders 512/2048)."""

VARIANT_UBATCH = 256
"""A decoder variant is also recorded at this micro-batch (llama.cpp's default is 512; an encoder's
micro-batch is its context, which the two contexts vary)."""
