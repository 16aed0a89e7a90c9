"""Shape + llama.cpp options -> MemoryProfile: KV cache per architecture, settings, compute buffer
structure, projectors, real model shapes. Exact numbers are worked out in the row comments."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import tiny_spec, write_projector, write_tiny

from layerfit.domain import Deployment, LlamaParams, MemoryProfile, ModelKind
from layerfit.errors import EstimationError, InputError
from layerfit.estimators import RuntimeCosts, estimate_profile, profile_for, read_gguf, resolve_settings
from layerfit.testing.arch_fixtures import arch_tensor_table
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

MiB = 1024**2
SSM = {"ssm_inner_size": 512, "ssm_state_size": 16, "ssm_conv_kernel": 4, "ssm_group_count": 1, "ssm_head_count": 8}

# The tiny model: 4 blocks, 2 KV heads of 64. One f16 cell of a layer: K 2*64*2 + V 2*64*2 = 512 B.
# Default options: ctx 8192, llama-server's 4 slots sharing a unified cache, ubatch 512, FA on.
KV_ROWS = [
    # id, model overrides, llama.cpp arguments, expected KV bytes per block
    ("f16, 8192 cells", {}, [], (512 * 8192,) * 4),
    ("ctx 5000 padded to 5120", {}, ["-c", "5000"], (512 * 5120,) * 4),
    # q8_0: 128 values = 4 blocks of 34 B = 136 B for K and for V
    ("q8_0 K and V", {}, ["-ctk", "q8_0", "-ctv", "q8_0"], (272 * 8192,) * 4),
    # q4_0 K: 4 blocks of 18 B = 72 B, V stays f16 (256 B)
    ("q4_0 K", {}, ["-ctk", "q4_0"], (328 * 8192,) * 4),
    # 4 streams of 2048 cells: still 8192 cells in all
    ("4 separate sequences", {}, ["-np", "4"], (512 * 8192,) * 4),
    # each stream's share is padded to 256: 3 x pad256(8192 / 3 = 2730) = 3 x 2816 = 8448 cells
    # (llama.cpp's KV buffer: 33.00 MiB for llama-q4_0, cpu-flags.csv rpc1np3)
    ("3 separate sequences", {}, ["-np", "3"], (512 * 8448,) * 4),
    ("5 sequences of 2048 cells", {}, ["-c", "2048", "-np", "5"], (512 * 5 * 512,) * 4),
    (
        "per-layer KV heads",  # openelm sizes each layer by its own counts (llama refuses them)
        {"architecture": "openelm", "metadata": {"{arch}.attention.head_count_kv": (2, 0, 2, 1)}},
        [],
        (4 * MiB, 0, 4 * MiB, 2 * MiB),
    ),
    # gemma3, window 128, period 6: blocks 0-4 slide. One sequence: pad256(min(8192, 128 + 512)) = 768 cells
    (
        "gemma3 one sequence",
        {"architecture": "gemma3", "block_count": 6, "sliding_window": 128},
        ["-np", "1"],
        (512 * 768,) * 5 + (512 * 8192,),
    ),
    # --swa-full: the sliding-window layers cache the whole context too (gemma-3-270m: KV 144.00 MiB
    # measured at 8192 cells against 39.00 without it, cpu-flags.csv rpc1swafull)
    (
        "gemma3 full-size window cache",
        {"architecture": "gemma3", "block_count": 6, "sliding_window": 128},
        ["-np", "1", "--swa-full"],
        (512 * 8192,) * 6,
    ),
    (
        "gemma3 full-size window cache, two streams",
        {"architecture": "gemma3", "block_count": 6, "sliding_window": 128},
        ["-np", "2", "--swa-full"],
        (512 * 8192,) * 6,
    ),
    # four unified slots: pad256(128 * 4 + 512) = 1024 cells
    (
        "gemma3 four slots",
        {"architecture": "gemma3", "block_count": 6, "sliding_window": 128},
        [],
        (512 * 1024,) * 5 + (512 * 8192,),
    ),
    # two separate sequences: 2 x pad256(min(4096, 128 + 512)) = 1536 cells
    (
        "gemma3 two streams",
        {"architecture": "gemma3", "block_count": 6, "sliding_window": 128},
        ["-np", "2"],
        (512 * 1536,) * 5 + (512 * 8192,),
    ),
    (
        "gemma2 every other layer",
        {"architecture": "gemma2", "sliding_window": 128, "tied_embeddings": True},
        ["-np", "1"],
        (512 * 768, 512 * 8192) * 2,
    ),
    (
        "gpt-oss every other layer",
        {"architecture": "gpt-oss", "sliding_window": 128},
        ["-np", "1"],
        (512 * 768, 512 * 8192) * 2,
    ),
    ("phi3 ignores its window", {"architecture": "phi3", "sliding_window": 128}, ["-np", "1"], (512 * 8192,) * 4),
    # MLA: one K-only latent row of kv_lora_rank + rope = 64 + 32 = 96 f16 values = 192 B
    (
        "deepseek2 latent cache",
        {"architecture": "deepseek2", "kv_lora_rank": 64, "rope_dim": 32, "head_dim": 96, "value_dim": 64},
        [],
        (192 * 8192,) * 4,
    ),
    # Mamba-2 state per sequence: conv (4 - 1) * (512 + 2 * 1 * 16) = 1632, ssm 16 * 512 = 8192 floats
    (
        "mamba2 state, 4 slots",
        {"architecture": "mamba2", "feed_forward_length": 0, **SSM},
        [],
        ((1632 + 8192) * 4 * 4,) * 4,
    ),
    (
        "mamba2 state, 1 sequence",
        {"architecture": "mamba2", "feed_forward_length": 0, **SSM},
        ["-np", "1"],
        ((1632 + 8192) * 4,) * 4,
    ),
    (
        "granitehybrid: state or KV per layer",
        {"architecture": "granitehybrid", "attention_layers": (1, 3), **SSM},
        ["-np", "1"],
        ((1632 + 8192) * 4, 512 * 8192) * 2,
    ),
    ("bert keeps no cache", {"architecture": "bert", "encoder": True}, [], (0,) * 4),
    (  # an architecture that builds next-token blocks (llama does not, and refuses the last block's tensors)
        "prediction-only last block",
        {"architecture": "exaone4", "metadata": {"{arch}.nextn_predict_layers": 1}},
        [],
        (512 * 8192,) * 3 + (0,),
    ),
    ("two shared-KV blocks", {"metadata": {"{arch}.attention.shared_kv_layers": 2}}, [], (512 * 8192,) * 2 + (0, 0)),
    ("nomic-bert keeps no cache", {"architecture": "nomic-bert", "encoder": True}, [], (0,) * 4),
    ("qwen2 with biases", {"architecture": "qwen2", "attention_bias": True}, [], (512 * 8192,) * 4),
    ("qwen3 with q/k norms", {"architecture": "qwen3", "qk_norm": True}, [], (512 * 8192,) * 4),
    ("mistral-style window ignored", {"sliding_window": 128}, [], (512 * 8192,) * 4),
    ("command-r", {"architecture": "command-r", "tied_embeddings": True}, [], (512 * 8192,) * 4),
    ("unknown architecture", {"architecture": "mystery"}, [], (512 * 8192,) * 4),
]


@pytest.mark.parametrize(("overrides", "args", "expected"), [r[1:] for r in KV_ROWS], ids=[r[0] for r in KV_ROWS])
def test_kv_cache_per_block(
    tmp_path: Path, overrides: dict[str, object], args: list[str], expected: tuple[int, ...]
) -> None:
    spec = tiny_spec(**overrides)
    path = tmp_path / "tiny.gguf"
    fused = arch_tensor_table(spec) if spec.architecture == "phi3" else None  # phi3 stacks gate and up in ffn_up
    write_gguf(path, spec, tokenizer=True, tensors=fused)
    shape = read_gguf(str(path))
    profile = estimate_profile(shape, LlamaParams.from_args(args))
    assert profile.block_kv_bytes == expected
    assert profile.block_weight_bytes == shape.block_bytes


def test_warnings_name_what_was_not_honoured(tmp_path: Path) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", architecture="mystery")))
    profile = estimate_profile(shape, LlamaParams.from_args(["-c", "10000", "-fa", "off"]))
    assert any("'mystery' is not modelled" in w for w in profile.warnings)
    assert any("ctx 10000 exceeds the trained context 4096" in w for w in profile.warnings)


@pytest.mark.parametrize(
    ("overrides", "args", "flag", "words"),
    [
        # llama.cpp: "quantized V cache requires flash_attn to be enabled" (unable to create context)
        ({}, ["-fa", "off", "-ctv", "q8_0"], "-ctv", "needs flash attention"),
        ({}, ["-fa", "off", "-ctk", "q4_0", "-ctv", "q4_0"], "-ctv", "needs flash attention"),
        # "model does not support different K (q8_0) and V (f16) cache types" (deepseek2, MLA)
        (
            {"architecture": "deepseek2", "kv_lora_rank": 64, "rope_dim": 32, "head_dim": 96, "value_dim": 64},
            ["-ctk", "q8_0"],
            "-ctk",
            r"different K \(q8_0\) and V \(f16\)",
        ),
        # "K cache type q8_0 with block size 32 does not divide n_embd_head_k=80"
        ({"head_dim": 80}, ["-ctk", "q8_0"], "-ctk", "does not divide the head width 80"),
        ({"head_dim": 80}, ["-ctv", "q4_0", "-ctk", "f16"], "-ctv", "does not divide the head width 80"),
    ],
)
def test_cache_types_llama_cpp_refuses_are_refused(
    tmp_path: Path, overrides: dict[str, object], args: list[str], flag: str, words: str
) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", **overrides)))
    with pytest.raises(InputError, match=words) as refused:
        estimate_profile(shape, LlamaParams.from_args(args))
    assert refused.value.field == flag


@pytest.mark.parametrize(
    ("overrides", "args"),
    [
        ({}, ["-fa", "off", "-ctk", "q8_0"]),  # a quantized K needs no flash attention (measured: rpc1kq8fa0)
        ({}, ["-ctk", "q8_0", "-ctv", "q8_0"]),  # -fa auto: llama.cpp turns flash attention on
        ({"head_dim": 80}, ["-fa", "off", "-ctk", "q8_0"]),  # the block check runs only with flash attention
        (
            {"architecture": "deepseek2", "kv_lora_rank": 64, "rope_dim": 32, "head_dim": 96, "value_dim": 64},
            ["-ctk", "q8_0", "-ctv", "q8_0"],
        ),
    ],
)
def test_cache_types_llama_cpp_accepts_are_estimated(
    tmp_path: Path, overrides: dict[str, object], args: list[str]
) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", **overrides)))
    assert sum(estimate_profile(shape, LlamaParams.from_args(args)).block_kv_bytes) > 0


@pytest.mark.parametrize(
    ("kind", "overrides", "args", "expected"),
    [
        # a language model: ubatch 512, batch 2048, 4 unified slots
        (ModelKind.LLM, {}, [], (8192, 2048, 512, 4, True, False)),
        (ModelKind.LLM, {}, ["-ub", "4096", "-b", "1024"], (8192, 1024, 1024, 4, True, False)),  # ubatch <= batch
        (ModelKind.LLM, {}, ["-np", "2"], (8192, 2048, 512, 2, False, False)),
        # embedding runs put a whole input in one micro-batch: ubatch = batch = ctx
        (ModelKind.EMBEDDING, {}, ["-c", "4096"], (4096, 4096, 4096, 4, True, True)),
        # llama-embedding ignores -ub and raises -b to the context (measured: a causal qwen3 at -c 4096 -ub 1024
        # reserves 4096 tokens; bert at -c 1024 -b 256 logs 'setting batch size to 1024')
        (ModelKind.EMBEDDING, {}, ["-c", "4096", "-ub", "1024"], (4096, 4096, 4096, 4, True, True)),
        (
            ModelKind.LLM,
            {"architecture": "bert", "encoder": True},
            ["-c", "1024", "-b", "256"],
            (1024, 1024, 1024, 4, True, True),
        ),
        # a causal model's batch is at most the context (measured: -c 100 reserves 100 tokens)
        (ModelKind.LLM, {}, ["-c", "100"], (100, 100, 100, 4, True, False)),
        (ModelKind.LLM, {}, ["-c", "1000", "-ub", "1024"], (1000, 1000, 1000, 4, True, False)),
        (ModelKind.LLM, {}, ["-b", "256"], (8192, 256, 256, 4, True, False)),  # -b below -ub caps it
        (ModelKind.LLM, {"architecture": "bert", "encoder": True}, ["-c", "2048"], (2048, 2048, 2048, 4, True, True)),
    ],
)
def test_settings(
    tmp_path: Path, kind: ModelKind, overrides: dict[str, object], args: list[str], expected: tuple[object, ...]
) -> None:
    shape = read_gguf(str(write_tiny(tmp_path, data="header", **overrides)))
    settings, _ = resolve_settings(shape, LlamaParams.from_args(args), kind, RuntimeCosts())
    assert (
        settings.ctx,
        settings.n_batch,
        settings.n_ubatch,
        settings.n_seq,
        settings.unified_kv,
        settings.embedding,
    ) == expected


def _llama8b(tmp_path: Path) -> str:
    path = tmp_path / "llama8b.gguf"
    write_gguf(path, REAL_MODELS["llama-3.1-8b"])
    return str(path)


def test_compute_buffers_of_a_llama_8b(tmp_path: Path) -> None:
    profile = estimate_profile(_llama8b(tmp_path), LlamaParams.from_args(["-np", "1"]))
    # ub 512: E = 4096*512*4 = 8 MiB, F3 = 3*14336*512*4 = 84 MiB, mask m = 8192*512*2 = 8 MiB,
    # logits L = 128256*512*4 = 250.5 MiB
    e, f3, m, logits = 8 * MiB, 84 * MiB, 8 * MiB, 128256 * 512 * 4
    assert profile.main.compute.full_offload_bytes == m + 6 * e + f3  # a layer's peak
    assert profile.main.compute.multi_device_bytes == m + 6 * e + f3 + e + 3 * m  # 4 copies of the inputs
    assert profile.main.compute.partial_offload_bytes == m + 6 * e + f3
    assert profile.output_compute_bytes == logits - 2 * e - f3  # the output device peaks at L + 4E + m
    assert profile.first_device_compute_bytes == 9 * e
    assert profile.host_compute.full_offload_bytes == 4 * e + m
    assert profile.host_compute.multi_device_bytes == 10 * e + 4 * m
    assert profile.host_output_compute_bytes == logits + e  # a CPU-only run computes the logits itself
    assert profile.main.fixed_bytes == 620 * MiB  # all matrices quantized, flash attention: no cuBLAS


def test_attention_scores_without_flash_attention_grow_with_context(tmp_path: Path) -> None:
    path = _llama8b(tmp_path)
    fa = estimate_profile(path, LlamaParams.from_args(["-c", "32768", "-np", "1"]))
    no_fa = estimate_profile(path, LlamaParams.from_args(["-c", "32768", "-np", "1", "-fa", "off"]))
    # scores F32 [32768 cells, 512 tokens, 32 heads] = 2 GiB, the F32 mask 64 MiB, 4E + QO = 32 + 16 MiB
    assert no_fa.main.compute.full_offload_bytes == 2048 * MiB + 64 * MiB + 48 * MiB
    assert fa.main.compute.full_offload_bytes < 512 * MiB


def test_embedding_runs_are_quadratic_in_context(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, data="header", architecture="bert", encoder=True, context_length=8192)
    small = estimate_profile(str(path), LlamaParams.from_args(["-c", "2048", "-fa", "off"]))
    large = estimate_profile(str(path), LlamaParams.from_args(["-c", "8192", "-fa", "off"]))
    # scores F32 [ctx, ctx, 4 heads]: 64 MiB at 2048, 1 GiB at 8192
    assert small.main.compute.full_offload_bytes > 64 * MiB
    assert large.main.compute.full_offload_bytes > 1024 * MiB
    assert large.output_compute_bytes == small.output_compute_bytes == 0  # no logits
    assert large.block_kv_bytes == (0,) * 4


def test_tied_embeddings_cost_nothing_more_on_the_host(tmp_path: Path) -> None:
    profile = estimate_profile(str(write_tiny(tmp_path, data="header", tied_embeddings=True)))
    # the output device copies token_embd (512,000 B) beside output_norm (1,024 B); the host reuses it
    assert profile.output_weight_bytes == 513_024
    assert profile.host_output_bytes == 1_024


def test_runtime_costs_are_configurable(tmp_path: Path) -> None:
    path = str(write_tiny(tmp_path, data="header"))
    default = estimate_profile(path)  # F16 matrices: cuBLAS
    assert default.main.fixed_bytes == default.rpc.fixed_bytes == default.local.fixed_bytes == 715 * MiB
    no_flash = estimate_profile(_llama8b(tmp_path), LlamaParams.from_args(["-fa", "off"]))
    assert no_flash.main.fixed_bytes == 715 * MiB
    cpu = estimate_profile(path, runtime=RuntimeCosts(backend="cpu"))
    assert cpu.rpc.fixed_bytes == 0
    custom = estimate_profile(path, runtime=RuntimeCosts(gpu_fixed_bytes=600 * MiB, rpc_host_fixed_bytes=MiB))
    assert custom.rpc.fixed_bytes == 600 * MiB
    assert custom.rpc_host_fixed_bytes == MiB


def test_projector_is_charged_to_the_main_gpu(tmp_path: Path) -> None:
    weights = write_projector(tmp_path / "mmproj.gguf")
    model = str(write_tiny(tmp_path, data="header"))
    profile = estimate_profile(model, LlamaParams(mmproj=str(tmp_path / "mmproj.gguf")))
    # (224 / 14)^2 = 256 patches: activations 256 * 64 * 4 * 8, F16 mask 256 * 256 * 2 (FA on)
    assert profile.extra_main_gpu_bytes == weights + 256 * 64 * 4 * 8 + 256 * 256 * 2
    assert any("projector" in w for w in profile.warnings)


def test_a_projector_is_not_a_model(tmp_path: Path) -> None:
    write_projector(tmp_path / "mmproj.gguf")
    with pytest.raises(EstimationError, match="pass it as --mmproj"):
        read_gguf(str(tmp_path / "mmproj.gguf"))


def test_profile_for_uses_the_given_profile_or_estimates(tmp_path: Path) -> None:
    given = MemoryProfile.uniform(4, 100, 10)
    assert profile_for(Deployment(name="given", profile=given)) is given
    path = str(write_tiny(tmp_path, data="header"))
    estimated = profile_for(Deployment(name="file", gguf_path=path, params=LlamaParams(ctx_size=4096)))
    assert estimated == estimate_profile(path, LlamaParams(ctx_size=4096))
    with pytest.raises(EstimationError):
        profile_for(Deployment(name="missing", gguf_path=str(tmp_path / "absent.gguf")))


# KV cache of real models at ctx 8192, f16, 4 unified slots (MiB), from their published shapes.
REAL_KV = [
    ("llama-3.2-1b", 16 * 16),  # 8 KV heads x 64 x 2 (K, V) x 2 B = 2 KiB per cell -> 16 MiB per block
    ("llama-3.1-8b", 32 * 32),  # 8 x 128 x 2 x 2 = 4 KiB per cell
    ("llama-3.1-70b", 80 * 32),
    ("llama-3.1-405b", 126 * 32),
    ("mixtral-8x7b", 32 * 32),
    ("qwen3-30b-a3b", 48 * 16),  # 4 KV heads x 128
    ("qwen3-235b-a22b", 94 * 16),
    ("deepseek-v3", 61 * 9),  # one 576-wide latent row: 1152 B per cell
    # 10 global layers of 64 MiB; 52 sliding layers of pad256(1024 * 4 + 512) = 4608 cells x 8 KiB
    ("gemma-3-27b", 10 * 64 + 52 * 36),
    # 18 full layers of 16 MiB; 18 sliding layers of pad256(128 * 4 + 512) = 1024 cells x 2 KiB
    ("gpt-oss-120b", 18 * 16 + 18 * 2),
]


@pytest.mark.parametrize(("name", "kv_mib"), REAL_KV, ids=[r[0] for r in REAL_KV])
def test_real_model_kv_cache(tmp_path: Path, name: str, kv_mib: int) -> None:
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, REAL_MODELS[name])
    profile = estimate_profile(str(path))
    assert sum(profile.block_kv_bytes) == kv_mib * MiB
    assert profile.n_blocks == REAL_MODELS[name].block_count
