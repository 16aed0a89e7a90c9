"""Architecture models whose metadata contradicts their tensors, for the estimator's load checks.

Each entry of ``CONTRADICTIONS`` takes an ``ARCH_MODELS`` model's tensor table unchanged and
writes it under changed metadata (or a changed tokenizer), so that one hyperparameter disagrees with
the tensors that carry it. llama.cpp refuses every one of them at load; the estimator must refuse
them too, naming the key. ``LOADABLE`` are files with a key that disagrees with the tensors where
llama.cpp ignores that key, which must still be estimated (with llama.cpp's numbers).
``benchmarks/contradiction_truth.py`` runs both sets through the real llama.cpp.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from gguf import Keys

from layerfit.testing.arch_fixtures import ARCH_MODELS, TOKENIZER, arch_tensor_table
from layerfit.testing.synthetic import DataMode, write_gguf


class Contradiction(NamedTuple):
    model: str
    """The ``ARCH_MODELS`` entry whose tensors are kept."""
    metadata: dict[str, int | float | str | tuple[int, ...] | None]
    """Keys (``{arch}`` expanded) written instead of the model's own."""
    key: str
    """The key the estimator names (``{arch}`` expanded), or the tensor where the refusal is about one."""
    tensor: str = ""
    """A tensor the refusal names ("" where it names none)."""
    vocab_size: int = 0
    """A tokenizer of this many tokens instead of the model's (0: the model's)."""
    tokenizer_model: str = ""
    """``tokenizer.ggml.model`` instead of the test tokenizer ("": the test tokenizer)."""
    dropped: tuple[str, ...] = ()
    """Tensors left out of the model's table."""
    added: tuple[tuple[str, str], ...] = ()
    """Tensors added to the table: (name, the tensor whose shape and type it copies)."""
    reshaped: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """Tensors given another ggml shape: (name, shape)."""


