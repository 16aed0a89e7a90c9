"""Small GGUF models with the real structure of every architecture the estimator models.

Each entry of ``ARCH_MODELS`` is a few blocks at narrow widths with a small vocabulary, but with
the tensor set and metadata keys llama.cpp's loader requires for its architecture (checked
against ``src/models/*.cpp`` of the measured build): fused QKV and gate+up (phi3, nomic-bert),
tied-only output (gemma2, command-r, cohere2), MLA with a dense-first block and a shared expert
(deepseek2), alternating sliding windows with sinks and MXFP4 experts (gpt-oss), Mamba-2 layers
(mamba2) and Mamba-2/attention hybrids (granitehybrid), BERT-style encoders. The weights are
zeros: header-only files for the estimator, sparse full-size files for llama.cpp.
``write_arch_model`` writes one; ``benchmarks/llamacpp_truth.py --record`` measures them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gguf import Keys

from layerfit.testing import arch_fixtures_decoders
from layerfit.testing.arch_fixtures_recurrent import RECURRENT_MODELS, RECURRENT_TABLES
from layerfit.testing.arch_fixtures_variants import variant_models
from layerfit.testing.arch_spec import MAMBA2, NORM_EPS, arch_spec
from layerfit.testing.synthetic import F32, DataMode, ModelSpec, Q, TensorSpec, tensor_table, write_gguf
from layerfit.testing.synthetic_spec import loader_table

TOKENIZER = "test"
"""llama.cpp's hashing tokenizer: any prompt tokenizes, no merges or special tokens needed."""

ARCH_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        arch_spec("llama-q4_0", "llama", weight_type=Q.Q4_0, embedding_type=Q.Q8_0),
        arch_spec("qwen2-q8_0", "qwen2", weight_type=Q.Q8_0, attention_bias=True, tied_embeddings=True),
        arch_spec("qwen3-f16", "qwen3", weight_type=Q.F16, head_count=16, qk_norm=True),
        arch_spec(
            "qwen3moe-q8_0",
            "qwen3moe",
            weight_type=Q.Q8_0,
            qk_norm=True,
            expert_count=16,
            expert_used_count=4,
            expert_feed_forward_length=512,
        ),
        arch_spec(
            "gemma2-q8_0",
            "gemma2",
            block_count=4,
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            post_norms=True,
            sliding_window=256,
            head_count_kv=4,
        ),
        arch_spec(
            "gemma3-q4_k",
            "gemma3",
            block_count=6,
            weight_type=Q.Q4_K,
            embedding_type=Q.Q8_0,
            tied_embeddings=True,
            post_norms=True,
            qk_norm=True,
            sliding_window=256,
            head_count_kv=4,
        ),
        arch_spec("phi-fused-q4_0", "phi3", weight_type=Q.Q4_0, embedding_type=Q.Q8_0, head_count_kv=8),
        arch_spec("command-r-f16", "command-r", weight_type=Q.F16, tied_embeddings=True, metadata=NORM_EPS),
        arch_spec(
            "cohere2-q8_0",
            "cohere2",
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            sliding_window=256,
            metadata={**NORM_EPS, Keys.LLM.LOGIT_SCALE: 0.25},
        ),
        arch_spec(
            "deepseek2-q8_0",
            "deepseek2",
            weight_type=Q.Q8_0,
            head_count_kv=8,
            head_dim=192,
            value_dim=128,
            q_lora_rank=384,
            kv_lora_rank=512,
            rope_dim=64,
            expert_count=16,
            expert_used_count=4,
            expert_feed_forward_length=512,
            expert_shared_feed_forward_length=512,
            leading_dense_block_count=1,
        ),
        arch_spec(
            "gpt-oss-mxfp4",
            "gpt-oss",
            weight_type=Q.F16,
            expert_type=Q.MXFP4,
            feed_forward_length=0,
            head_count=16,
            head_count_kv=4,
            head_dim=64,
            expert_count=16,
            expert_used_count=4,
            expert_feed_forward_length=1024,
            sliding_window=128,
            attention_bias=True,
        ),
        arch_spec("mamba2-f16", "mamba2", weight_type=Q.F16, feed_forward_length=0, **MAMBA2),
        arch_spec(
            "granitehybrid-q8_0",
            "granitehybrid",
            block_count=6,
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            attention_layers=(2, 5),
            **MAMBA2,
        ),
        arch_spec(
            "bert-f16",
            "bert",
            weight_type=Q.F16,
            head_count=16,
            head_count_kv=16,
            head_dim=64,
            feed_forward_length=4096,
            vocab_size=30522,
            context_length=2048,
            encoder=True,
            metadata={**NORM_EPS, Keys.Tokenizer.TOKEN_TYPE_COUNT: 2},
        ),
        arch_spec(
            "nomic-bert-f16",
            "nomic-bert",
            weight_type=Q.F16,
            head_count=16,
            head_count_kv=16,
            head_dim=64,
            feed_forward_length=3072,
            vocab_size=30522,
            context_length=2048,
            encoder=True,
            metadata={**NORM_EPS, Keys.Tokenizer.TOKEN_TYPE_COUNT: 2},
        ),
    )
} | RECURRENT_MODELS | arch_fixtures_decoders.MODELS
ARCH_MODELS |= variant_models(ARCH_MODELS)
"""One small model per modelled architecture, keyed by file name (architecture and weight type; the
phi3 model is not named "phi3", a name llama.cpp's vocabulary loader keys special tokens on)."""


