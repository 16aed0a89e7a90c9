"""What a prediction is made for besides the layout: the context fill, the prompt, the threads.

``settings_for`` reads them from a deployment's llama.cpp parameters: ``-t``/``--threads`` and
``-tb``/``--threads-batch`` (passed through to llama-server, ``common/arg.cpp``: the threads of
decode and of prompt processing; ``-tb`` defaults to ``-t``), and for a profile given as numbers
the context, micro-batch and flash attention its figures were made at.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from layerfit.domain.base import NOT_A_BOOLEAN, Frozen, NonNegInt, PosInt
from layerfit.domain.cluster import MAX_CPU_THREADS
from layerfit.domain.params import DEFAULT_CTX_SIZE, LlamaParams
from layerfit.errors import InputError

DEFAULT_PROMPT_TOKENS = 512
"""Prompt length of the prompt figure: llama-bench's ``pp512``, into an empty cache."""
DEFAULT_UBATCH = 512
"""llama.cpp's default ``-ub``."""
THREAD_FLAGS = ("-t", "--threads")
BATCH_THREAD_FLAGS = ("-tb", "--threads-batch")

Threads = Annotated[int, Field(ge=1, le=MAX_CPU_THREADS), NOT_A_BOOLEAN]


class SpeedSettings(Frozen):
    """The run a prediction is for."""

    context_fill: NonNegInt | None = None
    """Tokens in the KV cache while decoding; ``None``: half the context (stated in the prediction)."""
    prompt_tokens: PosInt = DEFAULT_PROMPT_TOKENS
    threads: Threads | None = None
    """``-t``: decode threads on the main worker; ``None``: the worker's ``cpu_threads``."""
    batch_threads: Threads | None = None
    """``-tb``: prompt-processing threads; ``None``: as ``threads``."""
    ctx: PosInt = DEFAULT_CTX_SIZE
    """For a profile without a ``SpeedShape`` only: the context its KV figures are for."""
    n_ubatch: PosInt = DEFAULT_UBATCH
    """For a profile without a ``SpeedShape`` only: the micro-batch (``-ub``)."""
    flash_attn: bool = True
    """For a profile without a ``SpeedShape`` only: flash attention on (an F16 mask)."""


def _thread_value(extra: tuple[str, ...], flags: tuple[str, ...]) -> int | None:
    """The last value of one of ``flags`` in the pass-through arguments; ``-1`` (llama.cpp's auto) is
    ``None``; anything but a count is refused naming the flag."""
    value: int | None = None
    for position, word in enumerate(extra[:-1]):
        if word not in flags:
            continue
        text = extra[position + 1]
        if text.lstrip("-").isdigit() and len(text) <= 6 and (int(text) == -1 or 1 <= int(text) <= MAX_CPU_THREADS):
            value = None if int(text) == -1 else int(text)
        else:
            raise InputError(word, f"expected a thread count from 1 to {MAX_CPU_THREADS} (or -1: auto), got {text!r}")
    return value


def settings_for(params: LlamaParams, *, context_fill: int | None = None, ctx: int | None = None) -> SpeedSettings:
    """The speed settings of a deployment's parameters (``ctx``: its resolved context, when ``-c 0``
    leaves it to the model)."""
    threads = _thread_value(params.extra, THREAD_FLAGS)
    resolved_ctx = (
        ctx if ctx is not None else (DEFAULT_CTX_SIZE if params.uses_training_ctx else params.effective_ctx_size)
    )
    return SpeedSettings(
        context_fill=context_fill,
        threads=threads,
        batch_threads=_thread_value(params.extra, BATCH_THREAD_FLAGS) or threads,
        ctx=max(resolved_ctx, 1),
        n_ubatch=params.ubatch_size or DEFAULT_UBATCH,
        flash_attn=params.flash_attn != "off",
    )
