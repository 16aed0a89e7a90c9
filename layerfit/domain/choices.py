"""The enumerations the command line offers as choices, free of pydantic so that ``--help`` is fast.

Each is re-exported by the module that uses it (``config``, ``deployment``, ``fleet``).
"""

from __future__ import annotations

from enum import StrEnum


class OffloadOrder(StrEnum):
    """Which layer ``-ngl`` offloads first.

    ``OUTPUT_FIRST`` is llama.cpp since December 2025: ``-ngl k`` = the output layer and the last
    ``k-1`` blocks. ``OUTPUT_LAST`` is older llama.cpp (and what gguf-parser and GPUStack still
    assume): the last ``k`` blocks, and the output layer only once every block is on a GPU.
    """

    OUTPUT_FIRST = "output-first"
    OUTPUT_LAST = "output-last"


class LlamaCppBuild(StrEnum):
    """The two named llama.cpp builds (a build may also be given by its number: ``layerfit.llamacpp.builds``).

    ``CURRENT`` is b11434, llama.cpp since December 2025: output-first ``-ngl`` (ggml-org/llama.cpp#18148)
    and ``--fit`` (#16653, on by default, so plans pass ``--fit off``). ``LEGACY`` is b6457 (September
    2025): output-last ``-ngl`` and no ``--fit`` flag (passing it would stop llama-server at start-up).
    """

    CURRENT = "current"
    LEGACY = "legacy"


class Policy(StrEnum):
    """Tie-break between equally good layouts."""

    BINPACK = "binpack"
    """Fill the fullest GPUs first, keeping whole GPUs free."""
    SPREAD = "spread"
    """Keep the most headroom on every GPU."""


class Objective(StrEnum):
    """What "best" means once every hard rule holds (``docs/design.md``, "The objective")."""

    LAYERS = "layers"
    """GPUStack's order: most layers on GPUs, most expert blocks on GPUs, fewest workers, fewest GPUs."""
    SPEED = "speed"
    """The fastest predicted decode of one sequence (``layerfit.speed``), then fewest workers, fewest GPUs."""


class ModelKind(StrEnum):
    LLM = "llm"
    EMBEDDING = "embedding"
    RERANKER = "reranker"
    IMAGE = "image"


class Executor(StrEnum):
    SERIAL = "serial"
    LOCAL = "local"
    """A local process pool."""
    RAY = "ray"
    """Ray tasks (``pip install layerfit[ray]``), for fleets that outgrow one machine."""
