"""Keys llama.cpp reads for every model are refused where llama.cpp refuses them (``estimators.key_check``):
another GGUF type than it reads them as, a per-layer array of the wrong length or item type, a broken
tokenizer. Found by ``benchmarks/loader_diff.py``; every verdict below was checked with the b11434 CPU
build (the crafted cases of ``contradiction_fixtures`` are recorded in ``cpu-contradictions.csv``)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from gguf import GGUFValueType as T

from layerfit.cli import EXIT_BAD_INPUT, main
from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf, read_header
from layerfit.testing.synthetic import NO_TOKENIZER, REAL_MODELS, write_gguf

Change = dict[str, tuple[T, object, T | None] | None]


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The differential's typed GGUF writer (``benchmarks/loader_diff_files.py``)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "benchmarks"))
    import loader_diff_files

    return loader_diff_files


def _write(files: ModuleType, directory: Path, model: str, change: Change) -> Path:
    """The architecture model (64 tokens) with keys replaced (value, GGUF type, item type) or removed."""
    base = files.base_model(model, vocab=64)
    keys = dict(base.keys)
    for key, value in change.items():
        if value is None:
            keys.pop(key, None)
        else:
            keys[key] = files.Value(value[0], value[1], value[2])
    path: Path = files.write_model(directory / f"{model}.gguf", base.with_keys(keys))
    return path


REFUSED: dict[str, tuple[str, Change]] = {
    "block count as INT32": ("llama.block_count", {"llama.block_count": (T.INT32, 4, None)}),
    "expert count as UINT64": ("llama.expert_count", {"llama.expert_count": (T.UINT64, 0, None)}),
    "key length as INT32": ("llama.attention.key_length", {"llama.attention.key_length": (T.INT32, 128, None)}),
    "linear rope scale as UINT32": ("llama.rope.scale_linear", {"llama.rope.scale_linear": (T.UINT32, 1, None)}),
    "KV heads as UINT64 items": (
        "llama.attention.head_count_kv",
        {"llama.attention.head_count_kv": (T.ARRAY, (2, 2, 2, 2), T.UINT64)},
    ),
    "feed-forward as FLOAT32 items": (
        "llama.feed_forward_length",
        {"llama.feed_forward_length": (T.ARRAY, (2816.0,) * 4, T.FLOAT32)},
    ),
    "tokenizer model as UINT32": ("tokenizer.ggml.model", {"tokenizer.ggml.model": (T.UINT32, 1, None)}),
    "tokenizer model missing": ("tokenizer.ggml.model", {"tokenizer.ggml.model": None}),
    "tokens missing": ("tokenizer.ggml.tokens", {"tokenizer.ggml.tokens": None}),
    "tokens as INT32": ("tokenizer.ggml.tokens", {"tokenizer.ggml.tokens": (T.ARRAY, tuple(range(64)), T.INT32)}),
    "scores as strings": ("tokenizer.ggml.scores", {"tokenizer.ggml.scores": (T.ARRAY, ("0",) * 64, T.STRING)}),
    "scores short": ("tokenizer.ggml.scores", {"tokenizer.ggml.scores": (T.ARRAY, (0.0,) * 63, T.FLOAT32)}),
    "token types as FLOAT32": (
        "tokenizer.ggml.token_type",
        {"tokenizer.ggml.token_type": (T.ARRAY, (1.0,) * 64, T.FLOAT32)},
    ),
    "token types short": ("tokenizer.ggml.token_type", {"tokenizer.ggml.token_type": (T.ARRAY, (1,) * 63, T.INT32)}),
    "EOS id as a string": ("tokenizer.ggml.eos_token_id", {"tokenizer.ggml.eos_token_id": (T.STRING, "2", None)}),
    "add BOS as UINT32": ("tokenizer.ggml.add_bos_token", {"tokenizer.ggml.add_bos_token": (T.UINT32, 1, None)}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_key_llama_cpp_refuses_is_refused_by_name(files: ModuleType, tmp_path: Path, case: str) -> None:
    key, change = REFUSED[case]
    with pytest.raises(EstimationError) as caught:
        read_gguf(str(_write(files, tmp_path, "llama-q4_0", change)))
    assert caught.value.where == key, str(caught.value)
    assert "llama.cpp refuses the file at load" in caught.value.problem, str(caught.value)


ACCEPTED: dict[str, tuple[str, Change]] = {
    # llama.cpp reads key_length only when block 0 has heads, scale_linear only without scaling.factor
    "key length as INT32 without heads": (
        "mamba-f16",
        {"mamba.attention.key_length": (T.INT32, 64, None)},
    ),
    "linear rope scale beside a scaling factor": (
        "llama-q4_0",
        {"llama.rope.scale_linear": (T.UINT32, 1, None), "llama.rope.scaling.factor": (T.FLOAT32, 1.0, None)},
    ),
    "per-layer array of UINT32 and INT32": (
        "llama-q4_0",
        {
            "llama.attention.head_count": (T.ARRAY, (8, 8, 8, 8), T.UINT32),
            "llama.feed_forward_length": (T.ARRAY, (2816,) * 4, T.INT32),
        },
    ),
    "scores as INT32": ("llama-q4_0", {"tokenizer.ggml.scores": (T.ARRAY, (0,) * 64, T.INT32)}),
    "an out-of-range BOS id": ("llama-q4_0", {"tokenizer.ggml.bos_token_id": (T.UINT32, 1000, None)}),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_what_llama_cpp_loads_is_accepted(files: ModuleType, tmp_path: Path, case: str) -> None:
    model, change = ACCEPTED[case]
    assert read_gguf(str(_write(files, tmp_path, model, change))).block_count > 0


TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def test_a_file_without_any_tokenizer_key_is_refused_naming_the_model_key(
    files: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp's vocabulary loader runs for every model and requires the key: the b11434 CPU build
    exits 1 with 'error loading model vocabulary: key not found in model: tokenizer.ggml.model'."""
    path = _write(files, tmp_path, "llama-q4_0", dict.fromkeys(TOKENIZER_KEYS))
    with pytest.raises(EstimationError) as caught:
        read_gguf(str(path))
    assert caught.value.where == "tokenizer.ggml.model", str(caught.value)
    assert "required key missing: llama.cpp loads a tokenizer for every model" in caught.value.problem
    assert main(["estimate", str(path)]) == EXIT_BAD_INPUT == 2
    assert "tokenizer.ggml.model: required key missing" in capsys.readouterr().err


