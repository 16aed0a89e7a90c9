"""The tensor names of llama.cpp b11434's loader, as tables (``tensor_names`` checks them).

``PATTERNS``: every ``LLM_TENSOR_NAMES`` pattern of ``src/llama-arch.cpp`` (``%d`` a block number);
``ARCH_TENSORS``: every name each modelled architecture's model file (``src/models/*.cpp``) passes to
``tn()`` in any branch. Printed by ``benchmarks/tensor_names_source.py`` from the source and
checked by hand.
"""

from __future__ import annotations

BLOCK = "blk.%d."
SUFFIXES = ("weight", "bias", "scale", "scales", "input_scale", "lora_a", "lora_b")
"""Suffixes ``tn(LLM_TENSOR_X, suffix, ...)`` passes anywhere in the loader (a name may also have none)."""
SCALED = frozenset(
    {f"{BLOCK}{name}" for name in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_qkv", "attn_gate")}
    | {f"{BLOCK}ffn_{part}{kind}" for part in ("gate", "down", "up") for kind in ("", "_shexp", "_exps")}
    | {f"{BLOCK}{name}" for name in ("ssm_in", "ssm_out", "ssm_alpha", "ssm_beta")}
    | {f"{BLOCK}nextn.eh_proj", f"{BLOCK}nextn.shared_head_head", "output"}
)
"""Tensors whose ``.scale`` and ``.input_scale`` ``load_tensors`` creates (optional) where it creates the
weight (``output``'s for an NVFP4 output, tied or not)."""

def _names(top: str, block: str) -> frozenset[str]:
    """Space-separated names outside blocks and names inside ``blk.%d.``."""
    return frozenset(top.split()) | frozenset(BLOCK + name for name in block.split())


PATTERNS = _names(
    top=(
        "altup_proj altup_unembd_proj cls cls.norm cls.output conf_proj conv1d convnext.%d.dw convnext.%d.gamma "
        "convnext.%d.norm convnext.%d.pw1 convnext.%d.pw2 d2t dec.blk.%d.attn_k dec.blk.%d.attn_norm "
        "dec.blk.%d.attn_o dec.blk.%d.attn_q dec.blk.%d.attn_rel_b dec.blk.%d.attn_v dec.blk.%d.cross_attn_k "
        "dec.blk.%d.cross_attn_norm dec.blk.%d.cross_attn_norm_kv dec.blk.%d.cross_attn_o dec.blk.%d.cross_attn_q "
        "dec.blk.%d.cross_attn_rel_b dec.blk.%d.cross_attn_v dec.blk.%d.ffn_down dec.blk.%d.ffn_gate "
        "dec.blk.%d.ffn_norm dec.blk.%d.ffn_up dec.output_norm decision.field_norm decision.hidden_norm "
        "decision.option_norm decision.option_summary_norm decision.proj_global decision.proj_memory "
        "decision.proj_option_context decision.proj_option_lexical decision.proj_option_question "
        "decision.proj_question decision.scales decision.scorer decision.scorer_out dense_2 dense_3 "
        "enc.blk.%d.attn_k enc.blk.%d.attn_norm enc.blk.%d.attn_o enc.blk.%d.attn_q enc.blk.%d.attn_rel_b "
        "enc.blk.%d.attn_v enc.blk.%d.ffn_down enc.blk.%d.ffn_gate enc.blk.%d.ffn_norm enc.blk.%d.ffn_up "
        "enc.output_norm fc hrm.z_l_init markov_w1 markov_w2 masked_embd_centroids masked_embd_ordering "
        "nextn.post_projection nextn.pre_projection output output_hc_base output_hc_down output_hc_fn output_hc_norm "
        "output_hc_scale output_hc_up output_norm output_res_score per_layer_model_proj per_layer_proj_norm "
        "per_layer_token_embd position_embd posnet.%d.attn_k posnet.%d.attn_norm posnet.%d.attn_output "
        "posnet.%d.attn_q posnet.%d.attn_v posnet.%d.conv1 posnet.%d.conv2 posnet.%d.norm posnet.%d.norm1 "
        "posnet.%d.norm2 rope_factors_long rope_factors_short rope_freqs selector_hidden selector_predecessor "
        "selector_successor token_embd token_embd_norm token_types "
    ),
    block=(
        "altup_correct_coef altup_correct_scale altup_predict_coef altup_router altup_router_norm "
        "attn_compressor_ape attn_compressor_gate attn_compressor_kv attn_compressor_norm attn_conv_base "
        "attn_conv_proj attn_gate attn_k attn_k_b attn_k_norm attn_kv attn_kv_a_mqa attn_kv_a_norm attn_kv_b "
        "attn_norm attn_norm_2 attn_output attn_output_a attn_output_b attn_output_norm attn_q attn_q_a "
        "attn_q_a_norm attn_q_b attn_q_norm attn_qkv attn_res_score attn_rot_embd attn_sinks attn_sub_norm attn_v "
        "attn_v_b channel_mix_key channel_mix_lerp_k channel_mix_lerp_r channel_mix_receptance channel_mix_value "
        "exp_probs_b exp_probs_b_vl ffn.act ffn_conv_base ffn_conv_proj ffn_down ffn_down.%d ffn_down_chexps "
        "ffn_down_exps ffn_down_shexp ffn_gate ffn_gate.%d ffn_gate_chexps ffn_gate_exps ffn_gate_inp "
        "ffn_gate_inp_shexp ffn_gate_shexp ffn_gate_tid2eid ffn_gate_up_exps ffn_latent_down ffn_latent_up ffn_norm "
        "ffn_norm_exps ffn_res_score ffn_routed_down ffn_routed_norm ffn_routed_up ffn_sub_norm ffn_up ffn_up.%d "
        "ffn_up_chexps ffn_up_exps ffn_up_shexp hc_attn_base hc_attn_down hc_attn_fn hc_attn_inject hc_attn_norm "
        "hc_attn_scale hc_attn_up hc_ffn_base hc_ffn_down hc_ffn_fn hc_ffn_inject hc_ffn_norm hc_ffn_scale hc_ffn_up "
        "indexer.attn_k indexer.attn_q_b indexer.k_norm indexer.k_proj indexer.proj indexer.q_norm indexer.q_proj "
        "indexer_compressor_ape indexer_compressor_gate indexer_compressor_kv indexer_compressor_norm inp_gate "
        "laurel_l laurel_post_norm laurel_r layer_output_norm layer_output_scale nextn.eh_proj nextn.embed_tokens "
        "nextn.enorm nextn.hc_head_down nextn.hc_head_norm nextn.hc_head_up nextn.hnorm nextn.shared_head_head "
        "nextn.shared_head_norm ple_conv1d ple_key ple_norm_conv ple_norm_key ple_norm_query ple_value "
        "post_attention_norm post_ffw_norm post_ffw_norm_1 post_ffw_norm_2 post_norm pre_ffw_norm_2 proj "
        "shortconv.conv shortconv.in_proj shortconv.out_proj ssm_a ssm_alpha ssm_b_norm ssm_ba ssm_beta ssm_c_norm "
        "ssm_conv1d ssm_conv1d_k ssm_conv1d_q ssm_conv1d_v ssm_d ssm_dt ssm_dt_norm ssm_f_a ssm_f_b ssm_g ssm_g_a "
        "ssm_g_b ssm_in ssm_norm ssm_out ssm_x time_mix_a0 time_mix_a1 time_mix_a2 time_mix_decay time_mix_decay_w1 "
        "time_mix_decay_w2 time_mix_first time_mix_g1 time_mix_g2 time_mix_gate time_mix_k_a time_mix_k_k "
        "time_mix_key time_mix_lerp_fused time_mix_lerp_g time_mix_lerp_k time_mix_lerp_r time_mix_lerp_v "
        "time_mix_lerp_w time_mix_lerp_x time_mix_ln time_mix_output time_mix_r_k time_mix_receptance time_mix_v0 "
        "time_mix_v1 time_mix_v2 time_mix_value time_mix_w0 time_mix_w1 time_mix_w2 vis_attn_output vis_attn_qkv "
        "vis_down vis_gate vis_up "
    ),
)
"""Every ``LLM_TENSOR_NAMES`` pattern of b11434 (``%d``: a number), without suffix."""
_LLAMA_TENSORS = _names(
    top=(
        "output.weight output_norm.weight rope_factors_long.weight rope_factors_short.weight rope_freqs.weight "
        "token_embd.weight "
    ),
    block=(
        "attn_k.bias attn_k.weight attn_norm.weight attn_output.bias attn_output.weight attn_q.bias "
        "attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight ffn_down.bias ffn_down.weight "
        "ffn_down_exps.weight ffn_down_shexp.weight ffn_gate.bias ffn_gate.weight ffn_gate_exps.weight "
        "ffn_gate_inp.weight ffn_gate_shexp.weight ffn_norm.weight ffn_up.bias ffn_up.weight ffn_up_exps.weight "
        "ffn_up_shexp.weight "
    ),
)
"""What ``llama.cpp``, ``granite.cpp`` and ``mistral3.cpp`` name (the same set)."""

_QWEN3MOE_TENSORS = _names(
    top=("output.weight output_norm.weight token_embd.weight "),
    block=(
        "attn_k.bias attn_k.weight attn_k_norm.weight attn_norm.weight attn_output.weight attn_q.bias "
        "attn_q.weight attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight "
        "ffn_down_exps.weight ffn_gate_exps.weight ffn_gate_inp.weight ffn_norm.weight ffn_up_exps.weight "
    ),
)
"""What ``qwen3moe.cpp`` and ``olmoe.cpp`` name (the same set)."""

ARCH_TENSORS: dict[str, frozenset[str]] = {
    # bert.cpp
    "bert": _names(
        top=(
            "cls.bias cls.output.bias cls.output.weight cls.weight position_embd.weight token_embd.weight "
            "token_embd_norm.bias token_embd_norm.weight token_types.weight "
        ),
        block=(
            "attn_k.bias attn_k.weight attn_output.bias attn_output.weight attn_output_norm.bias "
            "attn_output_norm.weight attn_q.bias attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias "
            "attn_v.weight ffn_down.bias ffn_down.weight ffn_up.bias ffn_up.weight layer_output_norm.bias "
            "layer_output_norm.weight "
        ),
    ),
    # cohere2.cpp
    "cohere2": _names(
        top=("output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_gate.weight ffn_up.weight "
        ),
    ),
    # command-r.cpp
    "command-r": _names(
        top=("output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_k_norm.weight attn_norm.weight attn_output.weight attn_q.bias "
            "attn_q.weight attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight "
            "ffn_down.weight ffn_gate.weight ffn_up.weight "
        ),
    ),
    # deepseek2.cpp
    "deepseek2": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k_b.weight attn_kv_a_mqa.weight attn_kv_a_norm.weight attn_kv_b.weight attn_norm.weight "
            "attn_output.weight attn_q.weight attn_q_a.weight attn_q_a_norm.weight attn_q_b.weight attn_v_b.weight "
            "exp_probs_b.bias ffn_down.weight ffn_down_exps.weight ffn_down_shexp.weight ffn_gate.weight "
            "ffn_gate_exps.weight ffn_gate_inp.weight ffn_gate_shexp.weight ffn_gate_up_exps.weight ffn_norm.weight "
            "ffn_up.weight ffn_up_exps.weight ffn_up_shexp.weight nextn.eh_proj.weight nextn.embed_tokens.weight "
            "nextn.enorm.weight nextn.hnorm.weight nextn.shared_head_head.weight nextn.shared_head_norm.weight "
        ),
    ),
    # exaone4.cpp
    "exaone4": _names(
        top=("output.weight output_norm.weight rope_freqs.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_k_norm.weight attn_output.weight attn_q.bias attn_q.weight "
            "attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight "
            "ffn_gate.weight ffn_up.weight nextn.eh_proj.weight nextn.enorm.weight nextn.hnorm.weight "
            "nextn.shared_head_norm.weight post_attention_norm.weight post_ffw_norm.weight "
        ),
    ),
    # falcon-h1.cpp
    "falcon-h1": _names(
        top=("output.weight output_norm.weight rope_freqs.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.bias attn_output.weight attn_q.bias "
            "attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight ffn_down.bias ffn_down.weight "
            "ffn_gate.bias ffn_gate.weight ffn_norm ffn_up.bias ffn_up.weight ssm_a ssm_conv1d.bias "
            "ssm_conv1d.weight ssm_d ssm_dt.bias ssm_in.weight ssm_norm.weight ssm_out.weight "
        ),
    ),
    # gemma.cpp
    "gemma": _names(
        top=("output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight "
        ),
    ),
    # gemma2.cpp
    "gemma2": _names(
        top=("output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight "
            "post_attention_norm.weight post_ffw_norm.weight "
        ),
    ),
    # gemma3.cpp
    "gemma3": _names(
        top=("dense_2.weight dense_3.weight output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_k_norm.weight attn_norm.weight attn_output.weight attn_q.bias "
            "attn_q.weight attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight "
            "ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight post_attention_norm.weight "
            "post_ffw_norm.weight "
        ),
    ),
    # gemma3n.cpp
    "gemma3n": _names(
        top=(
            "altup_proj.weight altup_unembd_proj.weight output.weight output_norm.weight per_layer_model_proj.weight "
            "per_layer_proj_norm.weight per_layer_token_embd.weight token_embd.weight "
        ),
        block=(
            "altup_correct_coef.weight altup_correct_scale.weight altup_predict_coef.weight altup_router.weight "
            "altup_router_norm.weight attn_k.bias attn_k.weight attn_k_norm.weight attn_norm.weight "
            "attn_output.weight attn_q.bias attn_q.weight attn_q_norm.weight attn_qkv.bias attn_qkv.weight "
            "attn_v.bias attn_v.weight ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight inp_gate.weight "
            "laurel_l.weight laurel_post_norm.weight laurel_r.weight post_attention_norm.weight post_ffw_norm.weight "
            "post_norm.weight proj.weight "
        ),
    ),
    # openai-moe.cpp
    "gpt-oss": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.bias attn_output.weight attn_q.bias "
            "attn_q.weight attn_qkv.bias attn_qkv.weight attn_sinks.weight attn_v.bias attn_v.weight "
            "ffn_down_exps.bias ffn_down_exps.weight ffn_gate_exps.bias ffn_gate_exps.weight ffn_gate_inp.bias "
            "ffn_gate_inp.weight ffn_up_exps.bias ffn_up_exps.weight post_attention_norm.weight "
        ),
    ),
    # granite.cpp
    "granite": _LLAMA_TENSORS,
    # granite-hybrid.cpp
    "granitehybrid": _names(
        top=("output.weight output_norm.weight rope_freqs.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.bias attn_output.weight attn_q.bias "
            "attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight ffn_down.bias ffn_down.weight "
            "ffn_down_exps.weight ffn_down_shexp.weight ffn_gate.bias ffn_gate.weight ffn_gate_exps.weight "
            "ffn_gate_inp.weight ffn_gate_shexp.weight ffn_norm.weight ffn_up.bias ffn_up.weight ffn_up_exps.weight "
            "ffn_up_shexp.weight ssm_a ssm_conv1d.bias ssm_conv1d.weight ssm_d ssm_dt.bias ssm_in.weight "
            "ssm_norm.weight ssm_out.weight "
        ),
    ),
    # jamba.cpp
    "jamba": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_down_exps.weight ffn_gate.weight "
            "ffn_gate_exps.weight ffn_gate_inp.weight ffn_norm.weight ffn_up.weight ffn_up_exps.weight ssm_a "
            "ssm_b_norm.weight ssm_c_norm.weight ssm_conv1d.bias ssm_conv1d.weight ssm_d ssm_dt.bias ssm_dt.weight "
            "ssm_dt_norm.weight ssm_in.weight ssm_out.weight ssm_x.weight "
        ),
    ),
    # jina-bert-v2.cpp
    "jina-bert-v2": _names(
        top=("cls.bias cls.weight token_embd.weight token_embd_norm.bias token_embd_norm.weight token_types.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_k_norm.bias attn_k_norm.weight attn_norm_2.bias attn_norm_2.weight "
            "attn_output.bias attn_output.weight attn_output_norm.bias attn_output_norm.weight attn_q.bias "
            "attn_q.weight attn_q_norm.bias attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias "
            "attn_v.weight ffn_down.bias ffn_down.weight ffn_gate.weight ffn_up.bias ffn_up.weight "
            "layer_output_norm.bias layer_output_norm.weight "
        ),
    ),
    # llama.cpp
    "llama": _LLAMA_TENSORS,
    # llama4.cpp
    "llama4": _names(
        top=("output.weight output_norm.weight rope_freqs.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_down_exps.weight ffn_down_shexp.weight "
            "ffn_gate.weight ffn_gate_exps.weight ffn_gate_inp.weight ffn_gate_shexp.weight ffn_norm.weight "
            "ffn_up.weight ffn_up_exps.weight ffn_up_shexp.weight "
        ),
    ),
    # mamba.cpp
    "mamba": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_norm.weight ssm_a ssm_conv1d.bias ssm_conv1d.weight ssm_d ssm_dt.bias ssm_dt.weight ssm_in.weight "
            "ssm_out.weight ssm_x.weight "
        ),
    ),
    # mamba2.cpp
    "mamba2": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_norm.weight ssm_a ssm_conv1d.bias ssm_conv1d.weight ssm_d ssm_dt.bias ssm_in.weight "
            "ssm_norm.weight ssm_out.weight "
        ),
    ),
    # mistral3.cpp
    "mistral3": _LLAMA_TENSORS,
    # modern-bert.cpp
    "modern-bert": _names(
        top=(
            "cls.bias cls.norm.bias cls.norm.weight cls.output.bias cls.output.weight cls.weight output_norm.weight "
            "token_embd.weight token_embd_norm.weight token_types.weight "
        ),
        block=(
            "attn_norm.bias attn_norm.weight attn_output.bias attn_output.weight attn_qkv.bias attn_qkv.weight "
            "ffn_down.bias ffn_down.weight ffn_norm.bias ffn_norm.weight ffn_up.bias ffn_up.weight "
        ),
    ),
    # nemotron-h.cpp
    "nemotron_h": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.bias attn_output.weight attn_q.bias "
            "attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight exp_probs_b.bias ffn_down.bias "
            "ffn_down.weight ffn_down_exps.weight ffn_down_shexp.weight ffn_gate_inp.weight ffn_latent_down.weight "
            "ffn_latent_up.weight ffn_up.bias ffn_up.weight ffn_up_exps.weight ffn_up_shexp.weight "
            "nextn.eh_proj.weight nextn.enorm.weight nextn.hnorm.weight nextn.shared_head_norm.weight "
            "post_attention_norm.weight ssm_a ssm_conv1d.bias ssm_conv1d.weight ssm_d ssm_dt.bias ssm_in.weight "
            "ssm_norm.weight ssm_out.weight "
        ),
    ),
    # neo-bert.cpp
    "neo-bert": _names(
        top=("cls.bias cls.output.bias cls.output.weight cls.weight enc.output_norm.weight token_embd.weight "),
        block=("attn_norm.weight attn_output.weight attn_qkv.weight ffn_down.weight ffn_norm.weight ffn_up.weight "),
    ),
    # nomic-bert.cpp
    "nomic-bert": _names(
        top=("token_embd.weight token_embd_norm.bias token_embd_norm.weight token_types.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_output.bias attn_output.weight attn_output_norm.bias "
            "attn_output_norm.weight attn_q.bias attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias "
            "attn_v.weight ffn_down.bias ffn_down.weight ffn_gate.weight ffn_up.bias ffn_up.weight "
            "layer_output_norm.bias layer_output_norm.weight "
        ),
    ),
    # nomic-bert-moe.cpp
    "nomic-bert-moe": _names(
        top=("token_embd.weight token_embd_norm.bias token_embd_norm.weight token_types.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_output.bias attn_output.weight attn_output_norm.bias "
            "attn_output_norm.weight attn_q.bias attn_q.weight attn_qkv.bias attn_qkv.weight attn_v.bias "
            "attn_v.weight ffn_down.bias ffn_down.weight ffn_down_exps.weight ffn_gate_inp.weight ffn_up.bias "
            "ffn_up.weight ffn_up_exps.weight layer_output_norm.bias layer_output_norm.weight "
        ),
    ),
    # olmoe.cpp
    "olmoe": _QWEN3MOE_TENSORS,
    # phi3.cpp
    "phi3": _names(
        top=("output.weight output_norm.weight rope_factors_long.weight rope_factors_short.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_norm.weight ffn_up.weight "
        ),
    ),
    # qwen2.cpp
    "qwen2": _names(
        top=("output.bias output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight "
        ),
    ),
    # qwen2moe.cpp
    "qwen2moe": _names(
        top=("output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_norm.weight attn_output.weight attn_q.bias attn_q.weight attn_qkv.bias "
            "attn_qkv.weight attn_v.bias attn_v.weight ffn_down_exps.weight ffn_down_shexp.weight "
            "ffn_gate_exps.weight ffn_gate_inp.weight ffn_gate_inp_shexp.weight ffn_gate_shexp.weight "
            "ffn_norm.weight ffn_up_exps.weight ffn_up_shexp.weight "
        ),
    ),
    # qwen3.cpp
    "qwen3": _names(
        top=("cls.output.weight output.weight output_norm.weight token_embd.weight "),
        block=(
            "attn_k.bias attn_k.weight attn_k_norm.weight attn_norm.weight attn_output.weight attn_q.bias "
            "attn_q.weight attn_q_norm.weight attn_qkv.bias attn_qkv.weight attn_v.bias attn_v.weight "
            "ffn_down.weight ffn_gate.weight ffn_norm.weight ffn_up.weight "
        ),
    ),
    # qwen3moe.cpp
    "qwen3moe": _QWEN3MOE_TENSORS,
}
"""Every name each modelled architecture's model file passes to ``tn()``, in any branch (the generic
``.scale``/``.input_scale`` of ``SCALED`` apart)."""
