"""The memory model against what llama.cpp does with the devices it is given: ``cpu-devices.csv``.

Recorded by ``benchmarks/flag_truth.py --cases devices`` (CPU build, rpc-server devices). Tensor
overrides that keep nothing on the host (a pattern matching no tensor, ``--n-cpu-moe 1`` over a
dense first block) still turn llama.cpp's pipeline parallelism off; ``--n-cpu-moe 0`` adds none.
``-nkvo`` keeps every block's KV cache in host RAM and the attention on the host (one and two
devices, half offload, CPU only, ``-fa off``, gemma3's sliding window, qwen3moe); with recurrent
state it is refused. ``cpu-unified.csv`` (``--cases unified``, run by ``llama-parallel``): ``-kvu``
against one cache per sequence, with sliding windows and recurrent state. Every figure is held to
the flags' tolerance (weights and KV 1 % or 1 MiB, compute 10 % or 16 MiB).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures_gguf import GROUND_TRUTH_DIR, Run, load_runs, write_arch_models
from test_estimator_architectures import within_tolerance
from test_moe_truth import comparisons

from layerfit.domain import LlamaParams
from layerfit.errors import InputError
from layerfit.estimators import estimate_profile, read_gguf

SOURCE = "cpu-devices.csv"
OVERRIDES = ("rpc2otnone", "rpc2ncmoe0", "rpc3ncmoe1")
NO_KV_OFFLOAD = ("rpc1nkvo", "rpc1nkvofa0", "rpc2nkvo", "rpc1halfnkvo", "cpunkvo")
MODELLED = (*OVERRIDES, *NO_KV_OFFLOAD)
"""Labels of the runs the memory model is held to here."""
REFUSED = {"rpc1nkvo_mamba2-f16_ngl99_c4096": "-nkvo"}
"""Recorded runs layerfit refuses, with the flag it names."""
ALL_RUNS = load_runs(GROUND_TRUTH_DIR, (SOURCE,))
RUNS = [run for run in ALL_RUNS if run.id.split("_")[0] in MODELLED and run.id not in REFUSED]


UNIFIED_RUNS = load_runs(GROUND_TRUTH_DIR, ("cpu-unified.csv",))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_arch_models(tmp_path_factory.mktemp("devices"))


def test_the_record_covers_the_override_and_host_kv_cases() -> None:
    assert {run.id.split("_")[0] for run in RUNS} == set(MODELLED)
    assert {run.model for run in RUNS} >= {"llama-q4_0", "qwen3moe-q8_0", "deepseek2-q8_0", "gemma3-q4_k"}
    assert {run.ctx for run in RUNS if run.id.startswith("rpc1nkvo_llama")} == {4096, 16384}


@pytest.mark.parametrize("run_id", sorted(REFUSED))
def test_what_is_not_modelled_is_refused(run_id: str, files: dict[str, Path]) -> None:
    (run,) = (run for run in ALL_RUNS if run.id == run_id)
    flags = [token for token in run.extra if token.startswith("-") and token != "--rpc"]
    with pytest.raises(InputError) as refused:
        estimate_profile(read_gguf(str(files[run.model])), LlamaParams.from_args(["-c", str(run.ctx), *flags]))
    assert refused.value.field == REFUSED[run_id]


def test_the_kv_cache_on_the_host_is_charged_to_it_whatever_the_layout(files: dict[str, Path]) -> None:
    """-nkvo: no device holds KV, the host holds all of it, in the solver's host costs too."""
    from layerfit.memory import main_host_overhead_bytes

    shape = read_gguf(str(files["llama-q4_0"]))
    offloaded = estimate_profile(shape, LlamaParams.from_args(["-c", "4096"]))
    kept = estimate_profile(shape, LlamaParams.from_args(["-c", "4096", "-nkvo"]))
    assert not any(kept.block_kv_bytes) and kept.host_kv_bytes == sum(offloaded.block_kv_bytes) > 0
    assert not kept.pipeline_parallel and offloaded.pipeline_parallel
    common = {"partial": False, "output_offloaded": True, "has_main_gpu": True, "multi_device": False}
    grown = main_host_overhead_bytes(kept, **common) - main_host_overhead_bytes(offloaded, **common)
    assert (
        grown == kept.host_kv_bytes + kept.host_compute.full_offload_bytes - offloaded.host_compute.full_offload_bytes
    )


@pytest.mark.parametrize("run", RUNS + UNIFIED_RUNS, ids=[run.id for run in RUNS + UNIFIED_RUNS])
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


