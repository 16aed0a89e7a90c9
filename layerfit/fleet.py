"""plan_fleet(): place every replica of many deployments over a whole fleet at once.

Formulation (a column-based master problem):

1. **Candidates.** For each deployment, a set of valid layouts, each checked alone against the
   cluster: its current layouts; a single-GPU full offload on every GPU that can hold it (the claims
   of such a layout do not depend on which GPU, so they are computed once); for every distinct kind
   of worker (same GPUs, RAM and memory type) the single-deployment planner's best layouts on that
   worker alone, mapped onto every worker of that kind; and, when distribution is allowed, the
   planner's layouts over the whole cluster. Candidates are generated per deployment in parallel
   (local process pool or Ray).
2. **Master CP-SAT.** ``x[d, c]`` = replicas of deployment ``d`` that use candidate ``c``. The claims
   of all chosen candidates add up per GPU and per worker (RAM, or the whole pool on unified-memory
   workers) and must fit. Sizes are scaled to MiB, claims rounded up and capacities down, so the
   scaled model can only be more conservative than the byte-exact check that follows.
3. **Tiers, solved in order** (each stage fixes the previous optimum and is hinted with the previous
   solution): priority weight placed (weights chosen so that one replica of a higher priority
   outweighs every replica of all lower ones), layers on GPUs, moved replicas (relative to the
   current placement; pinned replicas are fixed), then GPUs and workers used.

Optimality is relative to the candidate set: a layout no generator proposes is never chosen. The
reported gap is the master's own (bound vs. objective of the stage that stopped early).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Literal, TypeVar

from ortools.sat.python import cp_model

from layerfit.check import (
    capacity_reasons,
    check_layout,
    offload_order_reasons,
    reference_reasons,
    rule_reasons,
    unified_workers,
)
from layerfit.domain.base import MiB
from layerfit.domain.cluster import Cluster, Worker
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment, ModelKind
from layerfit.domain.fleet import (
    Executor,
    Fleet,
    FleetConfig,
    FleetPlan,
    Move,
    PlacedReplica,
    Placement,
    UnplacedReplica,
)
from layerfit.domain.layout import Claims, DeviceAssignment, Layout
from layerfit.domain.plan import EngineStats, Reason, ReasonKind, Severity, Status
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError, SolverError
from layerfit.layouts import worker_layouts
from layerfit.memory import claims as compute_claims
from layerfit.memory import make_layout

# ---------------------------------------------------------------------------------------------
# Candidate generation
# ---------------------------------------------------------------------------------------------

CandidateSet = tuple[tuple[Layout, Claims], ...]
Item = TypeVar("Item")


def _stratified(items: Sequence[Item], limit: int, offset: int) -> list[Item]:
    """At most ``limit`` items spread evenly over ``items``, starting at a per-deployment offset."""
    if limit <= 0 or len(items) <= limit:
        return list(items)
    step = len(items) / limit
    return [items[int((i * step + offset % max(1, int(step))) % len(items))] for i in range(limit)]


def _single_gpu_candidates(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, limit: int, offset: int
) -> list[tuple[Layout, Claims]]:
    """Full offloads on one GPU that fit. Their claims depend only on whether the worker has unified
    memory, so the memory model and the rules run once per kind and capacities are compared per GPU."""
    selected = None if deployment.gpu_selection is None else {(r.worker, r.index) for r in deployment.gpu_selection}
    templates: dict[bool, Claims | None] = {}

    def single(worker: Worker, index: int) -> Layout:
        device = DeviceAssignment(worker=worker.name, gpu_index=index, blocks=profile.n_blocks)
        return make_layout(worker.name, profile.n_blocks, [device], config.offload_order)

    fitting: list[tuple[Worker, int]] = []
    for worker in cluster.workers:
        for gpu in worker.gpus:
            if selected is not None and (worker.name, gpu.index) not in selected:
                continue
            unified = worker.unified_memory
            if unified not in templates:
                layout = single(worker, gpu.index)
                rules = (
                    *offload_order_reasons(layout, config.offload_order),
                    *rule_reasons(cluster, deployment, profile, layout, config),
                )
                templates[unified] = (
                    None if rules else compute_claims(profile, layout, {worker.name} if unified else ())
                )
            template = templates[unified]
            if template is None:
                continue
            ram = template.workers[0].pool_bytes if unified else template.workers[0].ram_bytes
            if template.devices[0].total_bytes <= gpu.allocatable_vram_bytes and ram <= worker.allocatable_ram_bytes:
                fitting.append((worker, gpu.index))
    chosen = []
    for worker, index in _shared_and_spread(fitting, limit, offset):
        template = templates[worker.unified_memory]
        if template is None:
            continue
        claims = template.model_copy(
            update={
                "devices": (template.devices[0].model_copy(update={"worker": worker.name, "gpu_index": index}),),
                "workers": (template.workers[0].model_copy(update={"worker": worker.name}),),
            }
        )
        chosen.append((single(worker, index), claims))
    return chosen


def _shared_and_spread(fitting: list[tuple[Worker, int]], limit: int, offset: int) -> list[tuple[Worker, int]]:
    """Half of the GPUs that fit tightest (the same ones for every deployment, so that several can
    share a GPU), half spread evenly over the rest (so that deployments do not all compete for the
    same few)."""
    if limit <= 0 or len(fitting) <= limit:
        return fitting
    by_room = sorted(fitting, key=lambda item: (item[0].gpu(item[1]).allocatable_vram_bytes, item[0].name, item[1]))
    tight = by_room[: limit // 2]
    return tight + _stratified(by_room[limit // 2 :], limit - len(tight), offset)


def _lower_bound_vram(profile: MemoryProfile) -> int:
    """VRAM any full offload needs in total, whatever the split: weights, KV and the output layer."""
    return sum(profile.block_weight_bytes) + sum(profile.block_kv_bytes) + profile.output_weight_bytes


def generate_candidates(
    cluster: Cluster,
    deployment: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    current: Sequence[Layout] = (),
    limit: int = 0,
    offset: int = 0,
) -> CandidateSet:
    """Valid layouts for one deployment, each fitting the cluster alone (see the module docstring).

    ``limit`` caps the single-GPU candidates (spread evenly over the GPUs, from ``offset``).
    """
    from layerfit.planner import plan as plan_one

    found = list(valid_candidates(cluster, deployment, profile, config, current))
    singles = _single_gpu_candidates(cluster, deployment, profile, config, limit, offset)
    found += singles
    fits_one_worker = bool(singles)
    needed = _lower_bound_vram(profile)
    if deployment.kind is not ModelKind.IMAGE:
        hosts = sorted(
            (
                worker
                for worker in cluster.workers
                if len(worker.gpus) > 1
                and (deployment.gpu_selection is None or worker.name in deployment.selected_workers)
                and sum(gpu.allocatable_vram_bytes for gpu in worker.gpus) >= needed
            ),
            key=lambda worker: (sum(gpu.allocatable_vram_bytes for gpu in worker.gpus), worker.name),
        )
        for worker in _stratified(hosts, limit, offset):
            multi = valid_candidates(cluster, deployment, profile, config, worker_layouts(worker, profile, config))
            found += multi[:1]
            fits_one_worker = fits_one_worker or bool(multi)
    if not fits_one_worker:
        # Nothing fits fully on one worker: let the single-deployment planner find distributed or
        # partial layouts over the whole cluster.
        result = plan_one(cluster, deployment, config, profile, explain=False)
        layouts = [c.layout for c in ([result.best] if result.best else []) + list(result.alternatives)]
        found += valid_candidates(cluster, deployment, profile, config, layouts)
    unique: dict[Layout, Claims] = {}
    for layout, claims in found:
        unique.setdefault(layout, claims)
    return tuple(unique.items())


def valid_candidates(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig, layouts: Iterable[Layout]
) -> CandidateSet:
    """The distinct layouts that pass every check alone, with their claims."""
    unified = unified_workers(cluster)
    seen: set[Layout] = set()
    valid: list[tuple[Layout, Claims]] = []
    for layout in layouts:
        if layout in seen:
            continue
        seen.add(layout)
        if check_layout(cluster, deployment, profile, layout, config):
            continue
        valid.append((layout, compute_claims(profile, layout, unified)))
    return tuple(valid)


CandidateTask = tuple[Cluster, Deployment, MemoryProfile, PlannerConfig, tuple[Layout, ...], int, int]


def _candidates_task(args: CandidateTask) -> CandidateSet:
    return generate_candidates(*args)


def _run_tasks(tasks: list[CandidateTask], config: FleetConfig) -> list[CandidateSet]:
    """Candidate generation over the configured executor; results in task order, identical everywhere."""
    if config.executor is Executor.SERIAL or len(tasks) <= 1:
        return [_candidates_task(task) for task in tasks]
    if config.executor is Executor.RAY:
        try:
            import ray
        except ImportError:
            raise InputError("executor", "ray is not installed: pip install 'layerfit[ray]'") from None
        if not ray.is_initialized():
            ray.init(num_cpus=config.processes or None, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(_candidates_task)
        return list(ray.get([remote.remote(task) for task in tasks]))
    processes = config.processes or os.cpu_count() or 1
    if processes <= 1:
        return [_candidates_task(task) for task in tasks]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        return list(pool.map(_candidates_task, tasks, chunksize=max(1, len(tasks) // (processes * 4))))


# ---------------------------------------------------------------------------------------------
# Master problem
# ---------------------------------------------------------------------------------------------


def priority_weights(deployments: Sequence[Deployment]) -> dict[str, int]:
    """Weights such that one replica of a priority outweighs all replicas of every lower priority."""
    replicas_at: Counter[int] = Counter()
    for deployment in deployments:
        replicas_at[deployment.priority] += deployment.replicas
    weight_of: dict[int, int] = {}
    lower_total = 0
    for priority in sorted(replicas_at):
        weight_of[priority] = lower_total + 1
        lower_total += weight_of[priority] * replicas_at[priority]
    if lower_total >= 2**50:
        raise InputError("priority", "too many distinct priorities to weigh exactly; use fewer levels")
    return {deployment.name: weight_of[deployment.priority] for deployment in deployments}


def _mib_up(n_bytes: int) -> int:
    return -(-n_bytes // MiB)


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, stage: str, started: float) -> None:
        super().__init__()
        self._stage = stage
        self._started = started

    def on_solution_callback(self) -> None:
        print(
            f"[{time.perf_counter() - self._started:7.2f}s] {self._stage}: objective {self.ObjectiveValue():.0f}, "
            f"bound {self.BestObjectiveBound():.0f}",
            file=sys.stderr,
            flush=True,
        )


class _Master:
    """The master CP-SAT model: replicas per candidate, capacities, tier expressions."""

    def __init__(
        self,
        cluster: Cluster,
        deployments: Sequence[Deployment],
        candidates: Sequence[CandidateSet],
        current: dict[str, Counter[Layout]],
        pins: dict[str, Counter[Layout]],
        seed: dict[str, Counter[Layout]] | None = None,
    ) -> None:
        self.model = cp_model.CpModel()
        self.seed = seed or {}
        self.deployments = deployments
        self.candidates = candidates
        self.x: list[list[cp_model.IntVar]] = []
        gpu_load: dict[tuple[str, int], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        ram_load: dict[str, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        gpu_users: dict[tuple[str, int], list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        worker_users: dict[str, list[tuple[int, cp_model.IntVar]]] = defaultdict(list)
        kept_terms: list[cp_model.IntVar] = []
        self.moves_total = 0
        weights = priority_weights(deployments)
        self.weights = weights
        self.current = current
        self.pins = pins
        self.capacity: dict[object, int] = {}
        self.loads: list[list[list[tuple[object, int]]]] = []
        """Per deployment, per candidate: (GPU or worker key, MiB) it takes."""
        placed_terms: list[tuple[int, cp_model.IntVar]] = []
        layer_terms: list[tuple[int, cp_model.IntVar]] = []
        for d, (deployment, options) in enumerate(zip(deployments, candidates, strict=True)):
            replicas = deployment.replicas
            row = [self.model.new_int_var(0, replicas, f"x_{d}_{c}") for c in range(len(options))]
            self.x.append(row)
            if row:
                self.model.add(sum(row) <= replicas)
            placed_terms += [(weights[deployment.name], var) for var in row]
            row_loads: list[list[tuple[object, int]]] = []
            for (layout, claims), var in zip(options, row, strict=True):
                layer_terms.append((layout.gpu_layers, var))
                takes: list[tuple[object, int]] = []
                for device in claims.devices:
                    key = (device.worker, device.gpu_index)
                    gpu_load[key].append((_mib_up(device.total_bytes), var))
                    gpu_users[key].append((replicas, var))
                    takes.append((key, _mib_up(device.total_bytes)))
                for worker_claim in claims.workers:
                    unified = cluster.worker(worker_claim.worker).unified_memory
                    need = worker_claim.pool_bytes if unified else worker_claim.ram_bytes
                    ram_load[worker_claim.worker].append((_mib_up(need), var))
                    worker_users[worker_claim.worker].append((replicas, var))
                    takes.append((worker_claim.worker, _mib_up(need)))
                row_loads.append(takes)
            self.loads.append(row_loads)
            now = current.get(deployment.name, Counter())
            self.moves_total += sum(now.values())
            for c, (layout, _) in enumerate(options):
                if layout in now:
                    kept = self.model.new_int_var(0, now[layout], f"kept_{d}_{c}")
                    self.model.add(kept <= row[c])
                    kept_terms.append(kept)
                pinned = pins.get(deployment.name, Counter()).get(layout, 0)
                if pinned:
                    self.model.add(row[c] >= pinned)
        for worker in cluster.workers:
            for gpu in worker.gpus:
                load = gpu_load.get((worker.name, gpu.index))
                self.capacity[(worker.name, gpu.index)] = gpu.allocatable_vram_bytes // MiB
                if load:
                    self.model.add(sum(size * var for size, var in load) <= gpu.allocatable_vram_bytes // MiB)
            self.capacity[worker.name] = worker.allocatable_ram_bytes // MiB
            if worker.name in ram_load:
                capacity = worker.allocatable_ram_bytes // MiB
                self.model.add(sum(size * var for size, var in ram_load[worker.name]) <= capacity)
        self.used_gpus = self._usage(gpu_users, "gpu")
        self.used_workers = self._usage(worker_users, "worker")
        self.placed = sum(weight * var for weight, var in placed_terms)
        self.layers = sum(layers * var for layers, var in layer_terms)
        self.kept = sum(kept_terms)
        n_workers = len(cluster.workers)
        self.footprint = sum(self.used_gpus) * (n_workers + 1) + sum(self.used_workers)

    def _usage(self, users: Mapping[Any, list[tuple[int, cp_model.IntVar]]], name: str) -> list[cp_model.IntVar]:
        flags = []
        for i, terms in enumerate(users.values()):
            flag = self.model.new_bool_var(f"used_{name}_{i}")
            for replicas, var in terms:
                self.model.add(var <= replicas * flag)
            flags.append(flag)
        return flags

    def all_vars(self) -> list[cp_model.IntVar]:
        return [var for row in self.x for var in row]

    def upper_bounds(self) -> tuple[int, int, int]:
        """Simple bounds of the maximised tiers: every replica placed, with all its layers on GPUs,
        and every current replica kept."""
        placed = layers = kept = 0
        for d, deployment in enumerate(self.deployments):
            options = self.candidates[d]
            if not options:
                continue
            placed += self.weights[deployment.name] * deployment.replicas
            layers += deployment.replicas * max(layout.gpu_layers for layout, _ in options)
            now = self.current.get(deployment.name, Counter())
            kept += sum(min(now[layout], deployment.replicas) for layout, _ in options if layout in now)
        return placed, layers, kept

    def tier_values(self, counts: Sequence[Sequence[int]]) -> tuple[int, int, int]:
        """The maximised tiers' values of a solution given as replicas per candidate."""
        placed = layers = kept = 0
        for d, deployment in enumerate(self.deployments):
            now = self.current.get(deployment.name, Counter())
            for (layout, _), n in zip(self.candidates[d], counts[d], strict=True):
                placed += self.weights[deployment.name] * n
                layers += layout.gpu_layers * n
                kept += min(n, now.get(layout, 0))
        return placed, layers, kept

    def satisfies_pins(self, counts: Sequence[Sequence[int]]) -> bool:
        return all(
            n >= self.pins.get(deployment.name, Counter()).get(layout, 0)
            for d, deployment in enumerate(self.deployments)
            for (layout, _), n in zip(self.candidates[d], counts[d], strict=True)
        )

    def greedy(self) -> list[list[int]]:
        """A first solution to start from: the better of two best-fit-decreasing passes, one taking
        deployments by priority then size, one by size alone (it packs better when all fit)."""

        def size(d: int) -> int:
            return min((sum(mib for key, mib in takes if isinstance(key, tuple)) for takes in self.loads[d]), default=0)

        def gpus_used(counts: list[list[int]]) -> int:
            return len(
                {
                    key
                    for d, row in enumerate(counts)
                    for c, n in enumerate(row)
                    if n
                    for key, _ in self.loads[d][c]
                    if isinstance(key, tuple)
                }
            )

        indices = range(len(self.deployments))
        by_priority = sorted(indices, key=lambda d: (-self.weights[self.deployments[d].name], -size(d)))
        by_size = sorted(indices, key=lambda d: -size(d))
        passes = [self._best_fit(by_priority), self._best_fit(by_size)]
        if self.seed:
            passes.append(self._best_fit(by_priority, self.seed))
        return max(passes, key=lambda counts: (*self.tier_values(counts)[:2], -gpus_used(counts)))

    def _best_fit(
        self, order: Sequence[int], preferred: Mapping[str, Counter[Layout]] | None = None
    ) -> list[list[int]]:
        """Pinned replicas, then replicas kept where they run (then ``preferred`` layouts), then the
        rest in ``order``, each on the candidate with the most layers on GPUs that opens the fewest
        GPUs and fits tightest."""
        free = dict(self.capacity)
        counts = [[0] * len(row) for row in self.x]

        def take(d: int, c: int) -> bool:
            takes = self.loads[d][c]
            if any(free[key] < mib for key, mib in takes):
                return False
            for key, mib in takes:
                free[key] -= mib
            counts[d][c] += 1
            return True

        left = [deployment.replicas for deployment in self.deployments]
        for wanted in (self.pins, self.current, preferred or {}):
            for d, deployment in enumerate(self.deployments):
                for c, (layout, _) in enumerate(self.candidates[d]):
                    for _ in range(min(wanted.get(deployment.name, Counter()).get(layout, 0) - counts[d][c], left[d])):
                        if take(d, c):
                            left[d] -= 1

        def fit(d: int, c: int) -> tuple[int, int]:
            gpus = [(key, mib) for key, mib in self.loads[d][c] if isinstance(key, tuple)]
            opened = sum(1 for key, _ in gpus if free[key] == self.capacity[key])
            return opened, sum(free[key] - mib for key, mib in gpus)

        for d in order:
            while left[d] > 0:
                fits = [c for c in range(len(self.x[d])) if all(free[k] >= mib for k, mib in self.loads[d][c])]
                if not fits:
                    break
                layers = max(self.candidates[d][c][0].gpu_layers for c in fits)
                best = min((c for c in fits if self.candidates[d][c][0].gpu_layers == layers), key=lambda c: fit(d, c))
                take(d, best)
                left[d] -= 1
        return counts


