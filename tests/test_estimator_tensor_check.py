"""Metadata that contradicts the tensors is refused as llama.cpp refuses it at load, and every real
or measured model is still accepted (``estimators.tensor_check``).

``gguf_fixtures/ground_truth/cpu-contradictions.csv`` holds what the real llama.cpp CPU build did
with each crafted file (``benchmarks/contradiction_truth.py``).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from fixtures_gguf import GROUND_TRUTH_DIR, gemma_270m_path, write_tiny

from layerfit.cli import EXIT_BAD_INPUT, main
from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf
from layerfit.testing.arch_fixtures import ARCH_MODELS, write_arch_model
from layerfit.testing.contradiction_fixtures import CONTRADICTIONS, LOADABLE, write_contradiction
from layerfit.testing.synthetic import GROUND_TRUTH_MODELS, REAL_MODELS, write_gguf

TRUTH = GROUND_TRUTH_DIR / "cpu-contradictions.csv"


def _expanded(template: str, model: str) -> str:
    return template.format(arch=ARCH_MODELS[model].architecture)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every crafted file, header-only, written once."""
    directory = tmp_path_factory.mktemp("contradictions")
    return {name: write_contradiction(directory, name, case) for name, case in {**CONTRADICTIONS, **LOADABLE}.items()}


def _recorded() -> dict[str, dict[str, str]]:
    with open(TRUTH, newline="") as handle:
        return {row["case"]: row for row in csv.DictReader(handle)}


@pytest.mark.parametrize("name", sorted(CONTRADICTIONS))
def test_a_contradicting_file_is_refused_naming_key_tensor_and_values(written: dict[str, Path], name: str) -> None:
    case = CONTRADICTIONS[name]
    with pytest.raises(EstimationError) as caught:
        read_gguf(str(written[name]))
    error = caught.value
    assert error.where == _expanded(case.key, case.model), str(error)
    assert case.tensor in error.problem and "llama.cpp refuses" in error.problem, str(error)
    values = [*_values(case.metadata), *([case.vocab_size] if case.vocab_size else []), case.tokenizer_model]
    values = [value for value in values if value != ""]
    assert not values or any(str(value) in error.problem for value in values), str(error)


def _values(metadata: dict[str, int | float | str | tuple[int, ...] | None]) -> list[int | float | str]:
    """The values written, or the words of a missing key's refusal."""
    values: list[int | float | str] = []
    for value in metadata.values():
        values += list(value) if isinstance(value, tuple) else [value] if value is not None else ["missing"]
    return values


def test_the_estimator_refuses_exactly_what_llama_cpp_refused(written: dict[str, Path]) -> None:
    """Every crafted file was run through llama.cpp: refused (load error or assertion) or ran."""
    recorded = _recorded()
    assert set(recorded) == set(CONTRADICTIONS) | set(LOADABLE)
    for name, row in recorded.items():
        llama_refused = row["llama_exit"] != "0"
        assert llama_refused == (name in CONTRADICTIONS), row
        try:
            read_gguf(str(written[name]))
            refused = False
        except EstimationError:
            refused = True
        assert refused == llama_refused, (name, row["llama_error"])


def test_keys_llama_cpp_ignores_are_estimated_with_llama_cpp_numbers(written: dict[str, Path]) -> None:
    vocab = read_gguf(str(written["llama-vocab-size-key"]))
    assert vocab.vocab_size == ARCH_MODELS["llama-q4_0"].vocab_size  # the token list, not vocab_size 50000
    heads = read_gguf(str(written["qwen3-head-count-array"]))
    assert heads.head_count == (16,) * 4  # llama.cpp runs every qwen3 layer with layer 0's count
    assert any("varies by layer" in warning for warning in heads.warnings)
    experts = read_gguf(str(written["olmoe-expert-width-key"]))
    assert experts.expert_feed_forward_length == ARCH_MODELS["olmoe-q4_0"].feed_forward_length != 999


def test_keys_read_for_other_architectures_or_layers_are_ignored(written: dict[str, Path]) -> None:
    """Found by benchmarks/loader_diff.py: ``full_attention_interval`` is read by the qwen3next family
    only (layerfit made every other llama layer recurrent and refused its attn_k), and an encoder runs
    every layer with layer 0's KV heads (layerfit checked each block's attn_k by its own)."""
    llama = read_gguf(str(written["llama-full-attention-interval"]))
    assert llama.head_count_kv == (2,) * 4 and not any(llama.recurrent_layers)
    hybrid = read_gguf(str(written["granitehybrid-full-attention-interval"]))
    assert hybrid.recurrent_layers == (True, True, False, True, True, False)
    for name, heads in (("bert", 16), ("nomic-bert", 16), ("neo-bert", 16)):
        encoder = read_gguf(str(written[f"{name}-head-count-kv-array"]))
        assert encoder.head_count_kv == (heads,) * 4, name
        assert any("head_count_kv varies by layer" in warning for warning in encoder.warnings), name


