"""The GGUF types, lengths and values llama.cpp requires of the keys it reads for every model.

llama.cpp's loader reads each key as one GGUF type and refuses the file when the key is there as
another ("key llama.block_count has wrong type i32 but expected type u32"), whether or not the key
is required; a per-layer key may be an array instead, of one integer per block. These are the keys
its common hyperparameter loader (``llama_model_base::load_hparams``) reads for every architecture,
and those its vocabulary loader reads for every tokenizer, as b11434 reads them (measured with
``benchmarks/loader_diff.py``). llama.cpp loads a tokenizer for every model, so a file without
``tokenizer.ggml.model`` is refused ("key not found in model: tokenizer.ggml.model"); a model
without a vocabulary says ``none`` (or ``no_vocab``) and needs no token list (llama.cpp then sizes
the vocabulary by ``{arch}.vocab_size``, with dummy tokens).
"""

from __future__ import annotations

from collections.abc import Mapping

from layerfit.errors import EstimationError
from layerfit.estimators import arch_keys
from layerfit.estimators.gguf_constants import GGUFValueType, Keys
from layerfit.estimators.gguf_types import ArrayInfo, KeyType, MetaValue

_U32, _BOOL, _F32, _STR = GGUFValueType.UINT32, GGUFValueType.BOOL, GGUFValueType.FLOAT32, GGUFValueType.STRING

COMMON_KEYS: dict[str, GGUFValueType] = {
    "general.name": _STR,
    "general.file_type": _U32,
    "{arch}.context_length": _U32,
    "{arch}.embedding_length": _U32,
    "{arch}.embedding_length_out": _U32,
    "{arch}.attention.causal": _BOOL,
    "{arch}.pooling_type": _U32,
    "{arch}.classifier.pooling_type": _U32,
    "{arch}.block_count": _U32,
    "{arch}.nextn_predict_layers": _U32,
    "{arch}.expert_count": _U32,
    "{arch}.expert_group_count": _U32,
    "{arch}.expert_group_used_count": _U32,
    "{arch}.rope.scaling.finetuned": _BOOL,
    "{arch}.rope.scaling.original_context_length": _U32,
    "{arch}.rope.freq_base": _F32,
    "{arch}.rope.scaling.type": _STR,
    "{arch}.rope.scaling.factor": _F32,
    "{arch}.rope.scaling.attn_factor": _F32,
    "{arch}.rope.scaling.alpha": _F32,
    "{arch}.attention.key_length_swa": _U32,
    "{arch}.attention.value_length_swa": _U32,
    "{arch}.rope.dimension_count_swa": _U32,
}
"""Keys read for every architecture, with the one type llama.cpp reads each as."""
SCALE_LINEAR = "{arch}.rope.scale_linear"
"""Read (as FLOAT32) only when ``rope.scaling.factor`` is absent."""
HEAD_KEYS = ("{arch}.attention.key_length", "{arch}.attention.value_length", "{arch}.rope.dimension_count")
"""Read (as UINT32) only when block 0 has attention heads."""
PER_LAYER_KEYS = (
    "{arch}.feed_forward_length",
    "{arch}.attention.head_count",
    "{arch}.attention.head_count_kv",
    "{arch}.expert_used_count",
)
"""A UINT32, or an array of one integer per block."""
PER_LAYER_ITEMS = frozenset({GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.BOOL})
"""Item types llama.cpp reads a per-layer array of (as 32-bit integers; booleans as 0 and 1)."""
REQUIRED_KEYS = ("{arch}.context_length",)
"""Keys llama.cpp requires of every architecture that the estimator itself does without (it needs
``block_count`` and ``embedding_length`` too)."""

