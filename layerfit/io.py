"""Reading YAML or JSON input files into domain types, with errors that name the file and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from layerfit.errors import InputError

Model = TypeVar("Model", bound=BaseModel)


def read_document(path: str | Path) -> Any:
    """Parse a YAML or JSON file (JSON is YAML; ``.json`` files are parsed strictly)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), f"cannot read: {exc.strerror or exc}") from None
    try:
        if file.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(
            str(path), f"not valid {'JSON' if file.suffix.lower() == '.json' else 'YAML'}: {exc}"
        ) from None


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
