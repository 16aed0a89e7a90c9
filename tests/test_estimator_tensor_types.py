"""Tensor types llama.cpp loads and then cannot compute with are refused
(``layerfit.estimators.tensor_types``); the cases are those ``benchmarks/loader_diff.py`` found
layerfit accepting, and those llama.cpp ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf
from layerfit.estimators.gguf_constants import GGMLQuantizationType as T
from layerfit.testing.arch_fixtures import ARCH_MODELS, arch_tensor_table
from layerfit.testing.synthetic import write_gguf


def _retyped(tmp_path: Path, model: str, name: str, ggml_type: T) -> Path:
    spec = ARCH_MODELS[model]
    table = arch_tensor_table(spec)
    assert name in {tensor.name for tensor in table}, name
    tensors = [tensor._replace(ggml_type=ggml_type) if tensor.name == name else tensor for tensor in table]
    path = tmp_path / f"{model}.gguf"
    write_gguf(path, spec, tokenizer=True, tensors=tensors, tokenizer_model="test")
    return path


@pytest.mark.parametrize(
    ("model", "name", "ggml_type"),
    [
        # the b11434 CPU build aborts at the first decode: "binary_op: unsupported types"
        ("llama-q4_0", "blk.0.ffn_norm.weight", T.Q4_0),
        ("qwen2-q8_0", "blk.1.attn_q.bias", T.Q8_0),
        ("llama-q4_0", "output_norm.weight", T.I32),
    ],
)
def test_a_norm_or_bias_in_a_quantized_or_integer_type_is_refused(
    tmp_path: Path, model: str, name: str, ggml_type: T
) -> None:
    with pytest.raises(EstimationError, match=f"a norm or bias in {ggml_type.name}") as caught:
        read_gguf(str(_retyped(tmp_path, model, name, ggml_type)))
    assert caught.value.where == name


@pytest.mark.parametrize(
    ("model", "name"), [("llama-q4_0", "blk.0.attn_output.weight"), ("qwen3moe-q8_0", "blk.1.ffn_gate_exps.weight")]
)
def test_a_weight_matrix_in_an_integer_type_is_refused(tmp_path: Path, model: str, name: str) -> None:
    """The b11434 CPU build crashes (SIGSEGV) in the first decode."""
    with pytest.raises(EstimationError, match="a weight matrix in I32") as caught:
        read_gguf(str(_retyped(tmp_path, model, name, T.I32)))
    assert caught.value.where == name


@pytest.mark.parametrize(
    ("model", "name", "ggml_type"),
    [
        ("llama-q4_0", "blk.0.ffn_norm.weight", T.F16),  # CUDA multiplies by an F16 norm
        ("llama-q4_0", "blk.1.attn_q.weight", T.MXFP4),  # quantized matrices: llama.cpp ran these
        ("falcon-h1-f16", "blk.2.ssm_a", T.I32),  # not a weight matrix: llama.cpp ran it
    ],
)
def test_types_llama_cpp_runs_or_some_backend_runs_are_accepted(
    tmp_path: Path, model: str, name: str, ggml_type: T
) -> None:
    assert read_gguf(str(_retyped(tmp_path, model, name, ggml_type))).block_count > 0
