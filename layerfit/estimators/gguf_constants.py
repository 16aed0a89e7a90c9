"""The GGUF format constants layerfit reads: value types, ggml tensor types and their block sizes,
and the metadata keys the estimator looks up.

The same facts as the ``gguf`` package's (``tests/test_estimator_gguf_constants.py`` checks every entry
against it), kept here so that reading a header and estimating a profile import neither ``gguf``
nor numpy: ``layerfit estimate`` answers in a fraction of the time ``import gguf`` takes.
"""

from __future__ import annotations

from enum import IntEnum

GGUF_MAGIC = 0x46554747
"""``GGUF`` read as a little-endian uint32."""
GGUF_DEFAULT_ALIGNMENT = 32


class GGUFValueType(IntEnum):
    """Type tag of a metadata value."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


class GGMLQuantizationType(IntEnum):
    """ggml tensor type of a tensor-table entry."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


_T = GGMLQuantizationType
GGML_QUANT_SIZES: dict[GGMLQuantizationType, tuple[int, int]] = {
    _T.F32: (1, 4),
    _T.F16: (1, 2),
    _T.Q4_0: (32, 18),
    _T.Q4_1: (32, 20),
    _T.Q5_0: (32, 22),
    _T.Q5_1: (32, 24),
    _T.Q8_0: (32, 34),
    _T.Q8_1: (32, 40),
    _T.Q2_K: (256, 84),
    _T.Q3_K: (256, 110),
    _T.Q4_K: (256, 144),
    _T.Q5_K: (256, 176),
    _T.Q6_K: (256, 210),
    _T.Q8_K: (256, 292),
    _T.IQ2_XXS: (256, 66),
    _T.IQ2_XS: (256, 74),
    _T.IQ3_XXS: (256, 98),
    _T.IQ1_S: (256, 50),
    _T.IQ4_NL: (32, 18),
    _T.IQ3_S: (256, 110),
    _T.IQ2_S: (256, 82),
    _T.IQ4_XS: (256, 136),
    _T.I8: (1, 1),
    _T.I16: (1, 2),
    _T.I32: (1, 4),
    _T.I64: (1, 8),
    _T.F64: (1, 8),
    _T.IQ1_M: (256, 56),
    _T.BF16: (1, 2),
    _T.TQ1_0: (256, 54),
    _T.TQ2_0: (256, 66),
    _T.MXFP4: (32, 17),
    _T.NVFP4: (64, 36),
    _T.Q1_0: (128, 18),
}
"""Elements per block and bytes per block of each tensor type."""


class Keys:
    """Metadata keys, grouped as in ``gguf.Keys``; ``{arch}`` is filled with the architecture."""

    class General:
        ALIGNMENT = "general.alignment"
        ARCHITECTURE = "general.architecture"
        FILE_TYPE = "general.file_type"
        NAME = "general.name"

    class LLM:
        BLOCK_COUNT = "{arch}.block_count"
        CONTEXT_LENGTH = "{arch}.context_length"
        EMBEDDING_LENGTH = "{arch}.embedding_length"
        EXPERT_COUNT = "{arch}.expert_count"
        EXPERT_FEED_FORWARD_LENGTH = "{arch}.expert_feed_forward_length"
        EXPERT_GROUP_COUNT = "{arch}.expert_group_count"
        EXPERT_GROUP_USED_COUNT = "{arch}.expert_group_used_count"
        EXPERT_SHARED_COUNT = "{arch}.expert_shared_count"
        EXPERT_SHARED_FEED_FORWARD_LENGTH = "{arch}.expert_shared_feed_forward_length"
        EXPERT_USED_COUNT = "{arch}.expert_used_count"
        FEED_FORWARD_LENGTH = "{arch}.feed_forward_length"
        FULL_ATTENTION_INTERVAL = "{arch}.full_attention_interval"
        LEADING_DENSE_BLOCK_COUNT = "{arch}.leading_dense_block_count"
        LOGIT_SCALE = "{arch}.logit_scale"
        NEXTN_PREDICT_LAYERS = "{arch}.nextn_predict_layers"
        POOLING_TYPE = "{arch}.pooling_type"
        TOKEN_SHIFT_COUNT = "{arch}.token_shift_count"
        VOCAB_SIZE = "{arch}.vocab_size"

    class Attention:
        CAUSAL = "{arch}.attention.causal"
        HEAD_COUNT = "{arch}.attention.head_count"
        HEAD_COUNT_KV = "{arch}.attention.head_count_kv"
        KEY_LENGTH = "{arch}.attention.key_length"
        KEY_LENGTH_MLA = "{arch}.attention.key_length_mla"
        KEY_LENGTH_SWA = "{arch}.attention.key_length_swa"
        KV_LORA_RANK = "{arch}.attention.kv_lora_rank"
        LAYERNORM_EPS = "{arch}.attention.layer_norm_epsilon"
        LAYERNORM_RMS_EPS = "{arch}.attention.layer_norm_rms_epsilon"
        Q_LORA_RANK = "{arch}.attention.q_lora_rank"
        SHARED_KV_LAYERS = "{arch}.attention.shared_kv_layers"
        SLIDING_WINDOW = "{arch}.attention.sliding_window"
        SLIDING_WINDOW_PATTERN = "{arch}.attention.sliding_window_pattern"
        VALUE_LENGTH = "{arch}.attention.value_length"
        VALUE_LENGTH_MLA = "{arch}.attention.value_length_mla"
        VALUE_LENGTH_SWA = "{arch}.attention.value_length_swa"

    class Rope:
        DIMENSION_COUNT = "{arch}.rope.dimension_count"
        FREQ_BASE = "{arch}.rope.freq_base"
        SCALING_TYPE = "{arch}.rope.scaling.type"

    class SSM:
        CONV_KERNEL = "{arch}.ssm.conv_kernel"
        GROUP_COUNT = "{arch}.ssm.group_count"
        INNER_SIZE = "{arch}.ssm.inner_size"
        STATE_SIZE = "{arch}.ssm.state_size"
        TIME_STEP_RANK = "{arch}.ssm.time_step_rank"

    class WKV:
        HEAD_SIZE = "{arch}.wkv.head_size"

    class Split:
        LLM_KV_SPLIT_COUNT = "split.count"
        LLM_KV_SPLIT_NO = "split.no"
        LLM_KV_SPLIT_TENSORS_COUNT = "split.tensors.count"

    class Tokenizer:
        MODEL = "tokenizer.ggml.model"
        LIST = "tokenizer.ggml.tokens"
        TOKEN_TYPE_COUNT = "tokenizer.ggml.token_type_count"

    class ClipVision:
        EMBEDDING_LENGTH = "clip.vision.embedding_length"
        IMAGE_SIZE = "clip.vision.image_size"
        PATCH_SIZE = "clip.vision.patch_size"

        class Attention:
            HEAD_COUNT = "clip.vision.attention.head_count"
