"""What the CLI prints: tables whose totals are the sums of their terms, one name per GPU, JSON figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixtures_gguf import gemma_270m_path

from layerfit.cli import EXIT_NO_FIT, EXIT_PLACED, main
from layerfit.domain import Claims, Plan
from layerfit.domain.base import GiB, MiB

EXAMPLES = Path(__file__).parent.parent / "examples"
CLUSTER = str(EXAMPLES / "cluster.yaml")
DEPLOYMENT = str(EXAMPLES / "deployment.yaml")
LAYOUT = str(EXAMPLES / "layout.yaml")
_SIZE = re.compile(r"(-?\d+(?:\.\d+)?) (GiB|MiB)|(?<!\S)(0)(?!\S)")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def sizes(row: str) -> list[tuple[float, float]]:
    """Every size in a table row as (bytes, rounding error bound of the printed figure)."""
    found = []
    for match in _SIZE.finditer(row):
        if match[3] is not None:
            found.append((0.0, 0.0))
        elif match[2] == "GiB":
            found.append((float(match[1]) * GiB, 0.005 * GiB))
        else:
            found.append((float(match[1]) * MiB, 0.05 * MiB))
    return found


def table(out: str, header: str) -> tuple[list[str], list[str]]:
    """Column names and rows of the table whose header line starts with ``header``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header + " "))
    columns = lines[start].split()
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("  ") or line.startswith("    ") or not sizes(line):
            break
        rows.append(line)
    return columns, rows


def assert_adds_up(row: str, n_terms: int) -> None:
    """The ``n_terms`` sizes before ``total`` add up to it, within the rounding of the printed figures."""
    figures = sizes(row)
    terms, total = figures[:n_terms], figures[n_terms]
    tolerance = sum(error for _, error in terms) + total[1]
    assert abs(sum(value for value, _ in terms) - total[0]) <= tolerance, row


def plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out = run(capsys, *argv, "--json")
    assert code in (EXIT_PLACED, EXIT_NO_FIT)
    data: dict[str, Any] = json.loads(out)
    return data


def test_vram_and_ram_tables_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", LAYOUT)
    assert code == EXIT_PLACED
    columns, rows = table(out, "GPU")
    assert columns[columns.index("weights") :] == [
        "weights", "output", "KV", "compute", "runtime", "total", "free", "after",
    ]  # fmt: skip
    assert len(rows) == 4 and rows[-1].split()[0] == "total"
    for row in rows:
        assert_adds_up(row, 5)
    # the totals row adds up the GPUs, column by column
    per_gpu = [sizes(row) for row in rows[:-1]]
    for column, (value, error) in enumerate(sizes(rows[-1])[:6]):
        cells = [figures[column] for figures in per_gpu]
        assert abs(sum(cell for cell, _ in cells) - value) <= error + sum(bound for _, bound in cells)
    columns, rows = table(out, "RAM")
    assert columns[2:] == ["fixed", "weights", "KV", "embed", "output", "compute", "total", "free", "after"]
    assert [row.split()[:2] for row in rows[:2]] == [["gpu-a", "main"], ["gpu-b", "rpc"]]
    assert rows[2].split()[0] == "total"
    for row in rows:
        assert_adds_up(row, 6)


def test_gemma_row_shows_the_output_layer_and_runtime(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "plan", "--cluster", CLUSTER, "--model", str(gemma_270m_path()), "--gpus", "gpu-b:cuda:0")
    assert code == EXIT_PLACED
    _, rows = table(out, "GPU")
    (row,) = rows
    assert row.split()[:4] == ["gpu-b:cuda:0", "CUDA0", "main", "18"]
    # a quantized model with flash attention: no cuBLAS, 620 MiB per process (608-617 measured)
    assert "170.0 MiB" in row and "620.0 MiB" in row and "1.41 GiB" in row
    assert_adds_up(row, 5)


