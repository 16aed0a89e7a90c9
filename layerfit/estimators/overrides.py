"""Tensor overrides applied to a model's real tensor names, as llama.cpp's loader applies them.

Every tensor is tested against the override patterns in order (``re.search``, the first match
wins, see ``layerfit.llamacpp.expert_flags``). A matched tensor of block ``i`` stays in host RAM while
the rest of the block goes where the layout puts it: its bytes become the block's host part
(``MemoryProfile.block_expert_bytes``) and the block joins ``fixed_host_experts``. Input tensors
(token embedding) are on the host anyway; output-layer tensors moved to the host are not modelled.

The work is bounded whatever the file holds (up to ``MAX_TENSORS`` names): ``--cpu-moe`` and
``--n-cpu-moe``'s patterns are read off each name once (``match_expert_name``), and the ``-ot``
searches must fit ``SEARCH_BUDGET``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from layerfit.errors import InputError
from layerfit.estimators.header_access import BLOCK_PREFIX, OUTPUT_PREFIXES
from layerfit.estimators.model_shape import ModelShape
from layerfit.llamacpp.expert_flags import (
    CPU_MOE_FLAGS,
    EXPERTS_PATTERN,
    N_CPU_MOE_FLAGS,
    OVERRIDE_FLAGS,
    ExpertFlags,
    compile_pattern,
    expert_block_pattern,
    match_expert_name,
)

SEARCH_CALL_PATHS = 40
"""What testing one name against one pattern costs besides the search's backtracking, counted in
paths of up to ~20 ns: a ``re.search`` call (~0.4 us, ``benchmarks/override_patterns.py --tensors``),
and the key literal looked for in the name, here and when the search is counted."""
SEARCH_BUDGET = 50_000_000
"""Most paths the ``-ot`` searches of one estimate may take: per pattern and tensor
``SEARCH_CALL_PATHS``, and for the names holding the pattern's key literal (the required literal
the fewest names hold) the paths of its search core on them (``pattern_cost.names_paths``). About a
second at the slowest measured rate; a real model with llama.cpp's documented patterns uses well
under 1 %."""


class _Search(NamedTuple):
    """One ``-ot`` pattern's search: its core, compiled, and the literal a name must hold first."""

    regex: re.Pattern[str]
    key: str


class HostOverrides(NamedTuple):
    """Per block, the bytes the overrides keep on the host; and what did not match."""

    block_bytes: tuple[int, ...]
    warnings: tuple[str, ...]
    tensors: tuple[str, ...] = ()
    """The block tensors kept on the host, in file order."""

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(block for block, size in enumerate(self.block_bytes) if size)


class _Hit(NamedTuple):
    """The override that decides a tensor: its flag, its pattern, its place among those that warn."""

    flag: str
    text: str
    warns: int | None


def resolve(shape: ModelShape, flags: ExpertFlags) -> HostOverrides:
    """Where the overrides send each tensor of the model; ``InputError`` naming the flag when the
    flags do not fit the model or the ``-ot`` searches would take too long."""
    if (flags.cpu_moe or flags.n_cpu_moe is not None) and not any(shape.block_expert_bytes):
        flag = CPU_MOE_FLAGS[1] if flags.cpu_moe else N_CPU_MOE_FLAGS[1]
        raise InputError(flag, f"{shape.path} is a dense model: it has no expert tensors (ffn_*_exps)")
    if flags.n_cpu_moe is not None and flags.n_cpu_moe > shape.block_count:
        raise InputError(N_CPU_MOE_FLAGS[1], f"{flags.n_cpu_moe} exceeds the model's {shape.block_count} blocks")
    searches = search_cores([name for name, _ in shape.tensor_sizes], flags.override_tensor, shape.path)
    given = [(OVERRIDE_FLAGS[1], text) for text in flags.override_tensor]
    given += [(CPU_MOE_FLAGS[1], EXPERTS_PATTERN)] if flags.cpu_moe else []
    matched = [False] * len(given)  # --n-cpu-moe's patterns do not warn
    host = [0] * shape.block_count
    kept: list[str] = []
    for name, size in shape.tensor_sizes:
        hit = _first_hit(name, searches, flags)
        if hit is None:
            continue
        if hit.warns is not None:
            matched[hit.warns] = True
        block = BLOCK_PREFIX.match(name)
        if block is not None and int(block[1]) < shape.block_count:
            host[int(block[1])] += size
            kept.append(name)
        elif name.startswith(OUTPUT_PREFIXES):
            raise InputError(hit.flag, f"{hit.text!r} keeps output tensor {name} on the host: not modelled")
    warnings = tuple(
        f"{flag} pattern {text!r} matches no tensor of {shape.path}"
        for (flag, text), hit in zip(given, matched, strict=True)
        if not hit
    )
    return HostOverrides(block_bytes=tuple(host), warnings=warnings, tensors=tuple(kept))


