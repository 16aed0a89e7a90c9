"""Small decoder models for the architectures measured after the first fifteen (``arch_fixtures``).

Each spec keeps its architecture's real structure at narrow widths, with the tensor set and keys
llama.cpp's loader requires (``src/models/*.cpp`` of the measured build): mistral3 with query
heads wider than the hidden state, gemma with one KV head and tied output, granite with its four
scaling keys, qwen2moe with routed experts, a shared expert and its sigmoid gate, olmoe with
full-width QK norms and the expert width in ``feed_forward_length``, exaone4 with post-norms only
(64 blocks: llama.cpp enables its 3:1 sliding window for 64-block files only; a 4-block file with
a window key shows the window ignored), llama4 with MoE every second block, a shared expert and
8192-token chunked attention whatever the file's window, gemma3n with 24 blocks (llama.cpp gives
the first 20 their own cache), per-layer token embeddings and projections, AltUp and LAuReL.
``MODELS`` joins ``arch_fixtures.ARCH_MODELS``, ``EDITS`` its tensor edits.
"""

from __future__ import annotations

from collections.abc import Callable

from gguf import Keys

from layerfit.testing.arch_fixture_base import Table, without
from layerfit.testing.arch_spec import arch_spec
from layerfit.testing.synthetic import F32, ModelSpec, Q, TensorSpec

_spec = arch_spec
ALTUP_INPUTS, PER_LAYER_WIDTH, LAUREL_RANK = 4, 256, 64
"""gemma3n's AltUp streams, per-layer input width and LAuReL rank (fixed in llama.cpp)."""

_MOE: dict[str, object] = {"expert_count": 16, "expert_used_count": 4, "expert_feed_forward_length": 512}
_GRANITE_SCALES: dict[str, object] = {
    Keys.LLM.LOGIT_SCALE: 8.0,
    Keys.LLM.RESIDUAL_SCALE: 0.22,
    Keys.LLM.EMBEDDING_SCALE: 12.0,
    Keys.Attention.SCALE: 0.0078125,
}

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _spec("mistral3-q4_k", "mistral3", weight_type=Q.Q4_K, embedding_type=Q.Q6_K, head_count=16),
        _spec(
            "gemma-q8_0",
            "gemma",
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            head_count=4,
            head_count_kv=1,
            head_dim=256,
        ),
        _spec("granite-q8_0", "granite", weight_type=Q.Q8_0, tied_embeddings=True, metadata=_GRANITE_SCALES),
        _spec(
            "qwen2moe-q8_0",
            "qwen2moe",
            weight_type=Q.Q8_0,
            attention_bias=True,
            expert_shared_feed_forward_length=1024,
            **_MOE,
        ),
        _spec(
            "olmoe-q4_0",
            "olmoe",
            weight_type=Q.Q4_0,
            embedding_type=Q.Q8_0,
            head_count_kv=8,
            feed_forward_length=512,
            qk_norm=True,
            metadata={Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: None},
            **_MOE,
        ),
        _spec(
            "exaone4-q8_0",
            "exaone4",
            block_count=64,
            embedding_length=512,
            feed_forward_length=1024,
            head_count=4,
            head_count_kv=1,
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            qk_norm=True,
            sliding_window=256,
        ),
        _spec("exaone4-4l-q8_0", "exaone4", weight_type=Q.Q8_0, qk_norm=True, sliding_window=256),
        _spec(
            "llama4-q4_k",
            "llama4",
            weight_type=Q.Q4_K,
            embedding_type=Q.Q8_0,
            expert_shared_feed_forward_length=512,
            sliding_window=4096,  # llama.cpp ignores it: 8192-token chunks
            metadata={
                Keys.LLM.INTERLEAVE_MOE_LAYER_STEP: 2,
                Keys.LLM.EXPERT_SHARED_COUNT: None,
                Keys.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: None,  # the shared expert is as wide as a routed one
            },
            **_MOE,
        ),
        _spec(
            "gemma3n-q8_0",
            "gemma3n",
            block_count=24,
            embedding_length=512,
            feed_forward_length=2048,
            head_count=2,
            head_count_kv=1,
            head_dim=256,
            weight_type=Q.Q8_0,
            tied_embeddings=True,
            qk_norm=True,
            post_norms=True,
            sliding_window=512,
            metadata={
                Keys.Attention.SHARED_KV_LAYERS: 4,
                Keys.LLM.ALTUP_ACTIVE_IDX: 0,
                Keys.LLM.ALTUP_NUM_INPUTS: ALTUP_INPUTS,
                Keys.LLM.EMBD_LENGTH_PER_LAYER_INP: PER_LAYER_WIDTH,
            },
        ),
    )
}
"""Keyed by file name: architecture and weight type."""


