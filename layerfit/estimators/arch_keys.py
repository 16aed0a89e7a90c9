"""The keys each modelled architecture's loader reads, with their GGUF type and whether it requires them.

From b11434's ``load_arch_hparams`` in ``src/models/*.cpp``: the norm epsilon every architecture
requires (``layer_norm_rms_epsilon`` or ``layer_norm_epsilon``), the SSM widths of the Mamba
mixers, the sliding window, the expert widths and scales. A key read under a condition
(deepseek2's ``q_lora_rank``, not read for its lite models) is typed but not required. The common
keys every architecture reads are in ``key_check``.
"""

from __future__ import annotations

from layerfit.estimators.gguf_constants import GGUFValueType

U32, F32 = GGUFValueType.UINT32, GGUFValueType.FLOAT32
PER_LAYER = GGUFValueType.ARRAY
"""A UINT32 or an array of one integer per block (``get_key_or_arr``)."""

RMS_EPS, EPS = "{arch}.attention.layer_norm_rms_epsilon", "{arch}.attention.layer_norm_epsilon"
NORM_EPS = (RMS_EPS, EPS)
"""Epsilon keys: llama.cpp's norm kernels assert ``eps >= 0`` on every backend."""
WINDOW = "{arch}.attention.sliding_window"
EXPERT_WIDTH = "{arch}.expert_feed_forward_length"
SHARED_WIDTH = "{arch}.expert_shared_feed_forward_length"
SCALES = ("{arch}.residual_scale", "{arch}.embedding_scale", "{arch}.attention.scale")
SSM = ("{arch}.ssm.conv_kernel", "{arch}.ssm.inner_size", "{arch}.ssm.state_size", "{arch}.ssm.time_step_rank")
SSM_GROUPS = "{arch}.ssm.group_count"

KeyRule = tuple[GGUFValueType, bool]
"""The type llama.cpp reads the key as (``PER_LAYER`` for UINT32-or-array), and whether it is required."""


_R, _O = True, False
"""Required, optional."""


def _keys(*entries: tuple[str, GGUFValueType, bool]) -> dict[str, KeyRule]:
    return {key: (kind, required) for key, kind, required in entries}


_SSM_REQUIRED = tuple((key, U32, _R) for key in SSM)
_SSM2_REQUIRED = (*_SSM_REQUIRED, (SSM_GROUPS, U32, _R))
_GRANITE_SCALES = tuple((key, F32, _O) for key in SCALES)

ARCH_KEYS: dict[str, dict[str, KeyRule]] = {
    "llama": _keys((RMS_EPS, F32, _R), ("{arch}.vocab_size", U32, _O)),
    "mistral3": _keys((RMS_EPS, F32, _R)),
    "qwen2": _keys((RMS_EPS, F32, _R)),
    "qwen2moe": _keys((RMS_EPS, F32, _R), (EXPERT_WIDTH, PER_LAYER, _O), (SHARED_WIDTH, U32, _O)),
    "qwen3": _keys((RMS_EPS, F32, _R)),
    "qwen3moe": _keys((RMS_EPS, F32, _R), (EXPERT_WIDTH, PER_LAYER, _O)),
    "gemma": _keys((RMS_EPS, F32, _R)),
    "gemma2": _keys((RMS_EPS, F32, _R), (WINDOW, U32, _O)),
    "gemma3": _keys((RMS_EPS, F32, _R), (WINDOW, U32, _O)),
    "phi3": _keys((RMS_EPS, F32, _R), (WINDOW, U32, _O)),
    "command-r": _keys((EPS, F32, _R), ("{arch}.logit_scale", F32, _O)),
    "cohere2": _keys((EPS, F32, _R), (WINDOW, U32, _R), ("{arch}.logit_scale", F32, _R)),
    "deepseek2": _keys(
        (RMS_EPS, F32, _R),
        ("{arch}.vocab_size", U32, _O),
        ("{arch}.leading_dense_block_count", U32, _O),
        ("{arch}.attention.q_lora_rank", U32, _O),
        ("{arch}.attention.kv_lora_rank", U32, _R),
        ("{arch}.attention.key_length_mla", U32, _O),
        ("{arch}.attention.value_length_mla", U32, _O),
        (EXPERT_WIDTH, PER_LAYER, _R),
        ("{arch}.expert_shared_count", U32, _R),
    ),
    "gpt-oss": _keys((RMS_EPS, F32, _R), (EXPERT_WIDTH, PER_LAYER, _R), (WINDOW, U32, _R)),
    "granite": _keys((RMS_EPS, F32, _R), ("{arch}.logit_scale", F32, _R), *_GRANITE_SCALES, (SHARED_WIDTH, U32, _O)),
    "olmoe": _keys((RMS_EPS, F32, _R)),
    "mamba": _keys(*_SSM_REQUIRED, (RMS_EPS, F32, _R)),
    "mamba2": _keys(*_SSM2_REQUIRED, (RMS_EPS, F32, _R)),
    "jamba": _keys(*_SSM_REQUIRED, (RMS_EPS, F32, _R)),
    "granitehybrid": _keys(
        (RMS_EPS, F32, _R),
        ("{arch}.logit_scale", F32, _O),
        *_GRANITE_SCALES,
        *_SSM2_REQUIRED,
        (SHARED_WIDTH, U32, _O),
    ),
    "falcon-h1": _keys((RMS_EPS, F32, _R), *_SSM2_REQUIRED),
    "nemotron_h": _keys(
        *_SSM2_REQUIRED,
        (EPS, F32, _R),
        (RMS_EPS, F32, _O),
        (EXPERT_WIDTH, PER_LAYER, _O),
        (SHARED_WIDTH, U32, _O),
        ("{arch}.expert_shared_count", U32, _O),
    ),
    "bert": _keys((EPS, F32, _R)),
    "nomic-bert": _keys((EPS, F32, _R)),
    "nomic-bert-moe": _keys((EPS, F32, _R), ("{arch}.moe_every_n_layers", U32, _O)),
    "jina-bert-v2": _keys((EPS, F32, _R)),
    "modern-bert": _keys((WINDOW, U32, _O), (EPS, F32, _R)),
    "neo-bert": _keys((RMS_EPS, F32, _R)),
    "exaone4": _keys((WINDOW, U32, _O), (RMS_EPS, F32, _R)),
    "llama4": _keys(
        (RMS_EPS, F32, _R),
        (EXPERT_WIDTH, PER_LAYER, _R),
        ("{arch}.interleave_moe_layer_step", U32, _R),
        (WINDOW, U32, _O),
    ),
    "gemma3n": _keys((WINDOW, U32, _R), (RMS_EPS, F32, _R)),
}
"""Per modelled architecture: each key its loader reads, as (type, required)."""