def _solve_tiers(
    master: _Master, config: FleetConfig
) -> tuple[Status, list[list[int]], tuple[int, ...], float | None, str | None]:
    """Solve the tiers in order: status, replicas per candidate, tier values, the gap and its tier.

    The greedy start is the incumbent. A maximised tier whose incumbent already reaches a simple
    upper bound (every replica placed, every layer on a GPU, every replica kept) is proven without
    a solve; otherwise CP-SAT gets its share of the remaining time, hinted with the incumbent.
    """
    started = time.perf_counter()
    tiers: list[tuple[str, cp_model.LinearExprT, bool]] = [
        ("priority weight placed", master.placed, True),
        ("layers on GPUs", master.layers, True),
        ("replicas kept in place", master.kept, True),
        ("GPUs and workers used", master.footprint, False),
    ]
    bounds = master.upper_bounds()
    solver = cp_model.CpSolver()
    solver.parameters.random_seed = config.seed
    solver.parameters.num_workers = config.num_search_workers or (os.cpu_count() or 1)
    values: list[int] = []
    status = Status.OPTIMAL
    gap: float | None = 0.0
    gap_tier: str | None = None
    greedy = master.greedy()
    counts: list[list[int]] | None = greedy if master.satisfies_pins(greedy) else None
    for var, value in zip(master.all_vars(), (n for row in greedy for n in row), strict=True):
        master.model.add_hint(var, value)
    for position, (name, expression, maximize) in enumerate(tiers):
        if counts is not None and position < len(bounds) and master.tier_values(counts)[position] == bounds[position]:
            value = bounds[position]
            values.append(value)
            master.model.add(expression >= value)
            continue
        remaining = config.time_limit_s - (time.perf_counter() - started)
        if remaining <= 0.05:
            status = Status.FEASIBLE if counts is not None else Status.UNKNOWN
            gap, gap_tier = None, name
            break
        share = remaining / (len(tiers) - position) if position < len(tiers) - 1 else remaining
        solver.parameters.max_time_in_seconds = share if counts is not None else remaining * 0.7
        if maximize:
            master.model.maximize(expression)
        else:
            master.model.minimize(expression)
        callback = _Progress(name, started) if config.progress else None
        outcome = solver.solve(master.model, callback)
        if outcome not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if outcome == cp_model.INFEASIBLE:
                raise SolverError("fleet master model is infeasible (pinned replicas cannot all fit together)")
            status = Status.FEASIBLE if counts is not None else Status.UNKNOWN
            gap, gap_tier = None, name
            break
        value = round(solver.objective_value)
        values.append(value if maximize else -value)
        flat = iter([solver.value(var) for var in master.all_vars()])
        counts = [[next(flat) for _ in row] for row in master.x]
        if outcome == cp_model.FEASIBLE and status is Status.OPTIMAL:
            # The first tier not proven optimal decides the status and the reported gap; later
            # tiers still improve the solution with this tier's value fixed.
            status = Status.FEASIBLE
            gap, gap_tier = abs(solver.best_objective_bound - value) / max(1.0, abs(value)), name
        master.model.clear_hints()  # type: ignore[no-untyped-call]
        for var, val in zip(master.all_vars(), (n for row in counts for n in row), strict=True):
            master.model.add_hint(var, val)
        if maximize:
            master.model.add(expression >= value)
        else:
            master.model.add(expression <= value)
    if counts is None:
        return Status.UNKNOWN, [[0] * len(row) for row in master.x], (), None, gap_tier
    return status, counts, tuple(values), gap, gap_tier


