"""Device facts: the GPU table by reported name, the cluster file's figures, stated defaults for
what nobody gave; bad figures refused naming the field; a prediction through JSON."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from speed_builders import layout, round_cluster, round_constants, round_profile

from layerfit.domain.cluster import Cluster, Gpu, Worker
from layerfit.domain.params import LlamaParams
from layerfit.domain.speed import SpeedPrediction
from layerfit.errors import InputError
from layerfit.io.documents import load_model
from layerfit.speed import SpeedSettings, calibration, predict, settings_for
from layerfit.speed.devices import apple_tflops_per_gbps, gpu_facts, host_facts, link_facts
from layerfit.speed.gpu_table import GPUS, match, words
from layerfit.speed.rates import gpu_rate, host_rate


@pytest.mark.parametrize(
    ("reported", "row"),
    [
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("Apple M2 Ultra", "Apple M2 Ultra"),
        ("AMD Instinct MI300X", "AMD Instinct MI300X"),
        ("Radeon RX 7900 XTX", "AMD Radeon RX 7900 XTX"),  # the vendor word left out
        ("RTX 4080 SUPER", "NVIDIA GeForce RTX 4080 SUPER"),
        ("nvidia geforce rtx 4080", "NVIDIA GeForce RTX 4080"),  # case
        ("NVIDIA A10 24GB", "NVIDIA A10"),  # a memory size added
        ("Tesla T4", "Tesla T4"),
    ],
)
def test_the_table_matches_the_names_drivers_report(reported: str, row: str) -> None:
    spec = match(reported)
    assert spec is not None and spec.name == row


@pytest.mark.parametrize("reported", ["NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 2080 Ti", "", "Foo"])
def test_a_name_the_table_does_not_have_is_no_match(reported: str) -> None:
    assert match(reported) is None


def test_every_row_names_its_source_and_one_row_per_name() -> None:
    assert all(row.source for row in GPUS)
    assert len({words(row.name) for row in GPUS}) == len(GPUS)
    assert all(row.family in calibration.FAMILIES or row.family == "cpu" for row in GPUS)


def _gpu(name: str, **figures: Any) -> Gpu:
    return Gpu.model_validate({"index": 0, "name": name, "total_vram_bytes": 1, "allocatable_vram_bytes": 1, **figures})


def test_a_known_gpu_takes_the_tables_figures_and_the_cluster_file_overrides_them() -> None:
    facts = gpu_facts("w:cuda:0", _gpu("NVIDIA GeForce RTX 4090"))
    assert (facts.bandwidth_gbps, facts.fp16_tflops, facts.family, facts.notes) == (1008, 330.3, "ada", ())
    given = gpu_facts("w:cuda:0", _gpu("NVIDIA GeForce RTX 4090", memory_bandwidth_gbps=900, fp16_tflops=100))
    assert (given.bandwidth_gbps, given.fp16_tflops, given.family) == (900, 100, "ada")
    assert "cluster file" in given.described


def test_an_unknown_gpu_is_the_tables_slowest_and_the_plan_says_so() -> None:
    # the slowest non-Apple row is the RTX 4060 (272 GB/s), with the 'unknown' family's efficiencies
    facts = gpu_facts("w:cuda:0", _gpu("Mystery Accelerator 9000"))
    assert (facts.bandwidth_gbps, facts.family) == (272, "unknown")
    assert "'Mystery Accelerator 9000') is not in the GPU table" in facts.notes[0]
    apple = gpu_facts(
        "mac:mps:0", Gpu(index=0, type="mps", name="Apple M9", total_vram_bytes=1, allocatable_vram_bytes=1)
    )
    assert apple.bandwidth_gbps == 68.25  # Apple M1
    # figures given in the cluster file: nothing is assumed of the GPU itself
    assert gpu_facts("w:cuda:0", _gpu("Mystery", memory_bandwidth_gbps=500, fp16_tflops=50)).notes == ()


def test_an_apple_gpu_without_a_published_rate_gets_a_stated_stand_in() -> None:
    # the Apple rows that state a rate: M1 2.6/68.25 ... the median TFLOPS per GB/s
    facts = gpu_facts("mac:mps:0", _gpu("Apple M3 Max"))
    assert facts.fp16_tflops == pytest.approx(400 * apple_tflops_per_gbps())
    assert "no FP16 rate published" in facts.notes[0]


@pytest.mark.parametrize(
    ("name", "stated"),
    [
        ("NVIDIA GeForce RTX 5090", "no published rows of several model sizes"),  # blackwell: 7B rows only
        ("NVIDIA H100 80GB HBM3", "H100 PCIe's published Llama-3 8B and 70B rows of May 2024"),
        ("NVIDIA A100 80GB PCIe", "A100-SXM4-80GB's published Llama-3 8B and 70B rows of May 2024"),
        ("Tesla V100-SXM2-32GB", "no published row"),
        ("Apple M2 Ultra", "one share for every Apple chip"),
    ],
)
def test_a_family_calibrated_on_little_states_its_limit(name: str, stated: str) -> None:
    facts = gpu_facts("w:cuda:0", _gpu(name))
    assert any(stated in note and f"({facts.family})" in note for note in facts.notes)


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000"])
def test_a_family_measured_at_several_sizes_states_no_limit(name: str) -> None:
    assert gpu_facts("w:cuda:0", _gpu(name)).notes == ()


def _worker(**fields: Any) -> Worker:
    return Worker.model_validate({"id": 1, "name": "w", "total_ram_bytes": 1, "allocatable_ram_bytes": 1, **fields})


def test_host_defaults_are_stated_and_given_figures_used() -> None:
    default = host_facts(_worker())
    assert (default.ram_bandwidth_gbps, default.threads) == (
        calibration.DEFAULT_RAM_BANDWIDTH_GBPS,
        calibration.DEFAULT_CPU_THREADS,
    )
    assert len(default.notes) == 2
    given = host_facts(_worker(ram_bandwidth_gbps=80, cpu_threads=16), threads=8)
    assert (given.ram_bandwidth_gbps, given.threads, given.batch_threads, given.notes) == (80, 8, 8, ())


def test_a_link_is_the_slower_of_its_two_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _worker(name="fast", network={"bandwidth_gbps": 25, "rtt_ms": 0.1})
    slow = _worker(name="slow", network={"bandwidth_gbps": 1, "rtt_ms": 2})
    assert (link_facts(fast, slow).bandwidth_gbps, link_facts(fast, slow).rtt_ms) == (1, 2)
    unknown = link_facts(fast, _worker(name="other"))
    assert (unknown.bandwidth_gbps, unknown.rtt_ms, unknown.notes) == (25, 0.1, ())
    default = link_facts(_worker(name="x"), _worker(name="y"))
    assert (default.bandwidth_gbps, default.rtt_ms, len(default.notes)) == (1.0, 0.5, 2)


def test_rates_follow_the_families_and_the_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    round_constants(monkeypatch)
    # 1,000 GB/s x 0.5 = 500 GB/s = 5e8 B/ms; 100 TFLOPS x 0.5 = 5e10 FLOP/ms; 10 us per layer
    rate = gpu_rate(
        gpu_facts("w:cuda:0", _gpu("NVIDIA GeForce RTX 4090", memory_bandwidth_gbps=1000, fp16_tflops=100)),
        host_facts(_worker()),
    )
    assert (rate.bytes_per_ms, rate.prompt_flops_per_ms, rate.layer_ms) == pytest.approx((5e8, 5e10, 0.01))
    # 2 threads x 10 GB/s = 20 GB/s < 100 GB/s x 0.8: the threads bound it; 16 threads: the RAM does
    assert host_rate(host_facts(_worker(ram_bandwidth_gbps=100, cpu_threads=2))).bytes_per_ms == pytest.approx(2e7)
    assert host_rate(host_facts(_worker(ram_bandwidth_gbps=100, cpu_threads=16))).bytes_per_ms == pytest.approx(8e7)
    # an rpc-server serving ggml's CPU backend runs at its worker's host rate
    cpu = gpu_rate(gpu_facts("w:unknown:0", _gpu("CPU")), host_facts(_worker(ram_bandwidth_gbps=100, cpu_threads=2)))
    assert cpu.bytes_per_ms == pytest.approx(2e7)


CLUSTER = """
workers:
  - id: 1
    name: a
    total_ram_bytes: 8 GiB
    allocatable_ram_bytes: 8 GiB
    {worker}
    gpus:
      - {{index: 0, total_vram_bytes: 8 GiB, allocatable_vram_bytes: 8 GiB, {gpu}}}
