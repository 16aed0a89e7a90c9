"""Context ranges and MoE models in the fleet planner (``layerfit.fleet.contexts``)."""

from __future__ import annotations

from load_emulation import planner_under, ticking_clock

from layerfit.domain import (
    Cluster,
    ComputeBuffer,
    Deployment,
    Gpu,
    MemoryProfile,
    MiB,
    PlannerConfig,
    RoleCosts,
    Worker,
)
from layerfit.domain.fleet import Fleet, FleetConfig, FleetPlan
from layerfit.fleet import plan_fleet
from layerfit.fleet.commands import with_commands

CONFIG = FleetConfig(time_limit_s=5.0, executor="serial", num_search_workers=1)
PLANNER = PlannerConfig(time_limit_s=2.0)
# test_planning_context_range's profile in MiB (4 blocks of 100, KV 32 each at 8192)
PROFILE = MemoryProfile(
    block_weight_bytes=(100 * MiB,) * 4,
    block_kv_bytes=(32 * MiB,) * 4,
    output_weight_bytes=10 * MiB,
    main=RoleCosts(fixed_bytes=50 * MiB),
    local=RoleCosts(fixed_bytes=50 * MiB),
    rpc=RoleCosts(fixed_bytes=50 * MiB),
)


def moe_profile() -> MemoryProfile:
    """test_moe_engines' profile in MiB: 8 blocks of 100 dense + 300 experts, KV 10."""
    compute = ComputeBuffer(full_offload_bytes=20 * MiB, partial_offload_bytes=30 * MiB)
    role = RoleCosts(fixed_bytes=100 * MiB, compute=compute)
    return MemoryProfile(
        block_weight_bytes=(400 * MiB,) * 8,
        block_kv_bytes=(10 * MiB,) * 8,
        block_expert_bytes=(300 * MiB,) * 8,
        output_weight_bytes=50 * MiB,
        main=role,
        local=role,
        rpc=role,
        host_fixed_bytes=10 * MiB,
    )


def gpus(*vram: int) -> Cluster:
    workers = tuple(
        Worker(
            id=f"w{i}",
            name=f"w{i}",
            total_ram_bytes=10**12,
            allocatable_ram_bytes=10**12,
            gpus=(Gpu(index=0, total_vram_bytes=v * MiB, allocatable_vram_bytes=v * MiB),),
        )
        for i, v in enumerate(vram)
    )
    return Cluster(workers=workers)


def argv_of(fleet: Fleet, result: FleetPlan, name: str) -> tuple[str, ...]:
    lines = with_commands(fleet, result).commands
    return next(r for r in lines if r.deployment == name).commands[-1].argv


def ctx_of(fleet: Fleet, result: FleetPlan, name: str) -> int:
    argv = argv_of(fleet, result, name)
    return int(argv[argv.index("-c") + 1])


def test_a_ranged_deployment_alone_gets_the_context_its_own_plan_picks() -> None:
    # full offload: 400 + 10 + 50 + KV (128 at 8192) fits 500 up to 2560 (test_planning_context_range)
    fleet = Fleet(cluster=gpus(500), deployments=(Deployment(name="a", profile=PROFILE, ctx_min=1000, ctx_max=16384),))
    result = plan_fleet(fleet, CONFIG, PLANNER)
    assert [p.deployment for p in result.placements] == ["a"] and result.placements[0].layout.full_offload
    assert ctx_of(fleet, result, "a") == 2560


def test_a_context_choice_cut_by_the_planners_safety_stop_is_a_safety_stop() -> None:
    # Each ranged deployment's context is chosen by its own plans, under the planner's own time
    # limit: a choice its wall clock cut may differ from run to run, and the plan says so (its
    # work budget would cut it at the same point on every run)
    fleet = Fleet(cluster=gpus(500), deployments=(Deployment(name="a", profile=PROFILE, ctx_min=1000, ctx_max=16384),))
    with planner_under(lambda: ticking_clock(86_400.0)):  # every deadline past by the next read
        cut = plan_fleet(fleet, CONFIG, PLANNER)
    stops = ", ".join(cut.stats[0].safety_stops)
    assert "context choice of a" in stops
    said = [r for r in cut.reasons if "safety stop" in r.message]
    assert len(said) == 1 and stops in said[0].message
    whole = plan_fleet(fleet, CONFIG, PLANNER)
    assert whole.stats[0].safety_stops == ()
    assert not any("safety stop" in r.message for r in whole.reasons)


def test_the_context_shrinks_when_that_places_another_replica() -> None:
    # alone, "a" takes 8192 (588 MiB): only the 1000 GPU holds it, and "b" (600 MiB) needs that GPU
    # too; at the range's smallest context (256: 464) "a" fits the 480 GPU and both are placed.
    b = MemoryProfile.uniform(4, 135 * MiB, 0)
    b = b.model_copy(update={"output_weight_bytes": 10 * MiB, "main": PROFILE.main})
    fleet = Fleet(
        cluster=gpus(1000, 480),
        deployments=(
            Deployment(name="a", profile=PROFILE, ctx_min=256, ctx_max=8192),
            Deployment(name="b", profile=b),
        ),
    )
    result = plan_fleet(fleet, CONFIG, PLANNER)
    assert sorted(p.deployment for p in result.placements) == ["a", "b"] and not result.unplaced
    assert ctx_of(fleet, result, "a") == 256


def test_a_moe_model_that_fits_no_gpu_whole_is_placed_with_experts_on_the_host() -> None:
    # 8 blocks of 400 (300 experts): 5 blocks' experts on the host on a 2000 GPU (test_moe_engines)
    fleet = Fleet(cluster=gpus(2000), deployments=(Deployment(name="m", profile=moe_profile()),))
    result = plan_fleet(fleet, CONFIG, PLANNER)
    (placed,) = result.placements
    assert placed.layout.full_offload and len(placed.layout.host_expert_blocks) == 5
    argv = argv_of(fleet, result, "m")
    assert argv[argv.index("--n-cpu-moe") + 1] == "5"