CONTRADICTIONS: dict[str, Contradiction] = {
    "llama-head-count": Contradiction(
        "llama-q4_0", {Keys.Attention.HEAD_COUNT: 65536}, Keys.Attention.HEAD_COUNT, "blk.0.attn_q.weight"
    ),
    "llama-head-count-kv": Contradiction(
        "llama-q4_0", {Keys.Attention.HEAD_COUNT_KV: 4}, Keys.Attention.HEAD_COUNT_KV, "blk.0.attn_k.weight"
    ),
    "llama-key-length": Contradiction(
        "llama-q4_0",
        {Keys.Attention.KEY_LENGTH: 64, Keys.Attention.VALUE_LENGTH: 64},
        Keys.Attention.HEAD_COUNT,
        "blk.0.attn_q.weight",
    ),
    "llama-embedding-length": Contradiction(
        "llama-q4_0", {Keys.LLM.EMBEDDING_LENGTH: 2048}, Keys.LLM.EMBEDDING_LENGTH, "token_embd.weight"
    ),
    "llama-tokenizer": Contradiction(
        "llama-q4_0", {Keys.LLM.VOCAB_SIZE: None}, "tokenizer.ggml.tokens", "token_embd.weight", vocab_size=32768
    ),
    "llama-block-count-more": Contradiction("llama-q4_0", {Keys.LLM.BLOCK_COUNT: 6}, Keys.LLM.BLOCK_COUNT),
    "llama-block-count-fewer": Contradiction(
        "llama-q4_0", {Keys.LLM.BLOCK_COUNT: 3}, Keys.LLM.BLOCK_COUNT, "blk.3.attn_norm.weight"
    ),
    "llama-head-count-kv-array": Contradiction(
        "llama-q4_0", {Keys.Attention.HEAD_COUNT_KV: (2, 4, 2, 2)}, Keys.Attention.HEAD_COUNT_KV, "blk.1.attn_k.weight"
    ),
    "granitehybrid-head-count-array": Contradiction(
        "granitehybrid-q8_0",
        {Keys.Attention.HEAD_COUNT: (8, 8, 8, 8, 8, 16)},
        Keys.Attention.HEAD_COUNT,
        "blk.5.attn_q.weight",
    ),
    "phi3-fused-qkv": Contradiction(
        "phi-fused-q4_0", {Keys.Attention.HEAD_COUNT_KV: 2}, Keys.Attention.HEAD_COUNT, "blk.0.attn_qkv.weight"
    ),
    "qwen3moe-expert-count": Contradiction(
        "qwen3moe-q8_0", {Keys.LLM.EXPERT_COUNT: 32}, Keys.LLM.EXPERT_COUNT, "blk.0.ffn_gate_inp.weight"
    ),
    "qwen3moe-expert-width": Contradiction(
        "qwen3moe-q8_0",
        {Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: 256},
        Keys.LLM.EXPERT_FEED_FORWARD_LENGTH,
        "blk.0.ffn_up_exps.weight",
    ),
    "qwen3moe-experts-used": Contradiction(
        "qwen3moe-q8_0", {Keys.LLM.EXPERT_USED_COUNT: 20}, Keys.LLM.EXPERT_USED_COUNT
    ),
    "deepseek2-kv-lora-rank": Contradiction(
        "deepseek2-q8_0",
        {Keys.Attention.KV_LORA_RANK: 256, Keys.Attention.KEY_LENGTH: 320, Keys.Attention.VALUE_LENGTH: 256},
        Keys.Attention.KV_LORA_RANK,
        "blk.0.attn_kv_a_mqa.weight",
    ),
    "mamba2-state-size": Contradiction(
        "mamba2-f16", {Keys.SSM.STATE_SIZE: 64}, Keys.SSM.STATE_SIZE, "blk.0.ssm_conv1d.weight"
    ),
    "mamba2-inner-size": Contradiction(
        "mamba2-f16", {Keys.SSM.INNER_SIZE: 4096}, Keys.SSM.INNER_SIZE, "blk.0.ssm_out.weight"
    ),
    "granitehybrid-head-count-kv": Contradiction(
        "granitehybrid-q8_0",
        {Keys.Attention.HEAD_COUNT_KV: (0, 0, 2, 0, 0, 0)},
        Keys.Attention.HEAD_COUNT_KV,
        "blk.5.attn_k.weight",
    ),
    # what llama.cpp asserts against while reading the hyperparameters, before any tensor
    "llama-block-count-zero": Contradiction("llama-q4_0", {Keys.LLM.BLOCK_COUNT: 0}, Keys.LLM.BLOCK_COUNT),
    # keys of another GGUF type than llama.cpp reads them as, missing, or of the wrong length
    "llama-context-length-missing": Contradiction(
        "llama-q4_0", {Keys.LLM.CONTEXT_LENGTH: None}, Keys.LLM.CONTEXT_LENGTH
    ),
    "llama-rope-freq-base-integer": Contradiction("llama-q4_0", {Keys.Rope.FREQ_BASE: 10000}, Keys.Rope.FREQ_BASE),
    "llama-causal-integer": Contradiction("llama-q4_0", {Keys.Attention.CAUSAL: 1}, Keys.Attention.CAUSAL),
    "llama-name-integer": Contradiction("llama-q4_0", {Keys.General.NAME: 7}, Keys.General.NAME),
    "llama-feed-forward-array-length": Contradiction(
        "llama-q4_0", {Keys.LLM.FEED_FORWARD_LENGTH: (2816,) * 5}, Keys.LLM.FEED_FORWARD_LENGTH
    ),
    "llama-tokenizer-unknown": Contradiction("llama-q4_0", {}, Keys.Tokenizer.MODEL, tokenizer_model="sentencepiece"),
    # keys an architecture's own loader requires, or reads as one type
    "mistral3-rms-epsilon-missing": Contradiction(
        "mistral3-q4_k", {Keys.Attention.LAYERNORM_RMS_EPS: None}, Keys.Attention.LAYERNORM_RMS_EPS
    ),
    "phi3-rms-epsilon-string": Contradiction(
        "phi-fused-q4_0", {Keys.Attention.LAYERNORM_RMS_EPS: "1e-06"}, Keys.Attention.LAYERNORM_RMS_EPS
    ),
    "gemma2-rms-epsilon-negative": Contradiction(
        "gemma2-q8_0", {Keys.Attention.LAYERNORM_RMS_EPS: -1.0}, Keys.Attention.LAYERNORM_RMS_EPS
    ),
    "cohere2-logit-scale-missing": Contradiction("cohere2-q8_0", {Keys.LLM.LOGIT_SCALE: None}, Keys.LLM.LOGIT_SCALE),
    "llama4-interleave-step-missing": Contradiction(
        "llama4-q4_k", {Keys.LLM.INTERLEAVE_MOE_LAYER_STEP: None}, Keys.LLM.INTERLEAVE_MOE_LAYER_STEP
    ),
    "gpt-oss-expert-width-array": Contradiction(
        "gpt-oss-mxfp4", {Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: (1024,) * 5}, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH
    ),
    # tensors llama.cpp requires, or never loads, and the keys that size them
    "qwen3-attn-q-missing": Contradiction("qwen3-f16", {}, "blk.2.attn_q.weight", dropped=("blk.2.attn_q.weight",)),
    "deepseek2-expert-down-missing": Contradiction(
        "deepseek2-q8_0",
        {},
        "blk.2.ffn_down_exps.weight",
        dropped=("blk.2.ffn_down_exps.weight",),
    ),
    "llama-token-embd-missing": Contradiction("llama-q4_0", {}, "token_embd.weight", dropped=("token_embd.weight",)),
    "gpt-oss-output-missing": Contradiction("gpt-oss-mxfp4", {}, "output.weight", dropped=("output.weight",)),
    "gemma2-output-added": Contradiction(
        "gemma2-q8_0", {}, "output.weight", added=(("output.weight", "token_embd.weight"),)
    ),
    "gpt-oss-output-bias-missing": Contradiction(
        "gpt-oss-mxfp4", {}, "blk.1.attn_output.bias", dropped=("blk.1.attn_output.bias",)
    ),
    "llama-nextn-block": Contradiction("llama-q4_0", {Keys.LLM.NEXTN_PREDICT_LAYERS: 1}, Keys.LLM.NEXTN_PREDICT_LAYERS),
    "mistral3-attn-k-extra-axis": Contradiction(
        "mistral3-q4_k", {}, "blk.0.attn_k.weight", reshaped=(("blk.0.attn_k.weight", (1024, 256, 2)),)
    ),
    "llama-ffn-norm-width": Contradiction(
        "llama-q4_0",
        {},
        Keys.LLM.EMBEDDING_LENGTH,
        "blk.0.ffn_norm.weight",
        reshaped=(("blk.0.ffn_norm.weight", (2048,)),),
    ),
    "qwen3moe-expert-down-width": Contradiction(
        "qwen3moe-q8_0",
        {},
        Keys.LLM.EMBEDDING_LENGTH,
        "blk.1.ffn_down_exps.weight",
        reshaped=(("blk.1.ffn_down_exps.weight", (512, 2048, 16)),),
    ),
    "llama4-head-count-missing": Contradiction(
        "llama4-q4_k", {Keys.Attention.HEAD_COUNT: None}, Keys.Attention.HEAD_COUNT, "attn_q.weight"
    ),
    "qwen3-feed-forward-length": Contradiction(
        "qwen3-f16", {Keys.LLM.FEED_FORWARD_LENGTH: 1408}, Keys.LLM.FEED_FORWARD_LENGTH, "blk.0.ffn_up.weight"
    ),
    "llama-nextn-layers": Contradiction(
        "llama-q4_0", {Keys.LLM.NEXTN_PREDICT_LAYERS: 5}, Keys.LLM.NEXTN_PREDICT_LAYERS
    ),
    "llama-rope-scaling": Contradiction("llama-q4_0", {Keys.Rope.SCALING_TYPE: "cubic"}, Keys.Rope.SCALING_TYPE),
    "llama-rope-dimension": Contradiction("llama-q4_0", {Keys.Rope.DIMENSION_COUNT: 64}, Keys.Rope.DIMENSION_COUNT),
    "qwen3-rope-dimension": Contradiction("qwen3-f16", {Keys.Rope.DIMENSION_COUNT: 64}, Keys.Rope.DIMENSION_COUNT),
    "llama-expert-groups": Contradiction("llama-q4_0", {Keys.LLM.EXPERT_GROUP_COUNT: 2}, Keys.LLM.EXPERT_GROUP_COUNT),
    "qwen3moe-expert-count-cap": Contradiction("qwen3moe-q8_0", {Keys.LLM.EXPERT_COUNT: 1025}, Keys.LLM.EXPERT_COUNT),
    "qwen3moe-experts-used-rising": Contradiction(
        "qwen3moe-q8_0", {Keys.LLM.EXPERT_USED_COUNT: (4, 2, 8, 4)}, Keys.LLM.EXPERT_USED_COUNT
    ),
    "qwen3moe-expert-groups": Contradiction(
        "qwen3moe-q8_0",
        {Keys.LLM.EXPERT_GROUP_COUNT: 3, Keys.LLM.EXPERT_GROUP_USED_COUNT: 1},
        Keys.LLM.EXPERT_GROUP_COUNT,
    ),
    "qwen3moe-expert-groups-used": Contradiction(
        "qwen3moe-q8_0",
        {Keys.LLM.EXPERT_GROUP_COUNT: 4, Keys.LLM.EXPERT_GROUP_USED_COUNT: 4},
        Keys.LLM.EXPERT_GROUP_USED_COUNT,
    ),
}
"""Files llama.cpp refuses at load, by the hyperparameter their tensors contradict or that passes
llama.cpp's own limits."""