# ---------------------------------------------------------------------------------------------
# Architecture-specific tensor sets, starting from the generic llama-style table
# ---------------------------------------------------------------------------------------------

Table = list[TensorSpec]


def _without(tensors: Table, *suffixes: str) -> Table:
    return [t for t in tensors if not t.name.endswith(suffixes)]


def _fused(tensors: Table, parts: tuple[str, ...], fused: str) -> Table:
    """Replace each block's ``parts`` (same row length) by one tensor of their stacked rows."""
    out: Table = []
    for tensor in tensors:
        prefix, _, suffix = tensor.name.rpartition(".")
        prefix, _, leaf = prefix.rpartition(".")
        if leaf not in parts or suffix != "weight":
            out.append(tensor)
            continue
        if leaf != parts[0]:
            continue
        rows = sum(t.shape[1] for t in tensors if t.name in {f"{prefix}.{p}.weight" for p in parts})
        out.append(TensorSpec(f"{prefix}.{fused}.weight", (tensor.shape[0], rows), tensor.ggml_type))
    return out


def _renamed(tensors: Table, old: str, new: str) -> Table:
    return [TensorSpec(t.name.replace(old, new), t.shape, t.ggml_type) for t in tensors]


def _qwen2(spec: ModelSpec, tensors: Table) -> Table:
    return _without(tensors, "attn_output.bias")  # q/k/v biases only


def _phi3(spec: ModelSpec, tensors: Table) -> Table:
    tensors = _fused(tensors, ("attn_q", "attn_k", "attn_v"), "attn_qkv")
    return _fused(tensors, ("ffn_gate", "ffn_up"), "ffn_up")  # gate and up stacked in ffn_up


def _cohere(spec: ModelSpec, tensors: Table) -> Table:
    return _without(tensors, "ffn_norm.weight")  # one norm feeds attention and feed-forward in parallel


def _gpt_oss(spec: ModelSpec, tensors: Table) -> Table:
    return _renamed(tensors, ".ffn_norm.", ".post_attention_norm.")


def _encoder(spec: ModelSpec, tensors: Table) -> Table:
    """BERT (learned positions, separate Q/K/V) and nomic-bert (rope, fused QKV, gated FFN)."""
    nomic = spec.architecture == "nomic-bert"
    d, w, ff = spec.embedding_length, spec.weight_type, spec.feed_forward_length
    table: Table = [TensorSpec("token_embd.weight", (d, spec.vocab_size), w)]
    table.append(TensorSpec("token_types.weight", (d, 2), F32))
    if not nomic:
        table.append(TensorSpec("position_embd.weight", (d, spec.context_length), F32))
    table += [TensorSpec("token_embd_norm.weight", (d,), F32), TensorSpec("token_embd_norm.bias", (d,), F32)]
    for block in range(spec.block_count):
        p = f"blk.{block}."
        if nomic:
            table.append(TensorSpec(p + "attn_qkv.weight", (d, 3 * d), w))
        else:
            for name in ("attn_q", "attn_k", "attn_v"):
                table += [TensorSpec(p + name + ".weight", (d, d), w), TensorSpec(p + name + ".bias", (d,), F32)]
        table += [TensorSpec(p + "attn_output.weight", (d, d), w), TensorSpec(p + "attn_output.bias", (d,), F32)]
        table += [TensorSpec(p + f"attn_output_norm.{s}", (d,), F32) for s in ("weight", "bias")]
        table.append(TensorSpec(p + "ffn_up.weight", (d, ff), w))
        if nomic:
            table.append(TensorSpec(p + "ffn_gate.weight", (d, ff), w))
        else:
            table.append(TensorSpec(p + "ffn_up.bias", (ff,), F32))
        table.append(TensorSpec(p + "ffn_down.weight", (ff, d), w))
        if not nomic:
            table.append(TensorSpec(p + "ffn_down.bias", (d,), F32))
        table += [TensorSpec(p + f"layer_output_norm.{s}", (d,), F32) for s in ("weight", "bias")]
    return table


_EDITS: dict[str, Callable[[ModelSpec, Table], Table]] = {
    "qwen2": _qwen2,
    "phi3": _phi3,
    "command-r": _cohere,
    "cohere2": _cohere,
    "gpt-oss": _gpt_oss,
    "bert": _encoder,
    "nomic-bert": _encoder,
    **arch_fixtures_decoders.EDITS,
}


def arch_tensor_table(spec: ModelSpec) -> Table:
    """The tensors llama.cpp's loader expects for the spec's architecture, in file order (none it never
    creates: a dense gpt-oss spec gets no dense feed-forward)."""
    if spec.architecture in RECURRENT_TABLES:
        return loader_table(spec, RECURRENT_TABLES[spec.architecture](spec))
    tensors = tensor_table(spec)
    edit = _EDITS.get(spec.architecture)
    return loader_table(spec, edit(spec, tensors) if edit is not None else tensors)


def write_arch_model(directory: str | os.PathLike[str], name: str, *, data: DataMode = "header") -> Path:
    """Write ``ARCH_MODELS[name]`` as ``directory/name.gguf`` (with the test tokenizer)."""
    spec = ARCH_MODELS[name]
    path = Path(directory) / f"{name}.gguf"
    write_gguf(path, spec, data=data, tokenizer=True, tensors=arch_tensor_table(spec), tokenizer_model=TOKENIZER)
    return path
