"""CP-SAT solver properties on random clusters and profiles.

* On tiny instances every layout is enumerated: the solver's strict tiers and tie-break equal the
  best valid layout's, INFEASIBLE exactly when no layout is valid, and the CP model accepts a
  layout exactly when ``check`` does (the encoding equals the memory model).
* On clusters up to 32 GPUs the solver never returns an invalid layout, and it is never worse than
  the GPUStack heuristic: the heuristic's layout is accepted by the model, a heuristic plan means
  the solver is not INFEASIBLE, and a proven solver answer is at least as good on the tiers.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import permutations, product

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from layerfit import heuristics
from layerfit.check import check_layout, unified_workers
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    DeviceAssignment,
    Gpu,
    GpuRef,
    Layout,
    LlamaParams,
    MemoryProfile,
    MiB,
    ModelKind,
    OffloadOrder,
    PlannerConfig,
    Policy,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.memory import claims
from layerfit.solver import SolveResult, layout_is_feasible_in_model, solve
from layerfit.solver.model.candidates import incumbent_of
from layerfit.solver.model.instance import build_instance
from layerfit.solver.model.objective import placement_score
from layerfit.solver.model.scale import tie_break_unit
from layerfit.solver.search.alternatives import twin_alternatives
from layerfit.solver.shortcuts.proofs import capacity_infeasibility, single_gpu_answer

# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def compute_buffers(draw: st.DrawFn, top: int) -> ComputeBuffer:
    return ComputeBuffer(
        full_offload_bytes=draw(st.integers(0, top)),
        partial_offload_bytes=draw(st.integers(0, top)),
        multi_device_bytes=draw(st.none() | st.integers(0, top)),
    )


@st.composite
def role_costs(draw: st.DrawFn, top: int) -> RoleCosts:
    return RoleCosts(fixed_bytes=draw(st.integers(0, top)), compute=draw(compute_buffers(top)))


@st.composite
def profiles(draw: st.DrawFn, max_blocks: int, unit: int = 1) -> MemoryProfile:
    """Uniform or uneven blocks; every memory-model term may be non-zero. Sizes in ``unit`` bytes."""
    n = draw(st.integers(1, max_blocks))
    small = st.integers(0, 60).map(lambda v: v * unit)
    if draw(st.booleans()):
        weights = (draw(st.integers(1, 300)) * unit,) * n
        kv = (draw(small),) * n
        host: tuple[int, ...] | None = None
    else:
        weights = tuple(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)))
        weights = tuple(w * unit for w in weights)
        kv = tuple(draw(st.lists(small, min_size=n, max_size=n)))
        host = draw(
            st.none() | st.lists(st.integers(0, 300).map(lambda v: v * unit), min_size=n, max_size=n).map(tuple)
        )
    top = 150 * unit
    return MemoryProfile(
        block_weight_bytes=weights,
        block_kv_bytes=kv,
        block_host_weight_bytes=host,
        output_weight_bytes=draw(small),
        token_embedding_bytes=draw(small),
        main=draw(role_costs(top)),
        local=draw(role_costs(top)),
        rpc=draw(role_costs(top)),
        unified=draw(st.none() | role_costs(top)),
        host_fixed_bytes=draw(small),
        host_compute=draw(compute_buffers(top)),
        rpc_host_fixed_bytes=draw(small),
        extra_main_gpu_bytes=draw(small),
        output_compute_bytes=draw(small),
        first_device_compute_bytes=draw(small),
        host_output_weight_bytes=draw(st.none() | small),
        host_output_compute_bytes=draw(small),
    )


@st.composite
def clusters(draw: st.DrawFn, max_gpus: int, max_workers: int, top: int, unit: int = 1) -> Cluster:
    """Workers with 0.. GPUs; some repeat the previous worker exactly (symmetry breaking)."""
    workers: list[Worker] = []
    budget = max_gpus
    for i in range(draw(st.integers(1, max_workers))):
        name = f"w{i}"
        if workers and draw(st.integers(0, 3)) == 0:
            twin = workers[-1]
            if len(twin.gpus) <= budget:
                budget -= len(twin.gpus)
                workers.append(twin.model_copy(update={"id": name, "name": name}))
                continue
        n_gpus = draw(st.integers(0, min(budget, 8)))
        budget -= n_gpus
        vram = [draw(st.integers(0, top)) * unit for _ in range(n_gpus)]
        ram = draw(st.integers(0, 2 * top)) * unit
        workers.append(
            Worker(
                id=name,
                name=name,
                unified_memory=draw(st.integers(0, 4)) == 0,
                total_ram_bytes=ram,
                allocatable_ram_bytes=ram,
                gpus=tuple(Gpu(index=j, total_vram_bytes=v, allocatable_vram_bytes=v) for j, v in enumerate(vram)),
            )
        )
    return Cluster(workers=tuple(workers))


@st.composite
def deployments(draw: st.DrawFn, where: Cluster, profile: MemoryProfile, *, with_split: bool) -> Deployment:
    gpus = [GpuRef(worker=w.name, index=g.index) for w in where.workers for g in w.gpus]
    selection = None
    if gpus and draw(st.integers(0, 3)) == 0:
        selection = tuple(draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=len(gpus), unique=True)))
    split = None
    if with_split and draw(st.integers(0, 3)) == 0:
        split = tuple(draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=1, max_size=3)))
        assume(sum(split) > 0)
    ngl = draw(st.none() | st.none() | st.integers(0, profile.n_layers + 1))
    return Deployment(
        name="d",
        profile=profile,
        params=LlamaParams(n_gpu_layers=ngl, tensor_split=split),
        cpu_offloading=draw(st.booleans()),
        distributed_inference_across_workers=draw(st.booleans()),
        gpu_selection=selection,
        kind=ModelKind.IMAGE if draw(st.integers(0, 9)) == 0 else ModelKind.LLM,
    )


@st.composite
def configs(draw: st.DrawFn) -> PlannerConfig:
    return PlannerConfig(
        offload_order=draw(st.sampled_from(list(OffloadOrder))),
        policy=draw(st.sampled_from(list(Policy))),
        max_rpc_servers=draw(st.integers(1, 3)),
        alternatives=draw(st.integers(0, 2)),
        time_limit_s=20.0,
        seed=draw(st.integers(0, 3)),
    )


# ---------------------------------------------------------------------------------------------
# Brute force
# ---------------------------------------------------------------------------------------------


def all_layouts(where: Cluster, n_blocks: int) -> Iterator[Layout]:
    """Every layout the cluster allows: main worker, ordered RPC and local GPUs, block counts, output."""
    gpus = [(w.name, g.index) for w in where.workers for g in w.gpus]
    for main in where.workers:
        local = [g for g in gpus if g[0] == main.name]
        remote = [g for g in gpus if g[0] != main.name]
        for n_rpc in range(len(remote) + 1):
            for rpc in permutations(remote, n_rpc):
                for n_local in range(len(local) + 1):
                    for own in permutations(local, n_local):
                        yield from _fillings(main.name, n_blocks, (*rpc, *own))


def _fillings(main: str, n_blocks: int, devices: tuple[tuple[str, int], ...]) -> Iterator[Layout]:
    if not devices:
        yield Layout(main_worker=main, n_blocks=n_blocks)
        return
    for output in (False, True):
        for counts in product(range(n_blocks + 1), repeat=len(devices)):
            if sum(counts) > n_blocks or 0 in counts[:-1] or (counts[-1] == 0 and not output):
                continue
            yield Layout(
                main_worker=main,
                n_blocks=n_blocks,
                devices=tuple(
                    DeviceAssignment(worker=w, gpu_index=i, blocks=b) for (w, i), b in zip(devices, counts, strict=True)
                ),
                output_offloaded=output,
            )


def tier_key(layout: Layout) -> tuple[int, int, int]:
    """Higher is better: layers, then fewer workers, then fewer GPUs."""
    return (layout.gpu_layers, -len(layout.workers), -len(layout.devices))


def result_key(result: SolveResult) -> tuple[int, int, int]:
    assert result.tiers is not None
    return (result.tiers.gpu_layers, -result.tiers.workers, -result.tiers.gpus)


def assert_valid(
    where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, result: SolveResult
) -> None:
    candidates = (*([result.best] if result.best else []), *result.alternatives)
    for candidate in candidates:
        assert check_layout(where, dep, profile, candidate.layout, config) == ()
        assert candidate.claims == claims(profile, candidate.layout, unified_workers(where))
    if result.best is not None:
        assert result.tiers is not None
        assert tier_key(result.best.layout) == result_key(result)
        signatures = set()
        for candidate in candidates:
            assert tier_key(candidate.layout) == result_key(result)
            signature = (
                candidate.layout.main_worker,
                tuple(sorted((d.worker, d.gpu_index) for d in candidate.layout.devices)),
            )
            assert signature not in signatures  # alternatives use other GPUs or another main worker
            signatures.add(signature)


SLOW = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], deadline=None)


@SLOW
@given(data=st.data())
def test_solver_equals_brute_force_on_tiny_instances(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=3))
    where = data.draw(clusters(max_gpus=3, max_workers=3, top=900))
    dep = data.draw(deployments(where, profile, with_split=True))
    config = data.draw(configs())
    hint = heuristics.plan(where, dep, config, profile).layout if data.draw(st.booleans()) else None
    result = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, result)

    layouts = sorted(all_layouts(where, profile.n_blocks), key=tier_key, reverse=True)
    valid = [layout for layout in layouts if check_layout(where, dep, profile, layout, config) == ()]
    if not valid:
        assert result.status is Status.INFEASIBLE
    else:
        assert result.status is Status.OPTIMAL
        best_key = tier_key(valid[0])
        assert result_key(result) == best_key
        equally_good = [layout for layout in valid if tier_key(layout) == best_key]
        scores = [
            placement_score(where, config.policy, layout, claims(profile, layout, unified_workers(where)))
            for layout in equally_good
        ]
        assert result.tiers is not None
        assert result.tiers.tie_break == pytest.approx(max(scores), abs=1e-12)

    sample = data.draw(st.lists(st.sampled_from(layouts), max_size=4)) if layouts else []
    for layout in [*valid[:2], *sample]:
        accepted = check_layout(where, dep, profile, layout, config) == ()
        assert layout_is_feasible_in_model(where, dep, profile, config, layout) is accepted


# ---------------------------------------------------------------------------------------------
# Larger clusters, against the heuristic
# ---------------------------------------------------------------------------------------------


@SLOW
@given(data=st.data())
def test_solver_is_valid_and_never_worse_than_the_heuristic(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=24, unit=16 * MiB))
    where = data.draw(clusters(max_gpus=32, max_workers=8, top=1200, unit=16 * MiB))
    # No -ts: the heuristic maps a split onto GPU indexes 0..n-1 of a worker, the solver onto any
    # devices; the two answer different questions.
    dep = data.draw(deployments(where, profile, with_split=False))
    config = data.draw(configs())
    plan = heuristics.plan(where, dep, config, profile)
    result = solve(where, dep, profile, config, hint=plan.layout)
    assert_valid(where, dep, profile, config, result)
    assert result.status is not Status.UNKNOWN
    if plan.best is not None:
        heuristic = plan.best.layout
        assert check_layout(where, dep, profile, heuristic, config) == ()
        assert layout_is_feasible_in_model(where, dep, profile, config, heuristic)
        assert result.status is not Status.INFEASIBLE
        if result.strict_optimal:
            assert result_key(result) >= tier_key(heuristic)
    if result.status is Status.INFEASIBLE:
        assert plan.best is None


@SLOW
@given(data=st.data())
def test_a_valid_heuristic_layout_always_lands(data: st.DataObject) -> None:
    """Whatever the time limit, a heuristic plan means a solver answer at least as good on the tiers."""
    profile = data.draw(profiles(max_blocks=24, unit=16 * MiB))
    where = data.draw(clusters(max_gpus=32, max_workers=8, top=1200, unit=16 * MiB))
    dep = data.draw(deployments(where, profile, with_split=False))
    limit = data.draw(st.sampled_from([1e-9, 1e-3, 0.05, 5.0]))
    config = data.draw(configs()).model_copy(update={"time_limit_s": limit})
    plan = heuristics.plan(where, dep, config, profile)
    assume(plan.best is not None)
    assert plan.best is not None
    result = solve(where, dep, profile, config, hint=plan.best.layout)
    assert result.status in (Status.OPTIMAL, Status.FEASIBLE)
    assert result.best is not None
    assert tier_key(result.best.layout) >= tier_key(plan.best.layout)
    assert_valid(where, dep, profile, config, result)


@SLOW
@given(data=st.data())
def test_each_shortcut_agrees_with_the_full_solve(data: st.DataObject) -> None:
    """A capacity proof means the full solve finds nothing; a single-GPU proof gives its tiers and
    a tie-break at least as good (CP-SAT ranks the tie-break in coarser units)."""
    profile = data.draw(profiles(max_blocks=12, unit=16 * MiB))
    where = data.draw(clusters(max_gpus=12, max_workers=4, top=1200, unit=16 * MiB))
    dep = data.draw(deployments(where, profile, with_split=False))
    config = data.draw(configs())
    plan = heuristics.plan(where, dep, config, profile)
    instance = build_instance(where, dep, profile, config)
    incumbent = incumbent_of(where, dep, profile, config, plan.layout)
    infeasible_by = capacity_infeasibility(instance)
    single = single_gpu_answer(where, dep, profile, config, instance, incumbent)
    event(f"shortcut: {infeasible_by or ('single-gpu' if single else 'none')}")
    if infeasible_by is None and single is None:
        return
    full = solve(where, dep, profile, config, hint=plan.layout, shortcuts=False)
    fast = solve(where, dep, profile, config, hint=plan.layout)
    assert_valid(where, dep, profile, config, fast)
    if infeasible_by is not None:
        assert incumbent is None
        assert full.status is Status.INFEASIBLE and fast.status is Status.INFEASIBLE
        assert fast.stats.details["proof"] == infeasible_by
    if single is not None:
        assert full.strict_optimal and fast.status is Status.OPTIMAL
        assert fast.stats.details["proof"] == "single-gpu-enumeration"
        assert fast.tiers is not None and full.tiers is not None
        assert result_key(fast) == result_key(full)
        assert fast.tiers.tie_break >= full.tiers.tie_break - 1e-9
        assert len(fast.alternatives) >= min(config.alternatives, len(full.alternatives))


@st.composite
def twin_cases(draw: st.DrawFn) -> tuple[MemoryProfile, Cluster, Deployment, PlannerConfig]:
    """A small cluster with 2-4 identical workers and a near twin of them (one GPU or the RAM
    differs, so no swap onto it keeps every figure), a deployment and a config with alternatives."""
    profile = draw(profiles(max_blocks=12, unit=16 * MiB))
    drawn = draw(clusters(max_gpus=6, max_workers=3, top=1200, unit=16 * MiB))
    vram = [draw(st.integers(300, 1200)) * 16 * MiB for _ in range(draw(st.integers(1, 3)))]
    ram = draw(st.integers(600, 2400)) * 16 * MiB
    template = Worker(
        id="t",
        name="t",
        unified_memory=draw(st.integers(0, 4)) == 0,
        total_ram_bytes=ram,
        allocatable_ram_bytes=ram,
        gpus=tuple(Gpu(index=j, total_vram_bytes=v, allocatable_vram_bytes=v) for j, v in enumerate(vram)),
    )
    twins = [template.model_copy(update={"id": f"t{i}", "name": f"t{i}"}) for i in range(draw(st.integers(2, 4)))]
    delta = draw(st.sampled_from([-64, -1, 1, 64])) * 16 * MiB
    if draw(st.booleans()):
        size = max(0, vram[0] + delta)
        changed: dict[str, object] = {
            "gpus": (Gpu(index=0, total_vram_bytes=size, allocatable_vram_bytes=size), *template.gpus[1:])
        }
    else:
        changed = {"total_ram_bytes": max(0, ram + delta), "allocatable_ram_bytes": max(0, ram + delta)}
    near = template.model_copy(update={"id": "n", "name": "n", **changed})
    where = Cluster(workers=(*drawn.workers, near, *twins))
    dep = draw(deployments(where, profile, with_split=False))
    config = draw(configs()).model_copy(update={"alternatives": draw(st.integers(1, 3))})
    return profile, where, dep, config


@SLOW
@given(case=twin_cases())
def test_twin_swaps_keep_every_tier_and_the_score(
    case: tuple[MemoryProfile, Cluster, Deployment, PlannerConfig],
) -> None:
    """Each twin swap of a valid layout is valid, on other workers, with the same tiers and score;
    one exists whenever the layout uses one of the identical workers and another is unused."""
    profile, where, dep, config = case
    plan = heuristics.plan(where, dep, config, profile)
    assume(plan.best is not None)
    assert plan.best is not None
    layout = plan.best.layout
    found = twin_alternatives(where, dep, profile, config, layout, config.alternatives)
    event(f"twin swaps: {len(found)}")
    score = placement_score(where, config.policy, layout, claims(profile, layout, unified_workers(where)))
    assert len(found) <= config.alternatives
    keys = {(layout.main_worker, tuple(sorted((d.worker, d.gpu_index) for d in layout.devices)))}
    for candidate in found:
        assert check_layout(where, dep, profile, candidate.layout, config) == ()
        assert candidate.score == score
        assert tier_key(candidate.layout) == tier_key(layout)
        key = (candidate.layout.main_worker, tuple(sorted((d.worker, d.gpu_index) for d in candidate.layout.devices)))
        assert key not in keys
        keys.add(key)
    twins = {w.name for w in where.workers if w.name.startswith("t")}
    if twins & set(layout.workers) and twins - set(layout.workers) and dep.gpu_selection is None:
        assert found


@SLOW
@given(case=twin_cases())
def test_twin_swap_alternatives_agree_with_the_full_solve(
    case: tuple[MemoryProfile, Cluster, Deployment, PlannerConfig],
) -> None:
    """Alternatives found by trading a worker for an identical one have the best's tiers and score,
    and the list is as long and, place by place, as good as the re-solves' own (within the
    tie-break's coarse unit)."""
    profile, where, dep, config = case
    plan = heuristics.plan(where, dep, config, profile)
    fast = solve(where, dep, profile, config, hint=plan.layout)
    swaps = [entry for entry in str(fast.stats.details["shortcuts"]).split(",") if entry.startswith("twin-swap:")]
    event(f"twin swaps: {swaps[0] if swaps else 'none'}")
    if not swaps:
        return
    full = solve(where, dep, profile, config, hint=plan.layout, shortcuts=False)
    assert_valid(where, dep, profile, config, fast)
    assert fast.best is not None and full.best is not None
    instance = build_instance(where, dep, profile, config)
    tie_unit_mib = tie_break_unit(cls.capacity for cls in instance.classes) * instance.scale.unit_bytes / MiB
    tolerance = (len(fast.best.layout.devices) + 1) * tie_unit_mib
    # shortcuts may prove the strict tiers on another layout, and twins tie: equal tiers, equal score
    assert fast.strict_optimal and full.strict_optimal
    assert tier_key(fast.best.layout) == tier_key(full.best.layout)
    swapped = int(swaps[0].split(":")[1])
    assert 1 <= swapped <= len(fast.alternatives)
    for candidate in fast.alternatives[:swapped]:
        assert candidate.score == fast.best.score
        assert set(candidate.layout.workers) != set(fast.best.layout.workers)
    # A tie-break cut by its time share (a loaded machine) is not proven and has no re-solves; a
    # re-solve cut by the alternatives' share truncates the list: nothing more to compare then.
    if fast.status is not Status.OPTIMAL or full.status is not Status.OPTIMAL:
        return
    assert abs(fast.best.score - full.best.score) <= tolerance
    if fast.stats.details["truncated"] or full.stats.details["truncated"]:
        return
    assert len(fast.alternatives) >= min(config.alternatives, len(full.alternatives))
    for ours, theirs in zip(fast.alternatives, full.alternatives, strict=False):
        assert ours.score >= theirs.score - tolerance