LOADABLE: dict[str, Contradiction] = {
    "llama-vocab-size-key": Contradiction("llama-q4_0", {Keys.LLM.VOCAB_SIZE: 50000}, Keys.LLM.VOCAB_SIZE),
    "qwen3-head-count-array": Contradiction(
        "qwen3-f16", {Keys.Attention.HEAD_COUNT: (16, 16, 32, 16)}, Keys.Attention.HEAD_COUNT
    ),
    "gemma3-rope-dimension": Contradiction("gemma3-q4_k", {Keys.Rope.DIMENSION_COUNT: 64}, Keys.Rope.DIMENSION_COUNT),
    "olmoe-expert-width-key": Contradiction(
        "olmoe-q4_0", {Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: 999}, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH
    ),
    "qwen3moe-experts-used-per-layer": Contradiction(
        "qwen3moe-q8_0", {Keys.LLM.EXPERT_USED_COUNT: (4, 2, 4, 3)}, Keys.LLM.EXPERT_USED_COUNT
    ),
    "llama-rope-scaling-yarn": Contradiction("llama-q4_0", {Keys.Rope.SCALING_TYPE: "yarn"}, Keys.Rope.SCALING_TYPE),
    "qwen3moe-expert-groups-loadable": Contradiction(
        "qwen3moe-q8_0",
        {Keys.LLM.EXPERT_GROUP_COUNT: 4, Keys.LLM.EXPERT_GROUP_USED_COUNT: 2},
        Keys.LLM.EXPERT_GROUP_COUNT,
    ),
    # found by benchmarks/loader_diff.py: keys llama.cpp reads only for other architectures or layers
    "llama-full-attention-interval": Contradiction(
        "llama-q4_0", {Keys.LLM.FULL_ATTENTION_INTERVAL: 2}, Keys.LLM.FULL_ATTENTION_INTERVAL
    ),
    "granitehybrid-full-attention-interval": Contradiction(
        "granitehybrid-q8_0", {Keys.LLM.FULL_ATTENTION_INTERVAL: 4}, Keys.LLM.FULL_ATTENTION_INTERVAL
    ),
    "bert-head-count-kv-array": Contradiction(
        "bert-f16", {Keys.Attention.HEAD_COUNT_KV: (16, 8, 16, 16)}, Keys.Attention.HEAD_COUNT_KV
    ),
    "nomic-bert-head-count-kv-array": Contradiction(
        "nomic-bert-f16", {Keys.Attention.HEAD_COUNT_KV: (16, 16, 8, 16)}, Keys.Attention.HEAD_COUNT_KV
    ),
    "neo-bert-head-count-kv-array": Contradiction(
        "neo-bert-f16", {Keys.Attention.HEAD_COUNT_KV: (16, 16, 16, 8)}, Keys.Attention.HEAD_COUNT_KV
    ),
    # optional keys, and per-layer arrays of them
    "gemma2-window-missing": Contradiction(
        "gemma2-q8_0", {Keys.Attention.SLIDING_WINDOW: None}, Keys.Attention.SLIDING_WINDOW
    ),
    "qwen3moe-expert-width-array": Contradiction(
        "qwen3moe-q8_0", {Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: (512,) * 4}, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH
    ),
    "nemotron_h-ffn-layer-kv-heads": Contradiction(
        "nemotron_h-q8_0", {Keys.Attention.HEAD_COUNT_KV: (0, 0, 0, 2, 0, 1)}, Keys.Attention.HEAD_COUNT_KV
    ),
    "llama4-experts-used-dense-block": Contradiction(
        "llama4-q4_k", {Keys.LLM.EXPERT_USED_COUNT: (4, 4, 8, 4)}, Keys.LLM.EXPERT_USED_COUNT
    ),
    # optional tensors: a bias every other block has, an output projection gemma3n may carry
    "nomic-bert-moe-bias-missing": Contradiction(
        "nomic-bert-moe-f16", {}, "blk.2.attn_output.bias", dropped=("blk.2.attn_output.bias",)
    ),
    "gemma3n-output-added": Contradiction(
        "gemma3n-q8_0", {}, "output.weight", added=(("output.weight", "token_embd.weight"),)
    ),
}
"""Files whose key disagrees with the tensors where llama.cpp ignores the key: the tokenizer's
list sizes the vocabulary, qwen3 runs every layer with layer 0's head count, olmoe's experts
are as wide as ``feed_forward_length``, ``full_attention_interval`` is read by the qwen3next family
only, an encoder runs every layer with layer 0's KV heads; and files within llama.cpp's limits that
look odd: experts used per layer (an array), expert groups; and tensors a loader takes as optional."""


def write_contradiction(
    directory: str | os.PathLike[str], name: str, case: Contradiction, *, data: DataMode = "header"
) -> Path:
    """Write the case as ``directory/name.gguf``: its model's tensors under the changed metadata."""
    spec = ARCH_MODELS[case.model]
    tensors = [tensor for tensor in arch_tensor_table(spec) if tensor.name not in case.dropped]
    by_name = {tensor.name: tensor for tensor in tensors}
    tensors += [by_name[source]._replace(name=name) for name, source in case.added]
    shapes = dict(case.reshaped)
    tensors = [tensor._replace(shape=shapes.get(tensor.name, tensor.shape)) for tensor in tensors]
    changed = spec.model_copy(
        update={
            "metadata": {**spec.metadata, **case.metadata},
            "vocab_size": case.vocab_size or spec.vocab_size,
        }
    )
    path = Path(directory) / f"{name}.gguf"
    model = case.tokenizer_model or TOKENIZER
    write_gguf(path, changed, data=data, tokenizer=True, tensors=tensors, tokenizer_model=model)
    return path