def search_cores(names: Sequence[str], patterns: Sequence[str], path: str) -> list[_Search]:
    """The ``-ot`` patterns' searches (``pattern_cost.search_core``: the same verdict in fewer steps;
    a name without the core's key literal is not searched); ``InputError`` when testing every name
    against them exceeds ``SEARCH_BUDGET``."""
    floor = len(names) * len(patterns) * SEARCH_CALL_PATHS
    if floor > SEARCH_BUDGET:  # refused before reading the patterns, or counting their paths name by name
        raise InputError(OVERRIDE_FLAGS[0], _over_budget(len(names), patterns, path, floor))
    for text in patterns:
        compile_pattern(OVERRIDE_FLAGS[0], text)
    from layerfit.llamacpp.pattern_cost import anchors, search_core  # only with -ot: off the estimate's start-up path

    cores = [search_core(text) for text in patterns]
    paths = search_cost(names, cores)
    if paths > SEARCH_BUDGET:
        raise InputError(OVERRIDE_FLAGS[0], _over_budget(len(names), patterns, path, paths))
    return [_Search(re.compile(core, re.ASCII), anchors(core).key(names)) for core in cores]


def search_cost(names: Sequence[str], cores: Sequence[str]) -> int:
    """What ``SEARCH_BUDGET`` counts: per name and per core ``SEARCH_CALL_PATHS``, and the paths of
    searching the names that hold the core's key literal (``pattern_cost.names_paths``); the key is
    looked for in every name once per required literal, each such scan counted in the call's paths."""
    from layerfit.llamacpp.pattern_cost import anchors, names_paths  # only with -ot

    searched = sum(names_paths(core, names, anchors(core).key(names)) for core in cores)
    return len(names) * len(cores) * SEARCH_CALL_PATHS + searched


def name_cost(core: str, name: str) -> int:
    """What ``search_cost`` counts for one name and one core."""
    return search_cost([name], [core])


def _over_budget(tensors: int, patterns: Sequence[str], path: str, paths: int) -> str:
    count = f"{len(patterns)} patterns" if len(patterns) > 1 else f"pattern {patterns[0]!r}"
    return (
        f"{count} tested against each of the {tensors:,} tensors of {path} may take {paths:,} "
        f"backtracking paths, beyond layerfit's budget of {SEARCH_BUDGET:,} (about a second): use fewer "
        "or simpler patterns (one alternation such as blk\\.(1|2|3)\\.ffn_.*_exps instead of one pattern "
        "per block)"
    )


def _first_hit(name: str, searches: list[_Search], flags: ExpertFlags) -> _Hit | None:
    """The first override that matches ``name``, in llama.cpp's order (``ExpertFlags.patterns``)."""
    for index, (regex, key) in enumerate(searches):
        if key in name and regex.search(name):
            return _Hit(OVERRIDE_FLAGS[1], flags.override_tensor[index], index)
    if not flags.cpu_moe and not flags.n_cpu_moe:
        return None
    found = match_expert_name(name)
    if flags.cpu_moe and found.experts:
        return _Hit(CPU_MOE_FLAGS[1], EXPERTS_PATTERN, len(searches))
    if found.block is not None and found.block < (flags.n_cpu_moe or 0):
        return _Hit(N_CPU_MOE_FLAGS[1], expert_block_pattern(found.block), None)
    return None
