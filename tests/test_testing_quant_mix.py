"""The Q4_K_M mix ``llama-quantize`` writes for a dense llama: the sizes and type counts llama.cpp
prints for Llama-3 8B and 70B Q4_K_M (``published-sizes.csv``'s rows are rebuilt with it)."""

from __future__ import annotations

from collections import Counter

import pytest

from layerfit.testing.quant_mix import q4_k_m_table, use_more_bits
from layerfit.testing.synthetic import REAL_MODELS, Q

GIB = 1024**3


@pytest.mark.parametrize(
    ("model", "gib", "types"),
    [
        # llama-bench's size column and llama_model_loader's "type q4_K: N tensors" lines
        ("llama-3.1-8b", 4.58, {"F32": 65, "Q4_K": 193, "Q6_K": 33}),
        ("llama-3.1-70b", 39.59, {"F32": 161, "Q4_K": 441, "Q5_K": 40, "Q6_K": 81}),
    ],
)
def test_the_mix_gives_llama_cpps_sizes_and_type_counts(model: str, gib: float, types: dict[str, int]) -> None:
    table = q4_k_m_table(REAL_MODELS[model])
    assert round(sum(tensor.n_bytes for tensor in table) / GIB, 2) == gib
    assert Counter(tensor.ggml_type.name for tensor in table) == types


def test_more_bits_go_to_the_first_and_last_eighth_and_every_third_between() -> None:
    picked = [block for block in range(32) if use_more_bits(block, 32)]
    assert picked == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]


def test_an_80_block_model_without_grouped_kv_heads_keeps_q4_k_values() -> None:
    # llama.cpp types 80 blocks with as many KV heads as heads LLM_TYPE_65B: no Q5_K attn_v
    spec = REAL_MODELS["llama-2-70b"].model_copy(update={"head_count_kv": 64})
    assert not any(tensor.ggml_type == Q.Q5_K for tensor in q4_k_m_table(spec))


@pytest.mark.parametrize(
    "update",
    [{"architecture": "qwen3moe"}, {"expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 1024}],
)
def test_other_models_are_refused(update: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="dense llama"):
        q4_k_m_table(REAL_MODELS["llama-3.1-8b"].model_copy(update=update))


def test_rows_that_do_not_hold_whole_blocks_are_refused() -> None:
    with pytest.raises(ValueError, match="whole Q4_K blocks"):
        q4_k_m_table(REAL_MODELS["llama-3.1-8b"].model_copy(update={"feed_forward_length": 14000}))
