"""A deployment request: which model, with which llama.cpp parameters, under which rules."""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import Field, field_validator, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, Frozen, Name, NonNegInt
from layerfit.domain.choices import ModelKind as ModelKind
from layerfit.domain.choices import Objective as Objective
from layerfit.domain.cluster import GpuRef
from layerfit.domain.param_words import INT_MAX
from layerfit.domain.params import LlamaParams
from layerfit.domain.profile import MemoryProfile
from layerfit.domain.speed import PositiveFigure
from layerfit.errors import InputError
from layerfit.llamacpp.flags import kind_contradiction

MAX_REPLICAS = 1024
"""Most replicas of one deployment: the fleet planner's work grows with each one (a million took
26 s past a 3 s limit and 1 GB), and no scheduler runs more of one model."""


class Deployment(Frozen):
    """One model to place. Give either ``gguf_path`` or an explicit ``profile``.

    ``backend_parameters`` (GPUStack's list form) may be given instead of ``params``.
    Defaults follow GPUStack: CPU offloading allowed, distribution across workers not.
    """

    name: Name
    gguf_path: str | None = None
    profile: MemoryProfile | None = None
    params: LlamaParams = LlamaParams()
    cpu_offloading: bool = True
    distributed_inference_across_workers: bool = False
    gpu_selection: tuple[GpuRef, ...] | None = None
    """Manual GPU selection (GPUStack ``gpu_selector.gpu_ids``)."""
    kind: ModelKind = ModelKind.LLM
    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS), NOT_A_BOOLEAN] = 1
    priority: NonNegInt = 0
    """Higher is more important (fleet planning)."""
    ctx_auto: bool = False
    """The context is a decision (``layerfit.planning.context_range``): the training context, shrunk to fit down
    to 4096, as llama.cpp does when no ``-c`` is given."""
    ctx_min: Annotated[int, Field(ge=1, le=INT_MAX), NOT_A_BOOLEAN] | None = None
    """With ``ctx_max``: the context is a decision, any multiple of 256 in the range will do."""
    ctx_max: Annotated[int, Field(ge=1, le=INT_MAX), NOT_A_BOOLEAN] | None = None
    """Default with ``ctx_min`` alone: the model's training context."""
    objective: Objective | None = None
    """What the best layout is for this deployment (``layers`` or ``speed``); ``None``: the planner's
    (``PlannerConfig.objective``, ``layers`` unless told otherwise)."""
    min_decode_tokens_per_s: PositiveFigure | None = None
    """The slowest predicted decode speed (tokens per second, one sequence) a layout may have: a
    hard rule (``check``), in a fleet checked with every replica on its GPUs decoding at once."""

    @model_validator(mode="before")
    @classmethod
    def _backend_parameters(cls, data: Any) -> Any:
        if isinstance(data, dict) and "backend_parameters" in data:
            data = dict(data)
            raw = data.pop("backend_parameters")
            if "params" in data:
                raise InputError("backend_parameters", "give either backend_parameters or params, not both")
            if not isinstance(raw, list | tuple):
                raise InputError("backend_parameters", f"expected a list of strings, got {type(raw).__name__}")
            data["params"] = LlamaParams.from_args(raw)
        return data

    @field_validator("gpu_selection", mode="before")
    @classmethod
    def _parse_refs(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            return value
        refs = []
        for position, item in enumerate(value):
            try:
                refs.append(GpuRef.parse(item) if isinstance(item, str) else item)
            except InputError as exc:
                raise InputError(f"gpu_selection[{position}]", exc.problem) from None
        return tuple(refs)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.gguf_path is None) == (self.profile is None):
            raise InputError(f"deployment[{self.name}]", "give exactly one of gguf_path or profile")
        if self.profile is not None and self.params.uses_training_ctx:
            raise InputError(
                f"deployment[{self.name}].params.ctx_size", "0 (the training context) needs gguf_path, not a profile"
            )
        self._check_ctx_range()
        contradiction = kind_contradiction(self.kind.value, self.params.extra)
        if contradiction is not None:
            raise contradiction
        if self.gpu_selection is not None:
            if not self.gpu_selection:
                raise InputError(f"deployment[{self.name}].gpu_selection", "empty selection; omit it instead")
            if len(set(self.gpu_selection)) != len(self.gpu_selection):
                raise InputError(f"deployment[{self.name}].gpu_selection", "a GPU is selected twice")
        return self

    def _check_ctx_range(self) -> None:
        where = f"deployment[{self.name}]"
        ranged = self.ctx_min is not None or self.ctx_max is not None
        if self.ctx_auto and ranged:
            raise InputError(f"{where}.ctx_auto", "give either ctx_auto or ctx_min/ctx_max, not both")
        if (self.ctx_auto or ranged) and self.params.ctx_size is not None:
            raise InputError(f"{where}.ctx_min", "a context range and a fixed --ctx-size contradict each other")
        if self.ctx_min is not None and self.ctx_max is not None and self.ctx_min > self.ctx_max:
            raise InputError(f"{where}.ctx_min", f"{self.ctx_min} exceeds ctx_max {self.ctx_max}")

    @property
    def has_ctx_range(self) -> bool:
        """The context is a decision rather than a fixed ``-c``."""
        return self.ctx_auto or self.ctx_min is not None or self.ctx_max is not None

    @property
    def selected_workers(self) -> tuple[str, ...]:
        """Workers named in the manual selection, in first-mention order."""
        if self.gpu_selection is None:
            return ()
        return tuple(dict.fromkeys(ref.worker for ref in self.gpu_selection))
