"""Prompt processing time per token, with the numbers worked out by hand (``speed_builders``)."""

from __future__ import annotations

import pytest
from speed_builders import GB, layout, round_cluster, round_constants, round_profile, round_shape

from layerfit.domain.profile import MemoryProfile
from layerfit.speed import SpeedSettings, predict
from layerfit.speed.work import expert_share_used, prompt_work

# a 512-token prompt: a token attends (512 + 1) / 2 = 256.5 positions, 100 FLOPs each: 25,650 FLOPs;
# a block 2 GFLOP + 25,650; the output layer 1 GFLOP
BLOCK_FLOPS = 2 * GB + 25_650
GPU_FLOPS_PER_MS = 100e12 * 0.5 / 1e3  # 100 TFLOPS x 0.5
MAIN_MS = 0.5 / 512  # the main process per micro-batch of 512


@pytest.fixture(autouse=True)
def _round(monkeypatch: pytest.MonkeyPatch) -> None:
    round_constants(monkeypatch)


DEFAULT = SpeedSettings()


def _terms(
    *devices: tuple[str, int, int], profile: MemoryProfile | None = None, settings: SpeedSettings = DEFAULT
) -> dict[str, float]:
    prediction = predict(profile or round_profile(), layout(*devices), round_cluster(), settings)
    return {term.where: term.ms for term in prediction.prompt_terms}


def test_full_offload_is_the_flops_over_the_gpus_rate() -> None:
    # (4 x 2.00002565 + 1) GFLOP / 5e10 FLOP/ms = 0.180002052 ms + 5 layers x 10 us / 512
    terms = _terms(("a", 0, 4))
    gpu = (4 * BLOCK_FLOPS + GB) / GPU_FLOPS_PER_MS + 5 * 0.01 / 512
    assert terms == pytest.approx({"a:cuda:0 (NVIDIA GeForce RTX 4090)": gpu, "main process": MAIN_MS})


def test_host_blocks_stream_their_weights_to_the_gpu_with_op_offload() -> None:
    # 2 host blocks: 2 GB per micro-batch at 20 GB/s = 100 ms / 512 tokens = 0.1953125 ms; their
    # matrices 4 GFLOP on the GPU: 0.08 ms; their attention 51,300 FLOPs on the CPU at 4 threads x
    # 25 GFLOPS = 1e8 FLOP/ms: 0.000513 ms
    terms = _terms(("a", 0, 2))
    assert terms["host a"] == pytest.approx(100 / 512 + 4 * GB / GPU_FLOPS_PER_MS + 51_300 / 1e8)


def test_below_32_tokens_a_micro_batch_runs_the_host_blocks_on_the_cpu() -> None:
    # -ub 16 (GGML_OP_OFFLOAD_MIN_BATCH 32): 2 x 2.00002565 GFLOP at 1e8 FLOP/ms = 40.000513 ms,
    # + 2 layers x 20 us / 16
    profile = round_profile(round_shape(n_ubatch=16))
    terms = _terms(("a", 0, 2), profile=profile)
    assert terms["host a"] == pytest.approx(2 * (2 * GB + 51_300 / 2) / 1e8 + 2 * 0.02 / 16)


def test_cpu_only_computes_everything_on_the_cpu() -> None:
    # (4 x 2.00002565 + 1) GFLOP at 1e8 FLOP/ms = 90.0001026 ms + 4 layers x 20 us / 512
    terms = _terms()
    assert terms["host a"] == pytest.approx((4 * BLOCK_FLOPS + GB) / 1e8 + 4 * 0.02 / 512)


def test_prompt_threads_follow_tb() -> None:
    # -tb 8: 8 x 25 GFLOPS = 2e8 FLOP/ms, twice as fast as 4 threads
    terms = _terms(settings=SpeedSettings(batch_threads=8))
    assert terms["host a"] == pytest.approx((4 * BLOCK_FLOPS + GB) / 2e8 + 4 * 0.02 / 512)


def test_an_rpc_server_costs_a_round_trip_per_micro_batch() -> None:
    # per micro-batch of 512: a round trip 1 ms + 0.2 ms fixed; per token its hidden state both ways and
    # the mask of 512 cells (F16): 16,384 x 2 + 1,024 = 33,792 B, x 512 x 8 / 10 Gbit/s = 13.84 ms;
    # (1.2 + 13.84) / 512 per token
    terms = _terms(("b", 0, 2), ("a", 0, 2))
    assert terms["rpc b:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx((1.2 + 33_792 * 512 * 8 / 10e9 * 1e3) / 512)


def test_a_micro_batch_routes_to_most_experts() -> None:
    # 2 of 8 experts per token: 1 - (3/4)^n of the experts are used by n tokens
    shape = round_shape(
        block_expert_bytes=(8 * GB,) * 4, block_expert_flops=(16 * GB,) * 4, expert_count=8, expert_used_count=2
    )
    assert expert_share_used(shape, 1) == pytest.approx(0.25)
    assert expert_share_used(shape, 4) == pytest.approx(1 - 0.75**4)
    assert prompt_work(shape, 512)[0].expert_bytes == pytest.approx(8 * GB * (1 - 0.75**512))
    assert prompt_work(shape, 512)[0].expert_flops == pytest.approx(4 * GB)  # a token's share: 2 of 8


def test_the_prompt_rate_is_the_inverse_of_its_terms() -> None:
    prediction = predict(round_profile(), layout(("a", 0, 2)), round_cluster())
    assert prediction.prompt_tokens_per_s == pytest.approx(1000 / sum(t.ms for t in prediction.prompt_terms))
