"""llama.cpp parameters, parsed from a backend-parameter list the way GPUStack passes them.

Accepted forms per item: ``--ctx-size 8192`` (one string), ``-c=8192``, or a flag followed by its
value as the next item. Unknown flags are kept in ``extra`` and passed through to ``llama-server``;
flags that would contradict the placement layerfit computes are rejected.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from layerfit.domain.base import Frozen, PosInt
from layerfit.errors import InputError

DEFAULT_CTX_SIZE = 8192
"""Context size GPUStack assumes when ``--ctx-size`` is not given."""

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FlashAttn = Literal["on", "off", "auto"]

# Flags whose value layerfit computes itself; a user value would silently fight the layout.
_RESERVED_FLAGS = {
    "--rpc": "layerfit chooses the RPC servers",
    "--device": "layerfit chooses the devices",
    "-dev": "layerfit chooses the devices",
    "--split-mode": "only layer split is modelled",
    "-sm": "only layer split is modelled",
    "--main-gpu": "layerfit chooses the main GPU",
    "-mg": "layerfit chooses the main GPU",
    "--fit": "layerfit's placement replaces llama.cpp's --fit",
    "-fit": "layerfit's placement replaces llama.cpp's --fit",
    "--model": "the model file is given separately",
    "-m": "the model file is given separately",
}

_ALIASES = {
    "-c": "ctx_size",
    "--ctx-size": "ctx_size",
    "-ngl": "n_gpu_layers",
    "--n-gpu-layers": "n_gpu_layers",
    "--gpu-layers": "n_gpu_layers",
    "-ts": "tensor_split",
    "--tensor-split": "tensor_split",
    "-np": "parallel",
    "--parallel": "parallel",
    "-ctk": "cache_type_k",
    "--cache-type-k": "cache_type_k",
    "-ctv": "cache_type_v",
    "--cache-type-v": "cache_type_v",
    "-fa": "flash_attn",
    "--flash-attn": "flash_attn",
    "--no-mmap": "no_mmap",
    "--mmap": "mmap",
    "-ub": "ubatch_size",
    "--ubatch-size": "ubatch_size",
    "-b": "batch_size",
    "--batch-size": "batch_size",
    "--mmproj": "mmproj",
    "-mm": "mmproj",
}

_VALUELESS = {"no_mmap", "mmap"}
_OPTIONAL_VALUE = {"flash_attn"}  # `--flash-attn` alone (older builds) or `--flash-attn on|off|auto`


class LlamaParams(Frozen):
    """The llama.cpp options that change memory or placement. ``None`` means llama.cpp's default."""

    ctx_size: PosInt | None = None
    n_gpu_layers: int | None = Field(default=None, ge=0)
    tensor_split: tuple[float, ...] | None = None
    parallel: PosInt | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: FlashAttn = "auto"
    mmap: bool = True
    batch_size: PosInt | None = None
    ubatch_size: PosInt | None = None
    mmproj: str | None = None
    extra: tuple[str, ...] = ()
    """Flags layerfit does not model, passed through to ``llama-server`` unchanged."""

    @model_validator(mode="after")
    def _valid(self) -> Self:
        for name in ("cache_type_k", "cache_type_v"):
            value = getattr(self, name)
            if value not in CACHE_TYPES:
                raise InputError(name, f"unknown cache type {value!r}; known: {', '.join(CACHE_TYPES)}")
        if self.tensor_split is not None:
            if not self.tensor_split:
                raise InputError("tensor_split", "empty")
            if any(part < 0 for part in self.tensor_split):
                raise InputError("tensor_split", f"negative share in {self.tensor_split}")
            if sum(self.tensor_split) <= 0:
                raise InputError("tensor_split", "all shares are zero")
        return self

    @property
    def effective_ctx_size(self) -> int:
        return self.ctx_size if self.ctx_size is not None else DEFAULT_CTX_SIZE

    @classmethod
    def from_args(cls, args: Sequence[str]) -> LlamaParams:
        """Parse a GPUStack backend-parameter list; ``InputError`` names the offending flag."""
        return cls(**_parse_args(args))

    def to_args(self) -> tuple[str, ...]:
        """The memory-relevant flags as llama-server arguments (placement flags excluded)."""
        out: list[str] = ["-c", str(self.effective_ctx_size)]
        if self.parallel is not None:
            out += ["-np", str(self.parallel)]
        if self.cache_type_k != "f16":
            out += ["-ctk", self.cache_type_k]
        if self.cache_type_v != "f16":
            out += ["-ctv", self.cache_type_v]
        if self.flash_attn != "auto":
            out += ["-fa", self.flash_attn]
        if not self.mmap:
            out.append("--no-mmap")
        if self.batch_size is not None:
            out += ["-b", str(self.batch_size)]
        if self.ubatch_size is not None:
            out += ["-ub", str(self.ubatch_size)]
        if self.mmproj is not None:
            out += ["--mmproj", self.mmproj]
        return (*out, *self.extra)


