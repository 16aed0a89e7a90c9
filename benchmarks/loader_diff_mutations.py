"""Seeded, header-level mutations of an architecture model for the loader differential.

Each mutation changes one thing a loader checks: a tensor dropped, added, reshaped along one axis
or given another type; a hyperparameter key changed, removed, written as another GGUF type or as a
per-layer array (of the wrong length, or with one block changed); a key llama.cpp reads that the
model lacks; a tokenizer key missing, of the wrong type or of the wrong length. ``mutate`` draws one
with the given ``random.Random`` and returns its kind, a description and the changed model (the
same draws give the same mutation). Tensor data stays zeros; sizes stay within a few blocks.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from loader_diff_files import GgufModel, Value

from layerfit.testing.synthetic import TensorSpec

Q = GGMLQuantizationType
Mutation = tuple[str, GgufModel]
"""A description of the change and the changed model."""

TENSOR_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q6_K, Q.MXFP4, Q.I32)
KEY_TYPES = (
    GGUFValueType.UINT8,
    GGUFValueType.UINT16,
    GGUFValueType.INT32,
    GGUFValueType.UINT32,
    GGUFValueType.INT64,
    GGUFValueType.UINT64,
    GGUFValueType.FLOAT32,
    GGUFValueType.FLOAT64,
    GGUFValueType.BOOL,
    GGUFValueType.STRING,
)
PER_LAYER_KEYS = (
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "expert_used_count",
)
"""Keys llama.cpp reads per layer (``get_key_or_arr``)."""
ADDED_KEYS: dict[str, tuple[object, ...]] = {
    "expert_count": (0, 2, 8, 16),
    "expert_used_count": (1, 2),
    "expert_feed_forward_length": (256, 512),
    "expert_shared_count": (1,),
    "expert_shared_feed_forward_length": (512,),
    "leading_dense_block_count": (1, 2),
    "attention.sliding_window": (0, 128, 4096),
    "attention.key_length_swa": (64, 128),
    "attention.value_length_swa": (64, 128),
    "attention.shared_kv_layers": (1, 2),
    "attention.kv_lora_rank": (64, 512),
    "nextn_predict_layers": (1,),
    "full_attention_interval": (2, 4),
    "rope.dimension_count": (32, 64, 128),
    "vocab_size": (100, 1000),
    "attention.causal": (False, True),
    "pooling_type": (0, 1, 2, 4),
}
"""Keys llama.cpp reads (for some architectures) with values a model might carry."""
TOKENIZER_MODELS = ("llama", "gpt2", "bert", "none", "no_vocab", "t5", "rwkv", "unknown-tokenizer", "")


# -- tensors ----------------------------------------------------------------------------------------


def _block_size(ggml_type: GGMLQuantizationType) -> int:
    return GGML_QUANT_SIZES[ggml_type][0]


def drop_tensor(model: GgufModel, rng: random.Random) -> Mutation | None:
    tensor = rng.choice(model.tensors)
    kept = [t for t in model.tensors if t is not tensor]
    return f"drop tensor {tensor.name}", model.with_tensors(kept)


def reshape_tensor(model: GgufModel, rng: random.Random) -> Mutation | None:
    """One axis doubled, halved, grown by a step, or a new trailing axis of 2."""
    index = rng.randrange(len(model.tensors))
    tensor = model.tensors[index]
    axis = rng.randrange(len(tensor.shape) + (1 if len(tensor.shape) < 4 else 0))
    dims = list(tensor.shape) + ([1] if axis == len(tensor.shape) else [])
    step = _block_size(tensor.ggml_type) if axis == 0 else 1
    choices = {dims[axis] * 2, dims[axis] + step, dims[axis] // 2 // step * step} - {0, dims[axis]}
    if axis == len(tensor.shape):
        choices = {2}
    if not choices:
        return None
    dims[axis] = rng.choice(sorted(choices))
    changed = TensorSpec(tensor.name, tuple(dims), tensor.ggml_type)
    tensors = list(model.tensors)
    tensors[index] = changed
    return f"reshape {tensor.name} {list(tensor.shape)} -> {dims}", model.with_tensors(tensors)


def retype_tensor(model: GgufModel, rng: random.Random) -> Mutation | None:
    index = rng.randrange(len(model.tensors))
    tensor = model.tensors[index]
    options = [q for q in TENSOR_TYPES if q != tensor.ggml_type and tensor.shape[0] % _block_size(q) == 0]
    if not options:
        return None
    new_type = rng.choice(options)
    tensors = list(model.tensors)
    tensors[index] = TensorSpec(tensor.name, tensor.shape, new_type)
    return f"retype {tensor.name} {tensor.ggml_type.name} -> {new_type.name}", model.with_tensors(tensors)


def _optional_tensors(model: GgufModel) -> list[TensorSpec]:
    """Tensors a model might carry that this one lacks: optional biases and norms, rope factors,
    an untied output, a block past the last, a tensor no loader knows."""
    names = {t.name for t in model.tensors}
    embd = next((t for t in model.tensors if t.name == "token_embd.weight"), None)
    d = embd.shape[0] if embd is not None else 256
    block = "blk.0."
    candidates = [
        TensorSpec(block + "attn_output.bias", (d,), Q.F32),
        TensorSpec(block + "ffn_down.bias", (d,), Q.F32),
        TensorSpec(block + "attn_norm.bias", (d,), Q.F32),
        TensorSpec(block + "attn_q_norm.weight", (64,), Q.F32),
        TensorSpec(block + "layer_output_norm.weight", (d,), Q.F32),
        TensorSpec(block + "unknown_thing.weight", (d,), Q.F32),
        TensorSpec("rope_freqs.weight", (32,), Q.F32),
        TensorSpec("token_embd_norm.weight", (d,), Q.F32),
        TensorSpec("mystery.weight", (d,), Q.F32),
        TensorSpec(f"blk.{model.blocks}.attn_norm.weight", (d,), Q.F32),
    ]
    if embd is not None:
        candidates.append(TensorSpec("output.weight", embd.shape, embd.ggml_type))
    return [t for t in candidates if t.name not in names]


def add_tensor(model: GgufModel, rng: random.Random) -> Mutation | None:
    """A tensor the model lacks: one of ``_optional_tensors`` or one a sibling block has."""
    missing = _optional_tensors(model)
    by_block: dict[str, set[int]] = {}
    for t in model.tensors:
        if t.name.startswith("blk."):
            number, _, leaf = t.name[4:].partition(".")
            by_block.setdefault(leaf, set()).add(int(number))
    for leaf, blocks in by_block.items():
        for block in sorted(set(range(model.blocks)) - blocks)[:1]:
            source = next(t for t in model.tensors if t.name == f"blk.{min(blocks)}.{leaf}")
            missing.append(TensorSpec(f"blk.{block}.{leaf}", source.shape, source.ggml_type))
    if not missing:
        return None
    tensor = rng.choice(missing)
    return f"add tensor {tensor.name} {list(tensor.shape)} {tensor.ggml_type.name}", model.with_tensors(
        [*model.tensors, tensor]
    )


# -- keys -------------------------------------------------------------------------------------------


def _arch_keys(model: GgufModel) -> list[str]:
    prefix = model.architecture + "."
    return [key for key in model.keys if key.startswith(prefix)]


def _changed_keys(model: GgufModel, key: str, value: Value | None) -> GgufModel:
    keys = dict(model.keys)
    if value is None:
        keys.pop(key, None)
    else:
        keys[key] = value
    return model.with_keys(keys)


def drop_key(model: GgufModel, rng: random.Random) -> Mutation | None:
    keys = [*_arch_keys(model), "general.architecture", "general.file_type"]
    key = rng.choice(keys)
    return f"drop key {key}", _changed_keys(model, key, None)


def _new_scalar(value: Value, rng: random.Random) -> object | None:
    v = value.value
    if value.type is GGUFValueType.BOOL:
        return not v
    if isinstance(v, int):
        return rng.choice(sorted({0, 1, v + 1, max(v - 1, 0), 2 * v, v // 2} - {v}))
    if isinstance(v, float):
        return rng.choice([0.0, -1.0, 2 * v + 1.0])
    if isinstance(v, str):
        return rng.choice(["", "linear", "yarn", "none", "nonsense"])
    return None


def set_key(model: GgufModel, rng: random.Random) -> Mutation | None:
    """An existing key's value changed (same type; one item of an array)."""
    key = rng.choice(_arch_keys(model))
    value = model.keys[key]
    if isinstance(value.value, tuple):
        items = list(value.value)
        at = rng.randrange(len(items))
        new = _new_scalar(Value(value.item_type or GGUFValueType.INT32, items[at]), rng)
        if new is None:
            return None
        items[at] = new
        return f"set {key}[{at}] = {new!r}", _changed_keys(model, key, Value(value.type, tuple(items), value.item_type))
    new = _new_scalar(value, rng)
    if new is None:
        return None
    return f"set {key} = {new!r}", _changed_keys(model, key, Value(value.type, new))


