"""What llama.cpp does differently per architecture, as far as memory is concerned.

Everything here mirrors llama.cpp's own per-architecture choices (``llama-model.cpp``): which
layers use a sliding window, which architectures attend bidirectionally (no KV cache), which keep
a recurrent state, which cache a compressed latent (MLA) instead of keys and values.
"""

from __future__ import annotations

SWA_PERIOD: dict[str, int] = {
    "gemma2": 2,
    "gemma3": 6,
    "gemma3n": 5,
    "cohere2": 4,
    "gpt-oss": 2,
    "exaone4": 4,
    "llama4": 4,
    "modern-bert": 3,
}
"""Sliding-window period: with period ``p`` layer ``il`` uses the window when ``il % p < p - 1``
(period 0: every layer, period 1: none).

Used when the file has a sliding window but no ``sliding_window_pattern`` key. Architectures not
listed ignore the window (llama.cpp disables it for phi3 and never applies it to llama or qwen2).
"""

SWA_DENSE_FIRST = frozenset({"modern-bert"})
"""Architectures whose period starts with the full-attention layer: layer ``il`` uses the window
when ``il % p != 0`` (llama.cpp's ``set_swa_pattern(p, dense_first=true)``)."""

SWA_DEFAULT_WINDOW: dict[str, int] = {"gemma2": 4096}
"""Window llama.cpp assumes when the file does not say."""

SWA_FIXED_WINDOW: dict[str, int] = {"llama4": 8192}
"""Window (attention chunk) llama.cpp uses whatever the file says, unless the file says 0 (off)."""

SWA_BLOCK_COUNTS: dict[str, frozenset[int]] = {"exaone4": frozenset({64})}
"""llama.cpp turns the window on only for these block counts (EXAONE 4.0 32B); files with other
block counts attend fully on every layer, whatever their window key says."""

KV_LAYERS_FROM_START: dict[str, int] = {"gemma3n": 20}
"""Only the first N layers own a KV cache; later ones reuse one of them (llama.cpp fixes N, and
ignores the file's ``shared_kv_layers``)."""

KNOWN_ARCHITECTURES = frozenset(
    {
        "llama",
        "mistral3",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "gemma",
        "gemma2",
        "gemma3",
        "phi3",
        "command-r",
        "cohere2",
        "deepseek2",
        "gpt-oss",
        "granite",
        "olmoe",
        "mamba",
        "mamba2",
        "jamba",
        "granitehybrid",
        "falcon-h1",
        "nemotron_h",
        "bert",
        "nomic-bert",
        "nomic-bert-moe",
        "jina-bert-v2",
        "modern-bert",
        "neo-bert",
        "exaone4",
        "llama4",
        "gemma3n",
    }
)
"""Architectures whose memory rules are modelled; others get a generic estimate and a warning."""

NON_CAUSAL = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "modern-bert", "neo-bert", "t5encoder"})
"""Encoder-only architectures: bidirectional attention, no KV cache, whole inputs in one micro-batch."""

RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
"""Every layer keeps a fixed-size recurrent state instead of a KV cache."""

HYBRID = frozenset({"jamba", "granitehybrid", "nemotron_h"})
"""Layers with ``head_count_kv == 0`` are recurrent, the others attend with a KV cache."""

PER_LAYER_HEADS = frozenset({"jamba", "granitehybrid", "nemotron_h"})
"""Architectures whose layers llama.cpp builds with their own ``head_count``; every other modelled
architecture runs every layer with layer 0's (a per-layer array that varies is read, checked
against the tensors and run as layer 0's value)."""

FFN_ONLY_LAYERS = frozenset({"nemotron_h"})
"""Hybrids with a third kind of layer: ``head_count_kv == 0`` and a non-zero
``feed_forward_length`` is a feed-forward-only layer (no KV cache, no recurrent state)."""

PER_LAYER_FFN = frozenset({"nemotron_h"})
"""Architectures whose loader sizes each block's feed-forward by its own ``feed_forward_length``
and ``expert_feed_forward_length``; every other modelled one sizes them all by block 0's."""

