"""The layout of the package, as docs/design.md describes it: no import cycle, the solver's three
layers in order, the llama.cpp grammar below the domain types, fixtures out of the runtime, and no
module past the size where it should become a package.

Imports are read from the source (every ``import`` and ``from ... import``, inside functions and
``TYPE_CHECKING`` blocks too), so a late import does not hide an arrow."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "layerfit"
MAX_MODULE_LINES = 400
"""Past this a module should become a package (a data table may split into its own module)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imported(module: str) -> Iterator[str]:
    """Every module (of the package or not) ``module`` imports, by its dotted name."""
    modules = _modules()
    for node in ast.walk(ast.parse(modules[module].read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in modules else node.module


@cache
def _graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    return {module: frozenset(name for name in _imported(module) if name in modules) for module in modules}


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({**graph, "c": frozenset()}) == []


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("layerfit.solver.model", "layerfit.solver.shortcuts"),
        ("layerfit.solver.model", "layerfit.solver.search"),
        ("layerfit.solver.shortcuts", "layerfit.solver.search"),
    ],
)
def test_solver_layers_point_one_way(lower: str, upper: str) -> None:
    against = [(m, d) for m, deps in _graph().items() if _in(m, lower) for d in deps if _in(d, upper)]
    assert against == []


GRAMMAR = ("flag_table", "flags", "flag_values", "expert_flags", "pattern_cost", "shell_words", "builds")


@pytest.mark.parametrize("module", [f"layerfit.llamacpp.{name}" for name in GRAMMAR])
def test_the_llamacpp_grammar_sits_below_the_domain_types(module: str) -> None:
    # only the shared base of the frozen types, the errors and the grammar itself
    allowed = ("layerfit.errors", "layerfit.domain.base", "layerfit.domain.choices", "layerfit.llamacpp")
    assert [d for d in _graph()[module] if not any(_in(d, a) for a in allowed)] == []


RANKS = {
    "layerfit.version": 0,
    "layerfit.errors": 0,
    "layerfit.domain.base": 0.5,
    "layerfit.domain.choices": 0.5,
    "layerfit.llamacpp.grammar": 1,
    "layerfit.domain": 2,
    "layerfit.remote": 2.5,
    "layerfit.io": 3,
    "layerfit.budget": 3,
    "layerfit.memory": 3,
    "layerfit.speed": 3,
    "layerfit.estimators": 4,
    "layerfit.check": 4,
    "layerfit.llamacpp.commands": 4,
    "layerfit.heuristics": 5,
    "layerfit.solver": 5,
    "layerfit.planning": 6,
    "layerfit.fleet": 7,
    "layerfit.gpustack": 8,
    "layerfit.cli": 8,
    "layerfit": 9,
}
"""Each part imports only parts of a lower rank (and itself): docs/design.md's order."""


def _part(module: str) -> str:
    if _in(module, "layerfit.llamacpp"):
        grammar = module == "layerfit.llamacpp" or module.rsplit(".", 1)[1] in GRAMMAR
        return "layerfit.llamacpp.grammar" if grammar else "layerfit.llamacpp.commands"
    return next((part for part in sorted(RANKS, key=len, reverse=True) if _in(module, part)), module)


def test_every_part_imports_only_lower_ranks() -> None:
    graph = {m: deps for m, deps in _graph().items() if not _in(m, "layerfit.testing")}
    against = sorted(
        (m, d)
        for m, deps in graph.items()
        for d in deps
        if _part(d) != _part(m) and RANKS[_part(d)] >= RANKS[_part(m)]
    )
    assert against == []


def test_fixtures_are_out_of_the_runtime() -> None:
    runtime = [m for m in _modules() if not _in(m, "layerfit.testing")]
    assert [(m, d) for m in runtime for d in _graph()[m] if _in(d, "layerfit.testing")] == []
    assert [m for m in runtime if any(_in(name, "gguf") for name in _imported(m))] == []


def test_no_module_past_the_size_of_a_package() -> None:
    sizes = {module: len(path.read_text().splitlines()) for module, path in _modules().items()}
    assert {module: lines for module, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