def _qwen2moe(spec: ModelSpec, tensors: Table) -> Table:
    """q/k/v biases, and a one-row sigmoid gate on the shared expert after the router."""
    out: Table = []
    for tensor in without(tensors, "attn_output.bias"):
        out.append(tensor)
        if tensor.name.endswith("ffn_gate_inp.weight"):
            block = tensor.name.removesuffix("ffn_gate_inp.weight")
            out.append(TensorSpec(block + "ffn_gate_inp_shexp.weight", (spec.embedding_length,), F32))
    return out


def _olmoe(spec: ModelSpec, tensors: Table) -> Table:
    """QK norms over the whole projection (``n_embd``), not per head."""
    d = spec.embedding_length
    norms = ("q_norm.weight", "k_norm.weight")
    return [TensorSpec(t.name, (d,), F32) if t.name.endswith(norms) else t for t in tensors]


def _exaone4(spec: ModelSpec, tensors: Table) -> Table:
    """No pre-norms: a post-attention and a post-feed-forward norm per block."""
    out: Table = []
    for tensor in without(tensors, "attn_norm.weight", "ffn_norm.weight"):
        out.append(tensor)
        block = tensor.name.split(".")[1] if tensor.name.startswith("blk.") else ""
        if tensor.name.endswith("attn_output.weight"):
            out.append(TensorSpec(f"blk.{block}.post_attention_norm.weight", (spec.embedding_length,), F32))
        elif tensor.name.endswith("ffn_down.weight"):
            out.append(TensorSpec(f"blk.{block}.post_ffw_norm.weight", (spec.embedding_length,), F32))
    return out


def _llama4(spec: ModelSpec, tensors: Table) -> Table:
    """Dense feed-forward on even blocks, routed experts plus a shared expert on odd ones."""
    step = spec.metadata.get(Keys.LLM.INTERLEAVE_MOE_LAYER_STEP, 1)
    assert isinstance(step, int) and step > 0
    d, w, ff = spec.embedding_length, spec.weight_type, spec.feed_forward_length
    out: Table = []
    for tensor in tensors:
        if not tensor.name.startswith("blk."):
            out.append(tensor)
            continue
        block = int(tensor.name.split(".")[1])
        if (block + 1) % step == 0:
            out.append(tensor)
        elif "_exps" in tensor.name or "shexp" in tensor.name or "gate_inp" in tensor.name:
            if tensor.name.endswith("ffn_gate_exps.weight"):
                p = f"blk.{block}."
                out += [
                    TensorSpec(p + "ffn_gate.weight", (d, ff), w),
                    TensorSpec(p + "ffn_up.weight", (d, ff), w),
                    TensorSpec(p + "ffn_down.weight", (ff, d), w),
                ]
        else:
            out.append(tensor)
    return out


def _gemma3n(spec: ModelSpec, tensors: Table) -> Table:
    """Per-layer token embeddings (an input), AltUp projections (output layer), a per-layer input
    projection loaded with block 0, and each block's per-layer gate, AltUp and LAuReL tensors."""
    d, w, n, a, r = spec.embedding_length, spec.weight_type, spec.block_count, ALTUP_INPUTS, PER_LAYER_WIDTH
    globals_: Table = [
        TensorSpec("per_layer_token_embd.weight", (r * n, spec.vocab_size), w),
        TensorSpec("altup_proj.weight", (d, d, a - 1), w),
        TensorSpec("altup_unembd_proj.weight", (d, d, a - 1), w),
        TensorSpec("per_layer_model_proj.weight", (d, r * n), w),
        TensorSpec("per_layer_proj_norm.weight", (r,), F32),
    ]
    out: Table = [tensors[0], *globals_[:1]]
    for tensor in tensors[1:]:
        out.append(tensor)
        if tensor.name == "output_norm.weight":
            out += globals_[1:]
        elif tensor.name.endswith("post_ffw_norm.weight"):
            p = tensor.name.removesuffix("post_ffw_norm.weight")
            out += [
                TensorSpec(p + "inp_gate.weight", (d, r), w),
                TensorSpec(p + "proj.weight", (r, d), w),
                TensorSpec(p + "post_norm.weight", (d,), F32),
                TensorSpec(p + "altup_correct_coef.weight", (a, a), F32),
                TensorSpec(p + "altup_correct_scale.weight", (d,), F32),
                TensorSpec(p + "altup_predict_coef.weight", (a, a * a), F32),
                TensorSpec(p + "altup_router.weight", (d, a), w),
                TensorSpec(p + "altup_router_norm.weight", (d,), F32),
                TensorSpec(p + "laurel_l.weight", (d, LAUREL_RANK), w),
                TensorSpec(p + "laurel_r.weight", (LAUREL_RANK, d), w),
                TensorSpec(p + "laurel_post_norm.weight", (d,), F32),
            ]
    return out


EDITS: dict[str, Callable[[ModelSpec, Table], Table]] = {
    "qwen2moe": _qwen2moe,
    "olmoe": _olmoe,
    "exaone4": _exaone4,
    "llama4": _llama4,
    "gemma3n": _gemma3n,
}
