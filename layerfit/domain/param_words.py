"""llama.cpp's command-line words read as ``LlamaParams`` fields: each flag looked up in the flag
table (its arity, its field), each value converted and checked as llama.cpp reads it, and the words
no flag takes found (``positional_words``: a model path before or after the flags)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

from layerfit.domain.limits import MAX_DEVICES
from layerfit.errors import InputError
from layerfit.llamacpp.flags import LEGACY_FLAGS, Flag, lookup, normalise, refusal, unknown_flag
from layerfit.llamacpp.shell_words import check_words, split_items

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
UNMAPPED_LOAD_MODES = ("none", "mlock", "dio")
_TRUTHY = ("on", "enabled", "true", "1")
_FALSEY = ("off", "disabled", "false", "0")
_AUTOY = ("auto", "-1")


def check_cache_type(flag: str, value: str) -> None:
    if value not in CACHE_TYPES:
        raise InputError(flag, f"unknown cache type {value!r}; known: {', '.join(CACHE_TYPES)}")


def check_shares(flag: str, shares: tuple[float, ...]) -> None:
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


def check_passed_through(extra: tuple[str, ...]) -> None:
    """``extra`` holds only flags passed through to llama-server (and the tensor overrides), each
    with its values, as ``from_args`` leaves them: it is read as llama-server arguments, so that a
    refused flag, a modelled one (which belongs in its field) or a missing value is refused too;
    the tensor overrides' patterns are checked here, before any model is read."""
    check_words(extra)
    fields, flags = parse_tokens(list(extra))
    check_overrides(fields["extra"])
    modelled = next((field for field in fields if field != "extra"), None)
    if modelled is not None:
        raise InputError(flags[modelled], f"sets {modelled}: give it as that parameter, not in extra")


def check_overrides(extra: tuple[str, ...]) -> None:
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
    check_shares(flag, shares)
    return shares


def _cache_type_value(flag: str, text: str) -> str:
    check_cache_type(flag, text)
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


CONVERTERS: dict[str, Callable[[str, str], Any]] = {
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


def parse_args(args: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``LlamaParams`` fields these arguments set, and the flag that set each field."""
    return parse_tokens(split_items(args))


def parse_tokens(tokens: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``parse_args`` of arguments already split into tokens."""
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
        fields[flag.field] = CONVERTERS[flag.field](name, values[0] if values else "")
        flags[flag.field] = name
    fields["extra"] = tuple(extra)
    return fields, flags
