"""The tie-break decided by its bound (``tie_break_bound``): shortcut ``tie-break-bound-met``.

* The bound's arithmetic: ``best_reserve`` is the largest reserve with which the devices hold the
  blocks (one more unit fails), on random devices.
* On random multi-worker clusters with uniform blocks, a solve whose tie-break was decided by the
  bound agrees with the full solve (every tie-break a CP-SAT search): the same strict tiers and,
  under spread, the same headroom within one model unit per device; under binpack within the
  tie-break's coarse unit. Alternatives are at least as many as the full solve's.
* A tie-break not searched (a model over ``LARGE_MODEL_CLASSES``; the limit set to 0 here) gives
  a valid layout of the full solve's strict tiers, never better than its tie-break (which would
  make the full solve's proof wrong) and, when it claims the optimum, as good.
* The binpack bound's knapsack equals brute force over every choice of GPUs.
* Identical GPUs over many workers (GPUStack's distributed scenario): the bound is met, without a
  tie-break search, and the answer's score equals the full solve's.
"""

from __future__ import annotations

from itertools import combinations
from unittest import mock

from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, assert_valid, configs, profiles, result_key, tier_key
from test_solver_witness import shared_clusters

from layerfit import heuristics
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    GiB,
    Gpu,
    MemoryProfile,
    MiB,
    PlannerConfig,
    Policy,
    Status,
    Worker,
)
from layerfit.solver import SolveResult, solve
from layerfit.solver.model.capacity import class_blocks
from layerfit.solver.model.instance import SlotKind, build_instance
from layerfit.solver.model.scale import tie_break_unit
from layerfit.solver.search import tie_break_stage
from layerfit.solver.shortcuts.tie_break_bound import (
    TIE_BREAK_BOUND_MET,
    DeviceRoom,
    best_reserve,
    binpack_bound,
    most_blocks,
)


@given(
    devices=st.lists(
        st.tuples(st.integers(1, 400), st.integers(0, 400), st.integers(0, 60)).map(
            lambda t: DeviceRoom(capacity=t[0], room=min(t[0], t[1] + t[2]), fixed=t[2])
        ),
        min_size=1,
        max_size=6,
    ),
    blocks=st.integers(1, 20),
    block=st.integers(1, 50),
)
def test_best_reserve_is_the_largest_that_holds_the_blocks(devices: list[DeviceRoom], blocks: int, block: int) -> None:
    runs = tuple(block * (b + 1) + b * b for b in range(blocks))  # non-decreasing run costs
    found = best_reserve(devices, blocks, runs)
    if found is None:
        assert most_blocks(devices, 0, runs) < blocks
        return
    assert most_blocks(devices, found, runs) >= blocks
    assert most_blocks(devices, found + 1, runs) < blocks


def _uniform_profile(n_blocks: int, block_mib: int, fixed_mib: int, output_mib: int) -> MemoryProfile:
    return MemoryProfile.uniform(
        n_blocks,
        block_mib * MiB,
        block_mib * MiB // 10,
        output_weight_bytes=output_mib * MiB,
        token_embedding_bytes=output_mib * MiB // 2,
        gpu_fixed_bytes=fixed_mib * MiB,
        compute=ComputeBuffer(full_offload_bytes=fixed_mib * MiB, partial_offload_bytes=2 * fixed_mib * MiB),
        host_fixed_bytes=fixed_mib * MiB,
        rpc_host_fixed_bytes=fixed_mib * MiB // 3,
    )


@st.composite
def uniform_profiles(draw: st.DrawFn) -> MemoryProfile:
    return _uniform_profile(
        draw(st.integers(2, 24)), draw(st.integers(20, 300)), draw(st.integers(0, 200)), draw(st.integers(0, 300))
    )


def _deployment(profile: MemoryProfile) -> Deployment:
    return Deployment(name="d", profile=profile, cpu_offloading=True, distributed_inference_across_workers=True)


def _met(result: SolveResult) -> bool:
    return TIE_BREAK_BOUND_MET in str(result.stats.details["shortcuts"])


