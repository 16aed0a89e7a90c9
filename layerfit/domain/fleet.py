"""Fleet planning types: many deployments, their current placements, the new plan and the moves."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import Field, computed_field, model_validator

from layerfit.domain.base import NOT_A_BOOLEAN, SCHEMA_VERSION, Frozen, NonNegInt, counted
from layerfit.domain.choices import Executor as Executor
from layerfit.domain.cluster import Cluster
from layerfit.domain.config import MAX_SEARCH_WORKERS, SEED, Policy
from layerfit.domain.deployment import Deployment
from layerfit.domain.layout import Claims, Layout
from layerfit.domain.limits import MAX_TIME_LIMIT_S
from layerfit.domain.plan import Command, DeviceUse, EngineStats, Reason, Status, WorkerUse
from layerfit.domain.speed import SpeedPrediction
from layerfit.errors import InputError


class Placement(Frozen):
    """Where one replica of a deployment runs now. A pinned replica must not move."""

    deployment: str
    replica: NonNegInt = 0
    layout: Layout
    pinned: bool = False


MAX_FLEET_REPLICAS = 8192
"""Most replicas of all deployments of a fleet together (8 x 1,024 replicas re-plan within the time
limit; the work grows with each replica)."""


class Fleet(Frozen):
    """A whole fleet: the cluster, the deployments and where their replicas run now.

    The cluster's allocatable memory is what is available to *these* deployments: total capacity
    minus anything not managed here. Current placements are not subtracted from it.
    """

    cluster: Cluster
    deployments: tuple[Deployment, ...]
    current: tuple[Placement, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        total = sum(deployment.replicas for deployment in self.deployments)
        if total > MAX_FLEET_REPLICAS:
            raise InputError("fleet.deployments", f"{total} replicas in all; at most {MAX_FLEET_REPLICAS} are planned")
        names: set[str] = set()
        for deployment in self.deployments:
            if deployment.name in names:
                raise InputError("fleet.deployments", f"duplicate deployment name {deployment.name!r}")
            names.add(deployment.name)
        self._check_own_ports()
        replicas = {d.name: d.replicas for d in self.deployments}
        seen: set[tuple[str, int]] = set()
        for placement in self.current:
            key = (placement.deployment, placement.replica)
            if placement.deployment not in replicas:
                raise InputError("fleet.current", f"placement of unknown deployment {placement.deployment!r}")
            if key in seen:
                raise InputError(
                    "fleet.current", f"replica {placement.replica} of {placement.deployment!r} placed twice"
                )
            seen.add(key)
        return self

    def _check_own_ports(self) -> None:
        """A ``--port`` of a deployment's own is written into each of its replicas' commands: two
        llama-servers on one worker would listen on one port, and the second would not start."""
        owners: dict[str, str] = {}
        for deployment in self.deployments:
            port = own_port(deployment)
            if port is None:
                continue
            where = f"deployment[{deployment.name}].params"
            if deployment.replicas > 1:
                raise InputError(
                    where,
                    f"--port {port} with {deployment.replicas} replicas: replicas on one worker would share the "
                    "port; remove --port (replan gives each llama-server on a worker its own)",
                )
            if port in owners:
                raise InputError(
                    where, f"--port {port} is {owners[port]!r}'s too: both could run on one worker; give each its own"
                )
            owners[port] = deployment.name


def own_port(deployment: Deployment) -> str | None:
    """The ``--port`` a deployment's own parameters give its llama-server, as written; ``None`` without one."""
    extra = deployment.params.extra
    for at, arg in enumerate(extra):
        if arg == "--port" and at + 1 < len(extra):
            return extra[at + 1]
        if arg.startswith("--port="):
            return arg.partition("=")[2]
    return None


