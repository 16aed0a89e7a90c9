"""Pass-through option values: refused exactly where llama.cpp refuses them, else kept as written.

``fixtures/flag_values.csv`` is what ``llama-completion`` b11434 answered for each option and value
(``benchmarks/flag_values.py``); server-only options (``--port``, ``--threads-http``) are parsed by
the same code in llama.cpp and are checked by hand below.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from layerfit.domain import LlamaParams
from layerfit.errors import InputError
from layerfit.llamacpp.flag_values import CHECKS
from layerfit.llamacpp.flags import all_flags

RECORDED = Path(__file__).parent / "fixtures" / "flag_values.csv"


def _rows() -> list[dict[str, str]]:
    with open(RECORDED, newline="") as handle:
        return list(csv.DictReader(handle))


def _layerfit(option: str, value: str) -> str:
    """The value as one argument, as a deployment's ``extra`` holds it (``from_args`` splits items
    at white space, so ``" 7"`` or ``""`` cannot reach an option through it)."""
    try:
        params = LlamaParams(extra=(option, value))
    except ValueError:  # pydantic's ValidationError, wrapping the InputError
        return "refused"
    assert params.extra == (option, value)  # kept verbatim
    return "accepted"


def test_the_record_covers_the_checked_options() -> None:
    options = {row["option"] for row in _rows()}
    assert len(options) >= 50 and options <= set(CHECKS)
    assert {row["llama_cpp"] for row in _rows()} == {"accepted", "refused"}


def test_layerfit_refuses_exactly_what_llama_cpp_refused() -> None:
    disagree = [
        (row["option"], row["value"], row["llama_cpp"])
        for row in _rows()
        if _layerfit(row["option"], row["value"]) != row["llama_cpp"]
    ]
    assert disagree == []


def test_every_checked_name_is_an_option_passed_through() -> None:
    by_name = {name: flag for flag in all_flags() for name in flag.names}
    assert all(name in by_name and by_name[name].field is None and by_name[name].arity for name in CHECKS)


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--port", "abc"], "expected an integer"),
        (["--port", "99999999999"], "outside llama.cpp's 32-bit integers"),
        (["--threads-http", "x8"], "expected an integer"),
        (["--sleep-idle-seconds", "0"], "refuses 0"),
        (["--host", " , "], "at least one address"),
        (["--alias", "a,b"], None),  # any string
        (["--spec-ngram-mod-n-match", "0"], "1 to 1024"),
        (["--draft", "4"], "removed from llama.cpp"),
        (["--reasoning", "maybe"], "one of"),
    ],
)
def test_server_only_and_removed_options(args: list[str], problem: str | None) -> None:
    if problem is None:
        assert LlamaParams.from_args(args).extra == tuple(args)
        return
    with pytest.raises(InputError, match=problem) as caught:
        LlamaParams.from_args(args)
    assert caught.value.field == args[0]


def test_accepted_values_are_kept_as_written() -> None:
    """llama.cpp reads --threads -5 as every core and 4x as 4: layerfit passes both unchanged."""
    params = LlamaParams.from_args(["--threads", "-5", "--seed", "-1", "--temp", "0x1p-3", "--port=8080"])
    assert params.extra == ("--threads", "-5", "--seed", "-1", "--temp", "0x1p-3", "--port", "8080")
    assert params.to_args()[-8:] == params.extra


def test_values_in_a_deployment_extra_are_checked_too() -> None:
    with pytest.raises(ValueError, match="--port"):  # pydantic's ValidationError wraps the InputError
        LlamaParams(extra=("--port", "abc"))
