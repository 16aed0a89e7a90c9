"""Tensors llama.cpp's loader never creates are refused (``layerfit.estimators.tensor_names``).

llama.cpp refuses such a file at load ("done_getting_tensors: wrong number of tensors"); the cases
are those ``benchmarks/loader_diff.py`` found layerfit accepting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf
from layerfit.estimators.architectures import KNOWN_ARCHITECTURES
from layerfit.estimators.tensor_name_tables import ARCH_TENSORS
from layerfit.estimators.tensor_names import created_by, known_to_llama_cpp, pattern
from layerfit.testing.arch_fixtures import ARCH_MODELS, arch_tensor_table
from layerfit.testing.synthetic import F32, TensorSpec, write_gguf


def _with(tmp_path: Path, model: str, *added: TensorSpec) -> Path:
    spec = ARCH_MODELS[model]
    path = tmp_path / f"{model}.gguf"
    write_gguf(path, spec, tokenizer=True, tensors=[*arch_tensor_table(spec), *added], tokenizer_model="test")
    return path


def _vector(name: str, length: int = 1024) -> TensorSpec:
    return TensorSpec(name, (length,), F32)


def test_every_modelled_architecture_has_a_table() -> None:
    assert ARCH_TENSORS.keys() == KNOWN_ARCHITECTURES


def test_patterns() -> None:
    assert pattern("blk.12.ffn_up.3") == "blk.%d.ffn_up.%d"
    assert pattern("dense_2.weight") == "dense_2.weight"
    assert known_to_llama_cpp("blk.7.attn_q.lora_a") and known_to_llama_cpp("blk.0.ssm_a")
    assert not known_to_llama_cpp("blk.0.attn_q.weights") and not known_to_llama_cpp("blk.x.attn_q.weight")


@pytest.mark.parametrize("name", ["mystery.weight", "blk.0.unknown_thing.weight"])
def test_a_name_no_architecture_has_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(EstimationError, match=r"no llama\.cpp architecture has a tensor of this name") as caught:
        read_gguf(str(_with(tmp_path, "llama-q4_0", _vector(name))))
    assert caught.value.where == name


def test_a_name_no_architecture_has_is_refused_for_an_unmodelled_architecture(tmp_path: Path) -> None:
    spec = ARCH_MODELS["llama-q4_0"].model_copy(update={"architecture": "starcoder2"})
    tensors = arch_tensor_table(ARCH_MODELS["llama-q4_0"])
    path = tmp_path / "unmodelled.gguf"
    write_gguf(path, spec, tensors=tensors, tokenizer=True, tokenizer_model="test")
    assert read_gguf(str(path)).block_count > 0  # its own names pass
    write_gguf(path, spec, tensors=[*tensors, _vector("mystery.weight")], tokenizer=True, tokenizer_model="test")
    with pytest.raises(EstimationError, match=r"no llama\.cpp architecture has a tensor of this name"):
        read_gguf(str(path))


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("llama4-q4_k", "token_embd_norm.weight"),
        ("gemma-q8_0", "blk.0.attn_q_norm.weight"),
        ("olmoe-q4_0", "blk.0.layer_output_norm.weight"),
        ("gemma3-q4_k", "rope_freqs.weight"),
        ("granitehybrid-q8_0", "blk.0.attn_norm.bias"),
        ("qwen2moe-q8_0", "blk.0.ffn_down.bias"),
        ("cohere2-q8_0", "blk.0.attn_output.bias"),
        ("mamba-f16", "blk.1.attn_q_norm.weight"),
    ],
)
def test_a_name_the_architecture_never_creates_is_refused(tmp_path: Path, model: str, name: str) -> None:
    arch = ARCH_MODELS[model].architecture
    with pytest.raises(EstimationError, match=rf"llama\.cpp's {arch} loader never creates this tensor") as caught:
        read_gguf(str(_with(tmp_path, model, _vector(name, 64 if "q_norm" in name else 1024))))
    assert caught.value.where == name


def test_every_fixture_model_is_accepted() -> None:
    """Every ``ARCH_MODELS`` model (all of which llama.cpp loads) names only tensors its loader creates."""
    for model, spec in ARCH_MODELS.items():
        for tensor in arch_tensor_table(spec):
            assert known_to_llama_cpp(tensor.name), (model, tensor.name)
            assert created_by(spec.architecture, tensor.name), (model, tensor.name)


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("llama-q4_0", "blk.0.attn_output.bias"),  # optional bias
        ("granite-q8_0", "blk.0.ffn_down.bias"),  # optional MLP bias (llama.cpp ran it)
        ("llama-q4_0", "rope_freqs.weight"),  # optional rope factors
        ("llama-q4_0", "blk.0.attn_q.scale"),  # load_tensors' generic scales
        ("llama-q4_0", "blk.1.ffn_down.input_scale"),
    ],
)
def test_optional_tensors_the_loader_creates_are_accepted(tmp_path: Path, model: str, name: str) -> None:
    length = 64 if name.startswith("rope") else 1 if "scale" in name else 1024
    assert read_gguf(str(_with(tmp_path, model, _vector(name, length)))).block_count > 0


def test_an_untied_output_is_accepted_where_the_loader_creates_one(tmp_path: Path) -> None:
    spec = ARCH_MODELS["qwen2-q8_0"]  # tied: no output.weight
    tensors = arch_tensor_table(spec)
    embd = next(t for t in tensors if t.name == "token_embd.weight")
    assert "output.weight" not in {t.name for t in tensors}
    path = _with(tmp_path, "qwen2-q8_0", TensorSpec("output.weight", embd.shape, embd.ggml_type))
    assert read_gguf(str(path)).block_count > 0
    assert created_by("llama", "output.weight") and not created_by("gemma", "output.weight")
