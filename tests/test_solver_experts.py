"""The CP-SAT model places experts block by block (``layerfit.solver.model.expert_costs``).

* Over two devices the first ``k`` blocks are not the best set: the model finds a better one.
* On tiny instances every layout and every set of host-expert blocks is enumerated: the solver's
  tiers (layers, blocks with experts on GPUs, workers, GPUs) and tie-break equal the best valid
  layout's, INFEASIBLE exactly when none is valid.
* On larger instances the solver is never worse than the heuristic's MoE stage on the tiers taken
  in order, and every layout it returns passes ``check``.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain, combinations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_solver_properties import SLOW, all_layouts, clusters, configs, deployments, profiles

from layerfit.check import check_layout, unified_workers
from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    Gpu,
    Layout,
    MemoryProfile,
    MiB,
    ModelKind,
    PlannerConfig,
    RoleCosts,
    Status,
    Worker,
)
from layerfit.heuristics.moe import plan_with_experts
from layerfit.memory import claims
from layerfit.memory.experts import experts_are_a_decision, with_host_experts
from layerfit.planning.planner import plan
from layerfit.solver import SolveResult, solve
from layerfit.solver.model.objective import placement_score
from layerfit.solver.search.expert_search import expert_tier_key

CONFIG = PlannerConfig(time_limit_s=10)


def two_gpu_case() -> tuple[Cluster, Deployment]:
    """Blocks of dense part 10 and experts 100; GPU 0 holds two whole blocks, GPU 1 two dense
    parts and the output layer (5)."""
    role = RoleCosts(fixed_bytes=0, compute=ComputeBuffer(full_offload_bytes=0, partial_offload_bytes=0))
    profile = MemoryProfile(
        block_weight_bytes=(110,) * 4,
        block_kv_bytes=(0,) * 4,
        block_expert_bytes=(100,) * 4,
        output_weight_bytes=5,
        main=role,
        local=role,
        rpc=role,
    )
    gpus = (
        Gpu(index=0, total_vram_bytes=220, allocatable_vram_bytes=220),
        Gpu(index=1, total_vram_bytes=25, allocatable_vram_bytes=25),
    )
    worker = Worker(id="a", name="a", total_ram_bytes=10_000, allocatable_ram_bytes=10_000, gpus=gpus)
    return Cluster(workers=(worker,)), Deployment(name="m", profile=profile)


def test_the_model_keeps_the_last_devices_experts_on_the_host_where_first_k_cannot() -> None:
    cluster, deployment = two_gpu_case()
    assert deployment.profile is not None
    result = plan(cluster, deployment, CONFIG)
    assert result.best is not None
    layout = result.best.layout
    # four blocks on GPU 0 and GPU 1, the experts of GPU 1's two blocks on the host
    assert layout.gpu_layers == 5 and [(d.gpu_index, d.blocks) for d in layout.devices] == [(0, 2), (1, 2)]
    assert layout.host_expert_blocks == (2, 3)
    argv = result.commands[-1].argv
    assert "--n-cpu-moe" not in argv and "-ot" in argv
    # the first k: --n-cpu-moe 2 leaves no split that fits; the heuristic needs 3 (one block's
    # experts on GPUs)
    quick, fixed = plan_with_experts(cluster, deployment, CONFIG, deployment.profile)
    assert quick.layout is not None and fixed == (0, 1, 2)
    heuristic = with_host_experts(quick.layout, fixed)
    assert expert_tier_key(deployment.profile, heuristic)[:2] == (5, 1)
    assert expert_tier_key(deployment.profile, layout)[:2] == (5, 2)


# ---------------------------------------------------------------------------------------------
# Brute force and the heuristic, on random MoE instances
# ---------------------------------------------------------------------------------------------


@st.composite
def moe_profiles(draw: st.DrawFn, max_blocks: int, unit: int = 1) -> MemoryProfile:
    """``profiles`` with expert tensors in some blocks (a leading dense block may have none) and,
    sometimes, another host size for them."""
    base = draw(profiles(max_blocks, unit))
    weights = base.block_weight_bytes
    # kept on the host, the experts are part of the block's host weights (never more)
    host_sizes = tuple(draw(st.integers(0, base.host_weight_bytes(b) // unit)) * unit for b in range(len(weights)))
    host = draw(st.none() | st.just(host_sizes))
    # without their own host sizes the experts cost the host their weights: no more than the block's
    tops = weights if host is not None else [min(w, base.host_weight_bytes(b)) for b, w in enumerate(weights)]
    experts = tuple(draw(st.integers(0, top // unit)) * unit for top in tops)
    if not any(experts):  # some block has experts: the first one's whole weights, kept at no more host RAM
        experts = (weights[0], *experts[1:])
        first_host = min(weights[0], base.host_weight_bytes(0))
        host = host if host is not None else (first_host, *(0,) * (len(weights) - 1))
    return base.model_copy(update={"block_expert_bytes": experts, "block_host_expert_bytes": host})


def with_every_expert_set(profile: MemoryProfile, layouts: Iterator[Layout], decided: bool) -> Iterator[Layout]:
    """Each layout with every subset of its GPU blocks' experts on the host (none unless ``decided``)."""
    for layout in layouts:
        on_gpus = [block for block in profile.expert_blocks if block >= layout.cpu_blocks] if decided else []
        for chosen in chain.from_iterable(combinations(on_gpus, k) for k in range(len(on_gpus) + 1)):
            yield with_host_experts(layout, chosen)


