"""Settings shared by the memory model, the engines and the planner."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, Frozen, NonNegInt, PosInt
from layerfit.domain.choices import LlamaCppBuild as LlamaCppBuild
from layerfit.domain.choices import Objective as Objective
from layerfit.domain.choices import OffloadOrder as OffloadOrder
from layerfit.domain.choices import Policy as Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.limits import MAX_DEVICES, MAX_TIME_LIMIT_S
from layerfit.llamacpp.builds import FIT, OUTPUT_FIRST, build_label, build_number, offload_order_of, parse_build

_BUILD_KEYS = ("llama_cpp_build", "offload_order")

MAX_SEARCH_WORKERS = 64
"""Most CP-SAT workers (threads) asked for; CP-SAT calls a model with 100,000 invalid."""
SEED = Field(default=0, ge=0, le=2**31 - 1)
"""A CP-SAT random seed: a 32-bit integer (a larger one raises TypeError in OR-Tools)."""
MAX_RPC_SERVERS = MAX_DEVICES
"""More rpc-servers than one llama.cpp process runs devices can never be used by one deployment."""
TIME_LIMIT = Field(default=10.0, gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)


class PlannerConfig(Frozen):
    """Knobs of the heuristic, the solver and the planner. Defaults follow GPUStack and llama.cpp."""

    llama_cpp_build: LlamaCppBuild | PosInt = LlamaCppBuild.CURRENT
    """The llama.cpp the commands are for: ``current``, ``legacy`` or a build number (``b6500`` or
    ``6500``); it decides which flags the commands use (``layerfit.llamacpp.builds``). When only
    ``offload_order`` is given, the named build it implies."""
    offload_order: OffloadOrder = OffloadOrder.OUTPUT_FIRST
    """``-ngl``'s order; when only ``llama_cpp_build`` is given, that build's order."""
    policy: Policy = Policy.BINPACK
    objective: Objective = Objective.LAYERS
    """What the best layout is: ``layers`` (GPUStack's order: layers, expert blocks, workers, GPUs)
    or ``speed`` (the fastest predicted decode, then workers, GPUs); a deployment's own
    ``objective`` wins (``objective_of``)."""
    max_rpc_servers: Annotated[int, Field(ge=1, le=MAX_RPC_SERVERS), NOT_A_BOOLEAN] = 8
    """At most this many rpc-servers per deployment (GPUStack ``DEFAULT_MAX_RPC_SERVER_COUNT``)."""
    max_rpc_candidate_gpus: PosInt = 16
    """The heuristic skips distribution when more remote GPUs qualify (GPUStack's cap)."""
    max_rpc_combinations: PosInt | None = 512
    """RPC-server combinations the heuristic evaluates before it returns its best so far (GPUStack
    tries all: 39,205 with 16 candidates), unless its work budget ends the search first. Counts, so
    the answer does not depend on the machine; ``None``: every combination the work budget allows.
    When a limit is hit, the heuristic's stats say ``truncated``."""
    selection_is_pool: bool = False
    """A manual GPU selection is the set of GPUs to use, all of them (GPUStack's rule) by default;
    ``True``: a pool to choose from (a layout may use any subset of it). Never left either way."""
    time_limit_s: float = TIME_LIMIT
    """Time limit of one ``plan()`` call, all stages together (heuristic, solver, alternatives,
    explain): each stage stops on a work budget derived from it (``layerfit.budget.work``, the same on
    every run), the wall clock at the limit being only a safety stop; see ``layerfit.planning.planner`` for
    the overhead beyond it."""
    num_search_workers: Annotated[int, Field(ge=1, le=MAX_SEARCH_WORKERS), NOT_A_BOOLEAN] = 1
    """CP-SAT workers; 1 with a fixed seed gives the same answer for the same input."""
    seed: int = SEED
    alternatives: NonNegInt = 3
    """Equally good alternative layouts to return besides the best one."""
    expert_offload: bool = True
    """MoE models: keep the experts of some GPU blocks in host RAM (llama.cpp's ``--n-cpu-moe``)
    before offloading whole layers. ``False``: GPUStack's original strategy order, experts always
    with their blocks."""
    rpc_port_base: Annotated[int, Field(ge=1, le=65535), NOT_A_BOOLEAN] = 50052
    """rpc-server ports: base, base+1, ... per server on a worker."""

    @model_validator(mode="after")
    def _ports_exist(self) -> PlannerConfig:
        last = self.rpc_port_base + self.max_rpc_servers - 1
        if last > 65535:
            raise ValueError(
                f"rpc_port_base {self.rpc_port_base} + {self.max_rpc_servers} rpc-servers: port {last} > 65535"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _build_and_order_agree(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = {key: value for key, value in data.items() if value is not None or key not in _BUILD_KEYS}
        build = parse_build(data["llama_cpp_build"]) if "llama_cpp_build" in data else None
        order = OffloadOrder(data["offload_order"]) if "offload_order" in data else None
        if build is None:
            first = order is None or order is OffloadOrder.OUTPUT_FIRST
            return {**data, "llama_cpp_build": LlamaCppBuild.CURRENT if first else LlamaCppBuild.LEGACY}
        implied = offload_order_of(build)
        if implied is None and order is None:
            raise ValueError(f"{OUTPUT_FIRST.unknown_reason(build_number(build))}; give offload_order to say which")
        if implied is not None and order is not None and implied is not order:
            raise ValueError(f"llama_cpp_build {build_label(build)} offloads {implied.value}, not {order.value}")
        order = order or implied
        if FIT.present(build_number(build)) is None and order is OffloadOrder.OUTPUT_LAST:
            raise ValueError(f"{FIT.unknown_reason(build_number(build))}; name a build outside that range")
        return {**data, "llama_cpp_build": build, "offload_order": order}

    def objective_for(self, deployment: Deployment) -> Objective:
        """The objective a deployment is planned under: its own, else this configuration's."""
        return deployment.objective or self.objective

    @property
    def build(self) -> int:
        """The llama.cpp build number the commands are for (a named build's own number)."""
        return build_number(self.llama_cpp_build)

    @property
    def emits_fit_off(self) -> bool:
        """Whether the commands pass ``--fit off``: the build has ``--fit`` (an output-first build
        whose number alone does not say has it: the output-first order came after ``--fit``)."""
        return FIT.present(self.build) is not False