class ReplicaChange(StrEnum):
    """What the plan does to one replica, relative to the current placement."""

    KEPT = "kept"
    """It runs where it runs now."""
    MOVED = "moved"
    """It has a current placement and runs somewhere else in the plan (also when its worker or GPU
    is gone)."""
    STARTED = "started"
    """It has no current placement: a first start, not a move."""
    STOPPED = "stopped"
    """It has a current placement and none in the plan."""


class ReplicaRef(Frozen):
    deployment: str
    replica: NonNegInt


class PlacedReplica(Frozen):
    """A replica in the new plan, with the memory it claims."""

    deployment: str
    replica: NonNegInt
    layout: Layout
    claims: Claims
    change: ReplicaChange
    """Kept, moved or started (never ``stopped``)."""
    device_use: tuple[DeviceUse, ...] = ()
    """Its GPUs, in llama.cpp device order: names and the memory it needs of each (as ``Plan``'s)."""
    worker_use: tuple[WorkerUse, ...] = ()
    """Its workers, main first: the RAM (or unified pool) it needs of each (as ``Plan``'s)."""
    speed: SpeedPrediction | None = None
    """Its predicted speed running alone: no other replica decoding on its GPUs at the same time."""
    busy_speed: SpeedPrediction | None = None
    """Its predicted speed with every replica the plan puts on its GPUs decoding at the same time
    (they share each GPU's bandwidth and FLOPS); ``None`` when it shares no GPU (``speed`` holds)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def moved(self) -> bool:
        """True when the replica has a current placement and runs somewhere else (first starts are no moves)."""
        return self.change is ReplicaChange.MOVED


class UnplacedReplica(Frozen):
    deployment: str
    replica: NonNegInt
    reasons: tuple[Reason, ...] = ()


class Move(Frozen):
    """One step of the transition: stop or start a replica on a worker's GPUs."""

    step: NonNegInt
    action: Literal["stop", "start"]
    deployment: str
    replica: NonNegInt
    worker: str
    gpus: tuple[str, ...]
    """``worker:type:index`` of every GPU the replica uses (RPC servers included)."""
    change: ReplicaChange
    """What the step is part of: a first start (``started``), a move (``moved``: its stop and its
    start), or a replica that stops for good (``stopped``)."""
    downtime: bool = False
    """A start whose replica was stopped first because there was no room for both."""


class ReplicaCommands(Frozen):
    """The processes to start for one placed replica: its rpc-servers first, then llama-server."""

    deployment: str
    replica: NonNegInt
    commands: tuple[Command, ...]


class LostPlacement(Frozen):
    """A current placement on a GPU or worker the cluster no longer has: not a step of the
    transition (it frees no memory the plan could use), but its process must be stopped."""

    deployment: str
    replica: NonNegInt
    worker: str
    gpus: tuple[str, ...]
    """The GPUs it names, ``worker:type:index`` where the cluster still knows the type."""


MAX_PROCESSES = 256
"""Most worker processes for candidate generation (each is a Python process of its own)."""


