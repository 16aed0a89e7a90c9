"""replan's output: starts, moves and stops apart, stops on lost GPUs, command lines per replica;
progress shown live on a terminal and never when piped."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from layerfit.budget.progress import LineReporter, LiveReporter, Progress, report, reporting
from layerfit.cli import EXIT_BAD_INPUT, EXIT_PLACED, main

EXAMPLES = Path(__file__).parent.parent / "layerfit" / "examples"
FLEET = str(EXAMPLES / "fleet.yaml")


def replan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    assert main(["replan", *argv, "--time-limit", "5"]) == EXIT_PLACED
    out, err = capsys.readouterr()
    return out, err


def section(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(f"  {title}:")
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        body.append(line.strip())
    return body


def test_starts_moves_and_stops_are_listed_apart(capsys: pytest.CaptureFixture[str]) -> None:
    out, err = replan(capsys, FLEET)
    assert err == ""  # stderr is not a terminal here: no progress
    summary = "6 placed (1 kept, 1 moved, 4 started), 0 stopped, 1 to stop by hand (GPU or worker gone), 0 not placed"
    assert summary in out
    assert [line.split(":")[0] for line in section(out, "kept")] == ["mistral-7b#0"]
    assert [line.split(":")[0] for line in section(out, "moved")] == ["qwen-30b#0"]
    assert len(section(out, "started")) == 4
    assert "(moved)" not in out
    # the replica on the lost GPU: its stop is listed, by hand, under the one GPU name
    assert section(out, "stop by hand (their GPU or worker is gone from the cluster)") == [
        "qwen-30b#0 on gpu-c [gpu-c:unknown:1]"
    ]
    steps = section(out, "steps")
    assert all(step.endswith(("(first start)", "(move)", "(stops for good)")) for step in steps)
    assert [step for step in steps if step.endswith("(move)")] == [next(step for step in steps if "qwen-30b#0" in step)]


def test_command_lines_per_replica_with_ports_that_do_not_clash(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(replan(capsys, FLEET, "--json")[0])
    assert data["schema_version"] == 1
    assert [(lost["deployment"], lost["gpus"]) for lost in data["lost"]] == [("qwen-30b", ["gpu-c:unknown:1"])]
    placed = {(p["deployment"], p["replica"]): p for p in data["placements"]}
    commands = {(c["deployment"], c["replica"]): c["commands"] for c in data["commands"]}
    assert commands.keys() == placed.keys()
    ports: dict[str, list[str]] = {}
    for key, lines in commands.items():
        server = lines[-1]
        assert server["program"] == "llama-server" and server["worker"] == placed[key]["layout"]["main_worker"]
        argv = server["argv"]
        ports.setdefault(server["worker"], []).append(argv[argv.index("--port") + 1])
    for worker_ports in ports.values():
        assert len(set(worker_ports)) == len(worker_ports)
    for move in data["moves"]:
        assert all(gpu.count(":") == 2 for gpu in move["gpus"])  # worker:type:index


def test_a_fresh_fleet_only_starts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text(encoding="utf-8"))
    fleet["current"] = []
    path = tmp_path / "fresh.yaml"
    path.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    out, _ = replan(capsys, str(path))
    assert "0 kept, 0 moved" in out and "  moved:" not in out and "stop by hand" not in out
    assert all(step.endswith("(first start)") for step in section(out, "steps"))


def test_progress_names_the_stage_and_the_units() -> None:
    stream = io.StringIO()
    with reporting(LineReporter(stream)):
        report(Progress("fleet tier 2/4 (layers on GPUs)", "layers", 1.5, best=150, bound=161))
    assert stream.getvalue().strip() == (
        "[   1.50 s] fleet tier 2/4 (layers on GPUs), best 150 layers, bound 161 layers, gap 7.3%"
    )
    with reporting(None):
        report(Progress("dropped", "layers", 0.0))  # no reporter shown: nothing anywhere


def test_the_live_display_draws_stage_elapsed_best_bound_and_gap() -> None:
    from rich.console import Console

    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=160)
    with LiveReporter(console, title="replan") as live:
        live.update(Progress("fleet tier 1/4 (priority weight placed)", "priority-weighted replicas", 0.3, 6, 9))
    drawn = stream.getvalue()
    for piece in ("replan: fleet tier 1/4 (priority weight placed)", "best 6 priority-weighted replicas",
                  "bound 9 priority-weighted replicas", "gap 50.0%"):  # fmt: skip
        assert piece in drawn


@pytest.mark.parametrize(
    ("terminal", "json_flag", "quiet", "shown"),
    [(True, False, False, True), (False, False, False, False), (True, True, False, False), (True, False, True, False)],
)
def test_progress_is_shown_only_on_a_terminal_without_json_or_quiet(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, json_flag: bool, quiet: bool, shown: bool
) -> None:
    import layerfit.budget.progress
    from layerfit.cli.inputs import progress_display

    monkeypatch.setattr(layerfit.budget.progress, "stderr_is_terminal", lambda: terminal)
    with progress_display(argparse.Namespace(json=json_flag, quiet=quiet), "plan") as on:
        assert on is shown
        assert layerfit.budget.progress.active() is shown


def test_plan_fleet_itself_gives_what_replan_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """A library user gets the command lines, the lost placements and the device use the CLI shows."""
    from layerfit.domain.fleet import Fleet, FleetConfig
    from layerfit.fleet import plan_fleet
    from layerfit.io.documents import load_file

    fleet = load_file(Fleet, FLEET)
    plan = plan_fleet(fleet, FleetConfig(time_limit_s=5.0))
    printed = json.loads(replan(capsys, FLEET, "--json")[0])
    assert [(lost.deployment, lost.gpus) for lost in plan.lost] == [("qwen-30b", ("gpu-c:unknown:1",))]
    assert json.loads(plan.model_dump_json())["lost"] == printed["lost"]
    assert {(c.deployment, c.replica) for c in plan.commands} == {(p.deployment, p.replica) for p in plan.placements}
    assert all(c.commands[-1].program == "llama-server" for c in plan.commands)


def test_fleet_placements_carry_device_use_like_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(replan(capsys, FLEET, "--json")[0])
    for placed in data["placements"]:
        claims, use = placed["claims"], placed["device_use"]
        assert len(use) == len(claims["devices"]) > 0
        for entry, device in zip(use, claims["devices"], strict=True):
            worker, _, index = entry["gpu_id"].split(":")
            assert (worker, int(index)) == (device["worker"], device["gpu_index"])
            assert entry["needed_bytes"] == device["total_bytes"]
            assert entry["free_after_bytes"] == entry["allocatable_bytes"] - entry["needed_bytes"]
        assert [w["worker"] for w in placed["worker_use"]] == [w["worker"] for w in claims["workers"]]


def with_bad_deployments(tmp_path: Path) -> str:
    """The example fleet plus a deployment whose GGUF file is missing (with a running replica) and
    one whose selection names a worker the cluster lacks."""
    fleet = yaml.safe_load((EXAMPLES / "fleet.yaml").read_text(encoding="utf-8"))
    profile = fleet["deployments"][0]["profile"]
    fleet["deployments"] += [
        {"name": "no-file", "gguf_path": str(tmp_path / "missing.gguf")},
        {"name": "no-worker", "gpu_selection": ["gpu-z:cuda:0"], "profile": profile},
    ]
    fleet["current"].append({"deployment": "no-file", "replica": 0, "layout": fleet["current"][0]["layout"]})
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(fleet), encoding="utf-8")
    return str(path)


def test_deployments_refused_for_bad_input_exit_2_and_the_rest_is_planned(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = with_bad_deployments(tmp_path)
    plot = tmp_path / "plan.svg"
    assert main(["replan", path, "--time-limit", "5", "--plot", str(plot)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert "6 placed (1 kept, 1 moved, 4 started)" in out and "not placed: no-worker#0" in out
    assert out.splitlines()[-1].startswith("refused for bad input") and "no-file, no-worker" in out.splitlines()[-1]
    assert "missing.gguf" not in err and plot.stat().st_size > 0  # drawn without the replica of unknown memory
    assert "no-file#0 of unknown memory, not drawn" in plot.read_text(encoding="utf-8")
    assert main(["replan", path, "--time-limit", "5", "--json"]) == EXIT_BAD_INPUT
    data = json.loads(capsys.readouterr().out)
    assert data["refused"] == ["no-file", "no-worker"] and len(data["placements"]) == 6
    assert main(["schema", "fleet"]) == EXIT_PLACED
    jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out)).validate(data)
    assert json.loads(replan(capsys, FLEET, "--json")[0])["refused"] == []  # the good fleet still exits 0


def _fleet_with_params(tmp_path: Path, params: dict[str, list[str]], replicas: dict[str, int] | None = None) -> str:
    document = yaml.safe_load(Path(FLEET).read_text())
    for deployment in document["deployments"]:
        if deployment["name"] in params:
            deployment["backend_parameters"] = params[deployment["name"]]
        deployment["replicas"] = (replicas or {}).get(deployment["name"], deployment.get("replicas", 1))
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_a_port_a_deployment_sets_is_not_given_to_another_replica(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The embedder's own --port 8080 was also given to mistral-7b#0 on the same worker: one of the
    two llama-servers could not bind it."""
    out, _ = replan(capsys, _fleet_with_params(tmp_path, {"embedder": ["--ctx-size 2048", "--port 8080"]}))
    ports: dict[str, list[str]] = {}
    for line in section(out, "commands"):
        if "llama-server" in line:
            words = line.split()
            ports.setdefault(words[0], []).append(words[words.index("--port") + 1])
    assert all(len(set(taken)) == len(taken) for taken in ports.values()), ports
    assert "8080" in ports["[gpu-b]"], ports


@pytest.mark.parametrize(
    ("params", "replicas", "problem"),
    [
        ({"mistral-7b": ["--ctx-size 8192", "--port 9000"]}, {"mistral-7b": 2}, "--port 9000 with 2 replicas"),
        (
            {"mistral-7b": ["--ctx-size 8192", "--port=9000"], "embedder": ["--ctx-size 2048", "--port", "9000"]},
            {"mistral-7b": 1},
            "--port 9000 is 'mistral-7b''s too",
        ),
    ],
)
def test_a_port_that_replicas_would_share_is_refused(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    params: dict[str, list[str]],
    replicas: dict[str, int],
    problem: str,
) -> None:
    code = main(["replan", _fleet_with_params(tmp_path, params, replicas), "--quiet"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and problem in err, err
