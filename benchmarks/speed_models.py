"""The synthetic models whose llama.cpp speed ``benchmarks/speed_record.py`` records.

Llama-shaped dense models of about 0.1, 0.5 and 1.5 B parameters in F16, Q8_0 and Q4_0, a
TinyLlama-shaped 1.1 B model, and two small qwen3moe models. Each model belongs to the ``fit`` set
(the speed model's constants are fitted on its rows) or to the ``held_out`` set (only checked);
the split is by whole model and fixed here, before any fitting: the 1.1 B shape and the second
MoE shape appear in no fitted row.

Weights are zeros (a sparse file), which does not change a dense model's speed: every matrix is
read once per token whatever its values. A MoE model with zero weights would route every token to
the same experts (all router logits equal), which keeps those experts hot in the cache and is not
what a real model does. Its token embedding and routers are therefore filled with random values
and its norms with ones, so that the experts chosen change from token to token and from layer to
layer (the experts themselves stay zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from gguf import GGUFReader

from layerfit.testing.arch_fixtures import TOKENIZER
from layerfit.testing.synthetic import ModelSpec, Q, tensor_table, write_gguf

Split = Literal["fit", "held_out"]
EXPERT_TENSOR = "_exps."
"""Routed-expert tensors (``blk.N.ffn_{gate,up,down}_exps.weight``)."""
ROUTED_INPUTS = ("token_embd.weight", "ffn_gate_inp.weight")
"""Tensors filled with random values in MoE files (the token embedding and the routers)."""


@dataclass(frozen=True)
class SpeedModel:
    """One recorded model: its spec, its set, and how many tokens a run generates."""

    spec: ModelSpec
    split: Split
    gen_tokens: int
    """``-n``: tokens generated per run (the first comes from the prompt; ``eval`` counts the rest)."""

    @property
    def name(self) -> str:
        return self.spec.name

    def weight_bytes(self) -> int:
        """Bytes of every tensor of the file."""
        return sum(tensor.n_bytes for tensor in tensor_table(self.spec))

    def decode_read_bytes(self) -> int:
        """Weight bytes a decoded token reads: every tensor but the token embedding (a row lookup),
        routed experts at ``expert_used_count / expert_count`` of their size. No KV cache."""
        total = 0.0
        for tensor in tensor_table(self.spec):
            if tensor.name == "token_embd.weight":
                continue
            share = self.spec.expert_used_count / self.spec.expert_count if EXPERT_TENSOR in tensor.name else 1.0
            total += tensor.n_bytes * share
        return round(total)


def _llama(name: str, blocks: int, d: int, ffn: int, heads: int, kv: int, head_dim: int, wtype: Q) -> ModelSpec:
    return ModelSpec(
        name=name,
        architecture="llama",
        block_count=blocks,
        embedding_length=d,
        feed_forward_length=ffn,
        head_count=heads,
        head_count_kv=kv,
        head_dim=head_dim,
        vocab_size=32000,
        context_length=4096,
        weight_type=wtype,
    )


def _qwen3moe(name: str, blocks: int, experts: int, used: int, expert_ffn: int, wtype: Q) -> ModelSpec:
    return ModelSpec(
        name=name,
        architecture="qwen3moe",
        block_count=blocks,
        embedding_length=1024,
        feed_forward_length=3072,
        head_count=16,
        head_count_kv=4,
        head_dim=64,
        vocab_size=32000,
        context_length=4096,
        weight_type=wtype,
        embedding_type=Q.F16,
        expert_count=experts,
        expert_used_count=used,
        expert_feed_forward_length=expert_ffn,
        qk_norm=True,
    )


_TYPES = {"f16": Q.F16, "q8_0": Q.Q8_0, "q4_0": Q.Q4_0}
_DENSE_SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    # name: blocks, d, ffn, heads, kv heads, head dim
    "llama-0.1b": (12, 768, 2048, 12, 4, 64),
    "llama-0.5b": (24, 1024, 4096, 16, 4, 64),
    "llama-1.5b": (28, 1536, 8960, 12, 2, 128),
    "llama-1.1b": (22, 2048, 5632, 32, 4, 64),
}
_GEN_TOKENS = {"llama-0.1b": 64, "llama-0.5b": 32, "llama-1.5b": 16, "llama-1.1b": 16}
HELD_OUT_SHAPES = ("llama-1.1b",)


def _catalogue() -> dict[str, SpeedModel]:
    models: dict[str, SpeedModel] = {}
    for shape, dims in _DENSE_SHAPES.items():
        split: Split = "held_out" if shape in HELD_OUT_SHAPES else "fit"
        for suffix, wtype in _TYPES.items():
            name = f"{shape}-{suffix}"
            models[name] = SpeedModel(_llama(name, *dims, wtype), split, _GEN_TOKENS[shape])
    models["qwen3moe-0.7b-a0.1b-q8_0"] = SpeedModel(
        _qwen3moe("qwen3moe-0.7b-a0.1b-q8_0", 12, 32, 4, 512, Q.Q8_0), "fit", 48
    )
    models["qwen3moe-1.3b-a0.2b-q4_0"] = SpeedModel(
        _qwen3moe("qwen3moe-1.3b-a0.2b-q4_0", 16, 64, 8, 384, Q.Q4_0), "held_out", 48
    )
    return models


MODELS = _catalogue()


def write_model(directory: Path, model: SpeedModel, seed: int = 0) -> Path:
    """Write ``model`` as ``directory/NAME.gguf`` (sparse, test tokenizer), unless it is already
    there; MoE files get random embeddings and routers and unit norms (module docstring)."""
    path = directory / f"{model.name}.gguf"
    if path.exists():
        return path
    partial = path.with_suffix(".partial")
    write_gguf(partial, model.spec, data="sparse", tokenizer=True, tokenizer_model=TOKENIZER)
    if model.spec.is_moe:
        _fill_routing(partial, np.random.default_rng(seed))
    partial.rename(path)
    return path


def _fill_routing(path: Path, rng: np.random.Generator) -> None:
    reader = GGUFReader(path, "r+")
    for tensor in reader.tensors:
        data = tensor.data
        if tensor.name.endswith(ROUTED_INPUTS):
            data[...] = rng.standard_normal(data.shape).astype(data.dtype)
        elif tensor.name.endswith("norm.weight"):
            data[...] = 1
    reader.data.flush()
