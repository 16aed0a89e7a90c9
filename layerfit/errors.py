"""The one exception hierarchy of layerfit.

Infeasible or timed-out plans are results (a ``Status``), never exceptions. Exceptions are for
input that cannot be understood: they name the field, file or byte offset that is wrong.
"""

from __future__ import annotations


class LayerfitError(Exception):
    """Base class of every error layerfit raises on purpose."""


class InputError(LayerfitError, ValueError):
    """Bad input: a field, flag or reference that cannot be accepted as given."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class EstimationError(LayerfitError):
    """A GGUF file that cannot be read or estimated: names the file and where it went wrong."""

    def __init__(self, path: str, where: str, problem: str) -> None:
        self.path = path
        self.where = where
        self.problem = problem
        super().__init__(f"{path}: {where}: {problem}")


class SolverError(LayerfitError):
    """The optimizer failed in a way that is not a result (invalid model, crash)."""
