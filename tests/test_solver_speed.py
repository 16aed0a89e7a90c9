"""``objective: speed``: the solver's optimum equals brute force over every layout, in the model's
units, on tiny clusters of mixed GPU speeds, links and CPUs; each layout's time in the model is its
predicted time within the stated rounding bound, and CP-SAT's ``decode_us`` is the same sum.

The brute force counts a layout's time from the instance's rounded figures (``time_us`` below,
worked out from ``SpeedCosts`` as the ``speed_costs`` docstring writes the sum), checks it against
CP-SAT on a sample and against ``speed.predict`` on every valid layout, and takes the best
(time, workers, GPUs), then the best tie-break score among those.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_solver_experts import moe_profiles, with_every_expert_set
from test_solver_properties import SLOW, all_layouts, clusters, configs, deployments, profiles

from layerfit import heuristics
from layerfit.budget.work import Work
from layerfit.check import check_layout, unified_workers
from layerfit.domain import Cluster, Deployment, Gpu, Layout, MemoryProfile, PlannerConfig, Status, Worker
from layerfit.domain.cluster import Network
from layerfit.domain.config import Objective
from layerfit.domain.deployment import ModelKind
from layerfit.domain.speed import SpeedShape
from layerfit.memory import claims
from layerfit.memory.experts import experts_are_a_decision
from layerfit.solver import SolveResult, solve
from layerfit.solver.model.build import build_model
from layerfit.solver.model.instance import Instance, build_instance
from layerfit.solver.model.objective import placement_score
from layerfit.solver.model.runner import complete_hint
from layerfit.solver.model.speed_floor import least_device_cost, time_floor
from layerfit.solver.shortcuts.server_bound import narrow, server_bound
from layerfit.solver.shortcuts.speed_bound import least_time_us, one_worker_least_time_us
from layerfit.speed.deployment import deployment_speed

MB = 10**6
GPU_NAMES = ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060", "Tesla T4", "", "CPU")
"""Fast, slower, slow, unknown (the table's slowest, stated), and ggml's CPU backend."""


@st.composite
def speed_facts(draw: st.DrawFn, where: Cluster) -> Cluster:
    """The cluster with each GPU's name drawn, and each worker's RAM bandwidth, threads and link."""
    networks = st.none() | st.builds(
        Network, rtt_ms=st.sampled_from([0.1, 1.0, 4.0]), bandwidth_gbps=st.sampled_from([None, 1.0, 25.0])
    )
    workers = []
    for worker in where.workers:
        gpus = tuple(gpu.model_copy(update={"name": draw(st.sampled_from(GPU_NAMES))}) for gpu in worker.gpus)
        update = {
            "gpus": gpus,
            "ram_bandwidth_gbps": draw(st.sampled_from([None, 20.0, 200.0])),
            "cpu_threads": draw(st.sampled_from([None, 2, 16])),
            "network": draw(networks),
        }
        workers.append(worker.model_copy(update=update))
    return Cluster(workers=tuple(workers))


@st.composite
def with_speed_shape(draw: st.DrawFn, profile: MemoryProfile) -> MemoryProfile:
    """The profile (its memory figures small and exact in the model's units) with what a token
    reads and computes per block drawn apart, at sizes of real models (100 MB to 2 GB a block):
    the times are those of real layouts, the memory model stays exact."""
    n = profile.n_blocks
    experts = profile.block_expert_bytes is not None

    def per_block(low: int, high: int) -> tuple[int, ...]:
        return tuple(draw(st.lists(st.integers(low, high), min_size=n, max_size=n)))

    dense = per_block(100 * MB, 2000 * MB)
    expert_bytes = tuple(b * 10 * MB if profile.expert_bytes(i) else 0 for i, b in enumerate(per_block(10, 300)))
    shape = SpeedShape(
        block_dense_bytes=dense,
        block_expert_bytes=expert_bytes if experts else (0,) * n,
        expert_count=8 if experts else 0,
        expert_used_count=2 if experts else 0,
        block_kv_position_bytes=per_block(0, 200_000),
        block_window=(0,) * n,
        block_state_bytes=(0,) * n,
        block_dense_flops=tuple(2 * b for b in dense),
        block_expert_flops=tuple(2 * b for b in expert_bytes) if experts else (0,) * n,
        block_attention_flops=per_block(0, 100_000),
        output_bytes=draw(st.integers(0, 800 * MB)),
        output_flops=draw(st.integers(0, 1600 * MB)),
        embedding_length=draw(st.sampled_from([2048, 8192])),
        vocab_size=draw(st.sampled_from([32_000, 150_000])),
        ctx=4096,
    )
    return profile.model_copy(update={"speed": shape})


@st.composite
def roomy_clusters(draw: st.DrawFn, profile: MemoryProfile, max_workers: int = 3) -> Cluster:
    """Workers with plenty of RAM and 0-2 GPUs each holding about 0-3 of the profile's blocks beside
    their fixed costs: layouts over several GPUs and workers, and partial offloads, are common."""
    block = max(profile.block_weight_bytes) + max(profile.block_kv_bytes)
    fixed = max(
        role.fixed_bytes + max(role.compute.full_offload_bytes, role.compute.partial_offload_bytes)
        for role in (profile.main, profile.local, profile.rpc)
    )
    ram = 4 * (sum(profile.block_weight_bytes) + sum(profile.block_kv_bytes)) + 4096
    workers = []
    for i in range(draw(st.integers(1, max_workers))):
        sizes = [draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, 2)))]
        vram = [fixed + profile.output_weight_bytes + blocks * block for blocks in sizes]
        gpus = tuple(Gpu(index=j, total_vram_bytes=v, allocatable_vram_bytes=v) for j, v in enumerate(vram))
        workers.append(Worker(id=f"w{i}", name=f"w{i}", total_ram_bytes=ram, allocatable_ram_bytes=ram, gpus=gpus))
    return Cluster(workers=tuple(workers))


def time_us(instance: Instance, layout: Layout) -> int:
    """A layout's time from the instance's rounded figures (the ``speed_costs`` module's sum)."""
    costs = instance.speed
    assert costs is not None
    main = instance.worker_index(layout.main_worker)
    assert main is not None
    host_index = costs.host_of[main]
    assert host_index is not None
    host = costs.hosts[host_index]
    moved = set(layout.host_expert_blocks) | {b for b in costs.fixed_host_experts if b >= layout.cpu_blocks}
    total = host.fixed + host.prefix[layout.cpu_blocks] + (0 if layout.output_offloaded else host.output)
    total += sum(host.experts[b] for b in moved)
    for position, device in enumerate(layout.devices):
        c = instance.class_of(device.worker, device.gpu_index)
        assert c is not None
        local = device.worker == layout.main_worker
        index = costs.local_table[c] if local else costs.rpc_table[c]
        assert index is not None
        table = costs.tables[index]
        blocks = layout.block_range(position)
        mine = [b for b in blocks if b in moved]
        last = layout.output_offloaded and position == len(layout.devices) - 1
        total += table.prefix[blocks.stop] - table.prefix[blocks.start] - sum(table.saving[b] for b in mine)
        total += table.output if last else 0
        if local:
            total += table.device + table.switch * len(mine)
        else:
            server = instance.worker_index(device.worker)
            assert server is not None
            link = costs.link(main, server)
            assert link is not None
            total += link.hop + link.switch * len(mine) + (link.logits if last else 0)
    return total


def model_time(instance: Instance, layout: Layout, config: PlannerConfig) -> int | None:
    """CP-SAT's ``decode_us`` for the layout (its decisions fixed), ``None`` when the model refuses it."""
    built = build_model(instance, break_symmetry=False)
    how, solution = complete_hint(built, layout, config, Work.of(10.0), 5.0)
    if how != "accepted":
        return None
    assert built.variables.decode_us is not None
    return solution[built.variables.decode_us.index]


def speed_key(instance: Instance, layout: Layout) -> tuple[int, int, int]:
    return time_us(instance, layout), len(layout.workers), len(layout.devices)


def accepted(
    where: Cluster, dep: Deployment, profile: MemoryProfile, config: PlannerConfig, instance: Instance, layout: Layout
) -> bool:
    """What the model accepts: every rule (``check``) and, with a minimum speed, a time in the model
    within its limit (``SpeedCosts.limit_us``: the minimum less the rounding bound)."""
    if check_layout(where, dep, profile, layout, config):
        return False
    limit = instance.speed.limit_us if instance.speed is not None else None
    return limit is None or time_us(instance, layout) <= limit


def assert_brute_force(
    where: Cluster,
    dep: Deployment,
    profile: MemoryProfile,
    config: PlannerConfig,
    result: SolveResult,
    layouts: Iterable[Layout],
    decided: bool,
) -> None:
    instance = build_instance(where, dep, profile, config, experts=decided)
    assert instance.speed is not None
    every = list(layouts)
    valid = [layout for layout in every if accepted(where, dep, profile, config, instance, layout)]
    error_ms = instance.speed.error_us / 1000
    for layout in valid:  # the rounding bound holds on every layout
        predicted = deployment_speed(where, dep, profile, layout).decode_ms_per_token
        assert abs(time_us(instance, layout) / 1000 - predicted) <= error_ms
    if not valid:
        event("infeasible")
        assert result.status is Status.INFEASIBLE
        return
    assert result.status is Status.OPTIMAL
    assert result.best is not None and result.tiers is not None
    best = min(speed_key(instance, layout) for layout in valid)
    found = speed_key(instance, result.best.layout)
    assert found == best
    assert (result.tiers.decode_us, result.tiers.workers, result.tiers.gpus) == best
    event(f"{best[1]} workers, {best[2]} GPUs")
    unified = unified_workers(where)
    scores = [
        placement_score(where, config.policy, layout, claims(profile, layout, unified))
        for layout in valid
        if speed_key(instance, layout) == best
    ]
    assert result.tiers.tie_break == pytest.approx(max(scores), abs=1e-12)
    for candidate in result.alternatives:
        assert speed_key(instance, candidate.layout) == best
        assert check_layout(where, dep, profile, candidate.layout, config) == ()
    for layout in [result.best.layout, *valid[:2]]:  # CP-SAT's decode_us is the same sum
        assert model_time(instance, layout, config) == time_us(instance, layout)


def speed_deployment(draw: st.DrawFn, where: Cluster, profile: MemoryProfile) -> Deployment:
    """``deployments``' rules, mostly with CPU offloading and distribution allowed (where speed
    choices are), sometimes with a minimum speed."""
    dep = draw(deployments(where, profile, with_split=True))
    update = {
        "objective": Objective.SPEED,
        "min_decode_tokens_per_s": draw(st.none() | st.none() | st.sampled_from([1.0, 5.0, 20.0])),
    }
    if draw(st.integers(0, 3)):
        update |= {"cpu_offloading": True, "distributed_inference_across_workers": True, "kind": ModelKind.LLM}
    return dep.model_copy(update=update)


@settings(SLOW, max_examples=50)
@given(data=st.data())
def test_speed_optimum_equals_brute_force(data: st.DataObject) -> None:
    profile = data.draw(with_speed_shape(data.draw(profiles(max_blocks=3))))
    where = data.draw(speed_facts(data.draw(clusters(max_gpus=3, max_workers=3, top=900))))
    dep = speed_deployment(data.draw, where, profile)
    config = data.draw(configs())
    hint = heuristics.plan(where, dep, config, profile).layout if data.draw(st.booleans()) else None
    result = solve(where, dep, profile, config, hint=hint)
    assert_brute_force(where, dep, profile, config, result, all_layouts(where, profile.n_blocks), decided=False)


@settings(SLOW, max_examples=30)
@given(data=st.data())
def test_speed_optimum_with_experts_as_a_decision_equals_brute_force(data: st.DataObject) -> None:
    profile = data.draw(with_speed_shape(data.draw(moe_profiles(max_blocks=3))))
    cluster = clusters(max_gpus=2, max_workers=2, top=900) | roomy_clusters(profile, max_workers=2)
    where = data.draw(speed_facts(data.draw(cluster)))
    dep = speed_deployment(data.draw, where, profile)
    dep = dep.model_copy(update={"cpu_offloading": True, "kind": ModelKind.LLM})
    config = data.draw(configs())
    decided = experts_are_a_decision(dep, profile, config)
    assert decided
    result = solve(where, dep, profile, config)
    layouts = with_every_expert_set(profile, all_layouts(where, profile.n_blocks), decided)
    assert_brute_force(where, dep, profile, config, result, layouts, decided=True)


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_speed_optimum_over_several_gpus_and_workers_equals_brute_force(data: st.DataObject) -> None:
    profile = data.draw(with_speed_shape(data.draw(profiles(max_blocks=3))))
    where = data.draw(speed_facts(data.draw(roomy_clusters(profile))))
    dep = speed_deployment(data.draw, where, profile)
    config = data.draw(configs())
    hint = heuristics.plan(where, dep, config, profile).layout if data.draw(st.booleans()) else None
    result = solve(where, dep, profile, config, hint=hint)
    assert_brute_force(where, dep, profile, config, result, all_layouts(where, profile.n_blocks), decided=False)


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_the_layers_objective_keeps_a_minimum_speed(data: st.DataObject) -> None:
    """Under ``objective: layers`` a minimum speed is a rule: the layers-first optimum over the
    layouts the model accepts (their time within the minimum less the rounding bound), every
    shortcut of the layers search included."""
    profile = data.draw(with_speed_shape(data.draw(profiles(max_blocks=3))))
    where = data.draw(speed_facts(data.draw(clusters(max_gpus=3, max_workers=3, top=900) | roomy_clusters(profile))))
    dep = speed_deployment(data.draw, where, profile)
    dep = dep.model_copy(update={"objective": None, "min_decode_tokens_per_s": data.draw(st.sampled_from([1.0, 5.0]))})
    config = data.draw(configs())
    hint = heuristics.plan(where, dep, config, profile).layout if data.draw(st.booleans()) else None
    result = solve(where, dep, profile, config, hint=hint)
    instance = build_instance(where, dep, profile, config)
    valid = [
        layout
        for layout in all_layouts(where, profile.n_blocks)
        if accepted(where, dep, profile, config, instance, layout)
    ]
    if not valid:
        event("infeasible")
        assert result.status is Status.INFEASIBLE
        return
    assert result.status is Status.OPTIMAL and result.best is not None and result.tiers is not None
    best = max(layers_key(layout) for layout in valid)
    assert layers_key(result.best.layout) == best
    event(f"{best[0]} layers, {-best[1]} workers")
    for candidate in (result.best, *result.alternatives):
        assert check_layout(where, dep, profile, candidate.layout, config) == ()


def layers_key(layout: Layout) -> tuple[int, int, int]:
    return layout.gpu_layers, -len(layout.workers), -len(layout.devices)


@settings(SLOW, max_examples=40)
@given(data=st.data())
def test_the_speed_bounds_hold_for_every_valid_layout(data: st.DataObject) -> None:
    """``speed_floor.time_floor`` by the host's blocks with the least cost per device used (as
    ``constraints.speed`` posts it), ``speed_bound.least_time_us`` and, for a
    layout of one worker, ``one_worker_least_time_us`` of its main worker are at most its time in
    the model (dense and MoE profiles; the experts' own sets where they are a decision); so are
    ``server_bound``'s bound of its main worker and server count, and its bound for each GPU it
    uses, and ``server_bound.narrow`` at its time keeps its main worker, server count and GPUs."""
    moe = data.draw(st.booleans())
    profile = data.draw(with_speed_shape(data.draw(moe_profiles(max_blocks=3) if moe else profiles(max_blocks=3))))
    where = data.draw(speed_facts(data.draw(clusters(max_gpus=3, max_workers=3, top=900) | roomy_clusters(profile))))
    dep = speed_deployment(data.draw, where, profile).model_copy(update={"min_decode_tokens_per_s": None})
    config = data.draw(configs())
    decided = experts_are_a_decision(dep, profile, config)
    instance = build_instance(where, dep, profile, config, experts=decided)
    floor = time_floor(instance)
    layouts = all_layouts(where, profile.n_blocks)
    if decided:
        layouts = with_every_expert_set(profile, layouts, decided)
    valid = [layout for layout in layouts if accepted(where, dep, profile, config, instance, layout)]
    event("valid layouts" if valid else "none valid")
    assert instance.speed is not None
    device, hop = least_device_cost(instance, instance.speed), instance.speed.least_hop()
    for layout in valid:
        took = time_us(instance, layout)
        local = sum(1 for d in layout.devices if d.worker == layout.main_worker)
        assert floor[layout.cpu_blocks] + device * local + hop * (len(layout.devices) - local) <= took
        assert least_time_us(instance) <= took
        if len(layout.workers) == 1:
            main = instance.worker_index(layout.main_worker)
            assert main is not None
            bound = one_worker_least_time_us(instance, main)
            assert bound is None or bound <= took
        assert_server_bound_holds(instance, layout, took)


def _class_of(instance: Instance, worker: str, gpu_index: int) -> int:
    w = instance.worker_index(worker)
    return next(c for c, cls in enumerate(instance.classes) if cls.worker == w and gpu_index in cls.gpu_indexes)


def assert_server_bound_holds(instance: Instance, layout: Layout, took: int) -> None:
    """``server_bound`` at most the layout's time, and ``narrow`` at that time keeping it."""
    found = server_bound(instance)
    if found is None:
        event("no server bound")
        return
    costs = found.costs
    main = instance.worker_index(layout.main_worker)
    assert main is not None
    servers = len(layout.rpc_devices)
    bounds = found.bounds(main)
    assert bounds[servers][0] <= took
    for device in layout.devices:
        rpc = device.worker != layout.main_worker
        c = _class_of(instance, device.worker, device.gpu_index)
        table = costs.rpc_table[c] if rpc else costs.local_table[c]
        assert table is not None
        assert found.forced(main, table, bounds, servers, rpc=rpc) <= took
    if servers == 0:
        return
    narrowed = narrow(instance, took)
    assert narrowed is not None
    assert servers in narrowed.counts[main]
    assert narrowed.instance.rpc_slots >= servers and narrowed.instance.workers[main].main_ok
    for device in layout.devices:
        cls = narrowed.instance.classes[_class_of(instance, device.worker, device.gpu_index)]
        assert cls.rpc_ok if device.worker != layout.main_worker else cls.local_ok
    event("server bound checked")


def test_a_server_with_room_for_the_output_layer_alone_counts_among_the_workers() -> None:
    # Found by the minimum-speed property above: a CPU-only main worker, one GPU with room for both
    # blocks and one with room for the output layer only; the layers-first optimum (3 layers on
    # 3 workers) needs the second as an rpc-server holding no block. The worker-count step left it
    # out (a remote worker of no blocks), so the one-worker layout of 2 layers was called optimal.
    from layerfit.domain.config import OffloadOrder, Policy
    from layerfit.domain.profile import ComputeBuffer, RoleCosts

    def role(full: int, partial: int, multi: int | None) -> RoleCosts:
        return RoleCosts(
            fixed_bytes=0,
            compute=ComputeBuffer(full_offload_bytes=full, partial_offload_bytes=partial, multi_device_bytes=multi),
        )

    shape = SpeedShape(
        block_dense_bytes=(10**8, 10**8),
        block_expert_bytes=(0, 0),
        expert_count=0,
        expert_used_count=0,
        block_kv_position_bytes=(0, 0),
        block_window=(0, 0),
        block_state_bytes=(0, 0),
        block_dense_flops=(2 * 10**8, 2 * 10**8),
        block_expert_flops=(0, 0),
        block_attention_flops=(0, 0),
        output_bytes=0,
        output_flops=0,
        embedding_length=2048,
        vocab_size=32000,
        ctx=4096,
        n_ubatch=512,
        flash_attn=True,
    )
    profile = MemoryProfile(
        block_weight_bytes=(1, 1),
        block_kv_bytes=(21, 21),
        host_kv_bytes=0,
        main=role(43, 0, None),
        local=role(0, 0, None),
        rpc=role(23, 22, 22),
        output_compute_bytes=21,
        pipeline_parallel=True,
        speed=shape,
    )

    def worker(name: str, vram: int | None) -> Worker:
        gpus = (
            ()
            if vram is None
            else (
                Gpu(
                    index=0,
                    type="cuda",
                    name="NVIDIA GeForce RTX 4090",
                    total_vram_bytes=vram,
                    allocatable_vram_bytes=vram,
                ),
            )
        )
        return Worker(id=name, name=name, total_ram_bytes=4272, allocatable_ram_bytes=4272, gpus=gpus)

    where = Cluster(workers=(worker("w0", None), worker("w1", 43), worker("w2", 87)))
    dep = Deployment(
        name="d",
        profile=profile,
        cpu_offloading=True,
        distributed_inference_across_workers=True,
        kind=ModelKind.LLM,
        min_decode_tokens_per_s=1.0,
    )
    config = PlannerConfig(
        offload_order=OffloadOrder.OUTPUT_FIRST, policy=Policy.BINPACK, max_rpc_servers=2, seed=0, alternatives=0
    )
    result = solve(where, dep, profile, config)
    assert result.status is Status.OPTIMAL and result.best is not None
    layout = result.best.layout
    assert layers_key(layout) == (3, -3, -2)
    assert check_layout(where, dep, profile, layout, config) == ()
