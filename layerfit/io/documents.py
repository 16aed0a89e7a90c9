"""Reading YAML or JSON input files into domain types, with errors that name the file and field."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from layerfit.errors import InputError
from layerfit.io.files import open_regular

Model = TypeVar("Model", bound=BaseModel)


MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted in an input file (real files need fewer than 10)."""
MAX_FILE_BYTES = 32 * 1024**2
"""Largest input file accepted (32 MiB): a cluster of 50,000 GPUs in YAML is about 5 MiB. Reading
takes time and memory linear in the size (``benchmarks/yaml_load.py``)."""


def yaml_loader() -> Any:
    """libyaml's safe loader when PyYAML was built with it (much faster), else the pure-Python one."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Unusual(Exception):
    """The document uses a YAML feature the event reader leaves to PyYAML's loader."""


_SAFE = yaml.constructor.SafeConstructor()
_RESOLVER = yaml.resolver.Resolver()


def _scalar(event: yaml.ScalarEvent) -> Any:
    """A scalar as ``SafeLoader`` constructs it: the same resolver and the same constructors."""
    if (event.tag is not None and event.tag != "!") or event.anchor is not None:
        raise _Unusual
    tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)  # type: ignore[no-untyped-call]
    construct = _SAFE.yaml_constructors.get(tag)
    if construct is None or event.value == "<<":
        raise _Unusual
    try:
        return construct(_SAFE, yaml.ScalarNode(tag, event.value, style=event.style))
    except ValueError as exc:  # 2020-13-45, !!int abc, an int of more than 4300 digits: name where
        kind = tag.rsplit(":", 1)[-1]
        shown = event.value if len(event.value) <= 40 else f"{event.value[:40]}... ({len(event.value)} characters)"
        problem = f"cannot read {shown!r} as {kind}: {_short(exc)}"
        raise yaml.constructor.ConstructorError(None, None, problem, event.start_mark) from None  # type: ignore[arg-type]


def _short(exc: Exception) -> str:
    """A parser's message without Python's advice (``use sys.set_int_max_str_digits() ...``)."""
    return str(exc).split("; use sys.", 1)[0]


def _container(event: yaml.NodeEvent, depth: int) -> dict[Any, Any] | list[Any]:
    if event.anchor is not None or getattr(event, "tag", None) not in (None, "!"):
        raise _Unusual
    if depth > MAX_DEPTH:
        raise _Unusual  # yaml.load reports it as before: libyaml's nesting limit, or too deep for us
    return {} if isinstance(event, yaml.MappingStartEvent) else []


def _load_events(text: str) -> Any:
    """Parse YAML with libyaml's event stream and build the document without PyYAML's node graph.

    The same result as ``yaml.load`` with the safe loader, in a third of its time on large files:
    each distinct scalar is resolved and constructed once. Anchors, aliases, explicit tags, merge
    keys, mappings as keys and several documents are left to ``yaml.load``.
    """
    scalars: dict[tuple[str, tuple[bool, bool], str | None], Any] = {}
    root: list[Any] = []
    containers: list[Any] = [root]
    keys: list[Any] = [_NO_KEY]
    documents = 0
    events: Iterator[Any] = yaml.parse(text, Loader=yaml_loader())
    for event in events:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            cached = (event.value, event.implicit, event.style)
            value = scalars.get(cached, _NO_KEY)
            if value is _NO_KEY or event.anchor is not None or event.tag is not None:
                value = scalars[cached] = _scalar(event)
            opened = None
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            value = opened = _container(event, len(containers))
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            containers.pop()
            keys.pop()
            continue
        elif kind is yaml.AliasEvent:
            raise _Unusual
        else:
            documents += kind is yaml.DocumentStartEvent
            if documents > 1:
                raise _Unusual  # yaml.load says "expected a single document"
            continue
        container = containers[-1]
        if type(container) is list:
            container.append(value)
        elif keys[-1] is _NO_KEY:
            if opened is not None:
                raise _Unusual  # a mapping or sequence as a key
            keys[-1] = value
        else:
            if keys[-1] in container:
                raise DuplicateKeyError(keys[-1], event.start_mark.line + 1)
            container[keys[-1]] = value
            keys[-1] = _NO_KEY
        if opened is not None:
            containers.append(opened)
            keys.append(_NO_KEY)
    return root[0] if root else None


