"""layerfit's own GGUF constants agree with the gguf package, and the estimate path imports neither
gguf nor numpy (nor OR-Tools), nor does a bad input file before its error is reported; ``--help`` and
argument errors import not even pydantic or yaml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gguf
import pytest

from layerfit.estimators import gguf_constants as ours

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("gguf", "numpy", "ortools", "rich")


def _key_paths(cls: type, prefix: str = "") -> dict[str, str]:
    paths: dict[str, str] = {}
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, type):
            paths.update(_key_paths(value, f"{prefix}{name}."))
        elif isinstance(value, str):
            paths[prefix + name] = value
    return paths


def test_every_key_is_gguf_s_key() -> None:
    keys = _key_paths(ours.Keys)
    assert len(keys) > 40
    for path, value in keys.items():
        theirs: object = gguf.Keys
        for part in path.split("."):
            theirs = getattr(theirs, part)
        assert value == theirs, path


def test_every_tensor_type_and_block_size_is_gguf_s() -> None:
    assert {t.name: t.value for t in ours.GGMLQuantizationType} == {t.name: t.value for t in gguf.GGMLQuantizationType}
    assert {t.name: size for t, size in ours.GGML_QUANT_SIZES.items()} == {
        t.name: size for t, size in gguf.GGML_QUANT_SIZES.items()
    }


def test_value_types_magic_and_alignment_are_gguf_s() -> None:
    assert {t.name: t.value for t in ours.GGUFValueType} == {t.name: t.value for t in gguf.GGUFValueType}
    assert ours.GGUF_MAGIC == gguf.GGUF_MAGIC
    assert ours.GGUF_DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT


def _modules_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO)
    return set(done.stdout.split())


def _heavy(modules: set[str]) -> set[str]:
    return {name for name in modules if name.split(".")[0] in HEAVY}


def test_estimate_imports_no_gguf_numpy_or_solver(tmp_path: Path) -> None:
    from fixtures_gguf import write_tiny

    model = write_tiny(tmp_path)
    code = (
        "import contextlib, io\nfrom layerfit.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['estimate', {str(model)!r}]) == 0"
    )
    loaded = _modules_after(code)
    assert _heavy(loaded) == set()
    assert "importlib.metadata" not in loaded  # pydantic's plugin loader stands aside (cli._without_plugin_scan)
    unused = {"layerfit.domain.cluster", "layerfit.domain.deployment", "layerfit.domain.config", "yaml"}
    assert loaded & unused == set()  # models an estimate does not need are not even built
    checks = {"layerfit.llamacpp.flag_values", "layerfit.llamacpp.pattern_cost"}
    assert loaded & checks == set()  # pass-through values and -ot patterns are checked only when given
    other_commands = {f"layerfit.cli.{name}" for name in ("plan", "replan", "examples", "schema")}
    assert loaded & other_commands == set()  # only the subcommand that runs builds its options
    assert "shutil" not in loaded  # argparse's width is found without it (cli.common.terminal_columns)


@pytest.mark.parametrize("which", ["cluster", "deployment"])
def test_a_bad_input_file_answers_before_heavy_imports(tmp_path: Path, which: str) -> None:
    examples = REPO / "layerfit" / "examples"
    files = {"cluster": examples / "cluster.yaml", "deployment": examples / "deployment.yaml"}
    files[which] = tmp_path / f"{which}.yaml"
    files[which].write_text("name: [unclosed\n", encoding="utf-8")
    code = (
        "import contextlib, io\nfrom layerfit.cli import main\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        f"    assert main(['plan', '--cluster', {str(files['cluster'])!r}, '--deployment', "
        f"{str(files['deployment'])!r}]) == 2\n"
        f"assert {which!r} in err.getvalue(), err.getvalue()"
    )
    loaded = _modules_after(code)
    assert _heavy(loaded) == set() and "importlib.metadata" not in loaded


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["estimate", "--help"], ["plan", "--cluster", "c.yaml", "--bogus"], ["replan", "--no-such"]],
)
def test_help_and_argument_errors_import_no_pydantic(argv: list[str]) -> None:
    code = (
        "import contextlib, io\nfrom layerfit.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    assert main({argv!r}) in (0, 2)"
    )
    loaded = {name.split(".")[0] for name in _modules_after(code)}
    assert loaded & {*HEAVY, "pydantic", "pydantic_core", "yaml", "shutil"} == set()
