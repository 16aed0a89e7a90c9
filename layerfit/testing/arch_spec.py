"""What the small architecture models (``arch_fixtures``, ``arch_fixtures_recurrent``) share:
narrow default widths, a few blocks, a small vocabulary, and the Mamba-2 mixer they use."""

from __future__ import annotations

from gguf import Keys

from layerfit.testing.synthetic import ModelSpec

ARCH_DEFAULTS: dict[str, object] = {
    "block_count": 4,
    "embedding_length": 1024,
    "feed_forward_length": 2816,
    "head_count": 8,
    "head_count_kv": 2,
    "head_dim": 128,
    "vocab_size": 32000,
    "context_length": 16384,
}
NORM_EPS: dict[str, object] = {Keys.Attention.LAYERNORM_EPS: 1e-5}
"""The LayerNorm epsilon key that several loaders require."""
MAMBA2: dict[str, object] = {
    "ssm_inner_size": 2048,
    "ssm_state_size": 128,
    "ssm_conv_kernel": 4,
    "ssm_group_count": 1,
    "ssm_head_count": 32,
}


def arch_spec(name: str, architecture: str, **fields: object) -> ModelSpec:
    """``ARCH_DEFAULTS`` with the model's name, architecture and own fields."""
    return ModelSpec.model_validate({**ARCH_DEFAULTS, "name": name, "architecture": architecture, **fields})