class FleetConfig(Frozen):
    """Knobs of fleet planning."""

    time_limit_s: float = Field(default=60.0, gt=0, le=MAX_TIME_LIMIT_S, allow_inf_nan=False)
    executor: Executor = Executor.LOCAL
    processes: Annotated[int, Field(ge=0, le=MAX_PROCESSES), NOT_A_BOOLEAN] = 0
    """Worker processes for candidate generation; 0 = one per core."""
    max_single_gpu_candidates: NonNegInt = 64
    """Cap on single-GPU candidate layouts per deployment, spread evenly over the GPUs; 0 = no cap.
    Keeps the master problem small on large fleets; optimality is relative to the candidates."""
    seed: int = SEED
    num_search_workers: Annotated[int, Field(ge=0, le=MAX_SEARCH_WORKERS), NOT_A_BOOLEAN] = 1
    """CP-SAT workers for the master problem. 1 with a fixed seed gives the same plan for the same
    input on every run and every executor unless a safety stop fires; 0 = one per core. More than
    one runs CP-SAT's parallel search, which depends on thread timing: the plan can differ from
    run to run, among equally good plans where every tier is proven and on the tiers' values where
    a tier's work budget cut it (the plan says so in an info reason)."""
    column_generation: bool = True
    """Price new layouts for every deployment against the master's LP duals (column generation):
    better columns, and a bound on the first two tiers over all layouts, not only the candidates."""
    column_generation_share: float = Field(default=0.5, gt=0, le=1)
    """Share of ``time_limit_s`` column generation may take before the integer master."""
    pricing_time_limit_s: float = Field(default=2.0, gt=0, allow_inf_nan=False)
    """CP-SAT time limit of one pricing problem; a problem cut short still gives a valid bound."""
    max_pricing_rounds: NonNegInt = 30
    """Rounds of LP and pricing per tier at most."""
    sequential_seed: Policy | None = Policy.SPREAD
    """Also place the deployments one at a time (GPUStack's way, with this placement policy) and start
    from that solution, so the joint plan is never behind it; ``None`` skips it."""
    progress: bool = False
    """Print solver progress to standard error."""


class TierBound(Frozen):
    """How far the plan can be from the best possible on one tier, in the tier's own units."""

    tier: str
    value: int
    """The plan's value on this tier, in ``unit`` (for the GPUs and workers tier: GPUs used)."""
    unit: str = ""
    """What ``value`` and ``bound`` count: priority weight, layers, replicas, GPUs."""
    bound: float | None
    """No plan beats this; for the layers tier: no plan that places at least ``placed_floor``
    (the plan's own priority weight, so the best plan overall is among them). On the minimised
    tiers (replicas moved, GPUs used) a lower bound, among the plans with the earlier tiers'
    values. ``None``: no bound beyond the trivial one is known (the tier was cut short)."""
    gap: float | None
    """Maximised tiers ``(bound - value) / bound``, minimised ``(value - bound) / value``: between 0
    and 1, 0 when no integer lies between them; ``None`` without a bound."""
    proven: bool = False
    """The value is the best possible (over ``over``)."""
    over: Literal["all layouts", "candidates"]
    """``all layouts``: from column generation, priced over every valid layout of every deployment;
    ``candidates``: the master's own bound, relative to the candidate layouts only."""
    closed: bool = False
    """Column generation left no column with a positive reduced cost (the LP over all layouts)."""
    placed_floor: int = 0
    layers_floor: int = 0
    """Moves and GPUs tiers: the bound holds among the plans with at least ``placed_floor`` weight
    placed and ``layers_floor`` layers on GPUs (the plan's own values: when those tiers are proven
    optimal, the best plan is among them)."""
    moved_ceiling: int | None = None
    """GPUs tier: and with at most this many replicas moved."""
    candidates_bound: float | None = None
    """The master's own bound over the candidates, when ``bound`` is over all layouts (minimised
    tiers: a lower bound on the count; it can be higher than ``bound``, but holds for the
    candidates only)."""
    rounds: NonNegInt = 0
    """Rounds of LP and pricing."""
    columns_added: NonNegInt = 0
    """Layouts pricing added to the candidates."""

    @property
    def shown_value(self) -> str:
        """The value with its unit where the tier's name does not already say it (``23`` for
        priority weight placed, ``3 GPUs`` for GPUs and workers used; ``1 GPU``, not ``1 GPUs``)."""
        named = self.tier.startswith(f"{self.unit} ") and " and " not in self.tier
        if not self.unit or named:
            return str(self.value)
        return counted(self.value, self.unit)

    @property
    def text(self) -> str:
        """``tier: value, proven best over ...``, ``tier: value, not proven: best possible at most /
        at least bound over ... (gap)``, or ``tier: value, not proven, no bound``."""
        head = f"{self.tier}: {self.shown_value}"
        if self.proven:
            return f"{head}, proven best over {self.over}"
        if self.bound is None or self.gap is None:
            return f"{head}, not proven, no bound"
        side = "at most" if self.tier in MAXIMISED_TIERS else "at least"
        return f"{head}, not proven: best possible {side} {self.bound:g} over {self.over} (gap {self.gap:.1%})"


