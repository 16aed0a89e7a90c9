"""Tensor overrides applied to a model's real tensor names, as llama.cpp's loader applies them.

Every tensor is tested against the override patterns in order (``re.search``, the first match
wins, see ``layerfit.domain.expert_flags``). A matched tensor of block ``i`` stays in host RAM while
the rest of the block goes where the layout puts it: its bytes become the block's host part
(``MemoryProfile.block_expert_bytes``) and the block joins ``fixed_host_experts``. Input tensors
(token embedding) are on the host anyway; output-layer tensors moved to the host are not modelled.
"""

from __future__ import annotations

from typing import NamedTuple

from layerfit.domain.expert_flags import CPU_MOE_FLAGS, N_CPU_MOE_FLAGS, ExpertFlags, compile_pattern
from layerfit.errors import InputError
from layerfit.estimators.header_access import BLOCK_PREFIX, OUTPUT_PREFIXES
from layerfit.estimators.shape import ModelShape


class HostOverrides(NamedTuple):
    """Per block, the bytes the overrides keep on the host; and what did not match."""

    block_bytes: tuple[int, ...]
    warnings: tuple[str, ...]
    tensors: tuple[str, ...] = ()
    """The block tensors kept on the host, in file order."""

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(block for block, size in enumerate(self.block_bytes) if size)


def resolve(shape: ModelShape, flags: ExpertFlags) -> HostOverrides:
    """Where the overrides send each tensor of the model; ``InputError`` naming the flag when the
    flags do not fit the model."""
    if (flags.cpu_moe or flags.n_cpu_moe is not None) and not any(shape.block_expert_bytes):
        flag = CPU_MOE_FLAGS[1] if flags.cpu_moe else N_CPU_MOE_FLAGS[1]
        raise InputError(flag, f"{shape.path} is a dense model: it has no expert tensors (ffn_*_exps)")
    if flags.n_cpu_moe is not None and flags.n_cpu_moe > shape.block_count:
        raise InputError(N_CPU_MOE_FLAGS[1], f"{flags.n_cpu_moe} exceeds the model's {shape.block_count} blocks")
    patterns = [(flag, text, compile_pattern(flag, text)) for flag, text in flags.patterns()]
    matched = [False] * len(patterns)
    host = [0] * shape.block_count
    kept: list[str] = []
    for name, size in shape.tensor_sizes:
        hit = next((k for k, (_, _, pattern) in enumerate(patterns) if pattern.search(name)), None)
        if hit is None:
            continue
        matched[hit] = True
        block = BLOCK_PREFIX.match(name)
        if block is not None and int(block[1]) < shape.block_count:
            host[int(block[1])] += size
            kept.append(name)
        elif name.startswith(OUTPUT_PREFIXES):
            flag, text, _ = patterns[hit]
            raise InputError(flag, f"{text!r} keeps output tensor {name} on the host: not modelled")
    warnings = tuple(
        f"{flag} pattern {text!r} matches no tensor of {shape.path}"
        for (flag, text, _), hit in zip(patterns, matched, strict=True)
        if not hit and flag not in N_CPU_MOE_FLAGS
    )
    return HostOverrides(block_bytes=tuple(host), warnings=warnings, tensors=tuple(kept))
