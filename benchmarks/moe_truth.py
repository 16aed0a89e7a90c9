"""Record llama.cpp's real allocations with experts kept on the host (CPU build, RPC emulation).

For the MoE architecture models of ``layerfit.testing.arch_fixtures`` (qwen3moe, deepseek2 with
a dense-first block and a shared expert, gpt-oss with MXFP4 experts) this runs ``llama-completion``
with one or two CPU ``ggml-rpc-server`` devices under ``--n-cpu-moe``, ``--cpu-moe`` and ``-ot``,
and writes llama.cpp's own buffer figures in the ground-truth CSV format::

    python benchmarks/moe_truth.py --llama-cpp ~/.cache/llamacpp-cpu-11434 \\
        --output tests/gguf_fixtures/ground_truth/cpu-moe.csv

``tests/test_moe_truth.py`` compares the memory model with every recorded figure.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from truth_recording import Config, csv_rows, run_config, write_rows

from layerfit.testing.arch_fixtures import ARCH_MODELS, write_arch_model

MODELS = ("qwen3moe-q8_0", "deepseek2-q8_0", "gpt-oss-mxfp4")
CTX = 2048
FULL = 99
ODD_BLOCKS = r"blk\.(1|3)\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"
CONFIGS = (
    Config("rpc1moe", CTX, FULL, 1),
    Config("rpc1ncmoe2", CTX, FULL, 1, ("--n-cpu-moe", "2")),
    Config("rpc1cmoe", CTX, FULL, 1, ("--cpu-moe",)),
    Config("rpc1ot13", CTX, FULL, 1, ("-ot", ODD_BLOCKS)),
    Config("rpc1downot", CTX, FULL, 1, ("-ot", r"blk\.2\.ffn_down_exps=CPU")),
    Config("rpc1halfncmoe3", CTX, 3, 1, ("--n-cpu-moe", "3")),
    Config("rpc2ncmoe1", CTX, FULL, 2, ("-ts", "1,1", "--n-cpu-moe", "1")),
    Config("rpc2ot13", CTX, FULL, 2, ("-ts", "1,1", "-ot", ODD_BLOCKS)),
    Config("rpc1cmoefa0", CTX, FULL, 1, ("--cpu-moe", "-fa", "off")),
    Config("rpc1cmoeub1024", CTX, FULL, 1, ("--cpu-moe", "-ub", "1024")),
    Config("rpc3ncmoe2", CTX, FULL, 3, ("-ts", "1,1,1", "--n-cpu-moe", "2")),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-cpp", type=Path, required=True, help="directory of the CPU build")
    parser.add_argument("--output", type=Path, required=True, help="CSV to write")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in MODELS:
            path = write_arch_model(scratch, name, data="sparse")
            for config in CONFIGS:
                extra, log = run_config(args.llama_cpp, path, ARCH_MODELS[name], config)
                rows += csv_rows(name, ARCH_MODELS[name], config, extra, log)
                print(f"recorded {config.run_id(name)}", flush=True)
    write_rows(args.output, rows)


if __name__ == "__main__":
    main()