# ---------------------------------------------------------------------------------------------
# Replicas, moves, reasons
# ---------------------------------------------------------------------------------------------


def _gpus(layout: Layout) -> tuple[str, ...]:
    return tuple(f"{d.worker}:{d.gpu_index}" for d in layout.devices)


def _assign_replicas(
    deployment: Deployment, chosen: list[Layout], now: dict[int, Layout]
) -> tuple[list[tuple[int, Layout, bool]], list[int]]:
    """Give chosen layouts replica numbers: kept replicas keep theirs; returns (placed, unplaced)."""
    pool = Counter(chosen)
    placed: list[tuple[int, Layout, bool]] = []
    free_ids = []
    for replica in range(deployment.replicas):
        layout = now.get(replica)
        if layout is not None and pool[layout] > 0:
            pool[layout] -= 1
            placed.append((replica, layout, False))
        else:
            free_ids.append(replica)
    rest = list(pool.elements())
    for replica, layout in zip(free_ids, rest, strict=False):
        placed.append((replica, layout, True))
    unplaced = free_ids[len(rest) :]
    return sorted(placed, key=lambda item: item[0]), unplaced


def order_moves(
    cluster: Cluster,
    current: Sequence[tuple[str, int, Layout, Claims]],
    target: Sequence[tuple[str, int, Layout, Claims]],
) -> tuple[Move, ...]:
    """Stops and starts in an order that never exceeds capacity.

    Starts go first whenever they fit next to what still runs (no downtime); otherwise the replica
    that blocks is stopped first, and the start is marked ``downtime``. Since the final state fits,
    stopping everything that must go always makes room, so no double booking is ever needed.
    """
    running = {(d, r): claims for d, r, _, claims in current}
    layout_of = {(d, r): layout for d, r, layout, _ in current}
    wanted = {(d, r): (layout, claims) for d, r, layout, claims in target}
    stops = [key for key in running if key not in wanted or wanted[key][0] != layout_of[key]]
    starts = [key for key in wanted if key not in running or wanted[key][0] != layout_of[key]]
    moves: list[Move] = []
    stopped_first: set[tuple[str, int]] = set()

    def fits(extra: Claims) -> bool:
        return not capacity_reasons(cluster, *running.values(), extra)

    def record(action: Literal["stop", "start"], key: tuple[str, int], layout: Layout, downtime: bool = False) -> None:
        moves.append(
            Move(
                step=len(moves),
                action=action,
                deployment=key[0],
                replica=key[1],
                worker=layout.main_worker,
                gpus=_gpus(layout),
                downtime=downtime,
            )
        )

    def stop(key: tuple[str, int]) -> None:
        record("stop", key, layout_of[key])
        del running[key]
        stops.remove(key)

    while starts:
        ready = next((key for key in starts if fits(wanted[key][1])), None)
        if ready is None:
            blocker = next((key for key in starts if key in stops), None) or (stops[0] if stops else None)
            if blocker is None:
                raise SolverError("moves cannot be ordered: the target placement does not fit")
            stop(blocker)
            stopped_first.add(blocker)
            continue
        layout, claims = wanted[ready]
        record("start", ready, layout, downtime=ready in stopped_first)
        starts.remove(ready)
        if ready in stops:  # started next to its old placement: now stop that one
            stop(ready)
        running[ready] = claims
    for key in list(stops):
        stop(key)
    return tuple(moves)


