"""Decode time per token, term by term, with the numbers worked out by hand (``speed_builders``:
round constants, blocks of 1 GB, GPUs of 1,000 GB/s, a host of 100 GB/s and 4 threads)."""

from __future__ import annotations

import itertools

import pytest
from speed_builders import GB, layout, round_cluster, round_constants, round_profile, round_shape

from layerfit.speed import SpeedSettings, decode_ms, layout_costs, predict
from layerfit.speed.decode import DecodeCosts, hop_bytes
from layerfit.speed.work import decode_work, kv_cells

FILL = SpeedSettings(context_fill=1000)
# fill 1,000 -> n_kv = 1,024 cells (padded to 256): a block reads 1 GB + 1,024 x 1,000 B = 1.001024 GB
BLOCK_BYTES = GB + 1_024_000
# on a GPU: 1,000 GB/s x 0.5 = 5e8 B/ms -> 2.002048 ms (the FLOPs, 2 GFLOP at 50 TFLOPS, take 0.04)
# + 10 us per layer = 2.012048 ms
GPU_BLOCK_MS = 2.012048
# the output layer: 0.5 GB / 5e8 B/ms = 1 ms + 10 us
GPU_OUTPUT_MS = 1.01
# on the host: min(4 threads x 10 GB/s, 100 GB/s x 0.8) = 40 GB/s = 4e7 B/ms -> 25.0256 ms, then the
# FLOPs, 2.0001024 GFLOP at 4 x 50 GFLOPS = 2e8 FLOP/ms: 10.000512 ms, + 20 us per layer
HOST_BLOCK_MS = 35.046112
# the output layer on the host: 0.5 GB / 4e7 = 12.5 ms + 1 GFLOP / 2e8 = 5 ms + 20 us
HOST_OUTPUT_MS = 17.52
SYNC_MS = 0.02
MAIN_MS = 0.5
# an rpc-server: sent 4,096 x 4 (hidden state) + 4 (position) + 1,024 x 2 (F16 mask) = 18,436 B,
# returned 16,384 B: 34,820 B x 8 / 10 Gbit/s = 0.027856 ms; + 1 ms round trip + 0.2 ms fixed
HOP_MS = 1.227856
# holding the output layer: the logits 32,000 x 4 B less the hidden state, 111,616 B: 0.0892928 ms
LOGITS_MS = 0.0892928


@pytest.fixture(autouse=True)
def _round(monkeypatch: pytest.MonkeyPatch) -> None:
    round_constants(monkeypatch)


def _terms(devices: tuple[tuple[str, int, int], ...], **kwargs: object) -> dict[str, float]:
    prediction = predict(round_profile(), layout(*devices, **kwargs), round_cluster(), FILL)  # type: ignore[arg-type]
    return {term.where: term.ms for term in prediction.terms}


def test_the_kv_cache_read_is_padded_to_256_cells_within_the_cache_and_the_window() -> None:
    assert [kv_cells(fill, 4096, 0) for fill in (0, 1, 256, 257, 1000, 9999)] == [256, 256, 256, 512, 1024, 4096]
    assert kv_cells(1000, 4096, 300) == 512  # a window of 300 attends 300 cells, padded
    assert decode_work(round_shape(), 1000)[0].cache_bytes == 1_024_000


def test_full_offload_on_one_gpu() -> None:
    # 4 blocks x 2.012048 + the output layer 1.01 + one local copy 0.02 = 9.078192 ms; main 0.5 ms
    terms = _terms((("a", 0, 4),))
    assert terms == pytest.approx(
        {"a:cuda:0 (NVIDIA GeForce RTX 4090)": 4 * GPU_BLOCK_MS + GPU_OUTPUT_MS + SYNC_MS, "main process": MAIN_MS}
    )
    assert sum(terms.values()) == pytest.approx(9.578192)


