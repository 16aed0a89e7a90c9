"""Helpers the small decoder models (``arch_fixtures_decoders``) share with ``arch_spec``."""

from __future__ import annotations

from layerfit.estimators.arch_spec import arch_spec
from layerfit.estimators.synthetic import TensorSpec

Table = list[TensorSpec]
small_spec = arch_spec
"""``arch_spec.ARCH_DEFAULTS`` with the model's own fields."""


def without(tensors: Table, *suffixes: str) -> Table:
    """The table less every tensor whose name ends with one of ``suffixes``."""
    return [t for t in tensors if not t.name.endswith(suffixes)]
