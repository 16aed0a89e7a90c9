"""llama.cpp parameters, parsed from a backend-parameter list the way GPUStack passes them.

Accepted forms per item: ``--ctx-size 8192`` (one string), ``-c=8192``, or a flag followed by its
value as the next item (the words are read in ``param_words``). Every flag is looked up in
llama-server's option table (``layerfit.llamacpp.flag_table``): modelled flags become fields, flags
without effect on memory are kept in ``extra`` and passed through, and everything else is refused
with a reason: an unknown flag (with the nearest known one), a flag that changes memory in a way
layerfit does not model, or one whose value layerfit computes itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import Field, ValidationError, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, Frozen
from layerfit.domain.param_words import (
    ALL_LAYERS,
    INT_MAX,
    MAX_SEQUENCES,
    UNMAPPED_LOAD_MODES,
    FlashAttn,
    LoadMode,
    check_cache_type,
    check_overrides,
    check_passed_through,
    check_shares,
    parse_args,
)
from layerfit.errors import InputError

if TYPE_CHECKING:
    from layerfit.llamacpp.expert_flags import ExpertFlags

DEFAULT_CTX_SIZE = 8192
"""Context size GPUStack assumes when ``--ctx-size`` is not given."""


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
            check_cache_type(name, getattr(self, name))
        if self.tensor_split is not None:
            check_shares("tensor_split", self.tensor_split)
        check_passed_through(self.extra)
        return self

    @property
    def mmap(self) -> bool:
        """Whether llama.cpp memory-maps the model file."""
        return self.load_mode not in UNMAPPED_LOAD_MODES

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
        fields, flags = parse_args(args)
        check_overrides(fields["extra"])
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


