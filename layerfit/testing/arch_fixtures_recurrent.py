"""Small GGUF models of the recurrent, hybrid and encoder architectures the estimator models.

Like ``arch_fixtures``: a few blocks at narrow widths, zero weights, but each architecture's exact
tensor set and required keys (from ``src/models/*.cpp`` of the measured build):

* mamba: Mamba-1 layers (``ssm_x``, ``ssm_dt``, a ``d_state x d_inner`` ``ssm_a``, no groups);
* jamba: Mamba-1 layers with dt/B/C norms and attention layers, MoE on every other block;
* falcon-h1: every block runs a Mamba-2 mixer and attention side by side, then a gated FFN
  (``ffn_norm`` has no ``.weight`` suffix there);
* nemotron_h: three kinds of block (Mamba-2, attention, ungated FFN), told apart by per-layer
  ``head_count_kv`` and ``feed_forward_length``;
* nomic-bert-moe (MoE every second block), jina-bert-v2 (ALiBi, separate biased Q/K/V, gated
  FFN), modern-bert (fused QKV, gate and up fused in ``ffn_up``, symmetric sliding windows) and
  neo-bert (fused QKV, fused gate+up, RMS norms): encoders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gguf import Keys

from layerfit.testing.arch_spec import MAMBA2, NORM_EPS, arch_spec
from layerfit.testing.synthetic import F32, ModelSpec, Q, TensorSpec

Table = list[TensorSpec]
_TOKEN_TYPES: dict[str, object] = {**NORM_EPS, Keys.Tokenizer.TOKEN_TYPE_COUNT: 2}


_MAMBA1: dict[str, object] = {"ssm_inner_size": 2048, "ssm_state_size": 16, "ssm_conv_kernel": 4, "ssm_head_count": 64}
"""Mamba-1 mixers (``ssm_head_count`` is written as the dt rank)."""


_ENCODER: dict[str, object] = {
    "weight_type": Q.F16,
    "head_count": 16,
    "head_count_kv": 16,
    "head_dim": 64,
    "feed_forward_length": 3072,
    "vocab_size": 30522,
    "context_length": 2048,
    "encoder": True,
}

RECURRENT_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        arch_spec(
            "mamba-f16",
            "mamba",
            weight_type=Q.F16,
            feed_forward_length=0,
            **_MAMBA1,
        ),
        arch_spec(
            "jamba-q8_0",
            "jamba",
            weight_type=Q.Q8_0,
            feed_forward_length=1024,
            attention_layers=(2,),
            expert_count=4,
            expert_used_count=2,
            **_MAMBA1,
        ),
        arch_spec(
            "falcon-h1-f16",
            "falcon-h1",
            weight_type=Q.F16,
            attention_layers=(0, 1, 2, 3),
            **MAMBA2,
        ),
        arch_spec(
            "nemotron_h-q8_0",
            "nemotron_h",
            block_count=6,
            weight_type=Q.Q8_0,
            attention_layers=(3,),
            **{**MAMBA2, "ssm_group_count": 2},
            metadata={**NORM_EPS, Keys.LLM.FEED_FORWARD_LENGTH: (0, 2816, 0, 0, 0, 2816)},
        ),
        arch_spec(
            "nomic-bert-moe-f16",
            "nomic-bert-moe",
            **{**_ENCODER, "feed_forward_length": 2048},
            expert_count=8,
            expert_used_count=2,
            metadata={**_TOKEN_TYPES, Keys.LLM.MOE_EVERY_N_LAYERS: 2},
        ),
        arch_spec("jina-bert-v2-f16", "jina-bert-v2", **_ENCODER, metadata=_TOKEN_TYPES),
        arch_spec("modern-bert-f16", "modern-bert", **_ENCODER, sliding_window=128, metadata=NORM_EPS),
        arch_spec("neo-bert-f16", "neo-bert", **_ENCODER, metadata={Keys.Attention.LAYERNORM_RMS_EPS: 1e-5}),
    )
}
"""One small model per architecture, keyed by file name (architecture and weight type)."""


def _w(spec: ModelSpec, name: str, *shape: int) -> TensorSpec:
    return TensorSpec(name, shape, spec.weight_type)


def _f(name: str, *shape: int) -> TensorSpec:
    return TensorSpec(name, shape, F32)


def _head(spec: ModelSpec, *, output: bool = True) -> Table:
    d = spec.embedding_length
    table = [_w(spec, "token_embd.weight", d, spec.vocab_size), _f("output_norm.weight", d)]
    return table + ([_w(spec, "output.weight", d, spec.vocab_size)] if output else [])


def _qkv(spec: ModelSpec, p: str, *, bias: bool = False) -> Iterator[TensorSpec]:
    d, q, kv = spec.embedding_length, spec.head_count * spec.head_dim, spec.head_count_kv * spec.head_dim
    for name, width in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
        yield _w(spec, f"{p}{name}.weight", d, width)
        if bias:
            yield _f(f"{p}{name}.bias", width)
    yield _w(spec, f"{p}attn_output.weight", q, d)


def _gated_ffn(spec: ModelSpec, p: str, width: int) -> Iterator[TensorSpec]:
    d = spec.embedding_length
    yield _w(spec, p + "ffn_gate.weight", d, width)
    yield _w(spec, p + "ffn_up.weight", d, width)
    yield _w(spec, p + "ffn_down.weight", width, d)


def _mamba1(spec: ModelSpec, p: str, *, norms: bool) -> Iterator[TensorSpec]:
    d, inner, state, rank = spec.embedding_length, spec.ssm_inner_size, spec.ssm_state_size, spec.ssm_head_count
    yield _w(spec, p + "ssm_in.weight", d, 2 * inner)
    yield _f(p + "ssm_conv1d.weight", spec.ssm_conv_kernel, inner)
    yield _f(p + "ssm_conv1d.bias", inner)
    yield _w(spec, p + "ssm_x.weight", inner, rank + 2 * state)
    yield _w(spec, p + "ssm_dt.weight", rank, inner)
    yield _f(p + "ssm_dt.bias", inner)
    if norms:
        yield from (_f(p + "ssm_dt_norm.weight", rank), _f(p + "ssm_b_norm.weight", state))
        yield _f(p + "ssm_c_norm.weight", state)
    yield _f(p + "ssm_a", state, inner)
    yield _f(p + "ssm_d", inner)
    yield _w(spec, p + "ssm_out.weight", inner, d)


def _mamba2(spec: ModelSpec, p: str, *, projection: int) -> Iterator[TensorSpec]:
    d, inner, heads, groups = spec.embedding_length, spec.ssm_inner_size, spec.ssm_head_count, spec.ssm_group_count
    conv = inner + 2 * groups * spec.ssm_state_size
    yield _w(spec, p + "ssm_in.weight", d, projection)
    yield _f(p + "ssm_conv1d.weight", spec.ssm_conv_kernel, conv)
    yield _f(p + "ssm_conv1d.bias", conv)
    yield _f(p + "ssm_dt.bias", heads)
    yield from (_f(p + "ssm_a", 1, heads), _f(p + "ssm_d", 1, heads))
    yield _f(p + "ssm_norm.weight", inner // groups, groups)
    yield _w(spec, p + "ssm_out.weight", inner, d)


def _mamba_table(spec: ModelSpec) -> Table:
    table = _head(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table += [_f(p + "attn_norm.weight", spec.embedding_length), *_mamba1(spec, p, norms=False)]
    return table


def _jamba_table(spec: ModelSpec) -> Table:
    d, ff, n = spec.embedding_length, spec.feed_forward_length, spec.expert_count
    table = _head(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table.append(_f(p + "attn_norm.weight", d))
        table += _qkv(spec, p) if spec.attends(block) else _mamba1(spec, p, norms=True)
        table.append(_f(p + "ffn_norm.weight", d))
        if block % 2 == 1:  # MoE on every other block, the experts as wide as the dense FFN
            table += [_f(p + "ffn_gate_inp.weight", d, n), _w(spec, p + "ffn_gate_exps.weight", d, ff, n)]
            table += [_w(spec, p + "ffn_down_exps.weight", ff, d, n), _w(spec, p + "ffn_up_exps.weight", d, ff, n)]
        else:
            table += _gated_ffn(spec, p, ff)
    return table


def _falcon_h1_table(spec: ModelSpec) -> Table:
    d, inner, groups = spec.embedding_length, spec.ssm_inner_size, spec.ssm_group_count
    projection = 2 * inner + 2 * groups * spec.ssm_state_size + spec.ssm_head_count
    table = _head(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table += [*_mamba2(spec, p, projection=projection), *_qkv(spec, p), _f(p + "attn_norm.weight", d)]
        table += [_f(p + "ffn_norm", d), *_gated_ffn(spec, p, spec.feed_forward_length)]
    return table


def _nemotron_h_table(spec: ModelSpec) -> Table:
    d, inner, groups = spec.embedding_length, spec.ssm_inner_size, spec.ssm_group_count
    projection = 2 * inner + 2 * groups * spec.ssm_state_size + spec.ssm_head_count
    widths = spec.metadata[Keys.LLM.FEED_FORWARD_LENGTH]
    assert isinstance(widths, tuple)
    table = _head(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table.append(_f(p + "attn_norm.weight", d))
        if spec.attends(block):
            table += _qkv(spec, p)
        elif widths[block]:  # ungated (squared ReLU) feed-forward
            width = widths[block]
            table += [_w(spec, p + "ffn_down.weight", width, d), _w(spec, p + "ffn_up.weight", d, width)]
        else:
            table += _mamba2(spec, p, projection=projection)
    return table


def _bert_embeddings(spec: ModelSpec) -> Table:
    d = spec.embedding_length
    embeddings = _w(spec, "token_embd.weight", d, spec.vocab_size), _f("token_types.weight", d, 2)
    return [*embeddings, _f("token_embd_norm.weight", d), _f("token_embd_norm.bias", d)]


def _post_norms(p: str, d: int, name: str) -> Table:
    return [_f(f"{p}{name}.weight", d), _f(f"{p}{name}.bias", d)]


def _nomic_moe_table(spec: ModelSpec) -> Table:
    d, ff, n = spec.embedding_length, spec.feed_forward_length, spec.expert_count
    table = _bert_embeddings(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table += [_w(spec, p + "attn_qkv.weight", d, 3 * d), _w(spec, p + "attn_output.weight", d, d)]
        table += [_f(p + "attn_output.bias", d), *_post_norms(p, d, "attn_output_norm")]
        if block % 2 == 1:
            table += [_w(spec, p + "ffn_up_exps.weight", d, ff, n), _w(spec, p + "ffn_down_exps.weight", ff, d, n)]
            table.append(_f(p + "ffn_gate_inp.weight", d, n))
        else:
            table += [_w(spec, p + "ffn_up.weight", d, ff), _f(p + "ffn_up.bias", ff)]
            table += [_w(spec, p + "ffn_down.weight", ff, d), _f(p + "ffn_down.bias", d)]
        table += _post_norms(p, d, "layer_output_norm")
    return table


def _jina_table(spec: ModelSpec) -> Table:
    d, ff = spec.embedding_length, spec.feed_forward_length
    table = _bert_embeddings(spec)
    for block in range(spec.block_count):
        p = f"blk.{block}."
        table += [*_qkv(spec, p, bias=True), _f(p + "attn_output.bias", d), *_post_norms(p, d, "attn_output_norm")]
        table += [*_gated_ffn(spec, p, ff), _f(p + "ffn_down.bias", d), *_post_norms(p, d, "layer_output_norm")]
    return table


def _fused_encoder_table(spec: ModelSpec) -> Table:
    """modern-bert and neo-bert: fused QKV, gate and up stacked in ``ffn_up``, pre-norms."""
    d, ff = spec.embedding_length, spec.feed_forward_length
    modern = spec.architecture == "modern-bert"
    table = [_w(spec, "token_embd.weight", d, spec.vocab_size)]
    table.append(_f("token_embd_norm.weight" if modern else "enc.output_norm.weight", d))
    if modern:
        table.append(_f("output_norm.weight", d))
    for block in range(spec.block_count):
        p = f"blk.{block}."
        if block or not modern:  # modern-bert's first block has no attention norm
            table.append(_f(p + "attn_norm.weight", d))
        table += [_w(spec, p + "attn_qkv.weight", d, 3 * d), _w(spec, p + "attn_output.weight", d, d)]
        table += [_f(p + "ffn_norm.weight", d), _w(spec, p + "ffn_up.weight", d, 2 * ff)]
        table.append(_w(spec, p + "ffn_down.weight", ff, d))
    return table


def hybrid_splits(spec: ModelSpec) -> list[int]:
    """Attention/recurrent hybrids: the ``-ngl`` of every split between the host and one device
    (llama.cpp's flash attention ``auto`` depends on the kinds of block either side of a split)."""
    attention = spec.attention_layers
    if attention is None or not spec.ssm_inner_size or len(attention) == spec.block_count:
        return []
    return [spec.block_count - kept + 1 for kept in range(1, spec.block_count)]


RECURRENT_TABLES: dict[str, Callable[[ModelSpec], Table]] = {
    "mamba": _mamba_table,
    "jamba": _jamba_table,
    "falcon-h1": _falcon_h1_table,
    "nemotron_h": _nemotron_h_table,
    "nomic-bert-moe": _nomic_moe_table,
    "jina-bert-v2": _jina_table,
    "modern-bert": _fused_encoder_table,
    "neo-bert": _fused_encoder_table,
}
"""The complete tensor table of each architecture, in file order."""