def _split_items(args: Sequence[str]) -> list[str]:
    """Flatten items such as ``"--ctx-size 8192"`` into tokens, keeping ``-c=8192`` as one token."""
    tokens: list[str] = []
    for item in args:
        if not isinstance(item, str):
            raise InputError("backend_parameters", f"expected strings, got {item!r}")
        try:
            tokens.extend(shlex.split(item))
        except ValueError as exc:
            raise InputError("backend_parameters", f"cannot split {item!r}: {exc}") from None
    return tokens


def _int_value(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(flag, f"expected an integer, got {text!r}") from None


def _tensor_split_value(flag: str, text: str) -> tuple[float, ...]:
    parts = text.replace("/", ",").split(",")
    if any(part.strip() == "" for part in parts):
        raise InputError(flag, f"empty entry in {text!r}")
    try:
        return tuple(float(part) for part in parts)
    except ValueError:
        raise InputError(flag, f"expected comma-separated numbers, got {text!r}") from None


def _flash_attn_value(flag: str, text: str | None) -> FlashAttn:
    if text is None:
        return "on"
    if text in ("on", "off", "auto"):
        return text  # type: ignore[return-value]
    if text in ("1", "true"):
        return "on"
    if text in ("0", "false"):
        return "off"
    raise InputError(flag, f"expected on, off or auto, got {text!r}")


_CONVERTERS: dict[str, Callable[[str, str], Any]] = {
    "ctx_size": _int_value,
    "n_gpu_layers": _int_value,
    "parallel": _int_value,
    "batch_size": _int_value,
    "ubatch_size": _int_value,
    "tensor_split": _tensor_split_value,
    "cache_type_k": lambda flag, text: text,
    "cache_type_v": lambda flag, text: text,
    "mmproj": lambda flag, text: text,
}


def _parse_args(args: Sequence[str]) -> dict[str, Any]:
    tokens = _split_items(args)
    fields: dict[str, Any] = {}
    extra: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, eq, attached = token.partition("=")
        if flag in _RESERVED_FLAGS:
            raise InputError(flag, f"cannot be set by the user: {_RESERVED_FLAGS[flag]}")
        name = _ALIASES.get(flag)
        if name is None:
            extra.append(token)
            i += 1
            continue
        if name in fields or (name in ("mmap", "no_mmap") and "mmap" in fields):
            raise InputError(flag, "given more than once")
        if name in _VALUELESS:
            if eq:
                raise InputError(flag, "takes no value")
            fields["mmap"] = name == "mmap"
            i += 1
            continue
        value: str | None = attached if eq else None
        if value is None and i + 1 < len(tokens) and (name not in _OPTIONAL_VALUE or not tokens[i + 1].startswith("-")):
            value = tokens[i + 1]
            i += 1
        i += 1
        if name == "flash_attn":
            fields[name] = _flash_attn_value(flag, value)
            continue
        if value is None:
            raise InputError(flag, "missing value")
        fields[name] = _CONVERTERS[name](flag, value)
        if name == "n_gpu_layers" and fields[name] < 0:
            raise InputError(flag, f"must be >= 0, got {fields[name]}")
    fields["extra"] = tuple(extra)
    return fields
