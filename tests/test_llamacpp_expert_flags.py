"""-ot / --cpu-moe / --n-cpu-moe: parsing, ECMAScript-safe patterns, and their effect on real tensor names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

from layerfit.domain import LlamaParams
from layerfit.errors import InputError
from layerfit.estimators import estimate_profile
from layerfit.estimators.shape import read_gguf
from layerfit.llamacpp.expert_flags import (
    DOCUMENTED_OVERRIDES,
    EXPERTS_PATTERN,
    MAX_OVERRIDES,
    ExpertFlags,
    compile_pattern,
    expert_block_pattern,
    parse_expert_flags,
)
from layerfit.llamacpp.pattern_cost import MAX_SEARCH_PATHS, search_paths

MOE = {"architecture": "qwen3moe", "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 128}


def test_flags_are_read_from_the_pass_through_tokens() -> None:
    flags, rest = parse_expert_flags(
        ["-t", "4", "-ot", r"blk\.1\.ffn_up_exps=CPU,blk\.2\..*=CPU", "--cpu-moe", "--n-cpu-moe=2", "-ot=x=CPU"]
    )
    assert flags == ExpertFlags(override_tensor=(r"blk\.1\.ffn_up_exps", r"blk\.2\..*", "x"), cpu_moe=True, n_cpu_moe=2)
    assert rest == ("-t", "4")
    assert flags.to_args() == ("-ot", r"blk\.1\.ffn_up_exps=CPU,blk\.2\..*=CPU,x=CPU", "--cpu-moe", "--n-cpu-moe", "2")
    assert parse_expert_flags(flags.to_args())[0] == flags


def test_llama_cpp_patterns_match_what_llama_cpp_matches() -> None:
    pattern = compile_pattern("--n-cpu-moe", expert_block_pattern(1))
    assert pattern.search("blk.1.ffn_gate_up_exps.weight") and pattern.search("blk.1.ffn_down_chexps.weight")
    assert not pattern.search("blk.11.ffn_up_exps.weight") and not pattern.search("blk.1.ffn_up_shexp.weight")
    assert compile_pattern("--cpu-moe", EXPERTS_PATTERN).search("blk.40.ffn_up_exps.bias")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("blk=CUDA1", "buffer type 'CUDA1' is not modelled"),
        ("blk", "is not PATTERN=BUFFER"),
        ("blk(=CPU", "does not compile"),
        (r"(?<!x)blk\.1=CPU", "only (?:...)"),
        (r"(?P<b>blk)=CPU", "only (?:...)"),
        (r"(?i)BLK=CPU", "only (?:...)"),
        (r"blk\.(\d)\.\1=CPU", r"the escape \1"),
        (r"[[:digit:]]=CPU", "POSIX"),
        (r"[]a]=CPU", "empty in ECMAScript"),
        (r"a{x}=CPU", "quantifier"),
        (r"a*+=CPU", "possessive"),
        (r"\x41=CPU", r"the escape \x"),
        ("[abc=CPU", "unterminated"),
    ],
)
def test_bad_overrides_name_the_flag_and_the_problem(value: str, problem: str) -> None:
    with pytest.raises(InputError, match=re.escape(problem)) as caught:
        parse_expert_flags(["-ot", value])
    assert caught.value.field == "-ot"


@pytest.mark.parametrize(
    "pattern", [r"blk\.(1|2)\.ffn_.*_exps", r"blk\.[0-9]+\.ffn_(?:up|down)_exps", r"^blk\.\d{1,2}\.", r"a+?b??c*?"]
)
def test_portable_patterns_are_accepted(pattern: str) -> None:
    assert compile_pattern("-ot", pattern).pattern == pattern


@pytest.mark.parametrize(
    ("tokens", "problem"),
    [(["--n-cpu-moe", "-1"], "block count"), (["--n-cpu-moe"], "missing value"), (["-cmoe=1"], "takes no value")],
)
def test_bad_counts_and_forms(tokens: list[str], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        parse_expert_flags(tokens)


def test_params_keep_the_flags_for_the_estimator() -> None:
    params = LlamaParams.from_args(["--n-cpu-moe 3", "-c 4096"])
    assert params.expert_flags() == ExpertFlags(n_cpu_moe=3)


def test_estimate_charges_the_expert_tensors_of_the_named_blocks(tmp_path: Path) -> None:
    path = write_tiny(tmp_path, "moe", data="header", **MOE)
    shape = read_gguf(str(path))
    experts = shape.block_expert_bytes
    # qwen3moe blocks: gate/up/down experts of 256 x 128 x 8 F16 = 3 x 524,288 bytes
    assert experts == (3 * 256 * 128 * 8 * 2,) * 4
    plain = estimate_profile(path)
    assert plain.block_expert_bytes == experts and plain.fixed_host_experts is None
    by_count = estimate_profile(path, LlamaParams.from_args(["--n-cpu-moe", "2"]))
    assert by_count.fixed_host_experts == (0, 1) and by_count.block_expert_bytes == experts
    everything = estimate_profile(path, LlamaParams.from_args(["--cpu-moe"]))
    assert everything.fixed_host_experts == (0, 1, 2, 3)
    # only the down projections of block 3: its host part is one third of its experts
    down = estimate_profile(path, LlamaParams.from_args(["-ot", "'blk\\.3\\.ffn_down_exps=CPU'"]))
    assert down.fixed_host_experts == (3,)
    assert down.block_expert_bytes == (*experts[:3], experts[3] // 3)


def test_estimate_refuses_what_does_not_fit_the_model(tmp_path: Path) -> None:
    moe = write_tiny(tmp_path, "moe", data="header", **MOE)
    dense = write_tiny(tmp_path, "dense", data="header")
    with pytest.raises(InputError, match="exceeds the model's 4 blocks") as caught:
        estimate_profile(moe, LlamaParams.from_args(["--n-cpu-moe", "5"]))
    assert caught.value.field == "--n-cpu-moe"
    with pytest.raises(InputError, match="dense model"):
        estimate_profile(dense, LlamaParams.from_args(["--cpu-moe"]))
    with pytest.raises(InputError, match=r"output tensor output\.weight"):
        estimate_profile(moe, LlamaParams.from_args(["-ot", "output=CPU"]))
    quiet = estimate_profile(moe, LlamaParams.from_args(["-ot", "nothing_here=CPU"]))
    assert quiet.fixed_host_experts == () and any("matches no tensor" in w for w in quiet.warnings)
    # dense tensors may be kept on the host too: block 0's attention output
    attention = estimate_profile(dense, LlamaParams.from_args(["-ot", "'blk\\.0\\.attn_output=CPU'"]))
    assert attention.fixed_host_experts == (0,) and attention.block_expert_bytes == (256 * 256 * 2, 0, 0, 0)


@pytest.mark.parametrize("pattern", DOCUMENTED_OVERRIDES)
def test_real_patterns_are_within_the_search_bound(pattern: str) -> None:
    assert compile_pattern("-ot", pattern).pattern == pattern
    assert search_paths(pattern) <= MAX_SEARCH_PATHS


@pytest.mark.parametrize(
    "pattern",
    [
        "(a+)+$",  # nested quantifiers
        "(.*)*x",
        r"blk\.(.*)*x",
        "(a|a)*$",  # overlapping alternatives under a repeat
        r"(\w|\d)+$",  # Python's parser makes this a class; ECMAScript backtracks over both branches
        "(a|aa){40}",  # a counted repeat of an ambiguous body
        "(a?a?){64}",
        ".*.*.*.*x",  # stacked: polynomial with a high degree
        r"(?:.*\.)*x",
    ],
)
def test_patterns_that_backtrack_without_bound_are_refused(pattern: str) -> None:
    with pytest.raises(InputError, match="ways to match a 63-byte tensor name") as caught:
        LlamaParams.from_args(["-ot", f"{pattern}=CPU"])
    assert caught.value.field == "-ot"


def test_the_search_bound_counts_paths_per_start() -> None:
    assert search_paths("exps") == 64  # one path from each of the 64 start positions
    assert search_paths(r"\.ffn_(up|down|gate)_exps") == 3 * 64
    assert search_paths("a*") == 64 * 64  # 0 to 63 iterations
    assert search_paths("(ab|c){2}") == 4 * 64
    assert search_paths("a{100}") == 64  # longer than any name: fails at once


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("(" * 51 + "a" + ")" * 51 + "=CPU", "nested more than 50 deep"),
        ("(" * 600 + "a" + ")" * 600 + "=CPU", "longer than 1024 bytes"),  # was a RecursionError in re
        ("é=CPU", "non-ASCII"),
        ("a\0b=CPU", "NUL"),
    ],
)
def test_patterns_too_big_or_unreadable_for_llama_cpp_are_refused(value: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        LlamaParams.from_args(["-ot", value])


def test_llama_cpp_takes_at_most_4095_overrides() -> None:
    items = ",".join(f"x{i}=CPU" for i in range(MAX_OVERRIDES))
    assert len(parse_expert_flags(["-ot", items])[0].override_tensor) == MAX_OVERRIDES
    with pytest.raises(InputError, match="4096 tensor overrides"):
        LlamaParams.from_args(["-ot", items, "--cpu-moe"])


def test_overrides_are_checked_with_an_explicit_profile_too() -> None:
    """A deployment with a profile reads no GGUF, but its -ot still goes into the command."""
    with pytest.raises(ValueError, match="ways to match"):  # pydantic's ValidationError
        LlamaParams(extra=("-ot", "(a+)+$=CPU"))


def test_the_overrides_together_are_bounded() -> None:
    """Every tensor name is tested against each pattern: five at the single-pattern bound are refused."""
    at_bound = r".*ffn_.*exps.*"
    assert search_paths(at_bound) == MAX_SEARCH_PATHS
    four = ",".join(f"{at_bound}{i}=CPU" for i in range(4))
    assert len(parse_expert_flags(["-ot", four])[0].override_tensor) == 4
    with pytest.raises(InputError, match="together the patterns may try"):
        LlamaParams.from_args(["-ot", four, "-ot", f"{at_bound}=CPU"])
    assert len(parse_expert_flags(["--n-cpu-moe", "4095"])[0].patterns()) == 4095
