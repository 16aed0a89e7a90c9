"""Shared base for the frozen pydantic domain types."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import cache, cached_property, lru_cache
from itertools import pairwise
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ModelWrapValidatorHandler, model_validator
from pydantic_core import CoreSchema, core_schema


def _refusing_booleans(expected: str) -> Callable[[Any], Any]:
    """A before-validator for a field pydantic would read ``true`` into as the integer 1: a count,
    a size or an id written as a boolean is a mistake (an id of 1 may be another worker's)."""

    def refuse(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError(f"expected {expected}, got {str(value).lower()}")
        return value

    return refuse


class _Before:
    """A before-validator, as ``pydantic.BeforeValidator`` but without its per-field signature
    inspection (~70 ``inspect.signature`` calls in the schema builds of one ``estimate``)."""

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_before_validator_function(self.func, handler(source))


_not_a_boolean = _refusing_booleans("a number")
NOT_A_BOOLEAN = _Before(_not_a_boolean)
"""For an ``Annotated[int, ...]`` count with bounds of its own."""
ID_NOT_A_BOOLEAN = _Before(_refusing_booleans("a number or a string"))
"""For an ``Annotated[int | str, ...]`` id."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
"""Control and format characters: new lines, escape sequences, NUL, zero-width and bidirectional marks."""


def _printable(value: Any) -> Any:
    """A name is printed in tables and beside command lines: a new line in it would start a line of
    its own there (a worker ``a\\n[gpu-b] rm -rf /`` printed a command of its own), an escape
    sequence would rewrite the terminal."""
    if isinstance(value, str) and (found := _CONTROL.search(value)) is not None:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise ValueError(f"{shown!r} holds the control character {found.group()!r}; names are printable text")
    return value


PrintableName = Annotated[str, _Before(_printable)]
"""A name shown in the output (a GPU's model name): no control or format characters."""

Name = Annotated[str, _Before(_printable), Field(min_length=1)]
"""A name that identifies something (a deployment): not empty, no control or format characters."""

NonNegInt = Annotated[int, Field(ge=0), NOT_A_BOOLEAN]
"""A count or a size in bytes: never negative."""

PosInt = Annotated[int, Field(gt=0), NOT_A_BOOLEAN]

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}
_SIZE_PATTERN = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-zA-Z]*)\s*$", re.ASCII)
"""ASCII digits only: ``\\d`` and ``float`` also read other scripts' digits (``'２４ GiB'``)."""


def parse_size(value: Any) -> Any:
    """Accept ``"80 GiB"``, ``"512MiB"``, ``"1.5 GB"`` as well as plain integers (bytes)."""
    if not isinstance(value, str):
        return _not_a_boolean(value)
    return _size_of_text(value)


@lru_cache(maxsize=4096)
def _size_of_text(value: str) -> int:
    """``parse_size`` of one string, remembered: a large cluster file repeats the same few sizes."""
    match = _SIZE_PATTERN.match(value)
    unit = match["unit"].lower() if match else ""
    if match is None or unit not in _UNITS:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise ValueError(f"not a size: {shown!r} (write bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)")
    if len(match["number"]) > 30:
        raise ValueError(f"not a size: {len(match['number'])} digits (at most {MAX_BYTES} bytes)")
    return int(float(match["number"]) * _UNITS[unit])


MAX_BYTES = 2**50
"""Largest size accepted (1 PiB): far above any GPU, host or tensor, and small enough that sums over
thousands of devices stay inside the solver's 64-bit integers."""

Bytes = Annotated[int, _Before(parse_size), Field(ge=0, le=MAX_BYTES)]
"""A size in bytes, at most ``MAX_BYTES``; YAML/JSON may also write it with a unit (``"24 GiB"``)."""

GiB = 1024**3
MiB = 1024**2


class Frozen(BaseModel):
    """Immutable, strict-about-unknown-fields base model."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True, defer_build=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy without the source's cached lookups, which ``update`` may have made stale."""
        copy = super().model_copy(update=update, deep=deep)
        for name in _cached_properties(type(self)):
            copy.__dict__.pop(name, None)
        return copy