# ---------------------------------------------------------------------------------------------
# plan_fleet() and the sequential baseline
# ---------------------------------------------------------------------------------------------


def _profiles(deployments: Sequence[Deployment]) -> list[MemoryProfile]:
    from layerfit.planner import resolve_profile

    return [resolve_profile(deployment) for deployment in deployments]


def _pin_reasons(
    fleet: Fleet, profiles: Mapping[str, MemoryProfile], config: PlannerConfig
) -> tuple[dict[str, Counter[Layout]], list[Reason]]:
    """Pins that still fit are enforced; a pin that no longer fits is reported, never dropped silently."""
    by_name = {d.name: d for d in fleet.deployments}
    pins: dict[str, Counter[Layout]] = defaultdict(Counter)
    reasons: list[Reason] = []
    for placement in fleet.current:
        if not placement.pinned:
            continue
        deployment = by_name[placement.deployment]
        broken = check_layout(fleet.cluster, deployment, profiles[deployment.name], placement.layout, config)
        if broken:
            reasons.append(
                Reason(
                    kind=ReasonKind.PIN_BROKEN,
                    message=f"pinned replica {placement.replica} of {placement.deployment} no longer fits where it is: "
                    + "; ".join(reason.message for reason in broken),
                    severity=Severity.WARNING,
                    worker=placement.layout.main_worker,
                )
            )
            continue
        pins[placement.deployment][placement.layout] += 1
    return pins, reasons


