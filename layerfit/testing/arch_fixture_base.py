"""Table helpers the small decoder models (``arch_fixtures_decoders``) use."""

from __future__ import annotations

from layerfit.testing.synthetic import TensorSpec

Table = list[TensorSpec]


def without(tensors: Table, *suffixes: str) -> Table:
    """The table less every tensor whose name ends with one of ``suffixes``."""
    return [t for t in tensors if not t.name.endswith(suffixes)]