_NO_KEY = object()
"""No mapping key read yet (and: no scalar in the cache)."""


class DuplicateKeyError(ValueError):
    """A mapping that gives one key twice: YAML and JSON readers keep the last value without a word,
    so ``allocatable_vram_bytes`` written twice would silently drop the first."""

    def __init__(self, key: Any, line: int | None = None) -> None:
        shown = str(key) if len(str(key)) <= 40 else f"{str(key)[:40]}..."
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"key {shown!r} given twice in one mapping{where}; keep one")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: a JSON object, refusing a key given twice."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise DuplicateKeyError(key)
        mapping[key] = value
    return mapping


def _check_duplicate_keys(nodes: Iterable[yaml.Node]) -> None:
    """Refuse a mapping node that gives one scalar key twice, as ``_load_events`` does (a merge key's
    ``<<`` entries may be overridden: that is what merging is for)."""
    for node in nodes:
        if not isinstance(node, yaml.MappingNode):
            continue
        seen: set[Any] = set()
        for key_node, _ in node.value:
            construct = _SAFE.yaml_constructors.get(key_node.tag)
            if not isinstance(key_node, yaml.ScalarNode) or construct is None or key_node.tag.endswith(":merge"):
                continue  # a mapping or sequence as a key: yaml.load refuses it itself
            key = construct(_SAFE, key_node)
            if key in seen:
                raise DuplicateKeyError(key, key_node.start_mark.line + 1)
            seen.add(key)


MAX_ALIASED_NODES = 100_000
"""Most nodes that aliases (``*name``) may add to a document when expanded: a few reused GPU or
profile entries add hundreds, while nine nested aliases of ten make a billion ("billion laughs")."""


class AliasExpansionError(yaml.YAMLError):
    """A document whose aliases expand beyond ``MAX_ALIASED_NODES`` nodes, or refer to themselves."""


def _check_aliases(root: yaml.Node) -> None:
    """Count the nodes ``root`` expands to, a shared (aliased) node once per reference, without
    expanding anything: each distinct node's size is computed once, in post-order."""
    distinct = _distinct_nodes(root)
    _check_duplicate_keys(distinct.values())
    written = len(distinct)
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
            if size[key] > written + MAX_ALIASED_NODES:
                raise AliasExpansionError(
                    f"its aliases expand it to more than {MAX_ALIASED_NODES} nodes beyond the {written} written "
                    f"(line {node.start_mark.line + 1}); write the repeated entries out or reuse fewer"
                )
        elif key in open_nodes:
            raise AliasExpansionError(f"an alias refers to a node that contains it (line {node.start_mark.line + 1})")
        elif key not in size:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))


