"""What a new user reads: each figure says what it is about, once, in plain words."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from layerfit.cli import main
from layerfit.domain.base import GiB
from layerfit.heuristics.notes import Action

EXAMPLES = Path(__file__).parent.parent / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")
TOO_BIG = str(EXAMPLES / "too-big.yaml")


def test_explain_says_which_layout_each_need_is_for(capsys: pytest.CaptureFixture[str]) -> None:
    """One GPU's need differs between the layouts tried (47.86 GiB alone, 24.67 GiB in a split), and
    GPUStack's summary (48.79 GiB) is the split's total: the text says so."""
    main(["explain", "--cluster", CLUSTER, "--deployment", TOO_BIG])
    out = capsys.readouterr().out
    vram_lines = [line for line in out.splitlines() if line.startswith("  ! error: GPU ")]
    assert len(vram_lines) == 3
    assert "needs 47.86 GiB VRAM" in vram_lines[0] and vram_lines[0].endswith("(tried: all layers on one GPU)")
    assert all(line.endswith("(tried: all layers split over one worker's GPUs)") for line in vram_lines[1:])
    assert "needs differ by the layout tried" in out
    summary = re.search(r"The model requires approximately (\d+\.\d\d) GiB VRAM", out)
    assert summary is not None
    main(["explain", "--cluster", CLUSTER, "--deployment", TOO_BIG, "--json"])
    reasons = json.loads(capsys.readouterr().out)["reasons"]
    split = sum(r["needed_bytes"] for r in reasons if r["strategy"] == Action.MULTI_GPU.value and r["resource"])
    alone = [r["needed_bytes"] for r in reasons if r["strategy"] == Action.SINGLE_GPU.value and r["resource"]]
    assert f"{split / GiB:.2f}" == summary[1] and alone and alone[0] < split


def test_counts_of_one_are_singular(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``1 RPC server``, ``1 block ... stays``: not ``1 RPC servers``, nor ``output layer: True``."""
    text = (EXAMPLES / "deployment.yaml").read_text(encoding="utf-8")
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(text.replace(": true", ": false"), encoding="utf-8")
    layout = tmp_path / "layout.yaml"
    layout.write_text(
        "main_worker: gpu-a\nn_blocks: 80\noutput_offloaded: false\ndevices:\n"
        "  - {worker: gpu-b, gpu_index: 0, blocks: 19}\n  - {worker: gpu-a, gpu_index: 0, blocks: 30}\n"
        "  - {worker: gpu-a, gpu_index: 1, blocks: 30}\n",
        encoding="utf-8",
    )
    main(["plan", "--cluster", CLUSTER, "--deployment", str(deployment), "--layout", str(layout)])
    reasons = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ! ")]
    assert "  ! error: the layout uses 1 RPC server but distribution across workers is not allowed" in reasons
    assert "  ! error: 1 block and the output layer stay on the CPU but CPU offloading is not allowed" in reasons


def _no_search(*_: object, **__: object) -> None:
    raise AssertionError("searched for a layout although the build cannot run the deployment's flags")


@pytest.mark.parametrize("command", ["plan", "replan"])
def test_a_flag_the_build_cannot_take_is_refused_before_the_search(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """``-fa auto`` (the default) on a build whose ``-fa`` is a plain switch: exit 2 at once."""
    import layerfit.fleet
    import layerfit.heuristics.moe

    monkeypatch.setattr(layerfit.heuristics.moe, "plan_with_experts", _no_search)
    monkeypatch.setattr(layerfit.fleet, "plan_fleet", _no_search)
    inputs = (
        ["plan", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "deployment.yaml")]
        if command == "plan"
        else ["replan", str(EXAMPLES / "fleet.yaml")]
    )
    assert main([*inputs, "--llama-cpp-build", "b4908"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layerfit: error: deployment[llama-70b] flash_attn auto: llama.cpp b4908 has no -fa auto")
    assert "give -fa on or -fa off" in err and "Traceback" not in err


@pytest.mark.parametrize(("ngl", "asked"), [("0", "no offload"), ("30", "partial offload (30 of 81 layers)")])
def test_gpu_layers_reasons_say_what_was_asked_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, ngl: str, asked: str
) -> None:
    """The strategies ``-ngl`` rules out say what it asks for, the same words for each: ``-ngl 0``
    printed both 'asks for partial or no offload' and 'asks for full or no offload'."""
    deployment = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text(encoding="utf-8"))
    deployment["backend_parameters"] = [*deployment.get("backend_parameters", []), f"-ngl {ngl}"]
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(deployment), encoding="utf-8")
    main(["plan", "--cluster", CLUSTER, "--deployment", str(path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if "--gpu-layers" in line and "asks" in line]
    assert [line.split("asks for ", 1)[1] for line in lines] == [asked]


def test_a_malformed_gpu_id_is_named_once_with_its_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not ``gpu_selection: gpu_selection: malformed GPU id``."""
    path = tmp_path / "d.yaml"
    path.write_text("name: x\ngguf_path: m.gguf\ngpu_selection: [gpu-a:cuda:0, nonsense]\n", encoding="utf-8")
    assert main(["plan", "--cluster", CLUSTER, "--deployment", str(path)]) == 2
    error = capsys.readouterr().err
    assert f"{path}: gpu_selection[1]: malformed GPU id 'nonsense'" in error
    assert error.count("gpu_selection") == 1
    assert main(["plan", "--cluster", CLUSTER, "--model", "m.gguf", "--gpus", "nonsense"]) == 2
    error = capsys.readouterr().err
    assert "gpu_selection[0]: malformed GPU id 'nonsense'" in error and error.count("gpu_selection") == 1


def test_each_estimate_flag_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    """``-no-kvu`` had ``-kvu``'s text and ``-kvo`` had ``-nkvo``'s: a text per flag, the flag table's
    modelled flags all listed (``-ts`` places layers over GPUs, which one GPU has no use for)."""
    from layerfit.llamacpp.flag_table import MODELLED, ROWS

    assert main(["estimate", "--help"]) == 0
    out = capsys.readouterr().out
    section = out.split("llama.cpp options that change the estimate", 1)[1].split("\n\n", 1)[0]
    texts = {}
    for line in section.splitlines()[1:]:
        names, text = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        texts[names.split(",")[0]] = text
    modelled = {names.split()[0] for names, _, effect, _ in ROWS if effect is MODELLED}
    assert set(texts) == modelled - {"-ts"}
    assert len(set(texts.values())) == len(texts)
    assert "per sequence" in texts["-no-kvu"] and "host RAM" in texts["-nkvo"] and "host RAM" not in texts["-kvo"]


def test_a_small_size_is_not_shown_as_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A 20 KiB output layer read '0.0 MiB' beside the '0' of an empty cell in the same table."""
    deployment = yaml.safe_load((EXAMPLES / "deployment.yaml").read_text(encoding="utf-8"))
    deployment["profile"]["output_weight_bytes"] = "20 KiB"
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(deployment), encoding="utf-8")
    main(["plan", "--cluster", CLUSTER, "--deployment", str(path)])
    out = capsys.readouterr().out
    assert not re.search(r"(?<![\d.])0\.0 MiB", out) and "20.0 KiB" in out
