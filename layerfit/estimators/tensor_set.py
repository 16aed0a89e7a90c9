"""Tensors llama.cpp requires or refuses, for the architectures whose tensor sets are modelled.

llama.cpp creates each tensor its architecture's loader names, with the shape the metadata gives,
and refuses a file that lacks a required one ("tensor 'blk.2.attn_q.weight' not found"), has one it
does not create ("wrong number of tensors"), or has one of another shape. Checked here, from
b11434's ``src/models/*.cpp``, where the rule holds for every file of the architecture:

* ``token_embd.weight`` is required by every modelled architecture, ``output_norm.weight`` by all
  but the BERT-style encoders, ``output.weight`` by three; ten never load an ``output.weight``;
* a block whose tensors are those every block of its kind has, less one or more tensors that the
  architecture requires, is refused: its kind is the tensor set most other blocks share (so MoE
  every other layer, leading dense blocks, hybrids and next-token blocks, each with their own set,
  are left alone); the weights an architecture creates as optional are named in
  ``OPTIONAL_BLOCK_WEIGHTS``, the biases it requires in ``REQUIRED_BLOCK_BIASES``;
* next-token prediction blocks only where the architecture builds them;
* attention tensors need ``head_count`` (llama.cpp sizes them by it, 0 when it is missing);
* a dense feed-forward is ``feed_forward_length`` wide (block 0's, except for ``nemotron_h``,
  whose loader reads each block's).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from layerfit.errors import EstimationError
from layerfit.estimators import architectures as arch_rules
from layerfit.estimators.gguf_constants import Keys
from layerfit.estimators.header_access import MetaReader, TensorGroups

if TYPE_CHECKING:
    from layerfit.estimators.model_shape import ModelShape

ENCODERS_WITHOUT_OUTPUT_NORM = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "neo-bert"})
"""Architectures that load no ``output_norm.weight`` (every other modelled one requires it)."""
OUTPUT_REQUIRED = frozenset({"qwen2moe", "gpt-oss", "olmoe"})
"""Architectures whose loader requires ``output.weight`` (the others tie it to the embedding)."""
NO_OUTPUT = frozenset(
    {"gemma", "gemma2", "command-r", "cohere2", "bert", "nomic-bert", "nomic-bert-moe"}
    | {"jina-bert-v2", "modern-bert", "neo-bert"}
)
"""Architectures that never load an ``output.weight``: llama.cpp refuses a file that has one."""
OPTIONAL_BLOCK_WEIGHTS: dict[str, frozenset[str]] = {
    "llama": frozenset({"ffn_gate_exps.weight"}),
    "mistral3": frozenset({"ffn_gate_exps.weight"}),
    "granite": frozenset({"ffn_gate_exps.weight"}),
    "granitehybrid": frozenset({"ffn_gate_exps.weight"}),
    "jamba": frozenset({"ffn_gate_inp.weight"}),
    "falcon-h1": frozenset({"ssm_norm.weight"}),
    "nemotron_h": frozenset({"ffn_latent_down.weight", "ffn_latent_up.weight"}),
    "jina-bert-v2": frozenset({"attn_q_norm.weight", "attn_k_norm.weight", "attn_norm_2.weight", "ffn_gate.weight"}),
    "modern-bert": frozenset({"attn_norm.weight"}),
}
"""Block weights an architecture's loader creates as optional (``TENSOR_NOT_REQUIRED``); every other
block weight (``.weight``, or a name without suffix such as ``ssm_a``) it creates is required."""
REQUIRED_BLOCK_BIASES: dict[str, frozenset[str]] = {
    "gpt-oss": frozenset(
        {"attn_output.bias", "ffn_gate_inp.bias", "ffn_up_exps.bias", "ffn_gate_exps.bias", "ffn_down_exps.bias"}
    ),
    "mamba": frozenset({"ssm_conv1d.bias", "ssm_dt.bias"}),
    "mamba2": frozenset({"ssm_conv1d.bias", "ssm_dt.bias"}),
    "jamba": frozenset({"ssm_conv1d.bias", "ssm_dt.bias"}),
    "granitehybrid": frozenset({"ssm_dt.bias"}),
    "falcon-h1": frozenset({"ssm_dt.bias"}),
    "bert": frozenset({"attn_output_norm.bias", "layer_output_norm.bias"}),
    "nomic-bert": frozenset({"attn_output_norm.bias", "layer_output_norm.bias"}),
    "nomic-bert-moe": frozenset({"attn_output_norm.bias", "layer_output_norm.bias"}),
    "jina-bert-v2": frozenset({"attn_output.bias", "attn_output_norm.bias", "ffn_down.bias", "layer_output_norm.bias"}),
}
"""Block biases an architecture's loader requires (every other bias is optional)."""
NEXTN_ARCHITECTURES = frozenset({"deepseek2", "exaone4", "nemotron_h"})
"""Modelled architectures whose loader builds next-token-prediction blocks; the others load only the
first ``block_count - nextn_predict_layers`` blocks and refuse the tensors of the rest."""
NO_DENSE_FFN = frozenset({"qwen2moe", "qwen3moe", "olmoe", "gpt-oss", "mamba", "mamba2"})
"""Modelled architectures without a dense feed-forward (``ffn_up``/``ffn_gate``/``ffn_down``)."""
FFN_UP_WIDTHS: dict[str, tuple[int, ...]] = {
    "phi3": (2,),
    "modern-bert": (2,),
    "neo-bert": (2,),
    "jina-bert-v2": (1, 2),
}
"""``ffn_up`` rows in units of the feed-forward width, where gate and up are (or may be) stacked."""
ATTENTION_TENSORS = ("attn_q.weight", "attn_k.weight", "attn_qkv.weight")
_NORMS = ("attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm", "attn_output_norm", "layer_output_norm")
EMBEDDING_AXES: dict[str, tuple[int, int]] = {
    **{f"{norm}.{part}": (1, 0) for norm in _NORMS for part in ("weight", "bias")},
    "attn_output.weight": (2, 1),
    "attn_output.bias": (1, 0),
    **dict.fromkeys(("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight"), (2, 0)),
    **dict.fromkeys(("ffn_up.weight", "ffn_gate.weight", "ffn_up_shexp.weight", "ffn_gate_shexp.weight"), (2, 0)),
    "ffn_down.weight": (2, 1),
    "ffn_down_shexp.weight": (2, 1),
    "ffn_gate_inp.weight": (2, 0),
    **dict.fromkeys(("ffn_up_exps.weight", "ffn_gate_exps.weight"), (3, 0)),
    "ffn_down_exps.weight": (3, 1),
}
"""Block tensors every modelled architecture creates with this many axes, ``embedding_length`` long on
the given one (the norms of the residual stream, the projections into and out of it)."""
TOP_EMBEDDING_AXES: dict[str, tuple[int, int]] = {
    "token_embd.weight": (2, 0),
    "output.weight": (2, 0),
    "output_norm.weight": (1, 0),
    "token_embd_norm.weight": (1, 0),
    "token_embd_norm.bias": (1, 0),
}
LATENT_EXPERTS = frozenset({"nemotron_h"})
"""Architectures whose experts may work in a latent width instead of ``embedding_length``."""