def test_partial_offload_adds_the_host_blocks_at_ram_speed() -> None:
    # 2 blocks on the host: 2 x 35.046112 = 70.092224 ms; the GPU: 2 x 2.012048 + 1.01 + 0.02 = 5.054096 ms
    terms = _terms((("a", 0, 2),))
    assert terms == pytest.approx(
        {"a:cuda:0 (NVIDIA GeForce RTX 4090)": 5.054096, "host a": 70.092224, "main process": 0.5}
    )


def test_cpu_only_reads_every_block_and_the_output_layer_on_the_host() -> None:
    # 4 x 35.046112 + 17.52 = 157.704448 ms
    assert _terms(()) == pytest.approx({"host a": 4 * HOST_BLOCK_MS + HOST_OUTPUT_MS, "main process": MAIN_MS})


def test_an_rpc_server_costs_a_round_trip_its_traffic_and_a_fixed_cost() -> None:
    assert hop_bytes(round_shape(), 1000) == (18_436, 16_384)
    terms = _terms((("b", 0, 2), ("a", 0, 2)))
    assert terms == pytest.approx(
        {
            "b:cuda:0 (NVIDIA GeForce RTX 4090)": 2 * GPU_BLOCK_MS,
            "rpc b:cuda:0 (NVIDIA GeForce RTX 4090)": HOP_MS,
            "a:cuda:0 (NVIDIA GeForce RTX 4090)": 2 * GPU_BLOCK_MS + GPU_OUTPUT_MS + SYNC_MS,
            "main process": MAIN_MS,
        }
    )