def plan_fleet(
    fleet: Fleet,
    config: FleetConfig = FleetConfig(),
    planner_config: PlannerConfig = PlannerConfig(time_limit_s=2.0),
) -> FleetPlan:
    """Place every replica that fits, jointly; then order the moves from the current placement."""
    started = time.perf_counter()
    profiles = dict(zip((d.name for d in fleet.deployments), _profiles(fleet.deployments), strict=True))
    current_layouts: dict[str, list[Layout]] = defaultdict(list)
    for placement in fleet.current:
        current_layouts[placement.deployment].append(placement.layout)
    tasks = [
        (
            fleet.cluster,
            d,
            profiles[d.name],
            planner_config,
            tuple(dict.fromkeys(current_layouts[d.name])),
            config.max_single_gpu_candidates,
            position,
        )
        for position, d in enumerate(fleet.deployments)
    ]
    candidates = _run_tasks(tasks, config)
    seed: list[tuple[str, Layout]] = []
    if config.sequential_seed is not None:
        # One at a time, GPUStack's way: its layouts join the candidates and its assignment is one of
        # the starting solutions, so the joint plan is never behind it on the tiers.
        seed_config = planner_config.model_copy(update={"policy": config.sequential_seed})
        placed, _ = plan_sequential(fleet, lambda c, d, p: _heuristic_layout(c, d, p, seed_config), profiles)
        seed = [(p.deployment, p.layout) for p in placed]
        extra: dict[str, list[Layout]] = defaultdict(list)
        for name, layout in seed:
            extra[name].append(layout)
        candidates = [
            (
                *options,
                *valid_candidates(
                    fleet.cluster,
                    d,
                    profiles[d.name],
                    planner_config,
                    [lay for lay in extra[d.name] if lay not in dict(options)],
                ),
            )
            for d, options in zip(fleet.deployments, candidates, strict=True)
        ]
    generation_s = time.perf_counter() - started
    result = choose(fleet, profiles, candidates, config, planner_config, seed)
    stats = result.stats[0].model_copy(
        update={
            "wall_time_s": time.perf_counter() - started,
            "details": {**result.stats[0].details, "candidate_generation_s": round(generation_s, 3)},
        }
    )
    return result.model_copy(update={"stats": (stats,)})


