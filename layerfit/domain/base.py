"""Shared base for the frozen pydantic domain types."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

NonNegInt = Annotated[int, Field(ge=0)]
"""A count or a size in bytes: never negative."""

PosInt = Annotated[int, Field(gt=0)]

GiB = 1024**3
MiB = 1024**2


class Frozen(BaseModel):
    """Immutable, strict-about-unknown-fields base model."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


def format_bytes(n_bytes: int) -> str:
    """A human size: ``1.50 GiB``, ``512.0 MiB``."""
    if abs(n_bytes) >= GiB:
        return f"{n_bytes / GiB:.2f} GiB"
    return f"{n_bytes / MiB:.1f} MiB"
