"""ModelShape from GGUF headers: hyperparameters, per-layer arrays, tensor grouping, real shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures_gguf import tiny_spec, write_tiny

from layerfit.estimators import read_gguf
from layerfit.testing.arch_fixtures import arch_tensor_table
from layerfit.testing.synthetic import REAL_MODELS, tensor_table, write_gguf

MiB = 1024**2


def test_tensors_are_grouped_into_blocks_inputs_and_output(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, data="header", tokenizer=False)
    shape = read_gguf(str(path))
    table = {t.name: t.n_bytes for t in tensor_table(tiny_spec())}
    assert shape.block_bytes == tuple(
        sum(size for name, size in table.items() if name.startswith(f"blk.{i}.")) for i in range(4)
    )
    assert shape.token_embd_bytes == shape.input_bytes == table["token_embd.weight"]
    assert shape.output_weight_bytes == table["output.weight"]
    assert shape.output_extra_bytes == table["output_norm.weight"]
    assert not shape.tied_embeddings
    assert (
        shape.output_layer_bytes
        == shape.host_output_layer_bytes
        == table["output.weight"] + table["output_norm.weight"]
    )
    assert shape.tensor_bytes == sum(table.values())


def test_tied_embeddings_copy_the_token_embedding_to_the_output_device(tmp_path: Path) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", tied_embeddings=True, architecture="command-r")))
    # token_embd: 256 x 1000 F16 = 512,000 bytes; output_norm: 256 F32 = 1,024 bytes
    assert shape.tied_embeddings
    assert shape.output_layer_bytes == 512_000 + 1_024
    assert shape.host_output_layer_bytes == 1_024


@pytest.mark.parametrize(
    ("architecture", "overrides", "expected_swa"),
    [
        ("gemma3", {"block_count": 6}, (True, True, True, True, True, False)),  # period 6: il % 6 < 5
        ("gemma2", {"tied_embeddings": True}, (True, False, True, False)),  # period 2
        ("gpt-oss", {}, (True, False, True, False)),  # period 2
        ("cohere2", {"tied_embeddings": True}, (True, True, True, False)),  # period 4
        ("phi3", {}, (False, False, False, False)),  # llama.cpp ignores phi3's window
        ("llama", {}, (False, False, False, False)),  # and mistral-style windows on llama
        (
            "gemma3",
            {"metadata": {"{arch}.attention.sliding_window_pattern": (True, False, False, True)}},
            (True, False, False, True),
        ),
    ],
)
def test_sliding_window_layers(
    tmp_path: Path, architecture: str, overrides: dict[str, object], expected_swa: tuple[bool, ...]
) -> None:
    spec = tiny_spec(architecture=architecture, sliding_window=128, **overrides)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, spec, tokenizer=True, tensors=arch_tensor_table(spec))  # the tensors llama.cpp loads
    shape = read_gguf(str(path))
    assert shape.swa_layers == expected_swa
    assert shape.sliding_window == (128 if any(expected_swa) else 0)


def test_per_layer_head_counts(tmp_path: Path) -> None:
    # openelm (not modelled) sizes each layer by its own counts; a modelled llama file with these
    # counts and uniform tensors is refused, as llama.cpp refuses it (test_estimator_tensor_check)
    metadata = {"{arch}.attention.head_count_kv": (2, 0, 2, 1)}
    path = write_tiny(tmp_path, data="header", architecture="openelm", metadata=metadata)
    shape = read_gguf(str(path))
    assert shape.head_count_kv == (2, 0, 2, 1)
    assert shape.head_count == (4, 4, 4, 4)
    assert (shape.key_length, shape.value_length) == (64, 64)


def test_recurrent_and_hybrid_layers(tmp_path: Path) -> None:
    ssm = {"ssm_inner_size": 512, "ssm_state_size": 16, "ssm_conv_kernel": 4, "ssm_group_count": 1, "ssm_head_count": 8}
    mamba = read_gguf(
        str(write_tiny(tmp_path, "mamba", data="header", architecture="mamba2", feed_forward_length=0, **ssm))
    )
    assert mamba.recurrent_layers == (True,) * 4
    assert mamba.head_count_kv == (0,) * 4
    assert (mamba.ssm_inner_size, mamba.ssm_state_size, mamba.ssm_conv_kernel, mamba.ssm_group_count) == (512, 16, 4, 1)
    hybrid = read_gguf(
        str(write_tiny(tmp_path, "hybrid", data="header", architecture="granitehybrid", attention_layers=(1, 3), **ssm))
    )
    assert hybrid.recurrent_layers == (True, False, True, False)
    assert hybrid.head_count_kv == (0, 2, 0, 2)


def test_encoders_are_not_causal_and_have_no_output_projection(tmp_path: Path) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="bert", encoder=True, context_length=512)))
    assert not shape.causal
    assert not shape.tied_embeddings
    assert shape.output_layer_bytes == 0
    # token embedding 256 x 1000 F16, position embedding 256 x 512 F32, token types 256 x 2 F32, norm 256 F32
    assert shape.input_bytes == 512_000 + 524_288 + 2_048 + 1_024


def test_rerankers_are_recognised(tmp_path: Path) -> None:
    metadata = {"{arch}.pooling_type": 4}
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="bert", encoder=True, metadata=metadata)))
    assert shape.reranker
    assert shape.pooling_type == 4


def test_unknown_architecture_gets_a_generic_shape_and_a_warning(tmp_path: Path) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="mystery")))
    assert not shape.known_architecture
    assert shape.head_count_kv == (2,) * 4
    assert any("'mystery' is not modelled" in warning for warning in shape.warnings)


def test_missing_head_counts_fall_back_to_the_key_projection(tmp_path: Path) -> None:
    absent = dict.fromkeys(
        ("{arch}.attention.head_count", "{arch}.attention.head_count_kv", "{arch}.attention.key_length")
    )
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="mystery", metadata=absent)))
    # attn_k is 256 -> 2 x 64 = 128 wide, attn_q 256 -> 256: one 128-wide KV "head", two query heads
    assert shape.head_count_kv == (1,) * 4
    assert (shape.key_length, shape.value_length) == (128, 128)
    assert shape.head_count == (2,) * 4
    assert any("KV cache sized from the attn_k/attn_v tensors" in warning for warning in shape.warnings)


# Real models: exact tensor tables, no downloads. Expected numbers from the published configs.
REAL_SHAPES = [
    # name, blocks, experts (count, used), swa layers, mla, params in billions (approximately)
    ("llama-3.2-1b", 16, (0, 0), 0, False, 1.24),
    ("llama-3.1-8b", 32, (0, 0), 0, False, 8.03),
    ("llama-3.1-70b", 80, (0, 0), 0, False, 70.6),
    ("llama-3.1-405b", 126, (0, 0), 0, False, 405.9),
    ("mixtral-8x7b", 32, (8, 2), 0, False, 46.7),
    ("qwen3-30b-a3b", 48, (128, 8), 0, False, 30.5),
    ("qwen3-235b-a22b", 94, (128, 8), 0, False, 235.1),
    ("deepseek-v3", 61, (256, 8), 0, True, 671.0),
    ("gemma-3-27b", 62, (0, 0), 52, False, 27.0),
    ("gpt-oss-120b", 36, (128, 4), 18, False, 116.8),
]


@pytest.mark.parametrize(
    ("name", "blocks", "experts", "swa", "mla", "billions"), REAL_SHAPES, ids=[r[0] for r in REAL_SHAPES]
)
def test_real_model_shapes(
    tmp_path: Path, name: str, blocks: int, experts: tuple[int, int], swa: int, mla: bool, billions: float
) -> None:
    spec = REAL_MODELS[name]
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, spec)
    shape = read_gguf(str(path))
    assert shape.block_count == blocks
    assert (shape.expert_count, shape.expert_used_count) == experts
    assert sum(shape.swa_layers) == swa
    assert shape.mla == mla
    params = sum(int(np.prod(t.shape)) for t in tensor_table(spec))
    assert params / 1e9 == pytest.approx(billions, rel=0.02)
    # every tensor is a block's, the host's or the output layer's
    assert (
        sum(shape.block_bytes) + shape.input_bytes + shape.output_weight_bytes + shape.output_extra_bytes
        == shape.tensor_bytes
    )
    moe_blocks = [i for i, size in enumerate(shape.block_expert_bytes) if size]
    assert len(moe_blocks) == (blocks - shape.leading_dense_block_count if experts[0] else 0)
