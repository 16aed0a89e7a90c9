"""Tensor overrides over a whole model are bounded: --cpu-moe / --n-cpu-moe read off each name
once, -ot searched by its core within a work budget (timings: benchmarks/override_budget.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures_gguf import tiny_spec
from hypothesis import assume, given
from hypothesis import strategies as st

from layerfit.domain import LlamaParams
from layerfit.errors import InputError
from layerfit.estimators import estimate_profile
from layerfit.estimators.header_access import BLOCK_PREFIX
from layerfit.estimators.overrides import SEARCH_BUDGET, resolve, search_cost
from layerfit.estimators.shape import read_gguf
from layerfit.llamacpp.expert_flags import (
    DOCUMENTED_OVERRIDES,
    EXPERTS_PATTERN,
    ExpertFlags,
    expert_block_pattern,
    match_expert_name,
)
from layerfit.llamacpp.pattern_cost import anchors, names_paths, search_core, search_paths
from layerfit.testing.synthetic import write_gguf
from layerfit.testing.synthetic_catalogue import REAL_MODELS
from layerfit.testing.synthetic_spec import F32, TensorSpec, tensor_table

MOE = {"architecture": "qwen3moe", "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 8}
PIECES = ["blk.", "blk", "lk.", ".", "0", "1", "3", "9", "10", "01", "007", "512", ".ffn_", "ffn_", "up", "down"]
PIECES += ["gate", "gate_up", "_", "ch", "exps", "exp", "s", ".weight", "x", "\u0663", "\n"]
REAL_SUFFIXES = sorted({BLOCK_PREFIX.sub("", t.name) for spec in REAL_MODELS.values() for t in tensor_table(spec)})


def regex_verdict(name: str) -> tuple[bool, int | None]:
    """What llama.cpp's own regexes say: --cpu-moe's match, and the lowest --n-cpu-moe block's."""
    runs = re.findall("[0-9]+", name)
    candidates = {int(run[a:b]) for run in runs for a in range(len(run)) for b in range(a + 1, len(run) + 1)}
    blocks = [i for i in sorted(candidates) if re.search(expert_block_pattern(i), name)]
    return bool(re.search(EXPERTS_PATTERN, name)), (blocks[0] if blocks else None)


@given(st.lists(st.sampled_from(PIECES), max_size=16).map("".join) | st.text(max_size=30))
def test_expert_names_are_read_as_the_regexes_read_them(name: str) -> None:
    assert tuple(match_expert_name(name)) == regex_verdict(name)


@given(st.integers(0, 600), st.sampled_from(REAL_SUFFIXES), st.sampled_from(["", "x", "blk.7", "a.blk.2"]))
def test_real_looking_expert_names_too(block: int, suffix: str, prefix: str) -> None:
    name = f"{prefix}blk.{block}.{suffix}"
    assert tuple(match_expert_name(name)) == regex_verdict(name)


ATOMS = ["a", "b", "1", ".", r"\.", "[ab]", r"\d", "[^b]", "^", "$", r"\b", "(?=a)", "(?!b)"]
QUANTIFIERS = ["", "", "*", "+", "?", "{0,2}", "{1,3}", "{2,}", "{0}", "*?", "+?", "??"]


def patterns() -> st.SearchStrategy[str]:
    atom = st.sampled_from(ATOMS)
    nested = st.recursive(
        atom,
        lambda inner: st.tuples(
            st.sampled_from(["(", "(?:"]), st.lists(st.lists(inner, min_size=0, max_size=3), min_size=1, max_size=3)
        ).map(lambda group: group[0] + "|".join("".join(seq) for seq in group[1]) + ")"),
        max_leaves=6,
    )
    item = st.tuples(nested, st.sampled_from(QUANTIFIERS)).map("".join)
    sequence = st.lists(item, max_size=5).map("".join)
    return st.lists(sequence, min_size=1, max_size=3).map("|".join)


@given(patterns(), st.text(alphabet="ab1.x", max_size=10))
def test_the_search_core_finds_a_match_exactly_where_the_pattern_does(pattern: str, name: str) -> None:
    try:
        compiled = re.compile(pattern, re.ASCII)
    except re.error:
        assume(False)
        raise
    core = search_core(pattern)
    assert bool(re.compile(core, re.ASCII).search(name)) == bool(compiled.search(name)), core
    assert search_paths(core, len(name)) <= search_paths(pattern, len(name))


@given(patterns(), st.lists(st.text(alphabet="ab1.x", max_size=10), min_size=1, max_size=4))
def test_a_name_without_the_key_literal_has_no_match(pattern: str, names: list[str]) -> None:
    """Every required literal (so the key, whichever is chosen) is in every match: skipping the
    names without it changes no verdict; and the counted paths bound the start positions."""
    try:
        compiled = re.compile(search_core(pattern), re.ASCII)
    except re.error:
        assume(False)
        raise
    found = anchors(search_core(pattern))
    key = found.key(names)
    for name in names:
        match = compiled.search(name)
        assert match is None or all(literal in match[0] for literal in found.required), (found, name)
        assert match is None or match[0].startswith(found.leading)
    searched = [name for name in names if key in name]
    assert names_paths(search_core(pattern), names, key) >= sum(1 for name in searched if compiled.search(name))


