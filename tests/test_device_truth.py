"""The memory model against what llama.cpp does with the devices it is given: ``cpu-devices.csv``.

Recorded by ``benchmarks/flag_truth.py --cases devices`` (CPU build, rpc-server devices). Tensor
overrides that keep nothing on the host (a pattern matching no tensor, ``--n-cpu-moe 1`` over a
dense first block) still turn llama.cpp's pipeline parallelism off; ``--n-cpu-moe 0`` adds none.
Every figure is held to the flags' tolerance (weights and KV 1 % or 1 MiB, compute 10 % or 16 MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import GROUND_TRUTH_DIR, Run, load_runs, write_arch_models
from test_estimator_architectures import within_tolerance
from test_moe_truth import comparisons

from layerfit.domain import LlamaParams
from layerfit.estimators import estimate_profile, read_gguf

SOURCE = "cpu-devices.csv"
MODELLED = ("rpc2otnone", "rpc2ncmoe0", "rpc3ncmoe1")
"""Labels of the runs the memory model is held to here."""
RUNS = [run for run in load_runs(GROUND_TRUTH_DIR, (SOURCE,)) if run.id.split("_")[0] in MODELLED]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_arch_models(tmp_path_factory.mktemp("devices"))


def test_the_record_covers_the_override_cases() -> None:
    assert {run.id.split("_")[0] for run in RUNS} == set(MODELLED)
    assert {run.model for run in RUNS} >= {"llama-q4_0", "qwen3moe-q8_0", "deepseek2-q8_0"}


@pytest.mark.parametrize("run", RUNS, ids=[run.id for run in RUNS])
def test_estimate_matches_llama_cpp(run: Run, files: dict[str, Path]) -> None:
    found = list(comparisons(run, files[run.model]))
    assert {c.device for c in found} == set(run.devices)
    failures = [c for c in found if not within_tolerance(c)]
    assert not failures, "\n".join(str(c) for c in failures)


@pytest.mark.parametrize(
    ("flags", "pipelined"),
    [
        ((), True),
        (("--n-cpu-moe", "0"), True),
        (("--n-cpu-moe", "1"), False),
        (("-ot", "nomatch=CPU"), False),
        (("--cpu-moe",), False),
    ],
)
def test_any_tensor_override_turns_pipeline_parallelism_off(
    flags: tuple[str, ...], pipelined: bool, files: dict[str, Path]
) -> None:
    shape = read_gguf(str(files["qwen3moe-q8_0"]))
    assert estimate_profile(shape, LlamaParams.from_args(["-c", "2048", *flags])).pipeline_parallel is pipelined
