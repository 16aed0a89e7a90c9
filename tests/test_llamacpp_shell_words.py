"""Backend parameters: split as shlex splits them (in linear time), within what a command line carries."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layerfit.domain import LlamaParams
from layerfit.errors import InputError
from layerfit.llamacpp.shell_words import MAX_ARGUMENT_BYTES, MAX_PARAMETER_BYTES, MAX_WORDS, split_words


def shlex_words(text: str) -> list[str]:
    """What LlamaParams used to split with."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.escape = ""
    return list(lexer)


@given(st.text(alphabet=" \t\r\n\v#'\"ab=-\\\u00a0\u00e9", max_size=40))
def test_words_are_the_ones_shlex_reads(text: str) -> None:
    try:
        expected = shlex_words(text)
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)):
            split_words(text)
        return
    assert split_words(text) == expected


def test_real_items_split_as_before() -> None:
    item = r"""--ctx-size 8192 -ot 'blk\.1\..*=CPU' --alias "a b"'c' -c=4096 # a comment
    --threads 4"""
    assert split_words(item) == shlex_words(item) == [
        "--ctx-size", "8192", "-ot", r"blk\.1\..*=CPU", "--alias", "a bc", "-c=4096", "--threads", "4"
    ]


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--alias " + "a" * (MAX_ARGUMENT_BYTES + 1)], "an argument of 131,072 bytes"),
        (["#" * (MAX_PARAMETER_BYTES + 1)], "more than 2,097,152 bytes"),
        (["-t 4 " * (MAX_WORDS // 2 + 1)], "more than 16,384 words"),
    ],
)
def test_parameters_llama_server_could_not_be_started_with_are_refused(args: list[str], problem: str) -> None:
    with pytest.raises(InputError, match=problem) as caught:
        LlamaParams.from_args(args)
    assert caught.value.field == "backend_parameters"


def test_a_params_mapping_s_extra_is_bounded_too() -> None:
    with pytest.raises(ValueError, match="131,071 bytes per argument"):  # pydantic's ValidationError
        LlamaParams(extra=("--alias", "a" * (MAX_ARGUMENT_BYTES + 1)))


def test_the_one_ot_argument_layerfit_writes_must_fit_a_command_line() -> None:
    """Each -ot value fits, but layerfit joins them into one argument; refused before compiling them."""
    half = ",".join(f"{'a' * 1000}{i}=CPU" for i in range(66))
    assert len(half) < MAX_ARGUMENT_BYTES < 2 * len(half)
    assert len(LlamaParams.from_args(["-ot", half]).to_args()[-1]) == len(half)
    with pytest.raises(InputError, match=f"the -ot argument layerfit writes of {2 * len(half) + 1:,} bytes"):
        LlamaParams.from_args(["-ot", half, "-ot", half])


def test_too_many_overrides_in_one_value_are_refused_before_reading_them() -> None:
    with pytest.raises(InputError, match="more than 4095 tensor overrides"):
        LlamaParams.from_args(["-ot", ",".join(["(=CPU"] * 5000)])  # the first item does not compile
