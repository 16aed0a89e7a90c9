"""llama.cpp parameters, parsed from a backend-parameter list the way GPUStack passes them.

Accepted forms per item: ``--ctx-size 8192`` (one string), ``-c=8192``, or a flag followed by its
value as the next item. Every flag is looked up in llama-server's option table
(``layerfit.llamacpp.flag_table``): modelled flags become fields, flags without effect on memory are
kept in ``extra`` and passed through, and everything else is refused with a reason: an unknown flag
(with the nearest known one), a flag that changes memory in a way layerfit does not model, or one
whose value layerfit computes itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from pydantic import Field, ValidationError, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, Frozen
from layerfit.domain.limits import MAX_DEVICES
from layerfit.errors import InputError
from layerfit.llamacpp.flags import LEGACY_FLAGS, Flag, lookup, normalise, refusal, unknown_flag
from layerfit.llamacpp.shell_words import check_words, split_items

if TYPE_CHECKING:
    from layerfit.llamacpp.expert_flags import ExpertFlags

DEFAULT_CTX_SIZE = 8192
"""Context size GPUStack assumes when ``--ctx-size`` is not given."""

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FlashAttn = Literal["on", "off", "auto"]

EXPERT_FLAGS = "expert_flags"
"""The note of the modelled tensor-override flags (-ot, -cmoe, -ncmoe): they stay in ``extra``, in
command-line order, and ``layerfit.llamacpp.expert_flags`` reads them from there."""

INT_MAX = 2**31 - 1
"""Largest value of llama.cpp's integer options (``std::stoi``: a 32-bit ``int``)."""
ALL_LAYERS = INT_MAX
"""``-ngl all``: every layer on GPUs (any count above the model's layers means the same)."""
MAX_SEQUENCES = 256
"""Most ``-np`` sequences llama.cpp accepts (``LLAMA_MAX_SEQ``: "n_seq_max must be <= 256")."""
MAX_SPLIT_SHARES = MAX_DEVICES
"""Most ``-ts`` shares llama.cpp accepts: it refuses as many as its 16 devices ("got 16 input
configs, but system only has 16 devices"); the same count as the devices of one process."""
FLOAT_MAX = 3.4028234663852886e38
"""Largest ``-ts`` share (and sum of shares) llama.cpp reads: a 32-bit float (``std::stof``)."""
_DIGITS = frozenset("0123456789")

LoadMode = Literal["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"]
_UNMAPPED_LOAD_MODES = ("none", "mlock", "dio")
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")
_AUTOY = ("auto", "-1")


