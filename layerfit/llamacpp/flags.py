"""Looking up llama-server options in the one table (``flag_table``): known, modelled, or refused."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

from layerfit.errors import InputError
from layerfit.llamacpp.flag_table import LLAMA_CPP_VERSION, ROWS, Effect

__all__ = [
    "LEGACY_FLAGS",
    "LLAMA_CPP_VERSION",
    "Effect",
    "Flag",
    "all_flags",
    "closest_flag",
    "kind_contradiction",
    "kind_of_switches",
    "lookup",
    "refusal",
]

LEGACY_FLAGS: dict[str, tuple[str, str]] = {
    "--no-mmap": ("--load-mode", "none"),
    "--mmap": ("--load-mode", "mmap"),
}
"""Flags of older llama.cpp builds that layerfit still reads, with the option and value they became."""


class Flag(NamedTuple):
    """One llama-server option: its names, how many values follow it, and its effect on memory."""

    names: tuple[str, ...]
    arity: int
    effect: Effect
    note: str

    @property
    def name(self) -> str:
        """The long name when there is one (``--ctx-size``), else the first."""
        return next((name for name in self.names if name.startswith("--")), self.names[0])

    @property
    def field(self) -> str | None:
        """The ``LlamaParams`` field a modelled flag sets."""
        return self.note if self.effect is Effect.MODELLED else None


@cache
def all_flags() -> tuple[Flag, ...]:
    """Every row of the table as a ``Flag``."""
    return tuple(Flag(tuple(names.split()), arity, effect, note) for names, arity, effect, note in ROWS)


@cache
def _by_name() -> dict[str, Flag]:
    return {name: flag for flag in all_flags() for name in flag.names}


def normalise(name: str) -> str:
    """llama.cpp reads ``--ctx_size`` as ``--ctx-size`` (underscores in long names become dashes)."""
    return name.replace("_", "-") if name.startswith("--") else name


def lookup(name: str) -> Flag | None:
    """The option called ``name`` (any of its spellings), or ``None`` if llama-server has none."""
    return _by_name().get(normalise(name))


def closest_flag(name: str) -> str | None:
    """The known option name nearest to a misspelled one (``--ctx-szie`` -> ``--ctx-size``)."""
    import difflib  # only for a misspelling: kept off the start-up path

    candidates = [*_by_name(), *LEGACY_FLAGS]
    matches = difflib.get_close_matches(normalise(name), candidates, n=1, cutoff=0.6)
    return matches[0] if matches else None


def unknown_flag(name: str) -> InputError:
    """The error for a name llama-server does not know, with the nearest known one."""
    guess = closest_flag(name)
    hint = f"; did you mean {guess}?" if guess else ""
    return InputError(name, f"not an option of llama-server ({LLAMA_CPP_VERSION}){hint}")


def refusal(name: str, flag: Flag) -> InputError | None:
    """Why layerfit refuses this flag, or ``None`` when it accepts it."""
    if flag.effect is Effect.DECIDED:
        return InputError(name, f"cannot be set by the user: {flag.note}")
    if flag.effect is Effect.NOT_MODELLED:
        return InputError(name, f"changes memory in a way layerfit does not model ({flag.note}); remove it")
    return None


_KINDS_OF_MODE: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("--embedding", None): ("embedding", "reranker"),
    ("--rerank", None): ("reranker",),
    ("--pooling", "none"): ("llm", "embedding"),
    ("--pooling", "mean"): ("embedding",),
    ("--pooling", "cls"): ("embedding",),
    ("--pooling", "last"): ("embedding",),
    ("--pooling", "rank"): ("reranker",),
}
"""The deployment kinds each embedding or reranking switch agrees with (llama.cpp: ``--embedding``
serves embeddings only, ``--rerank`` is ``--embedding`` with rank pooling, a reranker needs rank
pooling, and pooling other than ``none`` turns a generation server into an embedding one)."""


def kind_contradiction(kind: str, args: Sequence[str]) -> InputError | None:
    """The first embedding or reranking switch in ``args`` (``LlamaParams.extra``) that contradicts
    the deployment's ``kind``, as an error naming the flag; ``None`` when they agree."""
    for i, token in enumerate(args):
        flag = lookup(token)
        if flag is None or flag.effect is not Effect.BY_KIND:
            continue
        value = args[i + 1] if flag.arity and i + 1 < len(args) else None
        kinds = _KINDS_OF_MODE.get((flag.name, value))
        if kinds is None:
            return InputError(token, f"{value!r} is not a pooling of llama-server: none, mean, cls, last or rank")
        if kind not in kinds:
            shown = f"{token} {value}" if value is not None else token
            wanted = " or ".join(kinds)
            return InputError(
                token,
                f"{shown} makes llama-server a server for kind {wanted}, but the deployment's kind is {kind}: "
                f"set kind {wanted} (--kind, or GPUStack's model category) or remove the flag",
            )
    return None


_SWITCH_OF_KIND: dict[str, str] = {"embedding": "--embedding", "reranker": "--rerank"}
_SERVES_KIND: dict[str, frozenset[str]] = {
    "embedding": frozenset({"--embedding", "--rerank"}),
    "reranker": frozenset({"--rerank"}),
}


def kind_switches(kind: str, args: Sequence[str]) -> tuple[str, ...]:
    """The llama-server switch that serves a deployment of ``kind`` as it is planned: ``--embedding``
    or ``--rerank`` (llama-server answers no embedding request without one, whatever ``--pooling``
    says); nothing for ``llm``/``image``, nor when ``args`` already carry such a switch."""
    switch = _SWITCH_OF_KIND.get(kind)
    given = {flag.name for token in args if (flag := lookup(token)) is not None}
    if switch is None or given & _SERVES_KIND[kind]:
        return ()
    return (switch,)


def kind_of_switches(args: Sequence[str]) -> str:
    """The deployment kind the embedding and reranking switches in ``args`` ask for (``llm``
    without any), for callers that have no kind of their own (``layerfit estimate``); an error
    naming the flag when they contradict each other."""
    for kind in ("llm", "embedding", "reranker"):
        if kind_contradiction(kind, args) is None:
            return kind
    problem = kind_contradiction("reranker", args) or kind_contradiction("embedding", args)
    assert problem is not None
    raise InputError(problem.field, "contradicts the other embedding or reranking flags: give one consistent set")
