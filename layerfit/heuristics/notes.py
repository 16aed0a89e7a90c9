"""Sentences for people, and GPUStack's rule for which of them a plan shows.

Every strategy leaves notes at a level (error, warning, info) under its action name. A plan shows:
all errors when there is any; otherwise, when nothing fits, the advice of the first action in
display order (pre-check, multi-GPU, single GPU, distributed, partial, CPU) that left one, followed
by every warning; when something fits, only the warnings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from layerfit.domain.base import GiB


class Action(StrEnum):
    """GPUStack's event actions: one per strategy, plus the checks before them."""

    PRE_CHECK = "Pre-Check"
    SINGLE_GPU = "Single-Worker Single-GPU Full Offloading"
    MULTI_GPU = "Single-Worker Multi-GPU Full Offloading"
    DISTRIBUTED = "Distributed Deployment"
    PARTIAL = "Single-Worker Partial Offloading"
    CPU_ONLY = "CPU Offloading"


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


DISPLAY_ORDER = (
    Action.PRE_CHECK,
    Action.MULTI_GPU,
    Action.SINGLE_GPU,
    Action.DISTRIBUTED,
    Action.PARTIAL,
    Action.CPU_ONLY,
)


@dataclass(frozen=True, slots=True)
class Note:
    level: Level
    action: Action
    text: str


def gib(n_bytes: int) -> str:
    """Bytes as GiB with two decimals, the unit GPUStack's messages use."""
    return f"{n_bytes / GiB:.2f}"


def sentences(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def shown_messages(notes: Sequence[Note], found: bool) -> tuple[str, ...]:
    """The messages a plan shows, by GPUStack's rule (see the module docstring)."""
    errors = _unique(note.text for note in notes if note.level is Level.ERROR)
    if errors:
        return errors
    shown: list[str] = []
    if not found:
        advice = {note.action: note.text for note in notes if note.level is Level.INFO}
        first = next((advice[action] for action in DISPLAY_ORDER if action in advice), None)
        if first is not None:
            shown.append(first)
    shown.extend(_unique(note.text for note in notes if note.level is Level.WARNING))
    return tuple(shown)


def _unique(texts: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(texts))


def requirement(vram_bytes: int, ram_bytes: int, suffix: str = "") -> str:
    return f"The model requires approximately {gib(vram_bytes)} GiB VRAM and {gib(ram_bytes)} GiB RAM{suffix}."


def largest_worker(vram_bytes: int, ram_bytes: int) -> str:
    return f"The largest available worker provides {gib(vram_bytes)} GiB VRAM and {gib(ram_bytes)} GiB RAM."