def _assert_agrees(where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig) -> bool:
    hint = heuristics.plan(where, dep, config, profile).layout
    fast = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, fast)
    met = _met(fast)
    if not met:
        return False
    assert fast.status is Status.OPTIMAL
    full = solve(where, dep, profile, config, hint=hint, shortcuts=False)
    assert not _met(full)
    assert fast.best is not None and full.best is not None and full.strict_optimal
    assert result_key(fast) == result_key(full) == tier_key(fast.best.layout)
    if full.status is not Status.OPTIMAL:
        return True  # the full solve's tie-break ran out of its time share (a loaded machine)
    instance = build_instance(where, dep, profile, config)
    unit_mib = instance.scale.unit_bytes / MiB
    if config.policy is Policy.BINPACK:
        unit_mib *= tie_break_unit(cls.capacity for cls in instance.classes)
    tolerance = (len(fast.best.layout.devices) + 1) * unit_mib
    assert abs(fast.best.score - full.best.score) <= tolerance
    if not (fast.stats.details["truncated"] or full.stats.details["truncated"]):
        assert len(fast.alternatives) >= min(config.alternatives, len(full.alternatives))
    return True


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_a_tie_break_decided_by_its_bound_agrees_with_the_full_solve(data: st.DataObject) -> None:
    profile = data.draw(uniform_profiles())
    where = data.draw(shared_clusters(profile))
    event(f"bound met: {_assert_agrees(where, _deployment(profile), profile, data.draw(configs()))}")


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_a_tie_break_not_searched_is_valid_and_never_beats_the_full_solve(data: st.DataObject) -> None:
    profile = data.draw(profiles(max_blocks=16, unit=16 * MiB))
    where = data.draw(shared_clusters(profile))
    config = data.draw(configs())
    dep = _deployment(profile)
    hint = heuristics.plan(where, dep, config, profile).layout
    with mock.patch.object(tie_break_stage, "LARGE_MODEL_CLASSES", 0):
        fast = solve(where, dep, profile, config, hint=hint)
    assert_valid(where, dep, profile, config, fast)
    shortcuts = str(fast.stats.details["shortcuts"])
    event(f"not searched: {next((s for s in shortcuts.split(',') if s.startswith('tie-break-not')), 'no')}")
    if "tie-break-not-searched" not in shortcuts:
        return
    full = solve(where, dep, profile, config, hint=hint, shortcuts=False)
    assert fast.best is not None and full.best is not None and fast.strict_optimal and full.strict_optimal
    assert result_key(fast) == result_key(full)
    if full.status is not Status.OPTIMAL:
        return  # the full solve's tie-break ran out of its time share (a loaded machine): nothing to compare
    instance = build_instance(where, dep, profile, config)
    unit_mib = instance.scale.unit_bytes / MiB
    if config.policy is Policy.BINPACK:
        unit_mib *= tie_break_unit(cls.capacity for cls in instance.classes)
    tolerance = (len(fast.best.layout.devices) + 1) * unit_mib
    assert fast.best.score <= full.best.score + tolerance
    if fast.status is Status.OPTIMAL:
        assert fast.best.score >= full.best.score - tolerance


def _identical_workers(count: int, gpus_each: tuple[int, ...]) -> Cluster:
    workers = []
    for i in range(count):
        n = gpus_each[i % len(gpus_each)]
        gpus = tuple(Gpu(index=j, total_vram_bytes=24 * GiB, allocatable_vram_bytes=23 * GiB) for j in range(n))
        name = f"w{i:02d}"
        workers.append(
            Worker(id=name, name=name, total_ram_bytes=128 * GiB, allocatable_ram_bytes=126 * GiB, gpus=gpus)
        )
    return Cluster(workers=tuple(workers))


@settings(SLOW, max_examples=12)
@given(
    count=st.integers(3, 12),
    pattern=st.sampled_from([(1,), (2,), (1, 2), (2, 1, 1)]),
    policy=st.sampled_from(list(Policy)),
    n_blocks=st.integers(20, 80),
)
def test_identical_gpus_decide_the_tie_break_by_its_bound(
    count: int, pattern: tuple[int, ...], policy: Policy, n_blocks: int
) -> None:
    """Many workers of identical GPUs, a model of 3 to 5 of them: the bound is met."""
    where = _identical_workers(count, pattern)
    gpus = min(sum(len(w.gpus) for w in where.workers), 5)
    block_mib = int((gpus - 1.5) * 23 * 1024 / (n_blocks * 1.1))
    profile = _uniform_profile(n_blocks, block_mib, 300, block_mib)
    config = PlannerConfig(policy=policy, max_rpc_servers=8, time_limit_s=20.0, seed=0)
    dep = _deployment(profile)
    layout = heuristics.plan(where, dep, config, profile).layout
    assert layout is not None and layout.gpu_layers == profile.n_layers
    assert _assert_agrees(where, dep, profile, config), solve(where, dep, profile, config, hint=layout).stats.details


@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_the_binpack_knapsack_equals_brute_force(data: st.DataObject) -> None:
    """``binpack_bound`` (a dynamic programme) is the least allocatable VRAM of ``g`` candidate GPUs
    whose whole-block capacities add up to the blocks, as every choice of ``g`` GPUs shows."""
    profile = data.draw(profiles(max_blocks=16, unit=16 * MiB))
    where = data.draw(shared_clusters(profile))
    config = data.draw(configs()).model_copy(update={"policy": Policy.BINPACK})
    instance = build_instance(where, _deployment(profile), profile, config)
    gpus = data.draw(st.integers(1, 5))
    items = []
    for cls in instance.classes:
        kinds = [kind for kind, ok in ((SlotKind.RPC, cls.rpc_ok), (SlotKind.LOCAL, cls.local_ok)) if ok]
        if kinds:
            held = max(class_blocks(instance, cls, kind, multi=gpus > 1) for kind in kinds)
            items += [(cls.tie_capacity, held)] * cls.count
    assume(len(items) >= gpus)
    reaching = [
        sum(size for size, _ in chosen)
        for chosen in combinations(items, gpus)
        if sum(held for _, held in chosen) >= instance.n_blocks
    ]
    expected = min(reaching) if reaching else sum(sorted(size for size, _ in items)[:gpus])
    assert binpack_bound(instance, gpus) == expected