"""


@pytest.mark.parametrize(
    ("worker", "gpu", "named"),
    [
        ("", "memory_bandwidth_gbps: 0", "memory_bandwidth_gbps"),
        ("", "memory_bandwidth_gbps: -5", "memory_bandwidth_gbps"),
        ("", "fp16_tflops: .inf", "fp16_tflops"),
        ("", "fp16_tflops: true", "fp16_tflops"),
        ("ram_bandwidth_gbps: 0", "name: x", "ram_bandwidth_gbps"),
        ("cpu_threads: 0", "name: x", "cpu_threads"),
        ("cpu_threads: 2.5", "name: x", "cpu_threads"),
        ("network: {bandwidth_gbps: -1}", "name: x", "network.bandwidth_gbps"),
        ("network: {rtt_ms: 0}", "name: x", "network.rtt_ms"),
        ("network: {rtt: 1}", "name: x", "network.rtt"),
    ],
)
def test_a_bad_speed_figure_in_a_cluster_file_is_refused_naming_it(worker: str, gpu: str, named: str) -> None:
    with pytest.raises(InputError, match=named.replace(".", r"\.")):
        load_model(Cluster, yaml.safe_load(CLUSTER.format(worker=worker, gpu=gpu)), "cluster.yaml")


@pytest.mark.parametrize("flag", [["-t", "0"], ["-t", "many"], ["--threads-batch", "99999"]])
def test_a_bad_thread_count_is_refused_naming_the_flag(flag: list[str]) -> None:
    with pytest.raises(InputError, match=flag[0]):
        settings_for(LlamaParams.from_args(flag))


def test_thread_flags_and_the_micro_batch_are_read() -> None:
    settings = settings_for(LlamaParams.from_args(["-t", "6", "-ub", "256", "-c", "4096"]))
    assert (settings.threads, settings.batch_threads, settings.n_ubatch, settings.ctx) == (6, 6, 256, 4096)
    assert settings_for(LlamaParams.from_args(["-t", "-1", "-tb", "3"])).threads is None
    assert settings_for(LlamaParams.from_args(["-tb", "3"])).batch_threads == 3


def test_a_prediction_round_trips_through_json_and_a_changed_total_is_refused() -> None:
    prediction = predict(round_profile(), layout(("b", 0, 2), ("a", 0, 2)), round_cluster(), SpeedSettings())
    dumped = prediction.model_dump(mode="json")
    assert SpeedPrediction.model_validate(dumped) == prediction
    assert dumped["decode_ms_per_token"] == pytest.approx(sum(term["ms"] for term in dumped["terms"]))
    with pytest.raises(ValueError, match="decode_tokens_per_s"):
        SpeedPrediction.model_validate({**dumped, "decode_tokens_per_s": dumped["decode_tokens_per_s"] * 2})


def test_a_prediction_states_the_fill_and_that_it_runs_alone() -> None:
    prediction = predict(round_profile(), layout(("a", 0, 4)), round_cluster(), SpeedSettings())
    assert prediction.context_fill == 2048 and prediction.runs_alone
    assert any("half full (2048 of 4096" in text for text in prediction.assumptions)
    assert any("alone" in text for text in prediction.assumptions)


def test_a_profile_given_as_numbers_gets_derived_figures_stated() -> None:
    profile = round_profile().model_copy(update={"speed": None})
    prediction = predict(profile, layout(("a", 0, 4)), round_cluster(), SpeedSettings(ctx=4096))
    assert any("given as numbers" in text for text in prediction.assumptions)
    assert prediction.decode_tokens_per_s > 0


def test_the_wrong_layout_is_refused() -> None:
    with pytest.raises(InputError, match=r"layout\.n_blocks"):
        predict(round_profile(), layout(n_blocks=3), round_cluster())
    with pytest.raises(InputError, match="cluster"):
        predict(round_profile(), layout(), {"workers": []})  # type: ignore[arg-type]