@pytest.mark.parametrize("model", ["none", "no_vocab"])
def test_a_tokenizer_without_a_vocabulary_needs_no_token_list(files: ModuleType, tmp_path: Path, model: str) -> None:
    """The b11434 CPU build loads such a file (vocab_size dummy tokens) and builds its context;
    only tokenizing a prompt then asserts."""
    change: Change = dict.fromkeys(TOKENIZER_KEYS) | {"tokenizer.ggml.model": (T.STRING, model, None)}
    assert read_gguf(str(_write(files, tmp_path, "llama-q4_0", change))).vocab_size == 64


@pytest.mark.parametrize("model", ["none", "no_vocab"])
def test_a_tokenizer_without_a_vocabulary_needs_vocab_size(files: ModuleType, tmp_path: Path, model: str) -> None:
    """Without ``vocab_size`` the b11434 CPU build sizes the embedding by 0 and refuses the file
    ('token_embd.weight' has wrong shape; expected 1024, 0)."""
    change: Change = dict.fromkeys(TOKENIZER_KEYS) | {
        "tokenizer.ggml.model": (T.STRING, model, None),
        "llama.vocab_size": None,
    }
    with pytest.raises(EstimationError) as caught:
        read_gguf(str(_write(files, tmp_path, "llama-q4_0", change)))
    assert caught.value.where == "llama.vocab_size" and "required key missing" in caught.value.problem


def test_synthetic_headers_carry_a_tokenizer_without_a_vocabulary(tmp_path: Path) -> None:
    (path,) = write_gguf(tmp_path / "tiny.gguf", REAL_MODELS["llama-3.1-8b"])
    assert read_header(path).metadata["tokenizer.ggml.model"] == NO_TOKENIZER == "none"
    assert read_gguf(str(path)).vocab_size == REAL_MODELS["llama-3.1-8b"].vocab_size


def test_the_reader_keeps_each_key_s_gguf_type(files: ModuleType, tmp_path: Path) -> None:
    path = _write(files, tmp_path, "llama-q4_0", {"llama.feed_forward_length": (T.ARRAY, (2816,) * 4, T.UINT32)})
    types = read_header(path).key_types
    assert (types["llama.block_count"].value, types["llama.rope.freq_base"].value) == (T.UINT32, T.FLOAT32)
    assert (types["llama.feed_forward_length"].value, types["llama.feed_forward_length"].item) == (T.ARRAY, T.UINT32)
    assert types["tokenizer.ggml.tokens"].item == T.STRING
