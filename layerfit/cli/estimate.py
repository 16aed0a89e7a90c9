"""``layerfit estimate``: the memory of a GGUF model, per layer and in total."""

from __future__ import annotations

import argparse

from layerfit.cli.common import EXAMPLES, EXIT_PLACED, HELP_FORMAT, SUBCOMMANDS

_ESTIMATE_FLAGS = {
    "-c": "context tokens (default 8192, GPUStack's; 0 = the training context, as in llama.cpp)",
    "-np": "sequences (default: llama-server's 4 slots sharing one KV cache)",
    "-kvu": "one KV cache shared by the sequences (the default without -np)",
    "-no-kvu": "one KV cache per sequence (the default with -np)",
    "-ctk": "K cache type: f32 f16 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1 (default f16)",
    "-ctv": "V cache type, same types (default f16; quantized needs flash attention)",
    "--swa-full": "sliding-window layers cache the whole context",
    "-kvo": "the KV cache, and the attention over it, on the GPUs with their layers (the default)",
    "-nkvo": "the KV cache, and the attention over it, stay in host RAM",
    "-fa": "flash attention on|off|auto (default auto, estimated as on)",
    "-b": "logical batch (default 2048)",
    "-ub": "micro-batch: sizes the compute buffers (default 512)",
    "-lm": "how the model file is loaded (default: memory-mapped)",
    "-mm": "multimodal projector: weights and compute on the main GPU",
    "-ot": "tensors matching REGEX=CPU stay in host RAM (MoE experts)",
    "-cmoe": "the experts of every MoE block stay in host RAM",
    "-ncmoe": "the experts of the first N MoE blocks stay in host RAM",
    "-ngl": "layers on the GPU: the '-ngl N on one GPU' lines (placement: plan decides it)",
}
"""The llama.cpp flags an estimate depends on, by their first name in the flag table, with what
each does (placement flags excluded, but ``-ngl``: its line of the totals)."""


def llama_flags_help() -> str:
    """The llama.cpp options the estimate reads, with their names from the flag table."""
    from layerfit.llamacpp.flag_table import LLAMA_CPP_VERSION
    from layerfit.llamacpp.flags import all_flags

    lines = [f"llama.cpp options that change the estimate ({LLAMA_CPP_VERSION}; others pass through or are refused):"]
    shown = [
        (", ".join(flag.names) + (" VALUE" if flag.arity else ""), _ESTIMATE_FLAGS[flag.names[0]])
        for flag in all_flags()
        if flag.names[0] in _ESTIMATE_FLAGS
    ]
    width = max(len(names) for names, _ in shown) + 2
    lines += [f"  {names:<{width}}{what}" for names, what in shown]
    return "\n".join(lines) + "\n"


def cmd_estimate(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit import estimators
    from layerfit.domain.choices import ModelKind
    from layerfit.domain.param_words import positional_words
    from layerfit.domain.params import LlamaParams
    from layerfit.estimators.report import estimate_report, estimate_table
    from layerfit.llamacpp.flags import kind_of_switches

    positional, flags = positional_words(rest)
    params = LlamaParams.from_args(flags)  # first: a flag's bad value is named as its own
    model = model_word(positional)
    kind = ModelKind(kind_of_switches(params.extra))  # --embedding, --rerank: an embedding or reranking run
    shape = estimators.read_gguf(model)
    report = estimate_report(shape, params, kind=kind, gpu_name=args.gpu)
    print(report.model_dump_json(indent=2) if args.json else estimate_table(shape, report))
    return EXIT_PLACED


def model_word(positional: list[str]) -> str:
    """The GGUF file: the one word after ``estimate`` that no llama.cpp flag takes, before or after
    the flags, as llama.cpp users write it (``-c 32768 model.gguf``)."""
    from layerfit.errors import InputError

    if not positional:
        raise InputError("model", "give the GGUF file: layerfit estimate MODEL.gguf [llama.cpp flags]")
    if len(positional) > 1:
        raise InputError(positional[1], f"a second model file beside {positional[0]!r}, or a value without its flag")
    return positional[0]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``estimate`` to the subcommands."""
    estimate = commands.add_parser(
        "estimate",
        help=SUBCOMMANDS["estimate"][1],
        description="The memory llama.cpp will allocate for a GGUF model, read from its header.",
        usage="layerfit estimate [-h] [--json] [--gpu NAME] MODEL.gguf [llama.cpp options]",
        epilog="MODEL.gguf: the GGUF file (its first part when split), or its URL (https://...,\n"
        "hf://ORG/REPO[@REVISION]/FILE.gguf, ms://...: the header is read by range requests); the\n"
        "llama.cpp options may come before or after it (--ctx-size, -ctk, -fa, -np ...).\n\n"
        + llama_flags_help()
        + "\n"
        + EXAMPLES,
        formatter_class=HELP_FORMAT,
    )
    estimate.add_argument(
        "--gpu",
        metavar="NAME",
        help="also predict the speed of the reference layouts on one GPU of this name (as NVML or Apple "
        "report it: 'NVIDIA GeForce RTX 4090', 'Apple M2 Ultra'; see docs/speed.md)",
    )
    estimate.add_argument(
        "--json", action="store_true", help="print the estimate as JSON: assumed parameters, profile, totals"
    )
    estimate.set_defaults(handler=cmd_estimate)
