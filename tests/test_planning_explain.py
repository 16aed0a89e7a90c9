"""explain's changes can be followed: each, made as a user would make it (``explain.applied``), places
the model, and memory to free stays within what the hardware has.

* The bundled too-big example: its profile is given, so a smaller ``--ctx-size`` alone changes
  nothing the planner plans (following the old advice looped: 32768 -> 15616 -> 7424 ...); the
  change names the profile's KV cache too, and applied it places the model. Freeing memory on its
  24 GiB GPUs would take 24.68 and 24.13 GiB allocatable: said as what the hardware lacks.
* Memory to free within a GPU's total is offered; past it, ``more_hardware`` says what GPU it needs.
* Experts in host RAM where expert offload is off (GPUStack): the ``--n-cpu-moe`` flag a GGUF file's
  parameters take, or an explicit profile's ``fixed_host_experts``.
* A context range: a smaller ``ctx_min``.
* The explain stage's line says what it found, not a plan's status.
* The property: over random clusters and deployments (some with a minimum decode speed, from 1 to
  80 tokens/s against the 2 to 64 their fastest layouts reach), every change explain offers,
  applied, places the model on a re-plan; memory freed stays within the hardware; no change leaves
  the inputs as they were; a deployment said too slow has a fastest layout below its minimum, and a
  lowered minimum does not exceed what that layout reaches.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from test_moe_engines import moe_profile, one_gpu_cluster
from test_solver_properties import SLOW, clusters, profiles

from layerfit.cli.render import render_plan
from layerfit.domain import Cluster, Deployment, GiB, LlamaParams, MiB, PlannerConfig, Status
from layerfit.domain.plan import Plan
from layerfit.io.documents import load_file
from layerfit.planning.explain import MEMORY_KINDS, applied
from layerfit.planning.planner import plan
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

EXAMPLES = Path(__file__).parent.parent / "examples"
CONFIG = PlannerConfig(time_limit_s=5.0)


def _by_kind(result: Plan) -> dict[str, object]:
    return {relaxation.kind: relaxation for relaxation in result.relaxations}


def _placed(cluster: Cluster, deployment: Deployment, config: PlannerConfig = CONFIG) -> bool:
    return plan(cluster, deployment, config, explain=False).best is not None


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return load_file(Cluster, EXAMPLES / "cluster.yaml")


@pytest.fixture(scope="module")
def too_big() -> Deployment:
    return load_file(Deployment, EXAMPLES / "too-big.yaml")


def test_too_big_ctx_change_names_the_given_profile_and_places_it(cluster: Cluster, too_big: Deployment) -> None:
    result = plan(cluster, too_big, CONFIG)
    ctx = next(r for r in result.relaxations if r.kind == "ctx_size")
    assert ctx.value == 15616
    assert ctx.message.startswith("reduce --ctx-size from 32768 to 15616 and the profile's block_kv_bytes with it")
    assert "from 128.0 MiB to 61.0 MiB a block" in ctx.message
    # --ctx-size alone: the given profile is planned as it is, and nothing changes
    params = too_big.params.model_copy(update={"ctx_size": ctx.value})
    assert not _placed(cluster, too_big.model_copy(update={"params": params}))
    where, changed = applied(cluster, too_big, ctx)
    assert where == cluster and changed.profile is not None
    assert set(changed.profile.block_kv_bytes) == {61 * MiB}
    assert _placed(where, changed)
    assert plan(where, changed, CONFIG).relaxations == ()  # placed: nothing more to suggest


def test_too_big_asks_no_memory_beyond_the_24_gib_gpus(cluster: Cluster, too_big: Deployment) -> None:
    result = plan(cluster, too_big, CONFIG)
    kinds = _by_kind(result)
    assert "free_vram" not in kinds and "free_ram" not in kinds
    lacking = next(r for r in result.relaxations if r.kind == "more_hardware")
    assert [(n.gpu_index, n.needed_bytes > n.total_bytes == 24 * GiB) for n in lacking.memory] == [(0, True), (1, True)]
    assert lacking.message.startswith(
        "needs a GPU with at least 24.68 GiB VRAM allocatable in place of gpu-a:cuda:0 (24.00 GiB in all) and a "
        "GPU with at least 24.13 GiB VRAM allocatable in place of gpu-a:cuda:1 (24.00 GiB in all)"
    )
    assert _placed(*applied(cluster, too_big, lacking))
    text = render_plan(result)
    assert "  beyond this hardware: needs a GPU with at least 24.68 GiB" in text
    assert "    - needs" not in text  # not listed among the changes


def _one_4090() -> Cluster:
    worker = {
        "id": 1,
        "name": "desk",
        "total_ram_bytes": 64 * GiB,
        "allocatable_ram_bytes": 56 * GiB,
        "gpus": [{"index": 0, "total_vram_bytes": 24 * GiB, "allocatable_vram_bytes": 22 * GiB}],
    }
    return Cluster.model_validate({"workers": [worker]})


def test_memory_within_the_gpu_is_freed_and_past_it_a_larger_gpu_is_named(too_big: Deployment) -> None:
    desk = _one_4090()
    assert too_big.profile is not None
    smaller = {"block_weight_bytes": (270 * MiB,) * 80, "block_kv_bytes": (4 * MiB,) * 80}
    small = too_big.model_copy(update={"profile": too_big.profile.model_copy(update=smaller)})
    free = next(r for r in plan(desk, small, CONFIG).relaxations if r.kind == "free_vram")
    (need,) = free.memory
    assert 0 < need.short_bytes <= 2 * GiB and need.needed_bytes <= need.total_bytes
    assert free.message.startswith(
        f"free {free.message.split()[1]} {free.message.split()[2]} VRAM on desk:cuda:0 (of 2.00 GiB not"
    )
    assert _placed(*applied(desk, small, free))
    lacking = next(r for r in plan(desk, too_big, CONFIG).relaxations if r.kind == "more_hardware")
    assert lacking.message == (
        "needs a GPU with at least 47.87 GiB VRAM allocatable in place of desk:cuda:0 (24.00 GiB in all) to run it "
        "fully offloaded on desk:cuda:0"
    )


def test_experts_of_an_explicit_profile_go_to_its_fixed_host_experts() -> None:
    profile = moe_profile()
    where = one_gpu_cluster(2000)
    deployment = Deployment(name="m", profile=profile, cpu_offloading=False)
    config = CONFIG.model_copy(update={"expert_offload": False})
    result = plan(where, deployment, config)
    assert result.status is Status.INFEASIBLE
    experts = next(r for r in result.relaxations if r.kind == "experts_on_host")
    assert experts.message.startswith(
        "allow CPU offloading and keep the experts of blocks 0–4 in host RAM "
        "(the profile is given: set its fixed_host_experts to [0, 1, 2, 3, 4])"
    )
    _, changed = applied(where, deployment, experts)
    assert (
        changed.cpu_offloading and changed.profile is not None and changed.profile.fixed_host_experts == (0, 1, 2, 3, 4)
    )
    assert _placed(where, changed, config)
    # expert offload on: allowing CPU offloading is that change, said once
    on = plan(where, deployment, CONFIG)
    assert [r.kind for r in on.relaxations if r.kind != "more_hardware"] == ["allow_cpu_offloading"]
    assert on.relaxations[0].message.endswith("the experts of blocks 0–4 in host RAM")


def test_experts_of_a_gguf_file_are_the_flag_its_parameters_take(tmp_path: Path) -> None:
    path = tmp_path / "qwen3-30b-a3b.gguf"
    write_gguf(path, REAL_MODELS["qwen3-30b-a3b"])
    where = one_gpu_cluster(16 * GiB, ram=64 * GiB)
    deployment = Deployment(
        name="q", gguf_path=str(path), params=LlamaParams.from_args(["-c", "8192"]), cpu_offloading=False
    )
    config = CONFIG.model_copy(update={"expert_offload": False})  # GPUStack's
    result = plan(where, deployment, config)
    assert result.status is Status.INFEASIBLE
    experts = next(r for r in result.relaxations if r.kind == "experts_on_host")
    assert experts.parameters[0] == "--n-cpu-moe"
    assert f"(add --n-cpu-moe {experts.parameters[1]} to the backend parameters)" in experts.message
    _, changed = applied(where, deployment, experts)
    assert changed.params.extra[-2:] == experts.parameters
    again = plan(where, changed, config, explain=False)
    assert again.best is not None and again.best.layout.host_expert_blocks


def test_a_context_range_lowers_ctx_min(cluster: Cluster, too_big: Deployment) -> None:
    ranged = Deployment.model_validate(
        {**too_big.model_dump(exclude={"params"}), "ctx_min": 16384, "ctx_max": 32768, "cpu_offloading": False}
    )
    result = plan(cluster, ranged, CONFIG)
    assert result.status is Status.INFEASIBLE
    ctx = next(r for r in result.relaxations if r.kind == "ctx_size")
    assert ctx.message.startswith(f"lower ctx_min from 16384 to {ctx.value}: 81 of 81 layers on GPUs")
    _, changed = applied(cluster, ranged, ctx)
    assert changed.ctx_min == ctx.value and _placed(cluster, changed)


def test_the_explain_line_says_what_it_found(cluster: Cluster, too_big: Deployment) -> None:
    lines = render_plan(plan(cluster, too_big, CONFIG)).splitlines()
    assert lines[-1].startswith("  explain: 3 changes found that place it; ")
    lone = too_big.model_copy(update={"cpu_offloading": True})
    desk = _one_4090()
    nothing = lone.model_copy(update={"profile": lone.profile.model_copy(update={"host_fixed_bytes": 100 * GiB})})
    found = plan(desk, nothing, CONFIG)
    assert found.status is Status.INFEASIBLE
    assert render_plan(found).splitlines()[-1].startswith("  explain: no single change found that places it; ")


@st.composite
def _cases(draw: st.DrawFn) -> tuple[Cluster, Deployment, PlannerConfig]:
    """A small cluster whose GPUs and workers have memory held by others (allocatable below the
    total), and a deployment that often does not fit: switches mostly off, a KV cache that grows
    with the context, some MoE blocks (their experts sometimes fixed on the host), a fixed context
    or a range, and 6 times in 10 a minimum decode speed."""
    unit = 64 * MiB
    profile = draw(profiles(max_blocks=8, unit=8 * MiB))
    n = profile.n_blocks
    update: dict[str, object] = {"block_kv_bytes": (draw(st.integers(0, 40)) * 8 * MiB,) * n}
    moe = draw(st.integers(0, 2))  # 0: dense; 1: some experts; 2: most of each block, offload off (GPUStack)
    if moe == 2:
        profile = profile.model_copy(update={"block_host_weight_bytes": None})
        update["block_expert_bytes"] = tuple(weight * 3 // 4 for weight in profile.block_weight_bytes)
    elif moe == 1:
        host = profile.block_host_weight_bytes or profile.block_weight_bytes
        update["block_expert_bytes"] = tuple(
            draw(st.integers(0, min(weight, on_host) // MiB)) * MiB
            for weight, on_host in zip(profile.block_weight_bytes, host, strict=True)
        )
    profile = profile.model_copy(update=update)
    with_experts = tuple(b for b, size in enumerate(profile.block_expert_bytes or ()) if size)
    if moe == 1 and with_experts and draw(st.integers(0, 3)) == 0:  # the user's overrides keep some on the host
        profile = profile.model_copy(update={"fixed_host_experts": with_experts[: draw(st.integers(1, n))]})
    where = draw(clusters(max_gpus=4, max_workers=3, top=200, unit=unit))
    workers = []
    for worker in where.workers:
        gpus = tuple(
            g.model_copy(update={"total_vram_bytes": g.total_vram_bytes + draw(st.integers(0, 32)) * unit})
            for g in worker.gpus
        )
        ram = worker.total_ram_bytes + draw(st.integers(0, 32)) * unit
        workers.append(worker.model_copy(update={"gpus": gpus, "total_ram_bytes": ram}))
    where = Cluster(workers=tuple(workers))
    fields: dict[str, object] = {
        "name": "d",
        "profile": profile,
        "cpu_offloading": moe != 2 and draw(st.integers(0, 2)) == 0,
        "distributed_inference_across_workers": draw(st.integers(0, 3)) == 0,
        "min_decode_tokens_per_s": draw(st.sampled_from([None, None, None, None, 1.0, 5.0, 10.0, 20.0, 40.0, 80.0])),
    }
    if draw(st.integers(0, 3)) == 0:
        fields["ctx_min"], fields["ctx_max"] = 2048, 4096
    else:
        fields["params"] = LlamaParams(ctx_size=draw(st.sampled_from([1024, 4096, 8192])))
    config = PlannerConfig(time_limit_s=5.0, alternatives=0, expert_offload=moe != 2 and draw(st.booleans()))
    return where, Deployment.model_validate(fields), config


@settings(SLOW, max_examples=150)
@given(case=_cases())
def test_every_change_explain_offers_places_the_model(case: tuple[Cluster, Deployment, PlannerConfig]) -> None:
    where, deployment, config = case
    result = plan(where, deployment, config)
    assume(result.best is None and result.status is Status.INFEASIBLE)
    event(f"changes: {len(result.relaxations)}")
    slow = result.too_slow
    if slow is not None:
        event("too slow")
        assert slow.fastest.speed is not None and deployment.min_decode_tokens_per_s is not None
        assert slow.fastest.speed.decode_tokens_per_s < deployment.min_decode_tokens_per_s
        assert result.reasons[0].message == slow.message
    for relaxation in result.relaxations:
        if relaxation.kind == "min_decode_tokens_per_s":
            assert slow is not None and slow.fastest.speed is not None and relaxation.tokens_per_s is not None
            assert relaxation.tokens_per_s <= slow.fastest.speed.decode_tokens_per_s
        event(relaxation.kind)
        changed_cluster, changed = applied(where, deployment, relaxation)
        assert (changed_cluster, changed) != (where, deployment), relaxation
        again = plan(changed_cluster, changed, config, explain=False)
        assert again.best is not None, (relaxation, again.reasons)
        if relaxation.kind in MEMORY_KINDS and relaxation.kind != "more_hardware":
            assert all(need.needed_bytes <= need.total_bytes for need in relaxation.memory)
            assert changed_cluster.model_dump() != where.model_dump()
