"""``llama_cpp_build``: a name or a build number, and every build-dependent flag the commands use
follows it; a flag the build lacks, or may lack, is refused with the facts known about it."""

from __future__ import annotations

import pytest

from layerfit.domain import Cluster, DeviceAssignment, Gpu, LlamaParams, PlannerConfig, Worker
from layerfit.domain.config import LlamaCppBuild, OffloadOrder
from layerfit.errors import InputError
from layerfit.llamacpp.builds import (
    CURRENT_BUILD,
    FIT,
    FLASH_ATTN_VALUE,
    LEGACY_BUILD,
    N_CPU_MOE,
    flash_attn_args,
    load_mode_args,
    parse_build,
)
from layerfit.llamacpp.launch import server_command
from layerfit.memory import make_layout
from layerfit.memory.experts import with_host_experts

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


OLD_SWITCH = {"offload_order": OffloadOrder.OUTPUT_LAST}
"""What a build from before b6089 needs besides its number: its -ngl order is known, no --fit."""


@pytest.mark.parametrize(
    ("flash_attn", "current", "switch"),
    [("on", ("-fa", "on"), ("-fa",)), ("off", ("-fa", "off"), ()), ("auto", (), None)],
)
def test_flash_attention_takes_the_form_of_the_build(
    flash_attn: str, current: tuple[str, ...], switch: tuple[str, ...] | None
) -> None:
    """b6327 and newer take -fa on|off|auto (auto: the default, not emitted); b4908 and older have a
    plain switch, off unless given, and no auto, which the estimate would take as on."""
    params = LlamaParams(flash_attn=flash_attn)  # type: ignore[arg-type]
    for build in ("current", "legacy", "b6327"):
        line = argv(build, params)
        assert flash_attn_args(flash_attn, 6327) == current
        assert ("-fa" in line) == bool(current) and line.count("-fa") <= 1
        if current:
            assert line[line.index("-fa") + 1] == flash_attn
    if switch is None:
        refused = r"flash_attn auto: llama.cpp b4908 has no -fa auto.*give -fa on or -fa off"
        with pytest.raises(InputError, match=refused):
            argv("b4908", params, **OLD_SWITCH)
        return
    line = argv("b4908", params, **OLD_SWITCH)
    assert flash_attn_args(flash_attn, 4908) == switch
    assert [arg for arg in line if arg in {"-fa", "on", "off", "auto"}] == list(switch)


@pytest.mark.parametrize("flash_attn", ["on", "off", "auto"])
def test_flash_attention_between_the_known_builds_is_refused_with_both_figures(flash_attn: str) -> None:
    assert FLASH_ATTN_VALUE.present(5000) is None
    params = LlamaParams(flash_attn=flash_attn)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"b5000 has -fa on\|off\|auto.*b4908 and older lack it, b6327 and newer"):
        argv("b5000", params, **OLD_SWITCH)


def test_a_bare_fa_of_an_older_build_is_read_as_on_and_re_emitted_for_each_build() -> None:
    params = LlamaParams.from_args(["-fa", "-c", "4096"])
    assert params.flash_attn == "on" and params.ctx_size == 4096
    assert argv("b4908", params, **OLD_SWITCH).count("-fa") == 1
    current = argv("current", params)
    assert current[current.index("-fa") + 1] == "on"


def test_experts_on_the_host_need_a_build_with_the_flags() -> None:
    hosted = with_host_experts(LAYOUT, frozenset(range(3)))
    assert "--n-cpu-moe" in argv("b6400", layout=hosted)
    with pytest.raises(InputError, match=r"--n-cpu-moe: the layout keeps experts .* b4908 has no --n-cpu-moe"):
        argv("b4908", LlamaParams(flash_attn="off"), layout=hosted, **OLD_SWITCH)
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


@pytest.mark.parametrize(("build", "fit"), [("current", True), ("legacy", False)])
def test_fleet_commands_follow_the_build_too(capsys: pytest.CaptureFixture[str], build: str, fit: bool) -> None:
    import json
    from pathlib import Path

    from layerfit.cli import main

    fleet = Path(__file__).parent.parent / "layerfit" / "examples" / "fleet.yaml"
    assert main(["replan", str(fleet), "--time-limit", "2", "--json", "--llama-cpp-build", build]) in (0, 1)
    replicas = json.loads(capsys.readouterr().out)["commands"]
    lines = [line for replica in replicas for line in replica["commands"]]
    servers = [line["argv"] for line in lines if line["program"] == "llama-server"]
    assert servers
    assert all(("--fit" in argv) == fit for argv in servers)


def test_fleet_commands_refuse_what_the_build_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from layerfit.cli import EXIT_BAD_INPUT, main

    fleet = Path(__file__).parent.parent / "layerfit" / "examples" / "fleet.yaml"
    assert main(["replan", str(fleet), "--time-limit", "2", "--llama-cpp-build", "b4908"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "b4908 has no -fa auto" in err and "Traceback" not in err