class LlamaParams(Frozen):
    """The llama.cpp options that change memory or placement. ``None`` means llama.cpp's default."""

    ctx_size: Annotated[int, Field(ge=0, le=INT_MAX), NOT_A_BOOLEAN] | None = None
    """``-c``; ``None`` is GPUStack's default (8192), 0 is the model's training context (as in llama.cpp)."""
    n_gpu_layers: Annotated[int, Field(ge=0, le=ALL_LAYERS), NOT_A_BOOLEAN] | None = None
    tensor_split: tuple[float, ...] | None = None
    parallel: Annotated[int, Field(ge=1, le=MAX_SEQUENCES), NOT_A_BOOLEAN] | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: FlashAttn = "auto"
    load_mode: LoadMode | None = None
    """``-lm``; ``None`` is llama.cpp's ``auto`` (memory-mapped where the devices allow it)."""
    batch_size: Annotated[int, Field(ge=1, le=INT_MAX), NOT_A_BOOLEAN] | None = None
    ubatch_size: Annotated[int, Field(ge=1, le=INT_MAX), NOT_A_BOOLEAN] | None = None
    swa_full: bool = False
    """``--swa-full``: sliding-window layers cache the whole context, as full-attention layers do."""
    kv_offload: bool = True
    """``-kvo``/``-nkvo``: ``False`` keeps the KV cache in host RAM, and the attention over it on the host."""
    kv_unified: bool | None = None
    """``-kvu``/``-no-kvu``: one KV cache shared by the sequences, or one per sequence; ``None`` is
    llama-server's default (shared when ``-np`` is not given)."""
    mmproj: str | None = None
    extra: tuple[str, ...] = ()
    """Flags without effect on the memory layerfit plans, passed through to ``llama-server`` unchanged."""

    @model_validator(mode="before")
    @classmethod
    def _mmap_switch(cls, data: Any) -> Any:
        """``mmap: false`` (older files and callers) is ``load_mode: none``."""
        if isinstance(data, dict) and "mmap" in data:
            data = dict(data)
            mmap = data.pop("mmap")
            if not isinstance(mmap, bool):
                raise InputError("mmap", f"expected true or false, got {mmap!r}")
            if "load_mode" in data:
                raise InputError("mmap", "give either mmap or load_mode, not both")
            data["load_mode"] = None if mmap else "none"
        return data

    @model_validator(mode="after")
    def _valid(self) -> Self:
        for name in ("cache_type_k", "cache_type_v"):
            _check_cache_type(name, getattr(self, name))
        if self.tensor_split is not None:
            _check_shares("tensor_split", self.tensor_split)
        _check_passed_through(self.extra)
        return self

    @property
    def mmap(self) -> bool:
        """Whether llama.cpp memory-maps the model file."""
        return self.load_mode not in _UNMAPPED_LOAD_MODES

    def expert_flags(self) -> ExpertFlags:
        """The tensor overrides among the pass-through flags (``-ot``, ``-cmoe``, ``-ncmoe``)."""
        from layerfit.llamacpp.expert_flags import parse_expert_flags  # not on the start-up path

        return parse_expert_flags(self.extra)[0]

    @property
    def uses_training_ctx(self) -> bool:
        """``-c 0``: the context size is the model's training context."""
        return self.ctx_size == 0

    def ctx_for(self, training_ctx: int) -> int:
        """The context size llama.cpp runs with for a model trained on ``training_ctx`` tokens."""
        if self.ctx_size is None:
            return DEFAULT_CTX_SIZE
        return self.ctx_size or training_ctx

    @property
    def effective_ctx_size(self) -> int:
        """The context size; with ``-c 0`` it depends on the model, so ask ``ctx_for`` instead."""
        if self.uses_training_ctx:
            raise InputError("ctx_size", "0 means the model's training context, which only the GGUF file knows")
        return self.ctx_for(0)

    @classmethod
    def from_args(cls, args: Sequence[str]) -> LlamaParams:
        """Parse a GPUStack backend-parameter list; ``InputError`` names the offending flag."""
        fields, flags = _parse_args(args)
        _check_overrides(fields["extra"])
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "backend_parameters"
            raise InputError(flags.get(name, name), str(first["msg"])) from None

    def to_args(self) -> tuple[str, ...]:
        """The memory-relevant flags as llama-server arguments (placement flags excluded)."""
        out: list[str] = ["-c", str(self.ctx_size if self.ctx_size is not None else DEFAULT_CTX_SIZE)]
        if self.parallel is not None:
            out += ["-np", str(self.parallel)]
        if self.cache_type_k != "f16":
            out += ["-ctk", self.cache_type_k]
        if self.cache_type_v != "f16":
            out += ["-ctv", self.cache_type_v]
        if self.flash_attn != "auto":
            out += ["-fa", self.flash_attn]
        if self.load_mode is not None:
            out += ["-lm", self.load_mode]
        if self.batch_size is not None:
            out += ["-b", str(self.batch_size)]
        if self.ubatch_size is not None:
            out += ["-ub", str(self.ubatch_size)]
        if self.swa_full:
            out.append("--swa-full")
        if not self.kv_offload:
            out.append("-nkvo")
        if self.kv_unified is not None:
            out.append("-kvu" if self.kv_unified else "-no-kvu")
        if self.mmproj is not None:
            out += ["--mmproj", self.mmproj]
        return (*out, *self.extra)


def _check_cache_type(flag: str, value: str) -> None:
    if value not in CACHE_TYPES:
        raise InputError(flag, f"unknown cache type {value!r}; known: {', '.join(CACHE_TYPES)}")