MAXIMISED_TIERS = ("priority weight placed", "layers on GPUs")
"""The fleet tiers where more is better; the others (replicas moved, GPUs used) are minimised."""


class FleetPlan(Frozen):
    """The answer for a fleet."""

    schema_version: Literal[1] = SCHEMA_VERSION
    """Version of this JSON shape (``layerfit schema fleet``)."""
    status: Status
    """``optimal`` only when every tier in ``bounds`` is proven (each over what its bound says: all
    layouts or the candidates); ``feasible`` when one is not (``gap_tier``)."""
    placements: tuple[PlacedReplica, ...] = ()
    unplaced: tuple[UnplacedReplica, ...] = ()
    refused: tuple[str, ...] = ()
    """Deployments left out for bad input (a selection naming a worker or GPU the cluster lacks, a
    profile that cannot be estimated), in fleet order; their replicas are in ``unplaced`` with the
    reason. The rest is planned; ``replan`` exits 2 when any is refused."""
    moves: tuple[Move, ...] = ()
    """The steps from the current placement to the plan, in an order that never exceeds capacity."""
    stopped: tuple[ReplicaRef, ...] = ()
    """Replicas with a current placement and none in the plan (on a lost worker, scaled down,
    evicted by a higher priority, or of a deployment that cannot be planned whose memory is not known)."""
    lost: tuple[LostPlacement, ...] = ()
    """Current placements on GPUs or workers that are gone: stop them by hand."""
    commands: tuple[ReplicaCommands, ...] = ()
    """Command lines of every placed replica (``plan_fleet`` fills them, ``layerfit.fleet.commands``)."""
    reasons: tuple[Reason, ...] = ()
    """Fleet-level findings: pins that no longer fit, temporary double bookings avoided, ..."""
    objective: tuple[int, ...] = ()
    """Tier values reached: priority weight placed, layers on GPUs, minus the replicas moved (only
    replicas with a current placement that the deployment still has count; first starts do not),
    minus GPUs and workers used (``GPUs * (workers + 1) + workers``)."""
    gap: float | None = None
    """Relative distance between the solution and the bound of the first tier not proven optimal."""
    gap_tier: str | None = None
    """That tier (earlier tiers are proven); ``None`` when every tier is proven."""

    @property
    def proven_text(self) -> str:
        """Which tiers are proven, in words: ``every tier proven best over all layouts``, or
        ``proven: A, B; not proven: C (gap 33.3%)``; empty without bounds."""
        if not self.bounds:
            return ""
        proven = [bound for bound in self.bounds if bound.proven]
        if len(proven) == len(self.bounds):
            over = sorted({bound.over for bound in proven})
            return f"every tier proven best over {' or '.join(over)}"
        parts = []
        if proven:
            parts.append("proven: " + ", ".join(bound.tier for bound in proven))
        unproven = [
            bound.tier + (f" (gap {bound.gap:.1%})" if bound.gap is not None else "")
            for bound in self.bounds
            if not bound.proven
        ]
        parts.append("not proven: " + ", ".join(unproven))
        return "; ".join(parts)
    bounds: tuple[TierBound, ...] = ()
    """Bound and gap per tier where one is known: over all layouts with column generation (every
    tier where a pricing round could be run), else over the candidates."""
    stats: tuple[EngineStats, ...] = ()

    def replicas(self, change: ReplicaChange) -> tuple[ReplicaRef, ...]:
        """The replicas the plan keeps, moves, starts or stops."""
        if change is ReplicaChange.STOPPED:
            return self.stopped
        return tuple(
            ReplicaRef(deployment=p.deployment, replica=p.replica) for p in self.placements if p.change is change
        )
