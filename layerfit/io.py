"""Reading YAML or JSON input files into domain types, with errors that name the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from layerfit.errors import InputError

Model = TypeVar("Model", bound=BaseModel)


MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted in an input file (real files need fewer than 10)."""


def yaml_loader() -> Any:
    """libyaml's safe loader when PyYAML was built with it (much faster), else the pure-Python one."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML; ``.json`` files are parsed strictly)."""
    file = Path(path)
    kind = "JSON" if file.suffix.lower() == ".json" else "YAML"
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text: byte {exc.start} is 0x{raw[exc.start]:02x}") from None
    try:
        document = json.loads(text) if kind == "JSON" else yaml.load(text, Loader=yaml_loader())
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(str(path), f"not valid {kind}: {' '.join(str(exc).split())}") from None
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
    """One line per problem: ``workers.0.gpus.1.total_vram_bytes: Input should be ...``."""
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(top level)"
        message = str(error["msg"])
        context = error.get("ctx") or {}
        inner = context.get("error")
        if isinstance(inner, InputError):
            message = str(inner)
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def load_file(model: type[Model], path: str | Path) -> Model:
    """Read a YAML/JSON file and validate it as ``model``."""
    return load_model(model, read_document(path), str(path))
