"""``llama_cpp_build``: a name or a build number, and every build-dependent flag the commands use
follows it; a flag the build lacks, or may lack, is refused with the facts known about it."""

from __future__ import annotations

import pytest

from layerfit.domain import Cluster, DeviceAssignment, Gpu, LlamaParams, PlannerConfig, Worker
from layerfit.domain.builds import CURRENT_BUILD, FIT, LEGACY_BUILD, N_CPU_MOE, load_mode_args, parse_build
from layerfit.domain.config import LlamaCppBuild, OffloadOrder
from layerfit.errors import InputError
from layerfit.experts import with_host_experts
from layerfit.launch import server_command
from layerfit.memory import make_layout

CLUSTER = Cluster(
    workers=(
        Worker(
            id="a",
            name="a",
            total_ram_bytes=10**10,
            allocatable_ram_bytes=10**10,
            gpus=tuple(Gpu(index=i, total_vram_bytes=10**9, allocatable_vram_bytes=10**9) for i in range(2)),
        ),
    )
)
LAYOUT = make_layout("a", 8, [DeviceAssignment(worker="a", gpu_index=0, blocks=8)])


def argv(
    build: str | int, params: LlamaParams = LlamaParams(), layout: object = LAYOUT, **config: object
) -> tuple[str, ...]:
    planner = PlannerConfig(llama_cpp_build=build, **config)  # type: ignore[arg-type]
    return server_command(CLUSTER, layout, "m.gguf", params, planner).argv  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "build"),
    [("b6400", 6400), ("6400", 6400), ("B11434", 11434), (11434, 11434), ("current", LlamaCppBuild.CURRENT)],
)
def test_a_build_is_a_name_or_a_number(text: object, build: object) -> None:
    assert parse_build(text) == build


@pytest.mark.parametrize("text", ["b", "x6500", "0", "b0", -3, True, "6500.1", "b1234567"])
def test_a_malformed_build_is_refused(text: object) -> None:
    with pytest.raises(ValueError, match="build"):
        parse_build(text)


@pytest.mark.parametrize(
    ("build", "order", "fit"),
    [
        ("current", OffloadOrder.OUTPUT_FIRST, True),
        ("legacy", OffloadOrder.OUTPUT_LAST, False),
        ("b6400", OffloadOrder.OUTPUT_LAST, False),  # September 2025: before --fit and output-first
        ("b9000", OffloadOrder.OUTPUT_FIRST, True),
        (CURRENT_BUILD, OffloadOrder.OUTPUT_FIRST, True),
    ],
)
def test_the_build_number_decides_the_order_and_fit(build: object, order: OffloadOrder, fit: bool) -> None:
    config = PlannerConfig(llama_cpp_build=build)  # type: ignore[arg-type]
    assert config.offload_order is order
    assert config.emits_fit_off is fit
    assert ("--fit" in argv(build)) is fit  # type: ignore[arg-type]


def test_between_the_known_builds_the_order_must_be_given() -> None:
    build = (LEGACY_BUILD + FIT.has_since) // 2
    with pytest.raises(ValueError, match=f"does not know whether llama.cpp b{build} has the output-first"):
        PlannerConfig(llama_cpp_build=build)
    first = PlannerConfig(llama_cpp_build=build, offload_order=OffloadOrder.OUTPUT_FIRST)
    assert first.emits_fit_off  # output-first (#18148) came after --fit (#16653)
    with pytest.raises(ValueError, match=f"does not know whether llama.cpp b{build} has --fit"):
        PlannerConfig(llama_cpp_build=build, offload_order=OffloadOrder.OUTPUT_LAST)


def test_a_build_and_an_order_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="b6400 offloads output-last, not output-first"):
        PlannerConfig(llama_cpp_build="b6400", offload_order=OffloadOrder.OUTPUT_FIRST)


@pytest.mark.parametrize(
    ("mode", "old", "new"),
    [
        ("none", ("--no-mmap",), ("-lm", "none")),
        ("mlock", ("--mlock",), ("-lm", "mlock")),
        ("mmap+mlock", ("--mlock",), ("-lm", "mmap+mlock")),
        ("mmap", (), ("-lm", "mmap")),
        (None, (), ()),
    ],
)
def test_the_load_mode_uses_the_flags_of_the_build(
    mode: str | None, old: tuple[str, ...], new: tuple[str, ...]
) -> None:
    assert load_mode_args(mode, LEGACY_BUILD) == old
    assert load_mode_args(mode, CURRENT_BUILD) == new
    params = LlamaParams(load_mode=mode)  # type: ignore[arg-type]
    legacy = argv("legacy", params)
    assert "-lm" not in legacy and all(flag in legacy for flag in old)


def test_direct_io_needs_a_build_that_has_it() -> None:
    assert "-dio" in argv("b9500", LlamaParams(load_mode="dio"))
    with pytest.raises(InputError, match=r"load_mode dio: layerfit does not know whether llama.cpp b6400 has -dio"):
        argv("b6400", LlamaParams(load_mode="dio"))


def test_experts_on_the_host_need_a_build_with_the_flags() -> None:
    hosted = with_host_experts(LAYOUT, frozenset(range(3)))
    assert "--n-cpu-moe" in argv("b6400", layout=hosted)
    with pytest.raises(InputError, match=r"--n-cpu-moe: the layout keeps experts .* b6000 has no --n-cpu-moe"):
        argv("b6000", layout=hosted, offload_order=OffloadOrder.OUTPUT_LAST)
    assert N_CPU_MOE.present(6000) is False


def test_the_deployment_s_own_tensor_overrides_are_checked_too() -> None:
    params = LlamaParams(extra=("-ot", "exps=CPU"))
    assert "-ot" in argv("b6400", params)
    with pytest.raises(InputError, match=r"-ot: a tensor override of the deployment: layerfit does not know"):
        argv("b5000", params, offload_order=OffloadOrder.OUTPUT_LAST)


@pytest.mark.parametrize(
    ("build", "says"),
    [
        ("b7000", "layerfit does not know whether llama.cpp b7000 has the output-first -ngl order"),
        ("bogus", "expected current, legacy or a build number such as b6500 or 11434, got 'bogus'"),
    ],
)
def test_the_command_line_refuses_an_unusable_build(capsys: pytest.CaptureFixture[str], build: str, says: str) -> None:
    from pathlib import Path

    from layerfit.cli import EXIT_BAD_INPUT, main

    examples = Path(__file__).parent.parent / "layerfit" / "examples"
    files = ("--cluster", str(examples / "cluster.yaml"), "--deployment", str(examples / "deployment.yaml"))
    assert main(["plan", *files, "--llama-cpp-build", build]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
