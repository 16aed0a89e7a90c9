"""The context size as a decision: the largest multiple of 256 in the range that keeps the better tiers."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

from layerfit.domain import Cluster, Deployment, Gpu, MemoryProfile, PlannerConfig, RoleCosts, Worker
from layerfit.errors import InputError
from layerfit.planning.context_range import ctx_bounds, ctx_candidates
from layerfit.planning.planner import plan

CONFIG = PlannerConfig(time_limit_s=5)
# 4 blocks of 100 and KV 1 per 256 tokens of context at 8192 (the profile's ctx): 32 each.
PROFILE = MemoryProfile(
    block_weight_bytes=(100,) * 4,
    block_kv_bytes=(32,) * 4,
    output_weight_bytes=10,
    main=RoleCosts(fixed_bytes=50),
    local=RoleCosts(fixed_bytes=50),
    rpc=RoleCosts(fixed_bytes=50),
)


def cluster(vram: int) -> Cluster:
    gpu = Gpu(index=0, total_vram_bytes=vram, allocatable_vram_bytes=vram)
    return Cluster(workers=(Worker(id=1, name="a", total_ram_bytes=10**12, allocatable_ram_bytes=10**12, gpus=(gpu,)),))


def chosen_ctx(result: object) -> int:
    argv = result.commands[-1].argv  # type: ignore[attr-defined]
    return int(argv[argv.index("-c") + 1])


def test_largest_context_that_keeps_full_offload() -> None:
    # full offload: 400 + 10 + 50 + KV; KV = 4 x 32 x ctx / 8192 -> fits 500 when ctx <= 2560
    deployment = Deployment(name="m", profile=PROFILE, ctx_min=1000, ctx_max=16384)
    result = plan(cluster(500), deployment, CONFIG)
    assert result.best is not None and result.best.layout.full_offload
    assert chosen_ctx(result) == 2560
    stats = next(s for s in result.stats if s.engine == "context")
    assert stats.details["ctx_size"] == 2560


def test_the_whole_range_when_it_fits_and_layers_before_context() -> None:
    assert (
        chosen_ctx(plan(cluster(10_000), Deployment(name="m", profile=PROFILE, ctx_min=256, ctx_max=9000), CONFIG))
        == 8960
    )
    # not even the smallest context gives a full offload: the context stays small, layers first
    result = plan(cluster(300), Deployment(name="m", profile=PROFILE, ctx_min=512, ctx_max=8192), CONFIG)
    assert result.best is not None and not result.best.layout.full_offload


def test_fixed_context_is_planned_as_before() -> None:
    fixed = plan(cluster(500), Deployment(name="m", profile=PROFILE), CONFIG)
    assert all(s.engine != "context" for s in fixed.stats) and chosen_ctx(fixed) == 8192


def test_auto_is_the_training_context_shrunk_down_to_fit_ctx(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, "tiny", data="header", context_length=32768)
    auto = Deployment(name="m", gguf_path=str(path), ctx_auto=True)
    assert ctx_bounds(auto, 32768) == (4096, 32768)
    assert plan(cluster(10**10), auto, CONFIG).commands[-1].argv.count("32768") == 1
    explicit = Deployment(name="m", gguf_path=str(path), backend_parameters=["-c", "0"])
    assert ctx_bounds(explicit, 32768) is None


@pytest.mark.parametrize(
    "fields",
    [
        {"ctx_auto": True, "ctx_min": 512},
        {"ctx_min": 4096, "ctx_max": 1024},
        {"ctx_min": 1024, "backend_parameters": ["-c", "2048"]},
    ],
)
def test_contradictory_ranges_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="ctx"):
        Deployment.model_validate({"name": "m", "profile": PROFILE.model_dump(), **fields})


def test_candidates_are_multiples_of_256() -> None:
    assert ctx_candidates(1000, 2000) == [1024, 1280, 1536, 1792]
    with pytest.raises(InputError):
        ctx_candidates(300, 400)


def test_auto_shrinks_the_context_before_any_layer_leaves_the_gpu(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, "tiny", data="header", context_length=32768)
    at_8k = plan(cluster(10**10), Deployment(name="m", gguf_path=str(path), backend_parameters=["-c", "8192"]), CONFIG)
    assert at_8k.best is not None
    vram = at_8k.best.claims.devices[0].total_bytes  # what a full offload at 8192 needs
    auto = plan(cluster(vram), Deployment(name="m", gguf_path=str(path), ctx_auto=True), CONFIG)
    assert auto.best is not None and auto.best.layout.full_offload
    assert 8192 <= chosen_ctx(auto) < 32768 and chosen_ctx(auto) % 256 == 0
    # one step of 256 more would no longer fit the full offload
    more = Deployment(name="m", gguf_path=str(path), backend_parameters=["-c", str(chosen_ctx(auto) + 256)])
    bigger = plan(cluster(vram), more, CONFIG)
    assert bigger.best is None or not bigger.best.layout.full_offload


def test_a_cut_plan_the_choice_compared_marks_the_context_stage_truncated() -> None:
    # The bisection compares plans at several contexts; one cut by the wall clock (its safety stop)
    # may have decided the choice, although the plan chosen was not cut: the context stage says so
    from layerfit.planning.context_range import plan_context

    deployment = Deployment(name="m", profile=PROFILE, ctx_min=1000, ctx_max=16384)
    base = deployment.model_copy(update={"ctx_min": None, "ctx_max": None})

    def plan_at(_: Deployment, ctx: int, with_explain: bool) -> object:
        fixed = base.model_copy(update={"params": base.params.model_copy(update={"ctx_size": ctx})})
        found = plan(cluster(500), fixed, CONFIG, from_ctx(ctx), explain=with_explain)
        if ctx <= 2560:
            return found
        stopped = {"safety_stops": ("deadline",)}
        cut = tuple(
            s.model_copy(update={"details": {**s.details, "truncated": "deadline"}, **stopped}) for s in found.stats
        )
        return found.model_copy(update={"stats": cut})  # a larger context, cut: it does not fit anyway

    def from_ctx(ctx: int) -> MemoryProfile:
        return PROFILE.model_copy(update={"block_kv_bytes": tuple(-(-32 * ctx // 8192) for _ in range(4))})

    result = plan_context(deployment, ctx_candidates(1000, 16384), plan_at, PROFILE)  # type: ignore[arg-type]
    stats = next(s for s in result.stats if s.engine == "context")
    assert stats.details["ctx_size"] == 2560 and stats.details["truncated"] == "plans"
    assert stats.safety_stops == ("plans",) and result.time_cuts == ("context",)
