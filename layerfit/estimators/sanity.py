"""Bounds on the metadata the estimator reads: a value no real model can have is refused by key.

A header that claims 2^32 attention heads or keys of 2^63 elements would otherwise be estimated at
10^24 bytes and planned as if it were a model. Each bound is far above what published models use
(the largest of each in brackets), so no real file trips it. Per-layer arrays are checked item by
item; arrays too long to decode are left to the estimator, which refuses them when it needs them.
"""

from __future__ import annotations

from collections.abc import Mapping

from layerfit.domain.profile import MAX_BLOCKS
from layerfit.errors import EstimationError
from layerfit.estimators.gguf_constants import Keys

_K = 1 << 10
_M = 1 << 20

LIMITS: dict[str, int] = {
    Keys.LLM.BLOCK_COUNT: MAX_BLOCKS,  # [126 in 405B-class models]
    Keys.LLM.LEADING_DENSE_BLOCK_COUNT: MAX_BLOCKS,
    Keys.LLM.NEXTN_PREDICT_LAYERS: MAX_BLOCKS,
    Keys.Attention.SHARED_KV_LAYERS: MAX_BLOCKS,
    Keys.LLM.EMBEDDING_LENGTH: _M,  # [~25,000]
    Keys.LLM.FEED_FORWARD_LENGTH: 16 * _M,  # [~100,000]
    Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: 16 * _M,
    Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: 16 * _M,
    Keys.LLM.CONTEXT_LENGTH: 256 * _M,  # [10 M]
    Keys.LLM.VOCAB_SIZE: 16 * _M,  # [~262,000]
    Keys.LLM.EXPERT_COUNT: 64 * _K,  # [512]
    Keys.LLM.EXPERT_USED_COUNT: 64 * _K,
    Keys.LLM.EXPERT_SHARED_COUNT: 64 * _K,
    Keys.LLM.TOKEN_SHIFT_COUNT: 64 * _K,
    Keys.Attention.HEAD_COUNT: 64 * _K,  # [128]
    Keys.Attention.HEAD_COUNT_KV: 64 * _K,
    Keys.Attention.KEY_LENGTH: 64 * _K,  # [576 with MLA]
    Keys.Attention.VALUE_LENGTH: 64 * _K,
    Keys.Attention.KEY_LENGTH_SWA: 64 * _K,
    Keys.Attention.VALUE_LENGTH_SWA: 64 * _K,
    Keys.Attention.KEY_LENGTH_MLA: 64 * _K,
    Keys.Attention.VALUE_LENGTH_MLA: 64 * _K,
    Keys.Attention.KV_LORA_RANK: 64 * _K,  # [512]
    Keys.Attention.Q_LORA_RANK: 64 * _K,
    Keys.Attention.SLIDING_WINDOW: 256 * _M,
    Keys.Rope.DIMENSION_COUNT: 64 * _K,
    Keys.SSM.CONV_KERNEL: 64 * _K,  # [4]
    Keys.SSM.INNER_SIZE: 16 * _M,
    Keys.SSM.STATE_SIZE: 64 * _K,
    Keys.SSM.GROUP_COUNT: 64 * _K,
    Keys.WKV.HEAD_SIZE: 64 * _K,
}
"""Largest accepted value of each ``{arch}.*`` key (scalars and every item of per-layer arrays)."""


def check_metadata(path: str, metadata: Mapping[str, object]) -> None:
    """Refuse, naming the key, any bounded value above its limit (or below zero)."""
    arch = metadata.get(Keys.General.ARCHITECTURE)
    if not isinstance(arch, str):
        return
    for template, limit in LIMITS.items():
        key = template.format(arch=arch)
        value = metadata.get(key)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool) and not 0 <= item <= limit:
                raise EstimationError(path, key, f"{item} is impossible for a real model (at most {limit})")