def _distinct_nodes(root: yaml.Node) -> dict[int, yaml.Node]:
    seen: dict[int, yaml.Node] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            stack.extend(_children(node))
    return seen


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _load_checked(text: str) -> Any:
    """``yaml.load`` with the safe loader, after checking what its aliases expand to."""
    loader = yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str) -> Any:
    """A YAML document as ``yaml.load`` with the safe loader reads it, in time linear in its size;
    ``AliasExpansionError`` when its aliases would expand it beyond ``MAX_ALIASED_NODES`` nodes."""
    try:
        return _load_events(text)
    except (_Unusual, TypeError):  # TypeError: an unhashable key, which yaml.load reports itself
        pass
    return _load_checked(text)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML; ``.json`` files are parsed strictly)."""
    file = Path(path)
    kind = "JSON" if file.suffix.lower() == ".json" else "YAML"
    try:
        with open_regular(file) as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
            size = max(len(raw), os.fstat(handle.fileno()).st_size)
        if size > MAX_FILE_BYTES:
            raise InputError(str(path), f"{size} bytes: input files are limited to {MAX_FILE_BYTES} bytes")
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text: byte {exc.start} is 0x{raw[exc.start]:02x}") from None
    try:
        document = json.loads(text, object_pairs_hook=_unique_pairs) if kind == "JSON" else parse_yaml(text)
    except AliasExpansionError as exc:
        raise InputError(str(path), f"refused: {exc}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(str(path), f"not valid {kind}: {' '.join(str(exc).split())}") from None
    except ValueError as exc:  # a scalar that cannot be constructed (json: an int of over 4300 digits)
        raise InputError(str(path), f"not valid {kind}: {_short(exc)}") from None
    except RecursionError:
        raise InputError(str(path), f"nested more than {MAX_DEPTH} levels deep") from None
    if _depth(document) > MAX_DEPTH:
        raise InputError(str(path), f"nested more than {MAX_DEPTH} levels deep")
    return document


def _depth(document: Any) -> int:
    """How deeply lists and mappings nest (iteratively: no recursion on hostile input)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            return depth
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_model(model: type[Model], data: Any, source: str) -> Model:
    """Validate ``data`` as ``model``; a failure names the source and each bad field."""
    try:
        return model.model_validate(data)
    except InputError as exc:
        raise InputError(f"{source}: {exc.field}", exc.problem) from None
    except ValidationError as exc:
        raise InputError(source, validation_summary(exc)) from None


def validation_summary(exc: ValidationError) -> str:
    """One line per problem: ``workers.0.gpus.1.total_vram_bytes: Input should be ...``; a problem of
    the whole object (a model validator's) is its message alone."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        context = error.get("ctx") or {}
        inner = context.get("error")
        if isinstance(inner, InputError):
            message = str(inner)
            if inner.field.startswith(where):  # it names the field itself (``gpu_selection[0]: ...``)
                where = ""
            elif inner.field.isidentifier():  # a field of the object at ``where``
                where, message = f"{where}.{inner.field}", inner.problem
        lines.append(f"{where}: {message}" if where else message)
    return "; ".join(lines)


DOCUMENT_KINDS = {
    "cluster": ("layerfit.domain.cluster", "Cluster"),
    "deployment": ("layerfit.domain.deployment", "Deployment"),
    "fleet": ("layerfit.domain.fleet", "Fleet"),
    "layout": ("layerfit.domain.layout", "Layout"),
}
"""The input files layerfit reads, by what a command calls them, and their types."""


def load_file(model: type[Model], path: str | Path) -> Model:
    """Read a YAML/JSON file and validate it as ``model``; a file of another kind (a deployment
    given as the cluster) is named as what it looks like."""
    document = read_document(path)
    try:
        return load_model(model, document, str(path))
    except InputError:
        looks = other_kind(model, document)
        if looks is None:
            raise
        raise InputError(str(path), looks) from None


def other_kind(model: type[BaseModel], document: Any) -> str | None:
    """``this looks like a deployment file (name, profile), not a cluster file (workers)`` when none
    of the document's keys is a field of ``model`` and most are fields of another kind of input
    (the one with the most); else ``None``."""
    import importlib

    if not isinstance(document, dict) or not document:
        return None
    keys = set(document)
    kinds = {kind: getattr(importlib.import_module(module), name) for kind, (module, name) in DOCUMENT_KINDS.items()}
    expected = next((kind for kind, cls in kinds.items() if cls is model), None)
    if expected is None or keys & set(model.model_fields):
        return None
    shared, kind = max((len(keys & set(cls.model_fields)), kind) for kind, cls in kinds.items() if kind != expected)
    if 2 * shared < len(keys):
        return None
    shown = ", ".join(sorted(keys)[:4]) + (", ..." if len(keys) > 4 else "")
    fields = model.model_fields
    wanted = [name for name, field in fields.items() if field.is_required()] or list(fields)
    return f"this looks like a {kind} file ({shown}), not a {expected} file ({', '.join(wanted)})"