def test_the_unified_record_pairs_each_kvu_run_with_one_cache_per_sequence() -> None:
    ids = {run.id for run in UNIFIED_RUNS}
    assert {run.tool for run in UNIFIED_RUNS} == {"llama-parallel"}
    for shared, separate in (("rpc1np3kvu", "rpc1np3"), ("rpc1np4kvu", "rpc1np4")):
        assert any(i.startswith(f"{shared}_llama") for i in ids) and any(i.startswith(f"{separate}_llama") for i in ids)
    assert {run.model for run in UNIFIED_RUNS} >= {"gemma3-q4_k", "mamba2-f16", "granitehybrid-q8_0"}


def test_kvu_shares_one_cache_and_no_kvu_keeps_one_per_slot(files: dict[str, Path]) -> None:
    """-np 5 at 2048 cells: one cache per sequence pads each share (410) to 512 cells, a unified one
    holds 2048; without -np llama-server's 4 slots share one unless -no-kvu (at 1100 cells)."""
    shape = read_gguf(str(files["llama-q4_0"]))

    def kv(*flags: str, ctx: int = 2048) -> int:
        return sum(estimate_profile(shape, LlamaParams.from_args(["-c", str(ctx), *flags])).block_kv_bytes)

    assert kv("-np", "5", "-kvu") == kv() == kv("-np", "1") < kv("-np", "5") == kv("-np", "5", "-no-kvu")
    # 1100 cells: 1280 shared, 4 x 512 apart
    assert kv("-no-kvu", ctx=1100) == kv("-np", "4", ctx=1100) > kv(ctx=1100) == kv("-np", "4", "-kvu", ctx=1100)


IDLE = ("rpc2ts10", "rpc3ts011", "rpc3ts101", "rpc2ts01half", "rpc2ts01", "rpc2ts01ncmoe2")
"""Runs with a device given a zero share (``-ts 1,0``, ``0,1,1``, ``1,0,1``, ``0,1``)."""
IDLE_RUNS = [run for run in ALL_RUNS if run.id.split("_")[0] in IDLE]


@pytest.mark.parametrize("run", IDLE_RUNS, ids=[run.id for run in IDLE_RUNS])
def test_a_device_given_no_layer_holds_nothing_but_counts_for_the_pipeline(run: Run, files: dict[str, Path]) -> None:
    """llama.cpp allocates nothing on a device whose share is zero, wherever it sits, but counts it:
    a full offload stays pipelined, the first device holding layers takes the input copies. The
    memory model's pieces, told the device count llama.cpp sees, match the other devices and the
    host (a Layout names only devices with layers, so ``claims`` prices one device fewer:
    test_flag_truth's KNOWN_GAPS)."""
    from fixtures_gguf import interpret

    from layerfit.domain.profile import DeviceRole
    from layerfit.memory import device_compute_bytes, is_partial, keeps_scan, main_host_overhead, range_kinds
    from layerfit.memory.experts import with_host_experts

    shape = read_gguf(str(files[run.model]))
    interpretation = interpret(run, shape.block_count)
    params = interpretation.params
    profile = estimate_profile(shape, params, runtime=interpretation.runtime)
    layout = with_host_experts(interpretation.layout, profile.fixed_host_experts or ())
    given = len(run.extra[run.extra.index("--rpc") + 1].split(","))
    several, partial = given > 1, is_partial(layout)
    # the idle device has no buffer at all (its breakdown row is 0 / 0 / 0 MiB)
    assert len(interpretation.positions) == given - 1 and set(run.devices) == {"Host", *interpretation.positions}
    ours = {
        "Host": main_host_overhead(
            profile,
            partial=partial,
            output_offloaded=layout.output_offloaded,
            has_main_gpu=False,
            multi_device=several,
            host_blocks=layout.cpu_blocks,
        )
    }
    for name, position in interpretation.positions.items():
        blocks = layout.block_range(position)
        ours[name] = device_compute_bytes(
            profile,
            DeviceRole.RPC,
            partial=partial,
            unified_worker=False,
            holds_output=layout.output_offloaded and position == len(layout.devices) - 1,
            multi_device=several,
            first_device=position == 0,
            host_blocks=layout.cpu_blocks,
            kinds=range_kinds(profile, blocks.start, blocks.stop),
            keeps_scan=keeps_scan(profile, blocks.start, blocks.stop),
        )
    for name, estimate in ours.items():
        compute = (estimate.compute_bytes if name == "Host" else estimate) / 2**20
        measured = run.devices[name].compute_mib
        assert abs(compute - measured) <= max(0.10 * measured, 16.0), (name, compute, measured)
