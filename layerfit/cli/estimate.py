"""``layerfit estimate``: the memory of a GGUF model, per layer and in total."""

from __future__ import annotations

import argparse

from layerfit.cli.common import EXAMPLES, EXIT_PLACED, HELP_FORMAT

LLAMA_FLAGS = """\
llama.cpp parameters that change the estimate (others are kept and passed on to llama-server):
  -c, --ctx-size N           context tokens (default 8192, GPUStack's; the output names the training context)
  -np, --parallel N          sequences (default: llama-server's 4 slots sharing one KV cache)
  -ctk, --cache-type-k TYPE  K cache: f32 f16 bf16 q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1 (default f16)
  -ctv, --cache-type-v TYPE  V cache, same types (default f16; quantized needs flash attention)
  -fa, --flash-attn on|off|auto  flash attention (default auto, estimated as on)
  -b, --batch-size N         logical batch (default 2048)
  -ub, --ubatch-size N       micro-batch: sizes the compute buffers (default 512)
  --mmap, --no-mmap          map the model file (default on)
  -mm, --mmproj FILE         multimodal projector: weights and compute on the main GPU
"""


def cmd_estimate(args: argparse.Namespace, rest: list[str]) -> int:
    from layerfit import estimators
    from layerfit.domain.params import LlamaParams
    from layerfit.estimators.report import estimate_report, estimate_table

    params = LlamaParams.from_args(rest)
    shape = estimators.read_gguf(args.model)
    report = estimate_report(shape, params)
    print(report.model_dump_json(indent=2) if args.json else estimate_table(shape, report))
    return EXIT_PLACED


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``estimate`` to the subcommands."""
    estimate = commands.add_parser(
        "estimate",
        help="memory of a GGUF model, per layer and in total",
        description="The memory llama.cpp will allocate for a GGUF model, read from its header.",
        epilog=LLAMA_FLAGS + "\n" + EXAMPLES,
        formatter_class=HELP_FORMAT,
    )
    estimate.add_argument("model", help="GGUF file; llama.cpp parameters may follow (--ctx-size, -ctk, -fa, -np ...)")
    estimate.add_argument(
        "--json", action="store_true", help="print the estimate as JSON: assumed parameters, profile, totals"
    )
    estimate.set_defaults(handler=cmd_estimate)