def choose(
    fleet: Fleet,
    profiles: Mapping[str, MemoryProfile],
    candidates: Sequence[CandidateSet],
    config: FleetConfig = FleetConfig(),
    planner_config: PlannerConfig = PlannerConfig(),
    seed: Sequence[tuple[str, Layout]] = (),
) -> FleetPlan:
    """The master problem over given candidates (one set per deployment, in fleet order), and the moves.

    ``seed`` (deployment, layout) pairs, such as a one-at-a-time placement, start the search.
    """
    started = time.perf_counter()
    cluster, deployments = fleet.cluster, fleet.deployments
    current_by: dict[str, dict[int, Layout]] = defaultdict(dict)
    for placement in fleet.current:
        current_by[placement.deployment][placement.replica] = placement.layout
    pins, reasons = _pin_reasons(fleet, profiles, planner_config)
    current_counts = {name: Counter(layouts.values()) for name, layouts in current_by.items()}
    seeded: dict[str, Counter[Layout]] = defaultdict(Counter)
    for name, layout in seed:
        seeded[name][layout] += 1
    master = _Master(cluster, deployments, candidates, current_counts, pins, seeded)
    status, counts, values, gap, gap_tier = _solve_tiers(master, config)
    placed: list[PlacedReplica] = []
    unplaced: list[UnplacedReplica] = []
    for deployment, options, row in zip(deployments, candidates, counts, strict=True):
        chosen = [layout for (layout, _), n in zip(options, row, strict=True) for _ in range(n)]
        claims_of = dict(options)
        assigned, missing = _assign_replicas(deployment, chosen, current_by[deployment.name])
        placed += [
            PlacedReplica(deployment=deployment.name, replica=r, layout=layout, claims=claims_of[layout], moved=moved)
            for r, layout, moved in assigned
        ]
        why = _unplaced_reason(deployment, options)
        unplaced += [UnplacedReplica(deployment=deployment.name, replica=r, reasons=(why,)) for r in missing]
    if capacity_reasons(cluster, *(p.claims for p in placed)):
        raise SolverError("fleet plan exceeds a capacity after decoding; this is a bug")
    # Replicas on workers or GPUs that are gone are not running any more: nothing to stop there.
    unified = unified_workers(cluster)
    current = [
        (p.deployment, p.replica, p.layout, compute_claims(profiles[p.deployment], p.layout, unified))
        for p in fleet.current
        if not reference_reasons(cluster, p.layout)
    ]
    moves = order_moves(cluster, current, [(p.deployment, p.replica, p.layout, p.claims) for p in placed])
    stats = EngineStats(
        engine="fleet",
        wall_time_s=time.perf_counter() - started,
        status=status,
        details={
            "candidates": sum(len(options) for options in candidates),
            "deployments": len(deployments),
            "executor": config.executor.value,
        },
    )
    return FleetPlan(
        status=status,
        placements=tuple(placed),
        unplaced=tuple(unplaced),
        moves=moves,
        reasons=tuple(reasons),
        objective=values,
        gap=gap,
        gap_tier=gap_tier,
        stats=(stats,),
    )


