"""The speed model's facts about a model (``SpeedShape``): read from GGUF headers written here, with
the numbers worked out by hand; carried by ``MemoryProfile`` through JSON; bad input refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

from layerfit.domain.params import LlamaParams
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import SpeedShape
from layerfit.estimators import estimate_profile
from layerfit.estimators.gguf_constants import GGMLQuantizationType as Q


def test_a_dense_models_reads_and_flops(tmp_path: Path) -> None:
    # tiny: 4 blocks, d 256, 4 heads / 2 KV heads of 64, ffn 512, vocab 1000, F16.
    # Matrices per block: q 256x256 + k 256x128 + v 256x128 + o 256x256 = 196,608; gate, up, down
    # 3 x 256 x 512 = 393,216; 589,824 elements, 2 FLOPs each: 1,179,648. Bytes: 589,824 x 2 +
    # 2 norms x 256 x 4 = 1,181,696. KV per position: 2 KV heads x 64 x 2 bytes x (K and V) = 512.
    # Attention per position: 2 x 4 heads x (64 + 64) = 1,024. Output 256 x 1000 F16 = 512,000 bytes
    # + norm 1,024 = 513,024; 2 x 256,000 = 512,000 FLOPs.
    shape = estimate_profile(write_tiny(tmp_path)).speed
    assert shape is not None
    assert shape.block_dense_bytes == (1_181_696,) * 4
    assert shape.block_dense_flops == (1_179_648,) * 4
    assert shape.block_expert_bytes == (0,) * 4 and shape.expert_count == 0
    assert shape.block_kv_position_bytes == (512,) * 4
    assert shape.block_attention_flops == (1_024,) * 4
    assert (shape.output_bytes, shape.output_flops) == (513_024, 512_000)
    assert (shape.embedding_length, shape.vocab_size, shape.ctx, shape.n_ubatch) == (256, 1000, 8192, 512)


def test_cache_types_context_and_ubatch_follow_the_flags(tmp_path: Path) -> None:
    # q8_0 K and V: 2 heads x 64 = 128 values = 4 blocks of 34 bytes = 136 bytes each: 272 per position
    params = LlamaParams.from_args(["-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0", "-ub", "128", "-fa", "on"])
    shape = estimate_profile(write_tiny(tmp_path), params).speed
    assert shape is not None
    assert (shape.block_kv_position_bytes[0], shape.ctx, shape.n_ubatch, shape.flash_attn) == (272, 2048, 128, True)
    off = estimate_profile(write_tiny(tmp_path), LlamaParams.from_args(["-fa", "off"])).speed
    assert off is not None and off.flash_attn is False


def test_a_moe_model_reads_its_routed_share(tmp_path: Path) -> None:
    # 8 experts of width 128, 2 used: ffn_{gate,up,down}_exps 3 x 256 x 128 x 8 = 786,432 F16
    # elements: 1,572,864 bytes, 1,572,864 FLOPs for all experts; a token reads 2/8 of them.
    path = write_tiny(
        tmp_path, "moe", architecture="qwen3moe", expert_count=8, expert_used_count=2, expert_feed_forward_length=128
    )
    shape = estimate_profile(path).speed
    assert shape is not None
    assert shape.block_expert_bytes == (1_572_864,) * 4 and shape.block_expert_flops == (1_572_864,) * 4
    assert (shape.expert_count, shape.expert_used_count, shape.routed_share) == (8, 2, 0.25)
    # the router (256 x 8 F32 = 8,192 bytes) counts as dense: it is read by every token
    profile = estimate_profile(path)
    assert shape.block_dense_bytes[0] == profile.block_weight_bytes[0] - 1_572_864


def test_a_sliding_window_block_says_its_window(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, "gemma", architecture="gemma3", sliding_window=512, block_count=6)
    shape = estimate_profile(path).speed
    assert shape is not None
    assert shape.block_window == (512,) * 5 + (0,)  # gemma3: five windowed layers to one global
    full = estimate_profile(path, LlamaParams.from_args(["--swa-full"])).speed
    assert full is not None and full.block_window == (0,) * 6


def test_a_profile_with_its_speed_shape_round_trips_through_json(tmp_path: Path) -> None:
    profile = estimate_profile(write_tiny(tmp_path))
    assert MemoryProfile.model_validate_json(profile.model_dump_json()) == profile


def _shape(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "block_dense_bytes": [100, 100],
        "block_expert_bytes": [0, 0],
        "block_kv_position_bytes": [4, 4],
        "block_window": [0, 0],
        "block_state_bytes": [0, 0],
        "block_dense_flops": [200, 200],
        "block_expert_flops": [0, 0],
        "block_attention_flops": [8, 8],
        "embedding_length": 16,
        "ctx": 1024,
    }
    return fields | overrides


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"block_window": [0]}, "speed.block_window"),
        ({"expert_count": 2, "expert_used_count": 3}, "speed.expert_used_count"),
        ({"block_expert_bytes": [10, 10]}, "speed.expert_used_count"),
        ({"block_dense_bytes": [-1, 100]}, "block_dense_bytes"),
        ({"embedding_length": 0}, "embedding_length"),
        ({"ctx": True}, "ctx"),
    ],
)
def test_a_bad_speed_shape_is_refused_naming_the_field(overrides: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        SpeedShape.model_validate(_shape(**overrides))


def test_a_profile_whose_speed_shape_has_another_block_count_is_refused() -> None:
    with pytest.raises(ValueError, match=r"speed\.block_dense_bytes: has 2 entries, the profile has 3"):
        MemoryProfile.model_validate(
            {"block_weight_bytes": [100, 100, 100], "block_kv_bytes": [0, 0, 0], "speed": _shape()}
        )


def test_quantized_weights_read_their_quantized_bytes(tmp_path: Path) -> None:
    # Q8_0: 34 bytes per 32 weights; the same 589,824 matrix elements read 626,688 bytes + 2,048 of norms
    shape = estimate_profile(write_tiny(tmp_path, weight_type=Q.Q8_0)).speed
    assert shape is not None
    assert shape.block_dense_bytes[0] == 589_824 // 32 * 34 + 2_048
    assert shape.block_dense_flops[0] == 1_179_648