def _refuse(shape: ModelShape, where: str, problem: str) -> EstimationError:
    return EstimationError(shape.path, where, f"{problem}: llama.cpp refuses the file at load")


def check_tensor_set(shape: ModelShape, meta: MetaReader, tensors: TensorGroups) -> None:
    """Refuse, naming the tensor or key, what llama.cpp's loader refuses for a modelled architecture."""
    _top_level(shape, tensors)
    _next_token_blocks(shape, meta)
    _missing_block_weights(shape, tensors)
    _embedding_axes(shape, meta, tensors)
    _head_count(shape, meta, tensors)
    _dense_ffn(shape, meta, tensors)


def _top_level(shape: ModelShape, tensors: TensorGroups) -> None:
    arch = shape.architecture
    present = {**tensors.inputs, **tensors.outputs}
    required = ["token_embd.weight"]
    required += [] if arch in ENCODERS_WITHOUT_OUTPUT_NORM else ["output_norm.weight"]
    required += ["output.weight"] if arch in OUTPUT_REQUIRED else []
    for name in required:
        if name not in present:
            raise _refuse(shape, name, f"missing, where every {arch} file has it")
    if arch in NO_OUTPUT and "output.weight" in present:
        raise _refuse(shape, "output.weight", f"{arch} never loads an output projection (it reuses token_embd)")


def _required(arch: str, name: str) -> bool:
    """A block tensor the architecture's loader requires wherever its block kind has one."""
    if name.endswith(".bias"):
        return name in REQUIRED_BLOCK_BIASES.get(arch, frozenset())
    return (name.endswith(".weight") or "." not in name) and name not in OPTIONAL_BLOCK_WEIGHTS.get(arch, frozenset())


