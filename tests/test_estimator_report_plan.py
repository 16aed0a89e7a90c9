"""``layerfit estimate``'s one-GPU figures are the claims ``plan`` makes on a one-GPU cluster.

For every llama.cpp flag the flag table marks as modelled, drawn with a value, the estimate's
``requested`` (``-ngl N``), ``full_offload`` (no ``-ngl``, or one reaching every layer) or
``cpu_only`` (``-ngl 0``) equals the claims of the plan for the same flags on a cluster of one
GPU large enough for any layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from hypothesis import event, given, settings
from hypothesis import strategies as st

from layerfit.cli import EXIT_PLACED, main
from layerfit.domain import Cluster, Deployment, LlamaParams, PlannerConfig, format_bytes
from layerfit.domain.layout import Claims
from layerfit.errors import LayerfitError
from layerfit.estimators import read_gguf
from layerfit.estimators.report import estimate_report
from layerfit.llamacpp.flag_table import MODELLED, ROWS
from layerfit.planning.planner import plan
from layerfit.testing.synthetic import REAL_MODELS, write_gguf

MODELS = ("qwen3-30b-a3b", "llama-3.1-8b", "gemma-3-27b")
"""A MoE model (the tensor overrides), a dense one, one with sliding-window layers (``--swa-full``)."""

ONE_GPU = Cluster.model_validate(
    {
        "workers": [
            {
                "id": 1,
                "name": "gpu",
                "total_ram_bytes": "4 TiB",
                "allocatable_ram_bytes": "4 TiB",
                "gpus": [{"index": 0, "total_vram_bytes": "4 TiB", "allocatable_vram_bytes": "4 TiB"}],
            }
        ]
    }
)

Values = Callable[[st.DrawFn, str, Path], list[str]]
"""Draws the words a flag adds (the flag and its values) for a model; an empty list: not for it."""


def _moe_only(words: list[str]) -> Values:
    return lambda draw, model, folder: words if model == "qwen3-30b-a3b" else []


SAMPLES: dict[str, Values] = {
    "-c": lambda draw, model, folder: ["-c", str(draw(st.sampled_from([512, 4096, 8192, 40960])))],
    "-b": lambda draw, model, folder: ["-b", str(draw(st.sampled_from([512, 2048, 4096])))],
    "-ub": lambda draw, model, folder: ["-ub", str(draw(st.sampled_from([64, 256, 512])))],
    "--swa-full": lambda draw, model, folder: ["--swa-full"],
    "-kvu": lambda draw, model, folder: ["-kvu"],
    "-no-kvu": lambda draw, model, folder: ["-no-kvu"],
    "-fa": lambda draw, model, folder: ["-fa", draw(st.sampled_from(["on", "off", "auto"]))],
    "-kvo": lambda draw, model, folder: ["-kvo"],
    "-nkvo": lambda draw, model, folder: ["-nkvo"],
    "-ctk": lambda draw, model, folder: ["-ctk", draw(st.sampled_from(["f16", "q8_0", "q4_0", "f32"]))],
    "-ctv": lambda draw, model, folder: ["-ctv", draw(st.sampled_from(["f16", "bf16"]))],
    "-np": lambda draw, model, folder: ["-np", str(draw(st.integers(1, 8)))],
    "-mm": lambda draw, model, folder: ["-mm", str(_projector(folder / "mmproj.gguf"))],
    "-lm": lambda draw, model, folder: ["-lm", draw(st.sampled_from(["auto", "none", "mmap", "mlock"]))],
    "-ot": _moe_only(["-ot", r"blk\.(1|3|5)\.ffn_.*_exps=CPU"]),
    "-cmoe": _moe_only(["-cmoe"]),
    "-ncmoe": lambda draw, model, folder: (
        ["-ncmoe", str(draw(st.integers(1, 60)))] if model == "qwen3-30b-a3b" else []
    ),
    "-ngl": lambda draw, model, folder: ["-ngl", str(draw(st.sampled_from([0, 1, 7, 30, 99])))],
    "-ts": lambda draw, model, folder: ["-ts", "1"],
}
"""One way to draw each modelled flag, by its first name in the flag table."""

_EXCLUSIVE = ({"-kvu", "-no-kvu"}, {"-kvo", "-nkvo"}, {"-ot", "-cmoe", "-ncmoe"})
"""Flags of which one at most is given (the same field, or overrides llama.cpp would combine)."""


def _projector(path: Path) -> Path:
    if path.exists():
        return path
    writer = GGUFWriter(str(path), "clip")
    writer.add_uint32("clip.vision.image_size", 224)
    writer.add_uint32("clip.vision.patch_size", 14)
    writer.add_uint32("clip.vision.embedding_length", 64)
    writer.add_uint32("clip.vision.attention.head_count", 4)
    writer.add_tensor("v.blk.0.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_every_modelled_flag_has_a_sample() -> None:
    modelled = {names.split()[0] for names, _, effect, _ in ROWS if effect is MODELLED}
    assert modelled == set(SAMPLES)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    paths = {}
    for name in MODELS:
        paths[name] = folder / f"{name}.gguf"
        write_gguf(paths[name], REAL_MODELS[name])
    return paths


@st.composite
def flag_words(draw: st.DrawFn, model: str, folder: Path) -> list[str]:
    chosen = draw(st.sets(st.sampled_from(sorted(SAMPLES)), min_size=1, max_size=6))
    if draw(st.booleans()):
        chosen.add("-ngl")  # the requested layout: half the examples
    for group in _EXCLUSIVE:
        given = sorted(chosen & group)
        chosen -= set(given[1:])
    words: list[str] = []
    for first in sorted(chosen):
        words += SAMPLES[first](draw, model, folder)
    return words


def _same(estimated: Claims, planned: Claims) -> None:
    """Equal claims, the estimate's reference worker (``gpu`` or ``host``) read as the plan's."""
    assert len(estimated.workers) == len(planned.workers)
    pairs = zip(estimated.workers, planned.workers, strict=True)
    renamed = [mine.model_copy(update={"worker": theirs.worker}) for mine, theirs in pairs]
    assert estimated.devices == planned.devices
    assert tuple(renamed) == planned.workers


@settings(max_examples=60)
@given(data=st.data())
def test_estimate_equals_plan_on_one_gpu(models: dict[str, Path], data: st.DataObject) -> None:
    model = data.draw(st.sampled_from(MODELS))
    words = data.draw(flag_words(model, models[model].parent))
    try:
        params = LlamaParams.from_args(words)
        deployment = Deployment(name="d", gguf_path=str(models[model]), params=params)
        planned = plan(ONE_GPU, deployment, PlannerConfig(time_limit_s=5), explain=False)
    except LayerfitError:  # a combination layerfit refuses (as llama.cpp does): nothing to compare
        event("refused")
        return
    shape = read_gguf(str(models[model]))
    report = estimate_report(shape, params)
    assert planned.best is not None, planned.messages
    ngl = params.n_gpu_layers
    if ngl == 0:
        expected, which = report.cpu_only, "cpu_only"
    elif ngl is None:
        expected, which = report.full_offload, "full_offload"
    else:
        assert report.requested is not None
        expected, which = report.requested, "requested"
    event(f"{model}: {which}")
    _same(expected, planned.best.claims)


def test_expert_flags_change_the_one_gpu_totals(models: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``-ncmoe 24`` keeps 24 blocks' experts in host RAM: the one-GPU VRAM is the plan's, not the
    full model's (17.74 GiB before, the experts counted on the GPU)."""
    path = str(models["qwen3-30b-a3b"])
    deployment = Deployment(name="d", gguf_path=path, params=LlamaParams.from_args(["-ngl", "99", "-ncmoe", "24"]))
    planned = plan(ONE_GPU, deployment, PlannerConfig(time_limit_s=5), explain=False)
    assert planned.best is not None
    vram = planned.best.claims.devices[0].total_bytes
    assert main(["estimate", path, "-c", "8192", "-ngl", "99", "-ncmoe", "24"]) == EXIT_PLACED
    text = capsys.readouterr().out
    assert f"VRAM {format_bytes(vram)} =" in text
    assert text.count(f"VRAM {format_bytes(vram)} =") == 2  # full offload and -ngl 99
    assert "experts of 24 blocks in host RAM" in text