SCHEMA_VERSION: Literal[1] = 1
"""Version of the JSON that ``layerfit plan|explain|replan|estimate --json`` print (``layerfit schema``)."""


class Itemised(Frozen):
    """A frozen model with derived figures (``computed_field``: totals of its terms) in its dumps.

    The figures are output: on input they may be left out, and when given they must equal what the
    terms add up to, so that a dump read back is checked rather than trusted.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _derived_figures_agree(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        derived = cls.model_computed_fields
        if not isinstance(data, dict) or not derived.keys() & data.keys():
            return handler(data)
        given = {name: data[name] for name in derived if name in data}
        model = handler({key: value for key, value in data.items() if key not in derived})
        for name, value in given.items():
            if getattr(model, name) != value:
                raise ValueError(f"{name} is {value} but its terms add up to {getattr(model, name)}")
        return model


@cache
def _cached_properties(cls: type) -> tuple[str, ...]:
    """The cached properties of a class and its bases (computed once per class: copies are frequent)."""
    return tuple(
        name for klass in cls.__mro__ for name, value in vars(klass).items() if isinstance(value, cached_property)
    )


def strictly_ascending(values: tuple[int, ...]) -> bool:
    """Every value larger than the one before it (no repeats)."""
    return all(earlier < later for earlier, later in pairwise(values))


def format_bytes(n_bytes: int) -> str:
    """A human size: ``1.50 GiB``, ``512.0 MiB``; a size that would read ``0.0 MiB`` but is not zero
    in KiB or bytes (``20.0 KiB``, ``512 B``), so that only nothing reads as nothing."""
    if abs(n_bytes) >= GiB:
        return f"{n_bytes / GiB:.2f} GiB"
    mebibytes = f"{n_bytes / MiB:.1f}"
    if n_bytes == 0 or mebibytes not in ("0.0", "-0.0"):
        return f"{mebibytes} MiB"
    if abs(n_bytes) >= 1024:
        return f"{n_bytes / 1024:.1f} KiB"
    return f"{n_bytes} B"


def shown_size(n_bytes: int) -> int:
    """The least size at or above ``n_bytes`` that ``format_bytes`` shows as it is (``2.67 GiB`` is
    at least 2.67 GiB): a size a message asks for, so that doing what it says is enough."""
    if n_bytes <= 0:
        return 0
    step, digits = (GiB, 100) if n_bytes >= GiB else (MiB, 10)
    shown = -(-n_bytes * digits // step)
    return -(-shown * step // digits)


UNITS_NOTE = "GB, MB and TB are powers of 10 (1 GB = 10^9 bytes); GiB, MiB and TiB powers of 2 (1 GiB = 2^30 bytes)"
"""What the size units mean, for a message about two sizes that may have been written in different ones."""


def both_units(n_bytes: int) -> str:
    """A size in binary and decimal units: ``23.00 GiB = 24.70 GB``."""
    return f"{format_bytes(n_bytes)} = {n_bytes / 1e9:.2f} GB"


def exceeds(size: int, limit_field: str, limit: int) -> str:
    """``23.00 GiB = 24.70 GB exceeds total_vram_bytes 22.35 GiB = 24.00 GB;`` and what the units
    mean: two sizes that read alike in different units do not compare alike."""
    return f"{both_units(size)} exceeds {limit_field} {both_units(limit)}; {UNITS_NOTE}"


def spans(values: tuple[int, ...]) -> str:
    """Ascending integers as runs: ``3-4, 41-47``, ``5``."""
    runs: list[list[int]] = []
    for value in values:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def counted(n: int, noun: str) -> str:
    """``1 GPU``, ``2 GPUs``: a count with its noun (given in the plural), singular for one."""
    return f"{n} {noun[:-1] if n == 1 and noun.endswith('s') else noun}"
