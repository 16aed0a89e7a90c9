"""The package ships its examples: ``layerfit examples DIR`` writes them, and they plan."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from layerfit.cli import EXIT_BAD_INPUT, EXIT_PLACED, main

ROOT = Path(__file__).parent.parent
PACKAGE_EXAMPLES = ROOT / "layerfit" / "examples"


def test_examples_are_written_from_the_package_and_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "ex"
    assert main(["examples", str(target)]) == EXIT_PLACED
    written = sorted(path.name for path in target.iterdir())
    assert written == [
        "cluster.yaml",
        "deployment.yaml",
        "fleet-speed.yaml",
        "fleet.yaml",
        "layout.yaml",
        "moe-cluster.yaml",
        "speed-cluster.yaml",
        "speed-deployment.yaml",
        "too-big.yaml",
    ]
    for name in written:
        assert (target / name).read_bytes() == (PACKAGE_EXAMPLES / name).read_bytes()
    capsys.readouterr()
    code = main(["plan", "--cluster", str(target / "cluster.yaml"), "--deployment", str(target / "deployment.yaml")])
    assert code == EXIT_PLACED and "llama-server" in capsys.readouterr().out


def test_examples_do_not_overwrite_without_force(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("mine\n", encoding="utf-8")
    assert main(["examples", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "already has cluster.yaml; pass --force" in capsys.readouterr().err
    assert (tmp_path / "cluster.yaml").read_text(encoding="utf-8") == "mine\n"
    assert main(["examples", str(tmp_path), "--force"]) == EXIT_PLACED
    assert (tmp_path / "cluster.yaml").read_bytes() == (PACKAGE_EXAMPLES / "cluster.yaml").read_bytes()


def test_examples_into_a_folder_that_cannot_be_made_exit_two(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("x\n", encoding="utf-8")
    target = tmp_path / "file" / "ex"  # below a regular file: mkdir fails (it raised a traceback)
    assert main(["examples", str(target)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{target}: cannot write there: Not a directory" in err and "Traceback" not in err


def test_a_picture_that_cannot_be_written_exits_two(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "plan.svg").mkdir()  # the picture's name is taken by a folder
    cluster, deployment = str(ROOT / "examples" / "cluster.yaml"), str(ROOT / "examples" / "deployment.yaml")
    code = main(["plan", "--cluster", cluster, "--deployment", deployment, "--plot", str(tmp_path / "plan.svg")])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and f"--plot: cannot write {tmp_path / 'plan.svg'}: Is a directory" in err, err


def test_package_data_covers_every_example_and_the_repository_folder_is_the_same() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["layerfit"]
    shipped = [path.relative_to(ROOT / "layerfit").as_posix() for path in PACKAGE_EXAMPLES.iterdir()]
    assert shipped and all(any(fnmatch.fnmatch(name, pattern) for pattern in patterns) for name in shipped)
    # the README's quick start uses examples/... from the repository: the same files
    assert (ROOT / "examples").resolve() == PACKAGE_EXAMPLES.resolve()