def test_json_carries_every_term_and_the_derived_figures(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", LAYOUT)
    assert data["schema_version"] == 1
    claims = data["best"]["claims"]
    terms = ("weight_bytes", "kv_bytes", "output_bytes", "compute_bytes", "fixed_bytes", "extra_bytes")
    for device in claims["devices"]:
        assert device["total_bytes"] == sum(device[term] for term in terms)
    ram_terms = ("fixed_bytes", "weight_bytes", "kv_bytes", "embedding_bytes", "output_bytes", "compute_bytes")
    for worker in claims["workers"]:
        assert worker["ram_bytes"] == sum(worker[term] for term in (*ram_terms, "expert_bytes"))
        assert worker["pool_bytes"] == worker["ram_bytes"] + worker["vram_bytes"]
    assert claims["total_vram_bytes"] == sum(device["total_bytes"] for device in claims["devices"])
    assert [use["gpu_id"] for use in data["device_use"]] == ["gpu-b:cuda:0", "gpu-a:cuda:0", "gpu-a:cuda:1"]
    assert [use["llama_device"] for use in data["device_use"]] == ["RPC0", "CUDA0", "CUDA1"]
    for use, device in zip(data["device_use"], claims["devices"], strict=True):
        assert use["needed_bytes"] == device["total_bytes"]
        assert use["free_after_bytes"] == use["allocatable_bytes"] - use["needed_bytes"]
    assert Plan.model_validate(data).claims is not None  # a dump reads back


def test_a_dump_whose_total_disagrees_with_its_terms_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    data = plan_json(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT)
    claims = data["best"]["claims"]
    claims["devices"][0]["total_bytes"] += 1
    with pytest.raises(ValueError, match=r"total_bytes is .* but its terms add up to"):
        Claims.model_validate(claims)


def test_one_name_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = [
        run(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", LAYOUT)[1],
        run(capsys, "explain", "--cluster", CLUSTER, "--deployment", str(EXAMPLES / "too-big.yaml"))[1],
    ]
    for out in outputs:
        assert "gpu-a:cuda:0" in out
        assert not re.search(r"gpu-[ab]:\d", out), out  # never worker:index without the type
    assert "a GPU with at least 24.68 GiB VRAM allocatable in place of gpu-a:cuda:0" in outputs[1]


def test_a_unified_memory_worker_is_one_pool(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = tmp_path / "mac.yaml"
    cluster.write_text(
        "workers:\n"
        "  - {id: 1, name: mac, unified_memory: true, total_ram_bytes: 64 GiB, allocatable_ram_bytes: 56 GiB,\n"
        "     gpus: [{index: 0, type: metal, total_vram_bytes: 48 GiB, allocatable_vram_bytes: 48 GiB}]}\n",
        encoding="utf-8",
    )
    code, out = run(capsys, "plan", "--cluster", str(cluster), "--deployment", DEPLOYMENT)
    assert code == EXIT_PLACED
    assert "mac:metal:0" in out and "MTL0" in out
    data = plan_json(capsys, "plan", "--cluster", str(cluster), "--deployment", DEPLOYMENT)
    (worker,) = data["best"]["claims"]["workers"]
    (use,) = data["worker_use"]
    assert use["unified_memory"] and use["needed_bytes"] == worker["ram_bytes"] + worker["vram_bytes"]
    assert f"= {_gib(use['needed_bytes'])} of 56.00 GiB" in out


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GiB:.2f} GiB"


def test_estimate_states_every_assumed_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(gemma_270m_path())
    code, out = run(capsys, "estimate", model)
    assert code == EXIT_PLACED
    assert "ctx 8192 (-c, default): GPUStack's default; llama.cpp's own default (-c 0) is the training context" in out
    assert "32768 for this model" in out
    for line in ("slots 4 (-np, default)", "K f16 (-ctk, default)", "V f16 (-ctv, default)", "auto, estimated as on"):
        assert line in out
    assert "batch 2048 (-b, default), ubatch 512 (-ub, default)" in out and "mmap on (-lm, default)" in out
    data = json.loads(run(capsys, "estimate", model, "--json")[1])
    assert data["schema_version"] == 1
    assumed = data["parameters"]
    assert (assumed["ctx_size"], assumed["training_ctx_size"], assumed["parallel"]) == (8192, 32768, 4)
    assert set(assumed["defaults"]) >= {"ctx_size", "parallel", "cache_type_k", "flash_attn", "ubatch_size", "mmap"}
    flags = ("-c", "16384", "-np", "1", "-ctk", "q8_0", "-fa", "off", "-ub", "256")
    given = json.loads(run(capsys, "estimate", model, *flags, "--json")[1])["parameters"]
    assert (given["ctx_size"], given["parallel"], given["unified_kv"]) == (16384, 1, False)
    assert (given["cache_type_k"], given["flash_attn"], given["flash_attn_estimated_on"]) == ("q8_0", "off", False)
    assert given["ubatch_size"] == 256
    assert not {"ctx_size", "parallel", "cache_type_k", "flash_attn", "ubatch_size"} & set(given["defaults"])
    training = json.loads(run(capsys, "estimate", model, "-c", "0", "--json")[1])["parameters"]
    assert (training["ctx_size"], training["training_ctx"]) == (32768, True) and "ctx_size" not in training["defaults"]
    assert "ctx 32768 (-c): the training context (-c 0)" in run(capsys, "estimate", model, "-c", "0")[1]
    text = run(capsys, "estimate", model, "-c", "16384", "-np", "1")[1]
    assert "ctx 16384 (-c); training context 32768" in text and "slots 1 (-np), one KV cache per sequence" in text


def test_estimate_totals_are_the_planner_claims(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(gemma_270m_path())
    data = json.loads(run(capsys, "estimate", model, "--json")[1])
    (gpu,) = data["full_offload"]["devices"]
    terms = ("weight_bytes", "output_bytes", "kv_bytes", "compute_bytes", "fixed_bytes", "extra_bytes")
    assert gpu["total_bytes"] == sum(gpu[term] for term in terms)
    out = run(capsys, "estimate", model)[1]
    assert f"VRAM {gpu['total_bytes'] / GiB:.2f} GiB = weights" in out and "+ output 170.0 MiB" in out


def test_estimate_help_lists_the_llama_cpp_flags_it_reads(capsys: pytest.CaptureFixture[str]) -> None:
    from layerfit.llamacpp.flag_table import Effect
    from layerfit.llamacpp.flags import all_flags

    assert main(["estimate", "--help"]) == EXIT_PLACED
    out = capsys.readouterr().out
    placement = {"n_gpu_layers", "tensor_split"}  # decided by the planner, not by the estimate
    modelled = [flag for flag in all_flags() if flag.effect is Effect.MODELLED and flag.note not in placement]
    assert len(modelled) >= 10
    for flag in modelled:
        for name in flag.names:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", out), name
    assert "--tensor-split" not in out


def test_an_infeasible_layout_gets_no_launch_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    layout = tmp_path / "too-much-on-gpu-b.yaml"
    layout.write_text(
        "main_worker: gpu-a\nn_blocks: 80\noutput_offloaded: true\n"
        "devices: [{worker: gpu-b, gpu_index: 0, blocks: 40}, {worker: gpu-a, gpu_index: 0, blocks: 40}]\n",
        encoding="utf-8",
    )
    code, out = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", str(layout))
    assert code == EXIT_NO_FIT
    assert "gpu-b:cuda:0 needs" in out and "no launch commands: this layout does not fit" in out
    assert "llama-server" not in out and "rpc-server" not in out
    data = plan_json(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", str(layout))
    assert data["status"] == "infeasible" and data["commands"] == []
    code, out = run(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--layout", LAYOUT)
    assert code == EXIT_PLACED and "rpc-server --host" in out and "llama-server -m" in out


def test_explain_prints_each_reason_once(capsys: pytest.CaptureFixture[str]) -> None:
    too_big = str(EXAMPLES / "too-big.yaml")
    _, out = run(capsys, "explain", "--cluster", CLUSTER, "--deployment", too_big)
    reasons = [line for line in out.splitlines() if line.startswith("  ! ")]
    assert "  ! info: CPU offloading is not allowed" in reasons
    assert len(reasons) == len(set(reasons))
    data = plan_json(capsys, "explain", "--cluster", CLUSTER, "--deployment", too_big)
    messages = [reason["message"] for reason in data["reasons"]]
    assert len(messages) > len(set(messages))  # the JSON keeps every strategy's reasons


@pytest.mark.parametrize(
    ("flags", "fit_off"),
    [
        ((), True),
        (("--llama-cpp-build", "current"), True),
        (("--llama-cpp-build", "legacy"), False),
        (("--offload-order", "output-last"), False),  # output-last builds predate --fit
        (("--offload-order", "output-first"), True),
        (("--llama-cpp-build", "b6400"), False),
        (("--llama-cpp-build", "11434"), True),
        (("--llama-cpp-build", "b7000", "--offload-order", "output-first"), True),  # output-first came after --fit
    ],
)
def test_the_build_decides_whether_fit_off_is_emitted(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], fit_off: bool
) -> None:
    data = plan_json(capsys, "plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, *flags)
    (server,) = [command for command in data["commands"] if command["program"] == "llama-server"]
    argv = server["argv"]
    assert ("--fit" in argv) is fit_off
    if fit_off:
        assert argv[argv.index("--fit") + 1] == "off"


def test_a_build_and_an_offload_order_that_disagree_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ("--llama-cpp-build", "current", "--offload-order", "output-last")
    assert main(["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, *flags]) == 2
    assert "llama_cpp_build current (b11434) offloads output-first, not output-last" in capsys.readouterr().err


def test_a_whole_object_error_reads_as_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--cluster", CLUSTER, "--deployment", DEPLOYMENT, "--llama-cpp-build", "b7000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("layerfit: error: command line: layerfit does not know whether llama.cpp b7000")
    assert "Value error" not in err and "(top level)" not in err


def test_planner_config_derives_the_build_and_the_order_from_each_other() -> None:
    from layerfit.domain import PlannerConfig
    from layerfit.domain.config import LlamaCppBuild, OffloadOrder

    assert PlannerConfig().llama_cpp_build is LlamaCppBuild.CURRENT
    assert PlannerConfig(offload_order=OffloadOrder.OUTPUT_LAST).llama_cpp_build is LlamaCppBuild.LEGACY
    assert PlannerConfig(llama_cpp_build=LlamaCppBuild.LEGACY).offload_order is OffloadOrder.OUTPUT_LAST
    with pytest.raises(ValueError, match="offloads output-last, not output-first"):
        PlannerConfig(llama_cpp_build=LlamaCppBuild.LEGACY, offload_order=OffloadOrder.OUTPUT_FIRST)
