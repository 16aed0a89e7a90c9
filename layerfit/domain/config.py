"""Settings shared by the memory model, the engines and the planner."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from layerfit.domain.base import Frozen, NonNegInt, PosInt
from layerfit.domain.choices import LlamaCppBuild as LlamaCppBuild
from layerfit.domain.choices import OffloadOrder as OffloadOrder
from layerfit.domain.choices import Policy as Policy

_BUILD_KEYS = ("llama_cpp_build", "offload_order")


class PlannerConfig(Frozen):
    """Knobs of the heuristic, the solver and the planner. Defaults follow GPUStack and llama.cpp."""

    llama_cpp_build: LlamaCppBuild = LlamaCppBuild.CURRENT
    """The llama.cpp the commands are for; when only ``offload_order`` is given, the build it implies."""
    offload_order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
    """``-ngl``'s order; when only ``llama_cpp_build`` is given, that build's order."""
    policy: Policy = Policy.BINPACK
    max_rpc_servers: PosInt = 8
    """At most this many rpc-servers per deployment (GPUStack ``DEFAULT_MAX_RPC_SERVER_COUNT``)."""
    max_rpc_candidate_gpus: PosInt = 16
    """The heuristic skips distribution when more remote GPUs qualify (GPUStack's cap)."""
    max_rpc_combinations: PosInt | None = 512
    """RPC-server combinations the heuristic evaluates before it returns its best so far (GPUStack
    tries all: 39,205 with 16 candidates). A count, so the answer does not depend on the machine;
    ``None``: every combination. When the limit is hit, the heuristic's stats say ``truncated``."""
    selection_is_pool: bool = False
    """A manual GPU selection is the set of GPUs to use, all of them (GPUStack's rule) by default;
    ``True``: a pool to choose from (a layout may use any subset of it). Never left either way."""
    time_limit_s: float = Field(default=10.0, gt=0)
    """Wall-clock budget of one ``plan()`` call, all stages together (heuristic, solver, alternatives,
    explain); see ``layerfit.planner`` for the overhead beyond it."""
    num_search_workers: PosInt = 1
    """CP-SAT workers; 1 with a fixed seed gives the same answer for the same input."""
    seed: NonNegInt = 0
    alternatives: NonNegInt = 3
    """Equally good alternative layouts to return besides the best one."""
    expert_offload: bool = True
    """MoE models: keep the experts of some GPU blocks in host RAM (llama.cpp's ``--n-cpu-moe``)
    before offloading whole layers. ``False``: GPUStack's original strategy order, experts always
    with their blocks."""
    rpc_port_base: PosInt = 50052
    """rpc-server ports: base, base+1, ... per server on a worker."""

    @model_validator(mode="before")
    @classmethod
    def _build_and_order_agree(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {key: value for key, value in data.items() if value is not None or key not in _BUILD_KEYS}
        build, order = data.get("llama_cpp_build"), data.get("offload_order")
        if build is not None and order is not None:
            if LlamaCppBuild(build).offload_order is not OffloadOrder(order):
                raise ValueError(
                    f"llama_cpp_build {LlamaCppBuild(build).value} offloads "
                    f"{LlamaCppBuild(build).offload_order.value}, not {OffloadOrder(order).value}"
                )
        elif build is not None:
            data = {**data, "offload_order": LlamaCppBuild(build).offload_order}
        elif order is not None:
            first = OffloadOrder(order) is OffloadOrder.OUTPUT_FIRST
            data = {**data, "llama_cpp_build": LlamaCppBuild.CURRENT if first else LlamaCppBuild.LEGACY}
        return data

