"""GPUStack's objects as its API returns them (``tests/fixtures/gpustack_*.json``), as dicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"


def _load(name: str) -> Any:
    return json.loads((FIXTURES / f"gpustack_{name}.json").read_text())


WORKERS = _load("workers")
INSTANCES = _load("instances")
MODEL = _load("model")