def _check_shares(flag: str, shares: tuple[float, ...]) -> None:
    if not shares:
        raise InputError(flag, "empty")
    if len(shares) > MAX_SPLIT_SHARES:
        raise InputError(flag, f"{len(shares)} shares; llama.cpp takes at most {MAX_SPLIT_SHARES} (one per device)")
    bad = [share for share in shares if not math.isfinite(share) or share < 0 or share > FLOAT_MAX]
    if bad:
        raise InputError(flag, f"shares must be finite, >= 0 and at most {FLOAT_MAX:.7g}, got {bad[0]} in {shares}")
    if sum(shares) <= 0:
        raise InputError(flag, "all shares are zero")
    if sum(shares) > FLOAT_MAX:
        raise InputError(flag, f"the shares add up to {sum(shares):.7g}, beyond llama.cpp's 32-bit floats")


def _check_passed_through(extra: tuple[str, ...]) -> None:
    """``extra`` holds only flags passed through to llama-server (and the tensor overrides), each
    with its values, as ``from_args`` leaves them: it is read as llama-server arguments, so that a
    refused flag, a modelled one (which belongs in its field) or a missing value is refused too;
    the tensor overrides' patterns are checked here, before any model is read."""
    check_words(extra)
    fields, flags = _parse_tokens(list(extra))
    _check_overrides(fields["extra"])
    modelled = next((field for field in fields if field != "extra"), None)
    if modelled is not None:
        raise InputError(flags[modelled], f"sets {modelled}: give it as that parameter, not in extra")


def _check_overrides(extra: tuple[str, ...]) -> None:
    """The tensor overrides in ``extra`` are well formed, portable and bounded (``expert_flags``)."""
    from layerfit.llamacpp.expert_flags import parse_expert_flags  # not on the start-up path

    parse_expert_flags(extra)


def _int_value(flag: str, text: str, lowest: int) -> int:
    if len(text) > 20:
        raise InputError(flag, f"expected an integer, got {text[:20]!r}...")
    digits = text.strip().removeprefix("-").removeprefix("+")
    if not digits or not _DIGITS.issuperset(digits):  # int() also reads '٣' or '1_0', llama.cpp does not
        raise InputError(flag, f"expected an integer, got {text!r}")
    value = int(text)
    if not lowest <= value <= INT_MAX:
        raise InputError(flag, f"must be between {lowest} and {INT_MAX}, got {value}")
    return value


def _ctx_value(flag: str, text: str) -> int:
    return _int_value(flag, text, 0)


def _positive_value(flag: str, text: str) -> int:
    return _int_value(flag, text, 1)


def _parallel_value(flag: str, text: str) -> int | None:
    value = _int_value(flag, text, -1)
    if value == 0:
        raise InputError(flag, "must be at least 1 (or -1 for automatic), got 0")
    if value > MAX_SEQUENCES:
        raise InputError(flag, f"llama.cpp runs at most {MAX_SEQUENCES} sequences, got {value}")
    return None if value == -1 else value


def _gpu_layers_value(flag: str, text: str) -> int | None:
    if text == "auto":
        return None
    if text == "all":
        return ALL_LAYERS
    return _int_value(flag, text, 0)


def _tensor_split_value(flag: str, text: str) -> tuple[float, ...]:
    parts = text.replace("/", ",").split(",")
    if any(part.strip() == "" for part in parts):
        raise InputError(flag, f"empty entry in {text!r}")
    try:
        shares = tuple(float(part) for part in parts)
    except ValueError:
        raise InputError(flag, f"expected comma-separated numbers, got {text!r}") from None
    _check_shares(flag, shares)
    return shares


def _cache_type_value(flag: str, text: str) -> str:
    _check_cache_type(flag, text)
    return text


def _flash_attn_value(flag: str, text: str) -> FlashAttn:
    if text in _TRUTHY:
        return "on"
    if text in _FALSEY:
        return "off"
    if text in _AUTOY:
        return "auto"
    raise InputError(flag, f"expected on, off or auto, got {text!r}")


def _load_mode_value(flag: str, text: str) -> LoadMode:
    if text not in get_args(LoadMode):
        raise InputError(flag, f"expected one of {', '.join(get_args(LoadMode))}, got {text!r}")
    return text  # type: ignore[return-value]