def test_common_expert_patterns_cost_little_on_a_large_real_model() -> None:
    """Counted name by name, the patterns MoE users write take a small share of the budget: two of
    them on Qwen3-235B-A22B's 1,131 tensors were refused when every name was counted at the
    longest name's worst case (43 % each)."""
    names = [tensor.name for tensor in tensor_table(REAL_MODELS["qwen3-235b-a22b"])]
    for pattern in (r"blk\.\d+\.ffn_.*_exps", r"blk\..*ffn_.*exps", r"\.ffn_.*_exps\."):
        assert search_cost(names, [search_core(pattern)] * 2) < SEARCH_BUDGET / 50, pattern


def test_search_cores_drop_what_always_matches() -> None:
    assert search_core(r".*ffn_.*exps.*") == "ffn_.*exps"
    assert search_core(".*.*.*x") == "x"
    assert search_core(r"blk\.(1[0-9]|2[0-9])\.ffn_.*") == r"blk\.(1[0-9]|2[0-9])\.ffn_"
    assert search_core("a.*|(?:b)?c*") == ""  # the second alternative matches everywhere
    assert search_core("(?=x).*|^a+$") == "(?=x)|^a+$"


@pytest.fixture
def unchecked_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let ``crafted``'s names through: layerfit refuses tensors llama.cpp does not load."""
    monkeypatch.setattr("layerfit.estimators.tensor_check.check_tensor_names", lambda shape, tensors: None)


def crafted(directory: Path, blocks: int, tensors: int, name_length: int = 30) -> Path:
    """A qwen3moe header padded with extra block tensors (names llama.cpp would not load, read with
    ``unchecked_names``) to ``tensors`` in all; some of them carry a second, lower block's expert name."""
    spec = tiny_spec(name="crafted", block_count=blocks, embedding_length=64, feed_forward_length=64, **MOE)
    table = tensor_table(spec)
    for i in range(tensors - len(table)):
        block = i % blocks
        tail = f".blk.{block // 2}.ffn_up_exps.{i}" if i % 7 == 0 else f".x{i}"
        name = f"blk.{block}{tail}".ljust(name_length, "a")
        assert len(name) == name_length
        table.append(TensorSpec(name, (32,), F32))
    path = directory / "crafted.gguf"
    write_gguf(path, spec, data="header", tensors=table)
    return path


def by_regexes(path: Path, flags: ExpertFlags) -> tuple[int, ...]:
    """The host bytes per block that the override patterns give, searched as regexes (the old way)."""
    shape = read_gguf(str(path))
    regexes = [re.compile(pattern, re.ASCII) for _, pattern in flags.patterns()]
    host = [0] * shape.block_count
    for name, size in shape.tensor_sizes:
        block = BLOCK_PREFIX.match(name)
        if block is not None and any(regex.search(name) for regex in regexes):
            host[int(block[1])] += size
    return tuple(host)


@pytest.mark.parametrize(
    "args", [["--n-cpu-moe", "40"], ["--cpu-moe"], ["--n-cpu-moe", "64", "-ot", r"blk\.(1|63)\.attn_q=CPU"]]
)
@pytest.mark.usefixtures("unchecked_names")
def test_many_tensors_and_blocks_give_what_the_regexes_give(tmp_path: Path, args: list[str]) -> None:
    path = crafted(tmp_path, blocks=64, tensors=8192)
    params = LlamaParams.from_args(args)

    resolved = resolve(read_gguf(str(path)), params.expert_flags())
    assert resolved.block_bytes == by_regexes(path, params.expert_flags())
    assert estimate_profile(path, params).fixed_host_experts == resolved.blocks


@pytest.mark.usefixtures("unchecked_names")
def test_ot_searches_beyond_the_budget_are_refused(tmp_path: Path) -> None:
    path = crafted(tmp_path, blocks=16, tensors=4096)
    costly = r"blk\..*.*.*a"  # every name holds blk. and a: 1 start x 31**3 ways on a 30-byte name, 4,096 times
    with pytest.raises(InputError, match=r"4,096 tensors .* beyond layerfit's budget of 50,000,000") as caught:
        estimate_profile(path, LlamaParams.from_args(["-ot", f"{costly}=CPU"]))
    assert caught.value.field == "-ot"
    # the names without a pattern's key literal are not searched: the same shape whose key (exps) few
    # names hold is accepted (it was refused when every name was counted at its longest)
    sparse = estimate_profile(path, LlamaParams.from_args(["-ot", r"blk\..*ffn_.*exps=CPU"]))
    assert sparse.fixed_host_experts == tuple(range(16))
    many = ",".join(f"x{i}=CPU" for i in range(700))  # 4,096 x 700 searches: refused before reading them
    with pytest.raises(InputError, match="700 patterns tested against each of the 4,096 tensors"):
        estimate_profile(path, LlamaParams.from_args(["-ot", many]))
    cheap = estimate_profile(path, LlamaParams.from_args(["-ot", r".*ffn_.*exps.*=CPU"]))  # core ffn_.*exps
    assert cheap.fixed_host_experts == tuple(range(16))


@pytest.mark.parametrize("model", sorted(REAL_MODELS))
def test_real_models_with_documented_patterns_use_a_small_part_of_the_budget(model: str) -> None:
    names = [tensor.name for tensor in tensor_table(REAL_MODELS[model])]
    for pattern in DOCUMENTED_OVERRIDES:
        assert search_cost(names, [search_core(pattern)]) * 20 <= SEARCH_BUDGET, pattern
