"""The published rows of several model sizes on one GPU and build (``published-sizes.csv``), as
``speed_truth`` cases: with one size, a GPU family's share of its spec bandwidth and the fixed cost
per layer trade off; with 8B and 70B (32 and 80 layers, 4.6 and 42.5 GB) on one GPU they do not.

Each row is rebuilt as layerfit sees it: the model's GGUF header from its shape (``REAL_MODELS``:
Llama-3 8B/70B are the Llama-3.1 shapes, Llama-2 7B/13B/70B) in the row's type (Q4_K_M as
``llama-quantize`` mixes it, ``testing.quant_mix``; F16; a "4-bit" row whose type is not stated as
Q4_0, stated), checked against the size llama-bench reports; ``gpu_count`` GPUs of the row's name
on one worker, the blocks split evenly (``-sm layer``, llama-bench's default, no ``-ts``); full
offload; a context of 512 (llama-bench's ``n_prompt + n_gen``) and the cache half the generated
tokens (``tg512``: 256).

The rows come from builds older than the scoreboards' (May 2024 and January 2024): their ``era``
names the build and the backend, and the fit gives each fitted era one extra fixed cost per layer
(``speed_truth.ERA_LAYER_US``) while the families' bandwidth shares are shared with the current
builds (``speed_fit``). ``older_build`` rows (the January 2024 ones) are fitted on nothing.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator
from pathlib import Path

from speed_truth import BACKEND_TYPES, LOOPBACK_RTT_MS, Case, _worker

from layerfit.domain import Cluster, LlamaParams
from layerfit.estimators import estimate_profile
from layerfit.estimators.gguf_constants import GGMLQuantizationType as Q
from layerfit.estimators.shape import read_gguf
from layerfit.memory import layout_from_flags
from layerfit.speed import SpeedSettings
from layerfit.speed.gpu_table import match
from layerfit.testing.arch_fixtures import TOKENIZER
from layerfit.testing.quant_mix import q4_k_m_table
from layerfit.testing.synthetic import REAL_MODELS, ModelSpec, TensorSpec, tensor_table, write_gguf

SHAPES = {
    "llama-3-8b": REAL_MODELS["llama-3.1-8b"],
    "llama-3-70b": REAL_MODELS["llama-3.1-70b"],
    "llama-2-7b": REAL_MODELS["llama-2-7b"],
    "llama-2-13b": REAL_MODELS["llama-2-13b"],
    "llama-2-70b": REAL_MODELS["llama-2-70b"],
}
"""The rows' model shapes (Llama-3 and Llama-3.1 differ in RoPE scaling and context only)."""
UNSTATED_4BIT = "4-bit (type not stated)"
GIB = 1024**3
SIZE_TOLERANCE_GIB = 0.006
"""llama-bench prints the size to 0.01 GiB: the rebuilt model must round to it."""
CONTEXT = 512
FILLS = {"tg512": 256}
"""Tokens cached on average while generating (``tg512``: 512 tokens from an empty cache)."""
UNSTATED_FILL = 128
"""A generation of unstated length (the January 2024 rows): at most 256 tokens cached, which llama.cpp
pads to 256 cells anyway."""


def _table(shape: str, quant: str) -> tuple[ModelSpec, list[TensorSpec]]:
    base = SHAPES[shape]
    if quant == "Q4_K_M":
        spec = base.model_copy(update={"name": f"{shape}-q4_k_m", "weight_type": Q.Q4_K})
        return spec, q4_k_m_table(spec)
    weight = {"F16": Q.F16, UNSTATED_4BIT: Q.Q4_0}[quant]
    spec = base.model_copy(
        update={"name": f"{shape}-{weight.name.lower()}", "weight_type": weight, "embedding_type": weight}
    )
    return spec, tensor_table(spec)


def _model(directory: Path, row: dict[str, str]) -> Path:
    spec, tensors = _table(row["shape"], row["quant"])
    path = directory / f"{spec.name}.gguf"
    if not path.exists():
        write_gguf(path, spec, tokenizer=True, tokenizer_model=TOKENIZER, tensors=tensors)
    if row["size_gib"]:
        size = read_gguf(str(path)).tensor_bytes / GIB
        if abs(size - float(row["size_gib"])) > SIZE_TOLERANCE_GIB:
            sys.exit(f"{row['id']}: the rebuilt {spec.name} holds {size:.3f} GiB of tensors, the row {row['size_gib']}")
    return path


def size_label(row: dict[str, str]) -> str:
    """``70B Q4_K_M``: the model's size and type, how the errors are grouped."""
    size = row["shape"].rsplit("-", 1)[1].upper()
    return f"{size} {'4-bit' if row['quant'] == UNSTATED_4BIT else row['quant']}"


def size_cases(rows: list[dict[str, str]], models: Path) -> Iterator[Case]:
    """Every row whose GPU the table names as a case (the others, like the scoreboard rows the table
    lacks, are left out): ``split`` as the file fixes it (whole GPUs, chosen before fitting)."""
    for row in rows:
        spec = match(row["gpu_name"])
        if spec is None:
            continue
        profile = estimate_profile(_model(models, row), LlamaParams.from_args(["-c", str(CONTEXT), "-fa", "off"]))
        count = int(row["gpu_count"])
        gpus = [{"index": index, "type": BACKEND_TYPES[row["backend"]], "name": row["gpu_name"],
                 "total_vram_bytes": "1 TiB", "allocatable_vram_bytes": "1 TiB"} for index in range(count)]  # fmt: skip
        worker = _worker("gpu", 100.0, 8, LOOPBACK_RTT_MS, gpus) | {"unified_memory": row["backend"] == "Metal"}
        layout = layout_from_flags(
            "gpu", [("gpu", index) for index in range(count)], profile.n_blocks, profile.n_layers
        )
        fill = FILLS.get(row["tg_test"], UNSTATED_FILL)
        prompt = float(row["pp_tok_s"]) if row["pp_tok_s"] else float("nan")
        yield Case(
            row["id"],
            row["split"],
            "gpu",
            spec.family,
            profile,
            layout,
            Cluster.model_validate({"workers": [worker]}),
            SpeedSettings(context_fill=fill, prompt_tokens=512),
            1000 / float(row["tg_tok_s"]),
            prompt,
            model=size_label(row),
            source="sizes",
            era=f"{row['recorded']} {row['backend']}",
            gpu=f"{count}x {row['gpu_name']}" if count > 1 else row["gpu_name"],
        )


def load_size_cases(truth: Path, models: Path) -> list[Case]:
    path = truth / "published-sizes.csv"
    if not path.exists():
        return []
    with path.open() as file:
        return list(size_cases(list(csv.DictReader(file)), models))