_CONVERTERS: dict[str, Callable[[str, str], Any]] = {
    "ctx_size": _ctx_value,
    "n_gpu_layers": _gpu_layers_value,
    "parallel": _parallel_value,
    "batch_size": _positive_value,
    "ubatch_size": _positive_value,
    "tensor_split": _tensor_split_value,
    "cache_type_k": _cache_type_value,
    "cache_type_v": _cache_type_value,
    "flash_attn": _flash_attn_value,
    "load_mode": _load_mode_value,
    "mmproj": lambda flag, text: text,
    "swa_full": lambda flag, text: True,
    "kv_offload": lambda flag, text: flag in ("-kvo", "--kv-offload"),
    "kv_unified": lambda flag, text: flag in ("-kvu", "--kv-unified"),
}
"""One converter per ``LlamaParams`` field that a ``MODELLED`` row of the flag table names."""

_FLASH_ATTN_VALUES = frozenset((*_TRUTHY, *_FALSEY, *_AUTOY))


def _a_flag(token: str) -> bool:
    """Whether the token after a bare ``--flash-attn`` is the next flag (``-1`` is its value)."""
    return token.startswith("-") and token not in _FLASH_ATTN_VALUES


def _take_values(flag: Flag, name: str, attached: str | None, tokens: list[str], i: int) -> tuple[list[str], int]:
    """The values that follow ``name`` at ``tokens[i]``, and the index after them."""
    if flag.arity == 0:
        if attached is not None:
            raise InputError(name, "takes no value")
        return [], i + 1
    values = [] if attached is None else [attached]
    i += 1
    if flag.field == "flash_attn" and attached is None and (i >= len(tokens) or _a_flag(tokens[i])):
        return ["on"], i  # a bare --flash-attn (older builds) turns it on; a value after it is checked
    while len(values) < flag.arity:
        if i >= len(tokens):
            raise InputError(name, "missing value")
        values.append(tokens[i])
        i += 1
    return values, i


def _flag_word(token: str) -> bool:
    return token.startswith("-") and token != "-"


def _flag_at(tokens: list[str], i: int) -> tuple[str, Flag, list[str], int]:
    """The flag at ``tokens[i]`` (its name as llama.cpp reads it, a legacy name translated), its
    values and the index after them; ``InputError`` for an unknown or refused flag."""
    name, eq, attached_text = tokens[i].partition("=")
    attached = attached_text if eq else None
    if name in LEGACY_FLAGS:
        if eq:
            raise InputError(name, "takes no value")
        name, attached = LEGACY_FLAGS[name]
    flag = lookup(name)
    if flag is None:
        raise unknown_flag(name)
    problem = refusal(name, flag)
    if problem is not None:
        raise problem
    values, i = _take_values(flag, name, attached, tokens, i)
    return name, flag, values, i


def positional_words(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """The words of a command line that no llama.cpp flag takes as its value (a model path given
    before or after the flags), and the flag words, in order. Flags are read as ``from_args`` reads
    them (their arity from the flag table, a bare ``-fa``); a word starting with ``-`` is split into
    words as a backend parameter is, the others are kept whole (a path may hold spaces)."""
    tokens: list[str] = []
    for word in words:
        tokens += split_items([word]) if _flag_word(word) else [word]
    positional: list[str] = []
    flag_words: list[str] = []
    i = 0
    while i < len(tokens):
        if not _flag_word(tokens[i]):
            positional.append(tokens[i])
            i += 1
            continue
        start = i
        i = _flag_at(tokens, i)[3]
        flag_words += tokens[start:i]
    return positional, flag_words


def _parse_args(args: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``LlamaParams`` fields these arguments set, and the flag that set each field."""
    return _parse_tokens(split_items(args))


def _parse_tokens(tokens: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``_parse_args`` of arguments already split into tokens."""
    fields: dict[str, Any] = {}
    flags: dict[str, str] = {}
    extra: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _flag_word(token):
            raise InputError(token, "a value without a flag before it")
        name, flag, values, i = _flag_at(tokens, i)
        if flag.field is None:  # a pass-through option: its values checked as llama.cpp parses them
            from layerfit.llamacpp.flag_values import check_values  # not on the start-up path

            check_values(name, flag.names, values)
        if flag.field is None or flag.field == EXPERT_FLAGS:
            extra += [normalise(name), *values]
            continue
        if flag.field in fields:
            raise InputError(name, "given more than once")
        fields[flag.field] = _CONVERTERS[flag.field](name, values[0] if values else "")
        flags[flag.field] = name
    fields["extra"] = tuple(extra)
    return fields, flags
