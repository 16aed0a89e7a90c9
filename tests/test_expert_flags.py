"""-ot / --cpu-moe / --n-cpu-moe: parsing, ECMAScript-safe patterns, and their effect on real tensor names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny

from layerfit.domain import LlamaParams
from layerfit.domain.expert_flags import (
    EXPERTS_PATTERN,
    ExpertFlags,
    compile_pattern,
    expert_block_pattern,
    expert_flags,
    parse_expert_flags,
)
from layerfit.errors import InputError
from layerfit.estimators import estimate_profile
from layerfit.estimators.shape import read_gguf

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
    assert expert_flags(params) == ExpertFlags(n_cpu_moe=3)


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
