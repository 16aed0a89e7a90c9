"""Reading GPUStack objects and dicts alike: one accessor, GPUStack's GPU types, its id format."""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
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


def items(obj: Any, where: str) -> list[tuple[Any, Any]]:
    """Key/value pairs of a mapping or of an attribute object (labels, per-GPU claims)."""
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        return list(obj.items())
    if isinstance(obj, str | bytes | int | float | Sequence) or not hasattr(obj, "__dict__"):
        raise InputError(where, f"expected a mapping, got {type(obj).__name__} {_shown(obj)}")
    return list(vars(obj).items())


def as_list(obj: Any, where: str) -> list[Any]:
    """A GPUStack list (workers, GPU devices, categories, ...); ``None`` is an empty one."""
    if obj is None:
        return []
    if isinstance(obj, str | bytes | Mapping) or not isinstance(obj, Sequence):
        raise InputError(where, f"expected a list, got {type(obj).__name__} {_shown(obj)}")
    return list(obj)


def is_key(value: Any) -> bool:
    """Whether ``value`` can key a dict (a worker id read from a dict input may be a list)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def record(obj: Any, where: str) -> Any:
    """``obj`` when it is a GPUStack object (attributes) or a mapping; ``InputError`` naming ``where``
    otherwise (a string, a number, a list, ``None``), whose fields would all read as absent."""
    if isinstance(obj, Mapping) or (hasattr(obj, "__dict__") and not isinstance(obj, type)):
        return obj
    raise InputError(where, f"expected a GPUStack object or a mapping, got {type(obj).__name__} {_shown(obj)}")


def listed(obj: Any, path: str, where: str) -> list[Any]:
    """``as_list`` of the field at ``path`` (absent: empty)."""
    return as_list(field(obj, path, None), where)


def int_map(obj: Any, where: str) -> dict[int, int]:
    """A GPUStack ``{gpu_index: bytes}`` map; JSON gives its keys as strings."""
    result: dict[int, int] = {}
    for key, value in items(obj, where):
        index = non_negative(key, f"{where} key {key!r}")
        result[index] = result.get(index, 0) + non_negative(value, f"{where}[{key!r}]")
    return result


def non_negative(value: Any, where: str) -> int:
    """An integer size or count (an int, a whole finite float, or decimal digits); ``InputError``
    naming the field when it is absent (``None``), anything else (a boolean, 1.5, inf, NaN) or negative."""
    if value is None:
        raise InputError(where, "missing in the GPUStack object")
    whole_float = isinstance(value, float) and math.isfinite(value) and value.is_integer()
    digits = isinstance(value, str) and value.strip().isascii() and value.strip().lstrip("-").isdigit()
    if not (isinstance(value, int) and not isinstance(value, bool)) and not whole_float and not digits:
        raise InputError(where, f"expected an integer, got {_shown(value)}")
    number = int(value)
    if number < 0:
        raise InputError(where, f"must be >= 0, got {number}")
    return number


def gpu_device_index(device: Any, worker_name: str, position: int) -> int:
    """A GPU device's ``index`` (the id llama.cpp and GPUStack's claims use); ``InputError`` naming
    the worker and the device when it is absent: GPUStack only warns then and later fails building
    the claim, and the device's position in the list is no safe stand-in (another device may carry
    that index, and the candidate would name a GPU the worker does not report)."""
    where = f"worker[{worker_name}].status.gpu_devices[{position}].index"
    index = field(device, "index", None)
    if index is None:
        raise InputError(where, "missing: GPUStack reports no index for this GPU")
    return non_negative(index, where)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}..."


def gpu_id(worker_name: str, gpu_type: str, index: int) -> str:
    """GPUStack's GPU id: ``worker_name:type:index``."""
    return f"{worker_name}:{gpu_type}:{index}"
