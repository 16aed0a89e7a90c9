"""llama.cpp's Q4_K_M mix of a llama-shaped dense model: the tensor table ``llama-quantize`` writes.

``llama_tensor_get_type`` (``src/llama-quant.cpp``) for ``LLAMA_FTYPE_MOSTLY_Q4_K_M``: every 2-D
weight Q4_K (the token embedding included), the output layer Q6_K, and ``attn_v`` and
``ffn_down`` Q6_K in the blocks ``use_more_bits`` picks (the first and last eighth and every third
between). A model llama.cpp types ``LLM_TYPE_70B`` (80 blocks with fewer KV heads than heads)
takes Q5_K for its other ``attn_v`` tensors ("8 heads sharing the same attn_v weights"). The
Llama-3 8B and 70B tables come to llama-bench's reported sizes, 4.58 and 39.59 GiB.
"""

from __future__ import annotations

import re

from layerfit.testing.synthetic_spec import ModelSpec, Q, TensorSpec, tensor_table

_BLOCK_WEIGHT = re.compile(r"blk\.(\d+)\.(\w+)\.weight")
Q4_K_ROW = 256
"""Weights per Q4_K, Q5_K and Q6_K block: a row must hold whole blocks (llama.cpp falls back
otherwise, which this table does not model)."""


def use_more_bits(block: int, blocks: int) -> bool:
    """llama.cpp's ``use_more_bits``: the blocks whose ``attn_v``/``ffn_down`` get more bits."""
    return block < blocks // 8 or block >= 7 * blocks // 8 or (block - blocks // 8) % 3 == 2


def _is_70b(spec: ModelSpec) -> bool:
    """``llm_load_hparams`` types a llama of 80 blocks ``LLM_TYPE_70B`` when it groups its KV heads."""
    return spec.block_count == 80 and spec.head_count_kv < spec.head_count


def q4_k_m_table(spec: ModelSpec) -> list[TensorSpec]:
    """``spec``'s tensor table with the types ``llama-quantize ... Q4_K_M`` gives a dense llama."""
    if spec.architecture != "llama" or spec.expert_count:
        raise ValueError(f"{spec.name}: the Q4_K_M mix is written for dense llama models only")
    seventy = _is_70b(spec)
    mixed = []
    for tensor in tensor_table(spec):
        ggml_type = tensor.ggml_type
        if len(tensor.shape) == 2:
            if tensor.shape[0] % Q4_K_ROW:
                raise ValueError(f"{spec.name}: {tensor.name} rows of {tensor.shape[0]} do not hold whole Q4_K blocks")
            ggml_type = Q.Q6_K if tensor.name == "output.weight" else Q.Q4_K
        match = _BLOCK_WEIGHT.fullmatch(tensor.name)
        if match and match.group(2) in ("attn_v", "ffn_down"):
            if use_more_bits(int(match.group(1)), spec.block_count):
                ggml_type = Q.Q6_K
            elif seventy and match.group(2) == "attn_v":
                ggml_type = Q.Q5_K
        mixed.append(TensorSpec(tensor.name, tensor.shape, ggml_type))
    return mixed