TOKENIZER_MODELS = frozenset(
    {"no_vocab", "none", "llama", "bert", "gpt2", "hybriddna", "whitespace", "t5", "rwkv", "test", "plamo2", "gemma4"}
)
"""The ``tokenizer.ggml.model`` values llama.cpp knows ("unknown tokenizer" otherwise)."""
NO_VOCAB = frozenset({"no_vocab", "none"})
TOKENIZER_KEYS: dict[str, GGUFValueType] = {
    "tokenizer.ggml.pre": _STR,
    "tokenizer.ggml.token_type_count": _U32,
}
"""Read for every tokenizer model."""
VOCAB_KEYS: dict[str, GGUFValueType] = {
    **{
        f"tokenizer.ggml.{name}_token_id": _U32
        for name in (
            *("bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask"),
            *("fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep", "prefix", "suffix", "middle"),
        )
    },
    **{
        f"tokenizer.ggml.{name}": _BOOL
        for name in ("add_bos_token", "add_eos_token", "add_sep_token", "add_space_prefix", "remove_extra_whitespaces")
    },
}
"""Read for every tokenizer with a vocabulary (not ``none``/``no_vocab``)."""
MISSING_MODEL = "required key missing: llama.cpp loads a tokenizer for every model"
"""What a file without ``tokenizer.ggml.model`` is refused with."""
SCORES = "tokenizer.ggml.scores"
TOKEN_TYPES = "tokenizer.ggml.token_type"


def _type_name(kind: KeyType) -> str:
    if kind.value is GGUFValueType.ARRAY and kind.item is not None:
        return f"an array of {kind.item.name}"
    return kind.value.name


def _refuse(path: str, key: str, problem: str) -> EstimationError:
    return EstimationError(path, key, f"{problem}: llama.cpp refuses the file at load")


_WANTED = {_U32: "an integer", _F32: "a number", _BOOL: "a boolean", _STR: "a string"}


def _shown(value: MetaValue | None) -> str:
    if isinstance(value, tuple | ArrayInfo):
        return f"of {_length(value)} items"
    return repr(value)


def _expect_type(
    path: str, key: str, meta: Mapping[str, MetaValue], types: Mapping[str, KeyType], expected: GGUFValueType
) -> None:
    found = types.get(key)
    if found is not None and found.value is not expected:
        wanted = f"{_WANTED[expected]} ({expected.name}, the one type llama.cpp reads it as)"
        raise _refuse(path, key, f"expected {wanted}, got {_type_name(found)} {_shown(meta.get(key))}")


def _length(value: MetaValue | None) -> int:
    if isinstance(value, ArrayInfo):
        return value.length
    return len(value) if isinstance(value, tuple) else 0


def _first(value: MetaValue | None) -> str:
    """The first few items of a decoded array, in brackets ("" for an array too long to decode)."""
    items = value if isinstance(value, tuple) else ()
    shown = ", ".join(map(str, items[:4])) + (", ..." if len(items) > 4 else "")
    return f" ({shown})" if shown else ""


def _block_0_heads(value: MetaValue | None) -> int:
    if isinstance(value, tuple):
        value = value[0] if value else 0
    return value if isinstance(value, int) else 0


def check_keys(path: str, arch: str, metadata: Mapping[str, MetaValue], types: Mapping[str, KeyType]) -> None:
    """Refuse, naming the key, a key llama.cpp reads for every architecture that is written as another
    type, or a per-layer array whose length is not the block count or whose items are not integers."""
    key = {template: template.format(arch=arch) for template in (*COMMON_KEYS, *HEAD_KEYS, *PER_LAYER_KEYS)}
    for template, expected in COMMON_KEYS.items():
        _expect_type(path, key[template], metadata, types, expected)
    if key["{arch}.rope.scaling.factor"] not in metadata:
        _expect_type(path, SCALE_LINEAR.format(arch=arch), metadata, types, _F32)
    if _block_0_heads(metadata.get(key["{arch}.attention.head_count"])) > 0:
        for template in HEAD_KEYS:
            _expect_type(path, key[template], metadata, types, _U32)
    blocks = metadata.get(key["{arch}.block_count"])
    for template in PER_LAYER_KEYS:
        found = types.get(key[template])
        if found is None or found.value is not GGUFValueType.ARRAY:
            _expect_type(path, key[template], metadata, types, _U32)
            continue
        length = _length(metadata.get(key[template]))
        if length != blocks:
            raise _refuse(
                path,
                key[template],
                f"an array of {length} entries for {blocks} blocks{_first(metadata.get(key[template]))}",
            )
        if found.item not in PER_LAYER_ITEMS:
            problem = f"expected 32-bit integers (UINT32, INT32 or BOOL items), got {_type_name(found)}"
            raise _refuse(path, key[template], problem)