def test_every_fixture_and_real_model_is_accepted(tmp_path: Path) -> None:
    """Architecture models (measured with llama.cpp, with their tokenizer), the ground-truth and
    catalogue models, and the real gemma-3-270m file."""
    paths = [write_arch_model(tmp_path, name) for name in ARCH_MODELS]
    for name, spec in {**GROUND_TRUTH_MODELS, **REAL_MODELS}.items():
        paths += write_gguf(tmp_path / f"{name}.gguf", spec)
    paths.append(gemma_270m_path())
    for path in paths:
        assert read_gguf(str(path)).block_count > 0, path


def test_blocks_past_llama_cpp_s_limit_are_refused(tmp_path: Path) -> None:
    """llama.cpp asserts ``0 < n_layer <= LLAMA_MAX_LAYERS`` (512) before it reads a tensor (b11434
    aborted on 513 tiny blocks); the estimator's own cap is 1,024."""
    with pytest.raises(EstimationError, match=r"block_count: 513 blocks, more than llama\.cpp's 512"):
        read_gguf(str(write_tiny(tmp_path, "many", data="header", block_count=513)))
    assert read_gguf(str(write_tiny(tmp_path, "most", data="header", block_count=512))).block_count == 512


def test_experts_used_per_block_are_read_as_the_graph_reads_them(written: dict[str, Path]) -> None:
    """An array of experts used per block: block 0's count is what every block's graph routes to,
    except where the architecture routes each block by its own (nemotron_h: the most of any)."""
    assert read_gguf(str(written["qwen3moe-experts-used-per-layer"])).expert_used_count == 4
    from layerfit.estimators.header_access import MetaReader
    from layerfit.estimators.shape import _experts_used

    for arch, expected in (("nemotron_h", 8), ("qwen3moe", 2)):
        meta = MetaReader("m.gguf", {f"{arch}.expert_used_count": (2, 8, 4)}, arch)
        assert _experts_used(meta, arch, 3) == expected


def test_tensors_beyond_block_count_are_refused_for_a_modelled_architecture(
    written: dict[str, Path], tmp_path: Path
) -> None:
    with pytest.raises(EstimationError, match=r"3 blocks, but the file has tensor 'blk\.3\."):
        read_gguf(str(written["llama-block-count-fewer"]))
    # an architecture the estimator does not model keeps them on the host, with a warning
    unknown = write_tiny(tmp_path, data="header", architecture="openelm", metadata={"{arch}.block_count": 3})
    assert any("beyond block_count 3" in warning for warning in read_gguf(str(unknown)).warnings)


def test_the_cli_exits_two_naming_the_key(capsys: pytest.CaptureFixture[str], written: dict[str, Path]) -> None:
    code = main(["estimate", str(written["llama-head-count"])])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and "Traceback" not in err, err
    assert "llama.attention.head_count: head_count 65536" in err and "blk.0.attn_q.weight" in err, err


def test_optional_architecture_keys_take_llama_cpp_s_values(written: dict[str, Path]) -> None:
    """An expert width per block sizes every qwen3moe block by block 0's (it was refused as 'expected an
    integer'); gemma2 without a window key gets llama.cpp's 4096."""
    assert read_gguf(str(written["qwen3moe-expert-width-array"])).expert_feed_forward_length == 512
    window = read_gguf(str(written["gemma2-window-missing"]))
    assert window.sliding_window == 4096 and window.swa_layers == (True, False, True, False)


def test_a_layer_s_kind_is_read_as_its_loader_reads_it(written: dict[str, Path]) -> None:
    """Found by benchmarks/loader_diff.py (seed 2): a nemotron_h layer with a feed-forward width is a
    feed-forward layer whatever its KV heads (layerfit wanted its attn_k; llama.cpp runs it, with a KV
    cache for layer 3 alone: 0.25 MiB), and a dense llama4 block's experts-used count is never read
    (layerfit refused block 2's 8 as routing more than block 0's 4; only blocks 1 and 3 have experts)."""
    hybrid = read_gguf(str(written["nemotron_h-ffn-layer-kv-heads"]))
    assert hybrid.head_count_kv == (0, 0, 0, 2, 0, 0) and not hybrid.recurrent_layers[5]
    from layerfit.domain import LlamaParams
    from layerfit.estimators import estimate_profile

    kv = estimate_profile(hybrid, LlamaParams(ctx_size=256, parallel=1)).block_kv_bytes
    assert (kv[3], kv[5]) == (256 * 2 * 128 * 2 * 2, 0)  # 256 cells of 2 heads of 128, K and V in f16
    assert read_gguf(str(written["llama4-experts-used-dense-block"])).expert_used_count == 4