def test_two_rpc_servers_each_return_to_the_main_process() -> None:
    # b then c: the tensor between them is fetched by the main process and sent on, one round trip each
    terms = _terms((("b", 0, 2), ("c", 0, 2), ("a", 0, 0)))
    assert terms["rpc b:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(HOP_MS)
    assert terms["rpc c:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(HOP_MS)


def test_an_rpc_server_holding_the_output_layer_returns_the_logits() -> None:
    # main worker a without a GPU in the layout: b holds every block and the output layer
    terms = _terms((("b", 0, 4),))
    assert terms["rpc b:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(HOP_MS + LOGITS_MS)
    assert terms["b:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(4 * GPU_BLOCK_MS + GPU_OUTPUT_MS)


def test_two_local_gpus_add_their_times_and_a_copy_each() -> None:
    terms = _terms((("a", 0, 2), ("a", 1, 2)))
    assert terms["a:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(2 * GPU_BLOCK_MS + SYNC_MS)
    assert terms["a:cuda:1 (NVIDIA GeForce RTX 4090)"] == pytest.approx(2 * GPU_BLOCK_MS + GPU_OUTPUT_MS + SYNC_MS)


def _moe_profile():  # type: ignore[no-untyped-def]
    # 8 experts of 0.8 GB per block (1.6 GFLOP), 2 used: a token reads 0.2 GB of them (0.4 GFLOP)
    shape = round_shape(
        block_expert_bytes=(8 * GB // 10,) * 4,
        block_expert_flops=(16 * GB // 10,) * 4,
        expert_count=8,
        expert_used_count=2,
    )
    return round_profile(shape)


def test_experts_kept_on_the_host_cost_their_routed_share_there_and_three_copies() -> None:
    # block 3's experts on the host. On the GPU: blocks 0-2 read 1.201024 GB: 2.402048 + 0.01 ms each;
    # block 3 reads 1.001024 GB: 2.012048 ms; output 1.01, copy 0.02, 3 x 0.02 for the experts' copies.
    # On the host: 0.2 GB / 4e7 B/ms = 5 ms, then 0.4 GFLOP / 2e8 FLOP/ms = 2 ms.
    prediction = predict(_moe_profile(), layout(("a", 0, 4), experts=(3,)), round_cluster(), FILL)
    terms = {term.where: term.ms for term in prediction.terms}
    gpu = 3 * 2.412048 + GPU_BLOCK_MS + GPU_OUTPUT_MS + SYNC_MS + 3 * SYNC_MS
    assert terms == pytest.approx({"a:cuda:0 (NVIDIA GeForce RTX 4090)": gpu, "host a": 7.0, "main process": MAIN_MS})


def test_experts_on_the_host_behind_an_rpc_server_cost_a_round_trip_per_copy() -> None:
    # b holds blocks 0-3 with block 1's experts on the host: 1 + 3 round trips of 1 ms
    prediction = predict(_moe_profile(), layout(("b", 0, 4), ("a", 0, 0), experts=(1,)), round_cluster(), FILL)
    terms = {term.where: term.ms for term in prediction.terms}
    assert terms["rpc b:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(HOP_MS + 3 * 1.0)


def test_a_gpu_shared_by_two_decoding_processes_gets_half_its_bandwidth() -> None:
    # 1.001024 GB at 2.5e8 B/ms = 4.004096 ms + 10 us per block; the output 2 ms + 10 us
    prediction = predict(round_profile(), layout(("a", 0, 4)), round_cluster(), FILL, sharing={("a", 0): 2})
    gpu = next(term for term in prediction.terms if term.where.startswith("a:cuda:0"))
    assert gpu.ms == pytest.approx(4 * 4.014096 + 2.01 + SYNC_MS)
    assert not prediction.runs_alone and any("a:cuda:0 by 2" in text for text in prediction.assumptions)


def test_the_kv_cache_kept_on_the_host_is_read_there() -> None:
    # -nkvo: 4 x 1,024,000 B of cache at 4e7 B/ms = 0.1024 ms, then 4 x 102,400 FLOPs of attention at 2e8
    # FLOP/ms = 0.002048 ms, on the host whatever the layout
    profile = round_profile(host_kv_bytes=4 * 4096 * 1000, block_kv_bytes=(0,) * 4)
    prediction = predict(profile, layout(("a", 0, 4)), round_cluster(), FILL)
    terms = {term.where: term.ms for term in prediction.terms}
    assert terms["main process"] == pytest.approx(MAIN_MS + 0.104448)
    assert terms["a:cuda:0 (NVIDIA GeForce RTX 4090)"] == pytest.approx(4 * (2 + 0.01) + GPU_OUTPUT_MS + SYNC_MS)


def _linear_ms(costs: DecodeCosts, placed) -> float:  # type: ignore[no-untyped-def]
    """The decode time written out as ``decode``'s docstring states its linear form."""
    total = costs.fixed_ms + sum(costs.host.block_ms[b] for b in range(placed.cpu_blocks))
    experts = set(placed.host_expert_blocks)
    for position, device in enumerate(placed.devices):
        cost = costs.gpus[(device.worker, device.gpu_index)]
        total += cost.device_ms + cost.hop_ms
        for b in placed.block_range(position):
            total += (
                cost.dense_ms[b] + cost.expert_switch_ms + costs.host_expert_ms[b] if b in experts else cost.block_ms[b]
            )
        if placed.output_offloaded and position == len(placed.devices) - 1:
            total += cost.output_ms + cost.logits_ms
    return total + (0.0 if placed.output_offloaded else costs.host.output_ms)


def test_the_linear_form_the_solver_uses_is_the_prediction() -> None:
    profile, cluster = _moe_profile(), round_cluster()
    layouts = [layout()]
    for split in itertools.product(range(3), repeat=3):
        devices = [(w, i, n) for (w, i), n in zip((("b", 0), ("a", 1), ("a", 0)), split, strict=True) if n]
        if sum(split) <= 4 and devices:
            for experts in ((), (3,)):
                if 4 - sum(split) <= 3 or not experts:
                    layouts.append(layout(*devices, experts=experts if 4 - sum(split) <= 3 else ()))
    assert len(layouts) > 20
    for placed in layouts:
        costs, *_ = layout_costs(profile, placed, cluster, FILL)
        assert _linear_ms(costs, placed) == pytest.approx(decode_ms(costs, placed))
        assert predict(profile, placed, cluster, FILL).decode_ms_per_token == pytest.approx(decode_ms(costs, placed))