def _heuristic_layout(
    cluster: Cluster, deployment: Deployment, profile: MemoryProfile, config: PlannerConfig
) -> Layout | None:
    from layerfit import heuristics

    return heuristics.plan(cluster, deployment, config, profile).layout


def _unplaced_reason(deployment: Deployment, options: CandidateSet) -> Reason:
    if not options:
        return Reason(
            kind=ReasonKind.NO_CANDIDATE,
            message=f"{deployment.name} does not fit anywhere in this cluster, even alone",
        )
    return Reason(
        kind=ReasonKind.NO_CANDIDATE,
        message=f"{deployment.name}: no room left; its {len(options)} possible layouts are taken by deployments "
        f"of the same or higher priority",
        severity=Severity.WARNING,
    )


def subtract(cluster: Cluster, claims: Claims) -> Cluster:
    """The cluster with ``claims`` taken out of its allocatable memory (for one-at-a-time placement)."""
    workers = []
    for worker in cluster.workers:
        gpus = tuple(
            gpu.model_copy(
                update={
                    "allocatable_vram_bytes": max(
                        0, gpu.allocatable_vram_bytes - claims.vram_bytes(worker.name, gpu.index)
                    )
                }
            )
            for gpu in worker.gpus
        )
        claim = claims.worker(worker.name)
        used = 0 if claim is None else (claim.pool_bytes if worker.unified_memory else claim.ram_bytes)
        workers.append(
            worker.model_copy(
                update={"gpus": gpus, "allocatable_ram_bytes": max(0, worker.allocatable_ram_bytes - used)}
            )
        )
    return cluster.model_copy(update={"workers": tuple(workers)})


