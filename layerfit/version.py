"""layerfit's version: read by setuptools (pyproject's dynamic version) and printed by ``layerfit
--version``; a module of its own, below every other part, so that any part may name it."""

__version__ = "0.1.0"
