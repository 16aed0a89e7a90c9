"""What the speed model reads (``SpeedShape``: a model's per-token reads and work, from its GGUF
header) and what it says (``SpeedPrediction``: a layout's decode and prompt speed, term by term).

``layerfit.speed`` computes the prediction; these are only the types, so that a ``MemoryProfile``
can carry its ``SpeedShape`` and a ``Candidate`` its ``SpeedPrediction`` through JSON.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, computed_field, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, Bytes, Frozen, Itemised, NonNegInt, PosInt
from layerfit.errors import InputError

MAX_FIGURE = 1e6
"""Largest bandwidth (GB/s or Gbit/s), FLOPS (TFLOPS) or delay (ms) accepted: far above any device
or link (an H200 reads 4,800 GB/s), small enough that a typo is refused."""

PositiveFigure = Annotated[float, Field(gt=0, le=MAX_FIGURE, allow_inf_nan=False), NOT_A_BOOLEAN]
"""A bandwidth, a FLOPS figure, a delay: a finite number above 0 (0 or less is refused naming the field)."""

Milliseconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]

_PER_BLOCK = (
    "block_dense_bytes",
    "block_expert_bytes",
    "block_kv_position_bytes",
    "block_window",
    "block_state_bytes",
    "block_dense_flops",
    "block_expert_flops",
    "block_attention_flops",
)


class SpeedShape(Frozen):
    """What one token costs each block in bytes read and arithmetic, at the profile's settings.

    Computed by the estimator from the GGUF header (``estimators.speed_facts``): per block, the
    tensors its graph reads for one token (``src/llama-graph.cpp``: every matrix of the block once,
    the routed experts only for the ``expert_used_count`` experts the router picks), the KV cache
    one cached position costs, and the multiply-adds of its matrices.
    """

    block_dense_bytes: tuple[Bytes, ...] = Field(min_length=1)
    """Per block, the weights every token reads: all but the routed experts (attention, norms, the
    dense feed-forward, shared experts, the router)."""
    block_expert_bytes: tuple[Bytes, ...]
    """Per block, the routed-expert tensors (``ffn_*_exps``) of all experts; a token reads
    ``expert_used_count / expert_count`` of them."""
    expert_count: NonNegInt = 0
    expert_used_count: NonNegInt = 0
    block_kv_position_bytes: tuple[NonNegInt, ...]
    """Per block, the KV cache of one cached position of one sequence (K and V in the cache types);
    0 where the block keeps no KV cache."""
    block_window: tuple[NonNegInt, ...]
    """Per block, its sliding window (positions attended); 0: full attention."""
    block_state_bytes: tuple[NonNegInt, ...]
    """Per block, the recurrent state of one sequence, read and written back every token."""
    block_dense_flops: tuple[NonNegInt, ...]
    """Per block, 2 x the multiply-adds of the matrices every token uses (the dense part)."""
    block_expert_flops: tuple[NonNegInt, ...]
    """Per block, 2 x the multiply-adds of every routed expert's matrices (a token uses the
    ``expert_used_count / expert_count`` share)."""
    block_attention_flops: tuple[NonNegInt, ...]
    """Per block, 2 x the multiply-adds of attention per attended position (scores and values:
    heads x (key length + value length))."""
    output_bytes: Bytes = 0
    """The output layer a token reads (output norm and projection)."""
    output_flops: NonNegInt = 0
    embedding_length: PosInt
    """``n_embd``: one token's hidden state is this many F32 values between two devices."""
    vocab_size: NonNegInt = 0
    """Logits per token (F32), returned by the device holding the output layer."""
    ctx: PosInt
    """Cells per sequence the profile's KV cache was sized for (``-c`` shared by the sequences)."""
    n_ubatch: PosInt = 512
    """The micro-batch prompt processing runs in (``-ub``)."""
    flash_attn: bool = True
    """Flash attention on: the attention mask is F16, else F32 (``llama-graph.cpp``)."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        n = len(self.block_dense_bytes)
        for name in _PER_BLOCK[1:]:
            if len(getattr(self, name)) != n:
                raise InputError(f"speed.{name}", f"has {len(getattr(self, name))} entries, block_dense_bytes has {n}")
        if self.expert_used_count > self.expert_count:
            raise InputError(
                "speed.expert_used_count", f"{self.expert_used_count} exceeds expert_count {self.expert_count}"
            )
        if any(self.block_expert_bytes) and not self.expert_used_count:
            raise InputError("speed.expert_used_count", "blocks have routed experts but no expert is used per token")
        return self

    @property
    def n_blocks(self) -> int:
        return len(self.block_dense_bytes)

    @property
    def routed_share(self) -> float:
        """The share of a block's routed experts one token reads: ``expert_used_count / expert_count``."""
        return self.expert_used_count / self.expert_count if self.expert_count else 0.0


class SpeedTerm(Frozen):
    """One named part of the time per token: where it is spent, how long, and why."""

    where: str
    """A device (``gpu-a:cuda:0``), ``host`` (the main worker's CPU), a link (``rpc gpu-b``), ``main``."""
    ms: Milliseconds
    why: str
    """What the figure is made of, with the numbers (bytes, bandwidth, count x cost)."""


def figure(value: float) -> str:
    """A predicted figure at three significant digits, never in exponent form (``0.501``, ``62.7``,
    ``1,996``)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


MINOR_SHARE = 0.01
"""A decode term under this share of the total is not named among the largest (unless it is the largest)."""


class SpeedPrediction(Itemised):
    """A layout's predicted speed for one sequence: decode (tokens generated) and prompt processing.

    The decode time per token is the sum of ``terms`` (a single sequence runs the devices one after
    another); the prompt time per token is the sum of ``prompt_terms``. Every figure the prediction
    could not read from the model, the cluster or the parameters is in ``assumptions``. The totals
    and rates are derived from the terms (a dump read back must agree with them).
    """

    context_fill: NonNegInt
    """Tokens in the KV cache while decoding (the cache read per token grows with it)."""
    runs_alone: bool = True
    """The figures assume no other process uses these GPUs and workers at the same time."""
    terms: tuple[SpeedTerm, ...] = Field(min_length=1)
    prompt_terms: tuple[SpeedTerm, ...] = Field(min_length=1)
    assumptions: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _takes_time(self) -> Self:
        if self.decode_ms_per_token <= 0 or self.prompt_ms_per_token <= 0:
            raise InputError("speed.terms", "the terms add up to no time")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decode_ms_per_token(self) -> float:
        return sum(term.ms for term in self.terms)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def decode_tokens_per_s(self) -> float:
        return 1000.0 / self.decode_ms_per_token

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prompt_ms_per_token(self) -> float:
        return sum(term.ms for term in self.prompt_terms)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def prompt_tokens_per_s(self) -> float:
        return 1000.0 / self.prompt_ms_per_token

    def largest_terms(self, count: int = 2) -> tuple[SpeedTerm, ...]:
        """The decode terms that take the most time, largest first; a term under 1 % of the total
        only when it is the largest."""
        ranked = sorted(self.terms, key=lambda term: -term.ms)[:count]
        total = self.decode_ms_per_token
        return tuple(term for i, term in enumerate(ranked) if i == 0 or term.ms >= MINOR_SHARE * total)

    def largest_text(self, count: int = 2) -> str:
        """``largest_terms`` as text: ``ws-big:cuda:0 (NVIDIA RTX A6000) 62.7 ms, ...``."""
        return ", ".join(f"{term.where} {figure(term.ms)} ms" for term in self.largest_terms(count))
