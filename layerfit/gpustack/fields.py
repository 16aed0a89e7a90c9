"""Reading GPUStack objects and dicts alike: one accessor, GPUStack's GPU types, its id format."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from layerfit.errors import InputError

_MISSING = object()

UNIFIED_MEMORY_GPU_TYPES = frozenset({"mps", "metal"})
"""GPU types whose memory is the host's: Apple GPUs (GPUStack names them ``mps``)."""


def field(obj: Any, path: str, default: Any = _MISSING) -> Any:
    """``obj.a.b`` or ``obj["a"]["b"]`` for ``path="a.b"``; ``default`` when a part is absent or None.

    Deprecation warnings raised by reading a field are errors: a deprecated field is one GPUStack no
    longer fills, so reading it would silently return nothing.
    """
    current = obj
    for part in path.split("."):
        if current is None:
            break
        if isinstance(current, Mapping):
            current = current.get(part)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            current = getattr(current, part, None)
    if current is None:
        if default is _MISSING:
            raise InputError(path, "missing in the GPUStack object")
        return default
    return current


def items(obj: Any) -> list[tuple[Any, Any]]:
    """Key/value pairs of a mapping or of an attribute object (labels, per-GPU claims)."""
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        return list(obj.items())
    return list(vars(obj).items())


def int_map(obj: Any, where: str) -> dict[int, int]:
    """A GPUStack ``{gpu_index: bytes}`` map; JSON gives its keys as strings."""
    result: dict[int, int] = {}
    for key, value in items(obj):
        try:
            index, size = int(key), int(value)
        except (TypeError, ValueError):
            raise InputError(where, f"expected {{gpu_index: bytes}}, got {key!r}: {value!r}") from None
        if index < 0 or size < 0:
            raise InputError(where, f"negative GPU index or size: {key!r}: {value!r}")
        result[index] = result.get(index, 0) + size
    return result


def non_negative(value: Any, where: str) -> int:
    """An integer size or count; ``InputError`` naming the field when it is not one or negative."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(where, f"expected an integer, got {value!r}") from None
    if number < 0:
        raise InputError(where, f"must be >= 0, got {number}")
    return number


def gpu_id(worker_name: str, gpu_type: str, index: int) -> str:
    """GPUStack's GPU id: ``worker_name:type:index``."""
    return f"{worker_name}:{gpu_type}:{index}"
