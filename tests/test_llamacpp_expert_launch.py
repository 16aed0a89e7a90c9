"""Launch flags for experts on the host: the shortest exact form, and flags -> layout -> flags."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fixtures_gguf import write_tiny
from hypothesis import given
from hypothesis import strategies as st

from layerfit.domain import DeviceAssignment, Layout
from layerfit.estimators import overrides
from layerfit.estimators.model_shape import ModelShape
from layerfit.estimators.shape import read_gguf
from layerfit.llamacpp.expert_flags import parse_expert_flags
from layerfit.llamacpp.expert_launch import expert_args, numbers_pattern
from layerfit.memory import make_layout
from layerfit.memory.experts import with_host_experts

N_BLOCKS = 24
DENSE_FIRST = 2
MOE = {
    "architecture": "qwen3moe",
    "block_count": N_BLOCKS,
    "expert_count": 4,
    "expert_used_count": 2,
    "expert_feed_forward_length": 64,
    "leading_dense_block_count": DENSE_FIRST,
}


@pytest.fixture(scope="module")
def shape(tmp_path_factory: pytest.TempPathFactory) -> ModelShape:
    path: Path = write_tiny(tmp_path_factory.mktemp("moe"), "moe", data="header", tokenizer=False, **MOE)
    return read_gguf(str(path))


def two_gpus(cpu_blocks: int, first: int) -> Layout:
    gpu_blocks = N_BLOCKS - cpu_blocks
    devices = [DeviceAssignment(worker="a", gpu_index=0, blocks=first)]
    devices.append(DeviceAssignment(worker="a", gpu_index=1, blocks=gpu_blocks - first))
    return make_layout("a", N_BLOCKS, [d for d in devices if d.blocks] or devices[-1:])


def layout_of(shape: ModelShape, base: Layout, args: tuple[str, ...]) -> Layout:
    """What llama.cpp does with the flags on this model: the blocks whose expert tensors they match."""
    flags, rest = parse_expert_flags(args)
    assert rest == ()
    return with_host_experts(base, overrides.resolve(shape, flags).blocks)


EXPERTLESS = tuple(range(DENSE_FIRST))


@given(
    cpu_blocks=st.integers(0, N_BLOCKS - 1),
    first=st.integers(0, N_BLOCKS),
    chosen=st.sets(st.integers(DENSE_FIRST, N_BLOCKS - 1)),
)
def test_layout_flags_layout_round_trip(shape: ModelShape, cpu_blocks: int, first: int, chosen: set[int]) -> None:
    base = two_gpus(cpu_blocks, min(first, N_BLOCKS - cpu_blocks))
    layout = with_host_experts(base, chosen)
    args = expert_args(layout, EXPERTLESS)
    assert layout_of(shape, base, args) == layout
    # and back: the flags of that layout are the same flags
    assert expert_args(layout_of(shape, base, args), EXPERTLESS) == args


@given(count=st.integers(0, N_BLOCKS), cpu_blocks=st.integers(0, N_BLOCKS - 1))
def test_n_cpu_moe_flags_layout_flags(shape: ModelShape, count: int, cpu_blocks: int) -> None:
    base = two_gpus(cpu_blocks, 1)
    layout = layout_of(shape, base, ("--n-cpu-moe", str(count)))
    args = expert_args(layout, EXPERTLESS)
    assert layout_of(shape, base, args) == layout
    if layout.host_expert_blocks:
        assert args == ("--n-cpu-moe", str(max(layout.host_expert_blocks) + 1))


def test_shortest_forms() -> None:
    base = two_gpus(0, 12)
    # experts of blocks 2-9 (0-1 have none): --n-cpu-moe 10
    assert expert_args(with_host_experts(base, range(2, 10)), EXPERTLESS) == ("--n-cpu-moe", "10")
    assert expert_args(base, EXPERTLESS) == ()
    (flag, value) = expert_args(with_host_experts(base, [*range(10, 24)]), EXPERTLESS)
    assert flag == "-ot" and value == r"blk\.(1[0-9]|2[0-3])\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"


@given(st.sets(st.integers(0, 400), min_size=1))
def test_numbers_pattern_matches_exactly_its_numbers(numbers: set[int]) -> None:
    pattern = re.compile(rf"^blk\.{numbers_pattern(numbers)}\.x$")
    assert {n for n in range(0, 1200) if pattern.search(f"blk.{n}.x")} == numbers