def plan_sequential(
    fleet: Fleet,
    planner: Callable[[Cluster, Deployment, MemoryProfile], Layout | None],
    profiles: Mapping[str, MemoryProfile] | None = None,
) -> tuple[list[PlacedReplica], list[UnplacedReplica]]:
    """GPUStack's way: one replica at a time in arrival order, each taking what is left."""
    cluster = fleet.cluster
    placed: list[PlacedReplica] = []
    unplaced: list[UnplacedReplica] = []
    unified = unified_workers(cluster)
    if profiles is None:
        profiles = dict(zip((d.name for d in fleet.deployments), _profiles(fleet.deployments), strict=True))
    for deployment in fleet.deployments:
        profile = profiles[deployment.name]
        for replica in range(deployment.replicas):
            layout = planner(cluster, deployment, profile)
            if layout is None:
                unplaced.append(UnplacedReplica(deployment=deployment.name, replica=replica))
                continue
            claims = compute_claims(profile, layout, unified)
            placed.append(
                PlacedReplica(deployment=deployment.name, replica=replica, layout=layout, claims=claims, moved=True)
            )
            cluster = subtract(cluster, claims)
    return placed, unplaced


__all__ = [
    "Fleet",
    "FleetConfig",
    "FleetPlan",
    "Placement",
    "choose",
    "generate_candidates",
    "order_moves",
    "plan_fleet",
    "plan_sequential",
    "priority_weights",
    "subtract",
    "valid_candidates",
]