def _missing_block_weights(shape: ModelShape, tensors: TensorGroups) -> None:
    """A block whose tensor set is the common set of its kind less required weights."""
    sets = [frozenset(block) for block in tensors.blocks]
    counts = Counter(sets)
    for block, names in enumerate(sets):
        if counts[names] > 1:
            continue
        kinds = [(count, kind) for kind, count in counts.items() if count >= 2 and names < kind]
        if not kinds:
            continue
        count, kind = max(kinds, key=lambda item: (item[0], sorted(item[1])))
        missing = sorted(name for name in kind - names if _required(shape.architecture, name))
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            problem = (
                f"block {block} lacks '{missing[0]}'{more}, which the {count} blocks of its kind have and"
                f" {shape.architecture} requires"
            )
            raise _refuse(shape, f"blk.{block}.{missing[0]}", problem)


def _embedding_axes(shape: ModelShape, meta: MetaReader, tensors: TensorGroups) -> None:
    """No axis past a tensor's rank (llama.cpp wants 1 there), and ``embedding_length`` on its axis."""
    top = {**tensors.inputs, **tensors.outputs}
    named = [(name, TOP_EMBEDDING_AXES[name], top[name]) for name in top.keys() & TOP_EMBEDDING_AXES.keys()]
    for block, names in enumerate(tensors.blocks):
        found = names.keys() & EMBEDDING_AXES.keys()
        named += [(f"blk.{block}.{name}", EMBEDDING_AXES[name], names[name]) for name in sorted(found)]
    d = shape.embedding_length
    for name, (rank, axis), tensor in named:
        extra = [size for size in tensor.shape[rank:] if size != 1]
        if extra:
            raise _refuse(shape, name, f"{len(tensor.shape)} axes {list(tensor.shape)}, where llama.cpp creates {rank}")
        latent = shape.architecture in LATENT_EXPERTS and "_exps." in name
        if tensor.shape[axis] != d and not latent:
            problem = f"embedding_length {d} implies {d} on axis {axis} of '{name}', which has {list(tensor.shape)}"
            raise _refuse(shape, meta.key(Keys.LLM.EMBEDDING_LENGTH), problem)


def _next_token_blocks(shape: ModelShape, meta: MetaReader) -> None:
    nextn = shape.nextn_predict_layers
    if nextn and shape.architecture not in NEXTN_ARCHITECTURES:
        problem = (
            f"{nextn} next-token prediction blocks, which {shape.architecture} does not build: llama.cpp loads"
            f" {shape.block_count - nextn} blocks and finds the tensors of the last {nextn} unexpected"
        )
        raise _refuse(shape, meta.key(Keys.LLM.NEXTN_PREDICT_LAYERS), problem)


def _head_count(shape: ModelShape, meta: MetaReader, tensors: TensorGroups) -> None:
    if meta.has(Keys.Attention.HEAD_COUNT):
        return
    for block, names in enumerate(tensors.blocks):
        name = next((n for n in ATTENTION_TENSORS if n in names), None)
        if name is not None:
            problem = f"missing, but block {block} has '{name}', which llama.cpp sizes by it (0 heads without it)"
            raise _refuse(shape, meta.key(Keys.Attention.HEAD_COUNT), problem)


def _dense_ffn(shape: ModelShape, meta: MetaReader, tensors: TensorGroups) -> None:
    """Every dense ``ffn_up``/``ffn_gate``/``ffn_down`` is ``feed_forward_length`` wide and
    ``embedding_length`` deep."""
    arch = shape.architecture
    if arch in NO_DENSE_FFN:
        return
    widths = meta.per_layer(Keys.LLM.FEED_FORWARD_LENGTH, shape.block_count, 0)
    decision = meta.integer("{arch}.decision.block_count", 0) if arch == "modern-bert" else 0
    d = shape.embedding_length
    for block, names in enumerate(tensors.blocks[: shape.block_count - decision]):
        ff = widths[block] if arch in arch_rules.PER_LAYER_FFN else widths[0]
        claim = f"feed_forward_length {ff}"
        expected = {
            "ffn_up.weight": (d, tuple(ff * k for k in FFN_UP_WIDTHS.get(arch, (1,)))),
            "ffn_gate.weight": (d, (ff,)),
            "ffn_down.weight": (ff, (d,)),
        }
        for name, (first, second) in expected.items():
            tensor = names.get(name)
            if tensor is None:
                continue
            found = (tensor.shape[0], tensor.shape[1] if len(tensor.shape) > 1 else 1)
            if found[0] != first or found[1] not in second:
                wanted = f"[{first}, {' or '.join(map(str, second))}]"
                problem = f"{claim} implies {wanted} for 'blk.{block}.{name}', which has {list(tensor.shape)}"
                raise _refuse(shape, meta.key(Keys.LLM.FEED_FORWARD_LENGTH), problem)