def result_key(profile: MemoryProfile, result: SolveResult) -> tuple[int, int, int, int]:
    assert result.best is not None and result.tiers is not None
    key = expert_tier_key(profile, result.best.layout)
    tiers = result.tiers
    assert (key[0], key[2], key[3]) == (tiers.gpu_layers, -tiers.workers, -tiers.gpus)
    assert tiers.expert_blocks_on_gpus in (None, key[1])  # None: the experts were not the model's to place
    return key


def assert_valid(
    cluster: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, result: SolveResult
) -> None:
    for candidate in (*([result.best] if result.best else []), *result.alternatives):
        assert check_layout(cluster, dep, profile, candidate.layout, config) == ()
        assert candidate.claims == claims(profile, candidate.layout, unified_workers(cluster))
        assert expert_tier_key(profile, candidate.layout) == result_key(profile, result)


@settings(SLOW, max_examples=60)
@given(data=st.data())
def test_solver_equals_brute_force_with_expert_sets(data: st.DataObject) -> None:
    profile = data.draw(moe_profiles(max_blocks=3))
    cluster = data.draw(clusters(max_gpus=3, max_workers=2, top=900))
    dep = data.draw(deployments(cluster, profile, with_split=True))
    if data.draw(st.integers(0, 5)):  # mostly the deployments whose experts the model places
        dep = dep.model_copy(update={"cpu_offloading": True, "kind": ModelKind.LLM})
    config = data.draw(configs())
    decided = experts_are_a_decision(dep, profile, config)
    result = solve(cluster, dep, profile, config)
    layouts = with_every_expert_set(profile, all_layouts(cluster, profile.n_blocks), decided)
    valid = [layout for layout in layouts if check_layout(cluster, dep, profile, layout, config) == ()]
    if not valid:
        event("infeasible")
        assert result.status is Status.INFEASIBLE
        return
    assert_valid(cluster, dep, profile, config, result)
    if not decided:
        return  # the fixed-expert model; test_solver_properties covers it
    assert result.status is Status.OPTIMAL
    assert result.best is not None
    layout = result.best.layout
    event(f"host-expert blocks: {len(layout.host_expert_blocks)}, devices: {len(layout.devices)}")
    best = max(expert_tier_key(profile, layout) for layout in valid)
    assert result_key(profile, result) == best
    scores = [
        placement_score(cluster, config.policy, layout, claims(profile, layout, unified_workers(cluster)))
        for layout in valid
        if expert_tier_key(profile, layout) == best
    ]
    assert result.tiers is not None and result.tiers.tie_break == pytest.approx(max(scores), abs=1e-12)


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_solver_is_never_worse_than_the_heuristic_moe_stage(data: st.DataObject) -> None:
    profile = data.draw(moe_profiles(max_blocks=16, unit=16 * MiB))
    cluster = data.draw(clusters(max_gpus=12, max_workers=4, top=1200, unit=16 * MiB))
    dep = data.draw(deployments(cluster, profile, with_split=False))
    config = data.draw(configs()).model_copy(update={"time_limit_s": 10.0})
    quick, fixed = plan_with_experts(cluster, dep, config, profile)
    hint = None if quick.layout is None else with_host_experts(quick.layout, fixed)
    result = solve(cluster, dep, profile, config, hint=hint)
    assert_valid(cluster, dep, profile, config, result)
    if hint is not None and check_layout(cluster, dep, profile, hint, config) == ():
        assert result.best is not None
        # never worse on the tiers taken in order (layers, then expert blocks on GPUs, workers, GPUs)
        assert expert_tier_key(profile, result.best.layout) >= expert_tier_key(profile, hint)
    if result.status is Status.INFEASIBLE:
        assert quick.best is None