def _converted(value: object, to: GGUFValueType) -> object | None:
    if isinstance(value, tuple):
        return None
    if to is GGUFValueType.STRING:
        return str(value)
    if to is GGUFValueType.BOOL:
        return bool(value)
    if to in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(value) if isinstance(value, int | float) else None
    if not isinstance(value, int | float):
        return None
    number = int(value)
    limits = {GGUFValueType.UINT8: 2**8, GGUFValueType.UINT16: 2**16, GGUFValueType.INT32: 2**31}
    return number if number < limits.get(to, 2**63) else None


def retype_key(model: GgufModel, rng: random.Random) -> Mutation | None:
    """An existing key written as another GGUF type (the same value where it converts)."""
    key = rng.choice([*_arch_keys(model), "general.file_type"])
    value = model.keys[key]
    to = rng.choice([t for t in KEY_TYPES if t is not value.type])
    new = _converted(value.value, to)
    if new is None:
        return None
    return f"retype {key} {value.type.name} -> {to.name} ({new!r})", _changed_keys(model, key, Value(to, new))


def per_layer_array(model: GgufModel, rng: random.Random) -> Mutation | None:
    """A per-layer key as an array: of the wrong length, or of the right one with one block changed."""
    key = f"{model.architecture}.{rng.choice(PER_LAYER_KEYS)}"
    current = model.keys.get(key)
    if current is None or (current.type is not GGUFValueType.ARRAY and not isinstance(current.value, int)):
        return None
    items = list(current.value) if isinstance(current.value, tuple) else [current.value] * model.blocks
    if rng.random() < 0.4:
        length = rng.choice([model.blocks - 1, model.blocks + 1])
        items = (items * 2)[:length] if length > 0 else []
        if not items:
            return None
        what = f"{length} entries"
    else:
        at = rng.randrange(model.blocks)
        before = int(items[at])
        items[at] = rng.choice(sorted({0, before // 2, before * 2, before + 1} - {before}))
        what = f"block {at} {before} -> {items[at]}"
    item_type = rng.choice([GGUFValueType.INT32, GGUFValueType.UINT32])
    return f"array {key} ({what}, {item_type.name})", _changed_keys(
        model, key, Value(GGUFValueType.ARRAY, tuple(int(i) for i in items), item_type)
    )


def add_key(model: GgufModel, rng: random.Random) -> Mutation | None:
    """A key llama.cpp reads for some architecture, absent from this model."""
    absent = [k for k in ADDED_KEYS if f"{model.architecture}.{k}" not in model.keys]
    if not absent:
        return None
    name = rng.choice(absent)
    value = rng.choice(ADDED_KEYS[name])
    written = Value(GGUFValueType.BOOL, value) if isinstance(value, bool) else Value(GGUFValueType.UINT32, value)
    key = f"{model.architecture}.{name}"
    return f"add {key} = {value!r}", _changed_keys(model, key, written)


# -- tokenizer --------------------------------------------------------------------------------------


def tokenizer(model: GgufModel, rng: random.Random) -> Mutation | None:
    """A tokenizer key missing, of another type or length, or another tokenizer model."""
    tokens = model.keys["tokenizer.ggml.tokens"].value
    assert isinstance(tokens, tuple)
    vocab = len(tokens)
    choices: list[tuple[str, str, Value | None]] = [
        ("drop", "tokenizer.ggml.model", None),
        ("drop", "tokenizer.ggml.tokens", None),
        ("drop", "tokenizer.ggml.scores", None),
        ("drop", "tokenizer.ggml.token_type", None),
        ("model", "tokenizer.ggml.model", Value(GGUFValueType.STRING, rng.choice(TOKENIZER_MODELS))),
        ("type", "tokenizer.ggml.model", Value(GGUFValueType.UINT32, 1)),
        ("type", "tokenizer.ggml.tokens", Value(GGUFValueType.ARRAY, tuple(range(vocab)), GGUFValueType.INT32)),
        ("type", "tokenizer.ggml.scores", Value(GGUFValueType.ARRAY, tokens, GGUFValueType.STRING)),
        ("type", "tokenizer.ggml.token_type", Value(GGUFValueType.ARRAY, (1.0,) * vocab, GGUFValueType.FLOAT32)),
        ("length", "tokenizer.ggml.tokens", Value(GGUFValueType.ARRAY, tokens[: vocab // 2], GGUFValueType.STRING)),
        ("length", "tokenizer.ggml.scores", Value(GGUFValueType.ARRAY, (0.0,) * (vocab - 1), GGUFValueType.FLOAT32)),
        ("length", "tokenizer.ggml.token_type", Value(GGUFValueType.ARRAY, (1,) * (vocab - 1), GGUFValueType.INT32)),
        ("special", "tokenizer.ggml.bos_token_id", Value(GGUFValueType.UINT32, vocab + 5)),
        ("special", "tokenizer.ggml.eos_token_id", Value(GGUFValueType.STRING, "2")),
    ]
    what, key, value = rng.choice(choices)
    shown = "removed" if value is None else f"{value.type.name} {_short(value.value)}"
    return f"tokenizer {what} {key} {shown}", _changed_keys(model, key, value)


def _short(value: object) -> str:
    if isinstance(value, tuple):
        return f"[{len(value)} items]"
    return repr(value)


MUTATIONS: dict[str, Callable[[GgufModel, random.Random], Mutation | None]] = {
    "drop-tensor": drop_tensor,
    "reshape-tensor": reshape_tensor,
    "retype-tensor": retype_tensor,
    "add-tensor": add_tensor,
    "drop-key": drop_key,
    "set-key": set_key,
    "retype-key": retype_key,
    "per-layer-array": per_layer_array,
    "add-key": add_key,
    "tokenizer": tokenizer,
}


def mutate(model: GgufModel, rng: random.Random) -> tuple[str, str, GgufModel]:
    """One mutation of ``model``, its kind drawn first (another is drawn where it does not apply)."""
    for _ in range(100):
        kind = rng.choice(sorted(MUTATIONS))
        done = MUTATIONS[kind](model, rng)
        if done is not None:
            return kind, done[0], done[1]
    raise ValueError(f"no mutation applies to {model.name}")
