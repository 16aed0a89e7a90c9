"""The one exception hierarchy of layerfit.

Infeasible or timed-out plans are results (a ``Status``), never exceptions. Exceptions are for
input that cannot be understood: they name the field, file or byte offset that is wrong.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


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


def expect(value: T, expected: type | tuple[type, ...], argument: str) -> T:
    """``value`` when it is an instance of ``expected``; else ``InputError`` naming the argument.

    The Python API's entry points check their arguments with it, so that a dict or ``None`` given
    where a ``Deployment`` is expected is refused by name, not as an AttributeError deep inside.
    """
    if not isinstance(value, expected):
        names = " or ".join(t.__name__ for t in (expected if isinstance(expected, tuple) else (expected,)))
        raise InputError(argument, f"expected {names}, got {type(value).__name__} {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}..."