@SLOW
@given(data=st.data())
def test_no_other_gpu_set_agrees_with_the_full_solve(data: st.DataObject) -> None:
    """When the model has one main worker and no GPU beyond the best layout's, the re-solves find
    no alternative either."""
    profile = data.draw(profiles(max_blocks=12, unit=16 * MiB))
    where = data.draw(clusters(max_gpus=6, max_workers=2, top=1200, unit=16 * MiB))
    dep = data.draw(deployments(where, profile, with_split=False))
    config = data.draw(configs()).model_copy(update={"alternatives": data.draw(st.integers(1, 3))})
    plan = heuristics.plan(where, dep, config, profile)
    fast = solve(where, dep, profile, config, hint=plan.layout)
    skipped = "no-other-gpu-set" in str(fast.stats.details["shortcuts"]).split(",")
    event(f"no other GPU set: {skipped}")
    if not skipped:
        return
    full = solve(where, dep, profile, config, hint=plan.layout, shortcuts=False)
    assert_valid(where, dep, profile, config, fast)
    assert full.alternatives == ()
    assert "alternative" not in str(fast.stats.details["steps"])


@SLOW
@given(data=st.data())
def test_the_layer_bound_agrees_with_the_full_solve(data: st.DataObject) -> None:
    """When no worker count reaches the layer ceiling, step 1 runs again at the most layers the
    capacity bounds allow (``layer_bound``); a layout found there has the full solve's strict tiers
    (uneven blocks, CPU offloading, so that the ceiling is often out of reach)."""
    profile = data.draw(profiles(max_blocks=12, unit=16 * MiB))
    drawn = data.draw(clusters(max_gpus=8, max_workers=3, top=600, unit=16 * MiB))
    ram = 40_000 * 16 * MiB  # the host keeps what the GPUs cannot hold
    where = Cluster(
        workers=tuple(
            w.model_copy(update={"total_ram_bytes": ram, "allocatable_ram_bytes": ram}) for w in drawn.workers
        )
    )
    dep = data.draw(deployments(where, profile, with_split=False))
    params = dep.params.model_copy(update={"n_gpu_layers": None})
    dep = dep.model_copy(update={"cpu_offloading": True, "kind": ModelKind.LLM, "params": params})
    config = data.draw(configs())
    plan = heuristics.plan(where, dep, config, profile)
    fast = solve(where, dep, profile, config, hint=plan.layout)
    proven = fast.stats.details.get("proof") == "layer-bound"
    event(f"proof: {fast.stats.details.get('proof')} {fast.status.value}")
    if not proven:
        return
    full = solve(where, dep, profile, config, hint=plan.layout, shortcuts=False)
    assert_valid(where, dep, profile, config, fast)
    assert fast.strict_optimal and full.strict_optimal
    assert result_key(fast) == result_key(full)
