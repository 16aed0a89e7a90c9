"""Hyperparameters against the tensors that carry them, as llama.cpp checks them at load.

llama.cpp derives every tensor's shape from the metadata (embedding width, head counts and head
dimensions, vocabulary, expert count, SSM widths) and refuses a file whose tensor has another shape
("tensor 'blk.0.attn_q.weight' has wrong shape"), a block without its tensors, or a tensor it does
not load. A header whose numbers contradict its tensors would otherwise be estimated with numbers
llama.cpp never runs with (``head_count 65536`` on a small model). Only architectures whose tensor
sets are modelled are checked, and only where llama.cpp's rule is the same across them; a width
may match either the full or the sliding-window head dimension. Every loop runs over the tensor
table or the blocks, both bounded by the file's size.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from layerfit.errors import EstimationError
from layerfit.estimators import architectures as arch_rules
from layerfit.estimators.gguf_constants import Keys
from layerfit.estimators.gguf_reader import ArrayInfo, TensorInfo
from layerfit.estimators.header_access import MetaReader, TensorGroups
from layerfit.estimators.tensor_names import check_tensor_names
from layerfit.estimators.tensor_set import check_tensor_set
from layerfit.estimators.tensor_types import check_tensor_types

if TYPE_CHECKING:
    from layerfit.estimators.model_shape import ModelShape

MAMBA1 = frozenset({"mamba", "jamba"})
"""Mamba-1 mixers: ``ssm_conv1d`` spans the inner width, ``ssm_a`` is ``state x inner``."""
MAMBA2 = frozenset({"mamba2", "granitehybrid", "falcon-h1", "nemotron_h"})
"""Mamba-2 mixers: ``ssm_conv1d`` spans ``inner + 2 x groups x state``."""
EXPERT_WIDTH_KEY = frozenset({"qwen2moe", "qwen3moe", "deepseek2", "gpt-oss", "llama4", "nemotron_h"})
"""Architectures whose expert tensors llama.cpp sizes by ``expert_feed_forward_length`` (the
others size them by ``feed_forward_length`` and ignore the key)."""
EXPERT_TENSORS = ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_up_exps.weight")
NO_VOCAB_TOKENIZERS = frozenset({"none", "no_vocab"})
"""Tokenizer models for which llama.cpp takes the vocabulary size from ``vocab_size``."""


def vocabulary_size(meta: MetaReader) -> tuple[str, int] | None:
    """The vocabulary llama.cpp sizes the embedding by, and the key it comes from.

    The tokenizer's token list, except for the tokenizer models without a vocabulary, which take
    ``vocab_size``; a file without either leaves it to the tensors."""
    model = meta.metadata.get(Keys.Tokenizer.MODEL)
    tokens = meta.metadata.get(Keys.Tokenizer.LIST)
    if model not in NO_VOCAB_TOKENIZERS:
        if isinstance(tokens, ArrayInfo):
            return Keys.Tokenizer.LIST, tokens.length
        if isinstance(tokens, tuple):
            return Keys.Tokenizer.LIST, len(tokens)
    if meta.has(Keys.LLM.VOCAB_SIZE):
        return meta.key(Keys.LLM.VOCAB_SIZE), meta.integer(Keys.LLM.VOCAB_SIZE)
    return None


LLAMA_MAX_LAYERS = 512
"""Most blocks llama.cpp loads (``LLAMA_MAX_LAYERS``, b11434's ``llama-hparams.h``)."""
LLAMA_MAX_EXPERTS = 1024
"""Most experts per block llama.cpp loads (``LLAMA_MAX_EXPERTS``)."""
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")
"""The ``rope.scaling.type`` values llama.cpp knows; it asserts on any other."""


def check_hparams(shape: ModelShape, meta: MetaReader) -> None:
    """Refuse, naming the key, what llama.cpp asserts against when it reads the hyperparameters
    (``llama_model::load_hparams``, before any tensor): the block and expert limits (1 to 512 blocks),
    at least one of at most ``expert_count`` experts used (the most of any block), expert groups that
    divide the experts; and a block with experts routing more than block 0 where the graph takes
    block 0's count (a dense block's count is never read)."""
    experts, blocks = shape.expert_count, shape.block_count
    per_block = meta.per_layer(Keys.LLM.EXPERT_USED_COUNT, blocks, 0)
    used = max(per_block, default=0)
    groups = meta.integer(Keys.LLM.EXPERT_GROUP_COUNT, 0)
    groups_used = meta.integer(Keys.LLM.EXPERT_GROUP_USED_COUNT, 0)
    nextn = meta.integer(Keys.LLM.NEXTN_PREDICT_LAYERS, 0)
    scaling = meta.metadata.get(meta.key(Keys.Rope.SCALING_TYPE), "linear")
    rope = meta.integer(Keys.Rope.DIMENSION_COUNT, 0) if meta.has(Keys.Rope.DIMENSION_COUNT) else None
    head_0 = shape.head_count[0] if shape.head_count else 0  # llama.cpp's n_head(): block 0's
    refusals = (
        (Keys.LLM.BLOCK_COUNT, blocks == 0, "0 blocks, where llama.cpp needs at least one"),
        (
            Keys.LLM.BLOCK_COUNT,
            blocks > LLAMA_MAX_LAYERS,
            f"{blocks} blocks, more than llama.cpp's {LLAMA_MAX_LAYERS} (LLAMA_MAX_LAYERS)",
        ),
        (Keys.LLM.NEXTN_PREDICT_LAYERS, nextn > blocks, f"{nextn} next-token prediction layers of {blocks} blocks"),
        (
            Keys.Rope.SCALING_TYPE,
            scaling not in ROPE_SCALING_TYPES,
            f"rope scaling {scaling!r}, none of llama.cpp's {', '.join(ROPE_SCALING_TYPES)}",
        ),
        (
            Keys.Rope.DIMENSION_COUNT,
            shape.architecture in arch_rules.ROPE_WHOLE_HEAD and head_0 > 0 and rope not in (None, shape.key_length),
            f"rope dimension {rope} where {shape.architecture} rotates the whole key of {shape.key_length}",
        ),
        (
            Keys.LLM.EXPERT_COUNT,
            experts > LLAMA_MAX_EXPERTS,
            f"{experts} experts, more than llama.cpp's {LLAMA_MAX_EXPERTS} (LLAMA_MAX_EXPERTS)",
        ),
        (Keys.LLM.EXPERT_USED_COUNT, used > experts, f"{used} experts used of {experts} (expert_count)"),
        (Keys.LLM.EXPERT_USED_COUNT, experts > 0 and used == 0, f"no experts used of {experts} (expert_count)"),
        (Keys.LLM.EXPERT_GROUP_COUNT, experts == 0 and groups > 0, f"{groups} expert groups without experts"),
        (
            Keys.LLM.EXPERT_GROUP_COUNT,
            experts > 0 and groups >= experts,
            f"{groups} expert groups of {experts} experts (expert_count): fewer groups than experts needed",
        ),
        (
            Keys.LLM.EXPERT_GROUP_COUNT,
            experts > 0 and groups > 1 and experts % groups != 0,
            f"{groups} expert groups do not divide {experts} experts (expert_count)",
        ),
        (
            Keys.LLM.EXPERT_GROUP_USED_COUNT,
            experts > 0 and groups > 1 and not 0 < groups_used < groups,
            f"{groups_used} expert groups used of {groups}: at least one and fewer than all needed",
        ),
    )
    for template, refused, problem in refusals:
        if refused:
            raise EstimationError(shape.path, meta.key(template), f"{problem}: llama.cpp refuses it")
    routed = [count for count, experts in zip(per_block, shape.block_expert_bytes, strict=True) if experts]
    if shape.architecture not in arch_rules.PER_LAYER_EXPERTS_USED and any(count > per_block[0] for count in routed):
        block = next(i for i, count in enumerate(per_block) if count > per_block[0] and shape.block_expert_bytes[i])
        problem = (
            f"block {block} routes {per_block[block]} experts where the graph selects block 0's {per_block[0]} in "
            f"every block ({shape.architecture} takes no per-block count): llama.cpp refuses it (GGML_ASSERT on a "
            "view)"
        )
        raise EstimationError(shape.path, meta.key(Keys.LLM.EXPERT_USED_COUNT), problem)


def check_shape(shape: ModelShape, meta: MetaReader, tensors: TensorGroups) -> None:
    """Refuse, naming the key, the tensor and both values, a hyperparameter its tensors contradict."""
    check_hparams(shape, meta)
    check_tensor_types(shape, tensors)
    if not shape.known_architecture:
        check_tensor_names(shape, tensors)
        return
    check = _Checker(shape, meta)
    check.blocks(tensors)
    check.embeddings(tensors)
    for block, block_tensors in enumerate(tensors.blocks):
        if shape.mla:
            check.latent_attention(block, block_tensors)
        elif shape.architecture not in arch_rules.RECURRENT and shape.architecture not in arch_rules.MLA:
            check.attention(block, block_tensors)
        check.experts(block, block_tensors)
        check.recurrent(block, block_tensors)
    check_tensor_set(shape, meta, tensors)
    check_tensor_names(shape, tensors)


class _Checker:
    def __init__(self, shape: ModelShape, meta: MetaReader) -> None:
        self.shape = shape
        self.meta = meta
        self.path = shape.path

    def expect(
        self, template: str, claim: str, tensor: str, actual: TensorInfo, axis: int, allowed: Iterable[int]
    ) -> None:
        """The tensor's ``axis`` is one of ``allowed`` (the values the metadata implies)."""
        options = sorted(set(allowed))
        found = actual.shape[axis] if len(actual.shape) > axis else 1
        if found not in options:
            implied = " or ".join(str(value) for value in options)
            problem = (
                f"{claim} implies {implied} on axis {axis} of '{tensor}', which has {found}"
                f" (shape {list(actual.shape)}): llama.cpp refuses the file at load"
            )
            raise EstimationError(self.path, self.meta.key(template), problem)

    # -- blocks, embedding width, vocabulary ----------------------------------------------------

    def blocks(self, tensors: TensorGroups) -> None:
        n = self.shape.block_count
        for block, block_tensors in enumerate(tensors.blocks):
            if not block_tensors:
                raise EstimationError(
                    self.path,
                    self.meta.key(Keys.LLM.BLOCK_COUNT),
                    f"{n} blocks, but block {block} has no tensors (llama.cpp refuses a missing block's tensors)",
                )
        if tensors.stray:
            raise EstimationError(
                self.path,
                self.meta.key(Keys.LLM.BLOCK_COUNT),
                f"{n} blocks, but the file has tensor '{tensors.stray[0]}' beyond them"
                f" ({len(tensors.stray)} such tensors; llama.cpp refuses tensors it does not load)",
            )

    def embeddings(self, tensors: TensorGroups) -> None:
        d = self.shape.embedding_length
        vocab = vocabulary_size(self.meta)
        for name in ("token_embd.weight", "output.weight"):
            tensor = tensors.inputs.get(name) or tensors.outputs.get(name)
            if tensor is None:
                continue
            self.expect(Keys.LLM.EMBEDDING_LENGTH, f"embedding_length {d}", name, tensor, 0, (d,))
            if vocab is not None:
                key, size = vocab
                if len(tensor.shape) < 2 or tensor.shape[1] != size:
                    rows = tensor.shape[1] if len(tensor.shape) > 1 else 1
                    raise EstimationError(
                        self.path,
                        key,
                        f"a vocabulary of {size} tokens, but '{name}' has {rows} rows (shape {list(tensor.shape)}):"
                        " llama.cpp refuses the file at load",
                    )

    # -- attention ------------------------------------------------------------------------------

    def _head_dims(self, block: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Key and value head dimensions a block's tensors may have (full, and sliding-window)."""
        shape = self.shape
        keys, values = [shape.key_length], [shape.value_length]
        if shape.key_length_swa:
            keys.append(shape.key_length_swa)
        if shape.value_length_swa:
            values.append(shape.value_length_swa)
        return tuple(keys), tuple(values)

    def _feed_forward_layer(self, block: int) -> bool:
        widths = self.meta.per_layer(Keys.LLM.FEED_FORWARD_LENGTH, self.shape.block_count, 0)
        return not self.shape.recurrent_layers[block] and widths[block] > 0

    def attention(self, block: int, tensors: dict[str, TensorInfo]) -> None:
        shape = self.shape
        if shape.architecture in arch_rules.FFN_ONLY_LAYERS and self._feed_forward_layer(block):
            return  # nemotron_h's loader builds a layer with a feed-forward width as one, whatever its KV heads
        d, heads, heads_kv = shape.embedding_length, shape.head_count[block], shape.head_count_kv[block]
        keys, values = self._head_dims(block)
        p = f"blk.{block}."
        head_claim = f"head_count {heads} x key_length {'/'.join(map(str, keys))}"
        kv_claim = f"head_count_kv {heads_kv} x key_length {'/'.join(map(str, keys))}"
        v_claim = f"head_count_kv {heads_kv} x value_length {'/'.join(map(str, values))}"
        has_kv = "attn_k.weight" in tensors or "attn_qkv.weight" in tensors
        if heads_kv and not has_kv:
            raise EstimationError(
                self.path,
                self.meta.key(Keys.Attention.HEAD_COUNT_KV),
                f"{heads_kv} KV heads in block {block}, but it has no '{p}attn_k.weight' or '{p}attn_qkv.weight'"
                " (llama.cpp refuses a missing tensor)",
            )
        for name in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight"):
            if name in tensors:
                self.expect(Keys.LLM.EMBEDDING_LENGTH, f"embedding_length {d}", p + name, tensors[name], 0, (d,))
        if "attn_q.weight" in tensors:
            q = tensors["attn_q.weight"]
            self.expect(Keys.Attention.HEAD_COUNT, head_claim, p + "attn_q.weight", q, 1, (heads * k for k in keys))
        if "attn_k.weight" in tensors:
            k_tensor = tensors["attn_k.weight"]
            allowed = (heads_kv * k for k in keys)
            self.expect(Keys.Attention.HEAD_COUNT_KV, kv_claim, p + "attn_k.weight", k_tensor, 1, allowed)
        if "attn_v.weight" in tensors:
            v_tensor = tensors["attn_v.weight"]
            allowed = (heads_kv * v for v in values)
            self.expect(Keys.Attention.HEAD_COUNT_KV, v_claim, p + "attn_v.weight", v_tensor, 1, allowed)
        if "attn_qkv.weight" in tensors:
            fused = {(heads + heads_kv) * k + heads_kv * v for k in keys for v in values}
            claim = f"{head_claim}, {kv_claim}, {v_claim} (fused)"
            self.expect(Keys.Attention.HEAD_COUNT, claim, p + "attn_qkv.weight", tensors["attn_qkv.weight"], 1, fused)

    def latent_attention(self, block: int, tensors: dict[str, TensorInfo]) -> None:
        """Multi-head latent attention: the cached latent and the per-head up-projections."""
        shape = self.shape
        p, heads, rank = f"blk.{block}.", shape.head_count[block], shape.kv_lora_rank
        if "attn_kv_a_mqa.weight" in tensors:
            claim = f"kv_lora_rank {rank} + rope.dimension_count {shape.rope_dimension_count}"
            latent = (rank + shape.rope_dimension_count,)
            self.expect(
                Keys.Attention.KV_LORA_RANK,
                claim,
                p + "attn_kv_a_mqa.weight",
                tensors["attn_kv_a_mqa.weight"],
                1,
                latent,
            )
        for name, rank_axis in (("attn_k_b.weight", 1), ("attn_v_b.weight", 0)):
            if name in tensors:
                self.expect(
                    Keys.Attention.KV_LORA_RANK, f"kv_lora_rank {rank}", p + name, tensors[name], rank_axis, (rank,)
                )
                self.expect(Keys.Attention.HEAD_COUNT, f"head_count {heads}", p + name, tensors[name], 2, (heads,))

    # -- experts --------------------------------------------------------------------------------

    def experts(self, block: int, tensors: dict[str, TensorInfo]) -> None:
        shape = self.shape
        p, n = f"blk.{block}.", shape.expert_count
        if "ffn_gate_inp.weight" in tensors:
            router = tensors["ffn_gate_inp.weight"]
            self.expect(Keys.LLM.EXPERT_COUNT, f"expert_count {n}", p + "ffn_gate_inp.weight", router, 1, (n,))
        for name in EXPERT_TENSORS:
            if name in tensors:
                self.expect(Keys.LLM.EXPERT_COUNT, f"expert_count {n}", p + name, tensors[name], 2, (n,))
        if shape.architecture in EXPERT_WIDTH_KEY and self.meta.has(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH):
            widths = self.meta.per_layer(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, shape.block_count, 0)
            width = widths[block] if shape.architecture in arch_rules.PER_LAYER_FFN else widths[0]
            claim = f"expert_feed_forward_length {width}"
            for name, axis in (("ffn_up_exps.weight", 1), ("ffn_gate_exps.weight", 1), ("ffn_down_exps.weight", 0)):
                if name in tensors:
                    self.expect(Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, claim, p + name, tensors[name], axis, (width,))

    # -- recurrent (Mamba) layers ---------------------------------------------------------------

    def recurrent(self, block: int, tensors: dict[str, TensorInfo]) -> None:
        arch = self.shape.architecture
        if arch not in MAMBA1 and arch not in MAMBA2:
            return
        shape, p = self.shape, f"blk.{block}."
        inner, state, groups, kernel = (
            shape.ssm_inner_size,
            shape.ssm_state_size,
            shape.ssm_group_count,
            shape.ssm_conv_kernel,
        )
        if "ssm_out.weight" in tensors:
            out = tensors["ssm_out.weight"]
            self.expect(Keys.SSM.INNER_SIZE, f"ssm.inner_size {inner}", p + "ssm_out.weight", out, 0, (inner,))
        if "ssm_conv1d.weight" in tensors:
            conv = tensors["ssm_conv1d.weight"]
            self.expect(Keys.SSM.CONV_KERNEL, f"ssm.conv_kernel {kernel}", p + "ssm_conv1d.weight", conv, 0, (kernel,))
            if arch in MAMBA1:
                self.expect(Keys.SSM.INNER_SIZE, f"ssm.inner_size {inner}", p + "ssm_conv1d.weight", conv, 1, (inner,))
            else:
                claim = f"ssm.inner_size {inner} + 2 x ssm.group_count {groups} x ssm.state_size {state}"
                width = (inner + 2 * groups * state,)
                self.expect(Keys.SSM.STATE_SIZE, claim, p + "ssm_conv1d.weight", conv, 1, width)
        if arch in MAMBA1 and "ssm_a" in tensors:
            self.expect(Keys.SSM.STATE_SIZE, f"ssm.state_size {state}", p + "ssm_a", tensors["ssm_a"], 0, (state,))
        if arch in MAMBA2 and "ssm_norm.weight" in tensors:
            norm = tensors["ssm_norm.weight"]
            self.expect(Keys.SSM.GROUP_COUNT, f"ssm.group_count {groups}", p + "ssm_norm.weight", norm, 1, (groups,))