PER_LAYER_EXPERTS_USED = frozenset({"nemotron_h"})
"""Architectures whose blocks each route their own ``expert_used_count`` (an array): every other
graph selects block 0's count in every block (llama.cpp's ``build_moe_ffn`` default)."""

ROPE_WHOLE_HEAD = frozenset(
    {
        "apertus",
        "arcee",
        "arctic",
        "baichuan",
        "chameleon",
        "codeshell",
        "cogvlm",
        "cohere2moe",
        "dbrx",
        "deci",
        "deepseek",
        "dots1",
        "dream",
        "ernie4_5",
        "ernie4_5-moe",
        "exaone",
        "exaone-moe",
        "exaone4",
        "falcon",
        "granite",
        "granite_swa",
        "graniteswitch",
        "grok",
        "grovemoe",
        "hunyuan-moe",
        "hunyuan_vl",
        "hy_v3",
        "internlm2",
        "jais2",
        "llada",
        "llada-moe",
        "llama",
        "llama-embed",
        "llama4",
        "maincoder",
        "mellum",
        "minimax-01",
        "minimax-m2",
        "mistral3",
        "nemotron",
        "olmo",
        "olmo2",
        "olmoe",
        "orion",
        "paddleocr",
        "pangu-embedded",
        "plamo",
        "pockettts",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3vl",
        "qwen3vlmoe",
        "rnd1",
        "seed_oss",
        "smallthinker",
        "smollm3",
        "starcoder2",
        "talkie",
        "xverse",
    }
)
"""Architectures whose ``rope.dimension_count`` must equal the key length: llama.cpp b11434 refuses
another at load (llama, deci, falcon, llama-embed) or asserts it building the graph (the others;
every ``src/models/*.cpp`` with ``GGML_ASSERT(n_embd_head == n_rot)``)."""

FULL_ATTENTION_INTERVAL = frozenset({"qwen3next", "qwen35", "qwen35moe", "minimax-01", "qwen4exp"})
"""Architectures whose loader reads ``full_attention_interval`` (every ``interval``-th layer attends,
the others are recurrent); llama.cpp b11434 ignores the key everywhere else."""

PARALLEL_HYBRID = frozenset({"falcon-h1"})
"""Every layer has both an attention KV cache and a recurrent state."""

RWKV = frozenset({"rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})

FUSED_GATE_UP = frozenset({"phi3", "modern-bert", "neo-bert"})
"""Feed-forward gate and up projections stacked in one ``ffn_up`` tensor of twice the width."""

MLA = frozenset({"deepseek2"})
"""Multi-head latent attention: one K-only cache row of ``kv_lora_rank + rope_dim`` per token."""


def effective_window(architecture: str, n_layers: int, file_window: int | None) -> int:
    """The sliding window llama.cpp applies, from the file's key (``None``: absent); 0 for none."""
    if architecture in SWA_BLOCK_COUNTS and n_layers not in SWA_BLOCK_COUNTS[architecture]:
        return 0
    if architecture in SWA_FIXED_WINDOW:
        return 0 if file_window == 0 else SWA_FIXED_WINDOW[architecture]
    return SWA_DEFAULT_WINDOW.get(architecture, 0) if file_window is None else file_window


def swa_layers(
    architecture: str, n_layers: int, window: int, pattern: int | tuple[bool, ...] | None
) -> tuple[bool, ...]:
    """Which layers use the sliding window."""
    if window <= 0:
        return (False,) * n_layers
    if isinstance(pattern, tuple):
        return tuple(bool(flag) for flag in pattern)
    period = pattern if pattern is not None else SWA_PERIOD.get(architecture)
    if period is None:
        return (False,) * n_layers
    if period == 0:
        return (True,) * n_layers
    if architecture in SWA_DENSE_FIRST:
        return tuple(layer % period != 0 for layer in range(n_layers))
    return tuple(layer % period < period - 1 for layer in range(n_layers))