def check_arch_keys(path: str, arch: str, metadata: Mapping[str, MetaValue], types: Mapping[str, KeyType]) -> None:
    """Refuse, naming the key, what a modelled architecture's own loader refuses: a key it requires
    that is missing, one of another type, a per-layer key of the wrong length, a negative epsilon."""
    blocks = metadata.get(f"{arch}.block_count")
    for template, (kind, required) in arch_keys.ARCH_KEYS.get(arch, {}).items():
        key = template.format(arch=arch)
        found = types.get(key)
        if found is None:
            if required:
                raise _refuse(path, key, f"required key missing ({arch} reads it)")
            continue
        if kind is not arch_keys.PER_LAYER or found.value is not GGUFValueType.ARRAY:
            _expect_type(path, key, metadata, types, _U32 if kind is arch_keys.PER_LAYER else kind)
        elif _length(metadata.get(key)) != blocks or found.item not in PER_LAYER_ITEMS:
            items = metadata.get(key)
            problem = f"{_type_name(found)} of {_length(items)} items for {blocks} blocks{_first(items)}"
            raise _refuse(path, key, f"expected a UINT32 or one 32-bit integer per block, got {problem}")
        value = metadata.get(key)
        if template in arch_keys.NORM_EPS and isinstance(value, float) and value < 0:
            raise _refuse(path, key, f"a negative epsilon {value} (llama.cpp's norms assert eps >= 0)")


def check_required(path: str, arch: str, metadata: Mapping[str, MetaValue]) -> None:
    """Refuse, naming it, a key llama.cpp requires of every architecture that the file lacks."""
    for template in REQUIRED_KEYS:
        if template.format(arch=arch) not in metadata:
            raise _refuse(path, template.format(arch=arch), "required key missing")


def check_tokenizer(path: str, arch: str, metadata: Mapping[str, MetaValue], types: Mapping[str, KeyType]) -> None:
    """Refuse, naming the key, a tokenizer llama.cpp cannot load: an unknown or mistyped model, a token
    list that is not strings, scores or token types of another type or shorter than the list, and
    special-token ids or flags of another type. A file without ``tokenizer.ggml.model`` is refused:
    b11434's vocabulary loader (``llama_vocab::impl::load``), which runs for every model, requires it
    whether or not the file has a token list. A tokenizer without a vocabulary (``none``,
    ``no_vocab``) needs ``{arch}.vocab_size``: llama.cpp sizes the embedding by it (0 without it)."""
    model_key, tokens_key = Keys.Tokenizer.MODEL, Keys.Tokenizer.LIST
    model = metadata.get(model_key)
    if model is None:
        raise _refuse(path, model_key, MISSING_MODEL)
    _expect_type(path, model_key, metadata, types, _STR)
    if model not in TOKENIZER_MODELS:
        raise _refuse(path, model_key, f"unknown tokenizer {model!r}")
    for key, expected in TOKENIZER_KEYS.items():
        _expect_type(path, key, metadata, types, expected)
    if model in NO_VOCAB:
        vocab_size = f"{arch}.vocab_size"
        if vocab_size not in metadata:
            problem = f"tokenizer {model!r} lists no tokens; llama.cpp sizes the vocabulary by this"
            raise _refuse(path, vocab_size, f"required key missing: {problem}")
        return
    listed = types.get(tokens_key)
    if listed is None:
        raise _refuse(path, tokens_key, f"required key missing (tokenizer {model!r} has a vocabulary)")
    if listed != KeyType(GGUFValueType.ARRAY, _STR):
        raise _refuse(path, tokens_key, f"expected an array of STRING, got {_type_name(listed)}")
    tokens = _length(metadata.get(tokens_key))
    for key, items in ((SCORES, {GGUFValueType.FLOAT32, GGUFValueType.INT32}), (TOKEN_TYPES, {GGUFValueType.INT32})):
        found = types.get(key)
        if found is None:
            continue
        if found.value is not GGUFValueType.ARRAY or found.item not in items:
            wanted = " or ".join(sorted(item.name for item in items))
            raise _refuse(path, key, f"expected an array of {wanted}, got {_type_name(found)}")
        if _length(metadata.get(key)) < tokens:
            raise _refuse(path, key, f"{_length(metadata.get(key))} entries for {tokens} tokens")
    for key, expected in VOCAB_KEYS.items():
        _expect_type(path, key, metadata, types, expected)
