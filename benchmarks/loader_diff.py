"""Differential of layerfit's GGUF acceptance against llama.cpp's loader, over mutated files.

For each architecture model of ``layerfit.testing.arch_fixtures.ARCH_MODELS`` (or ``--models``)
this writes the model with a small vocabulary and then ``--count`` seeded header-level mutations
of it (``loader_diff_mutations``: a tensor dropped, added, reshaped or retyped; a hyperparameter
changed, removed, retyped or made a per-layer array; a tokenizer key missing or of the wrong type),
each a sparse file of a few blocks. Every file is run through llama.cpp (``llama-completion``,
``llama-embedding`` for encoders; CPU, ``-c 256``, two tokens, one thread, one process at a time,
with a timeout) and through layerfit (``read_gguf`` then ``estimate_profile`` at ``-c 256``). A
row per file records llama.cpp's exit status and first error line and layerfit's verdict; every
disagreement is printed::

    python benchmarks/loader_diff.py --llama-cpp ~/.cache/llamacpp-cpu-11434 --seed 1 --count 300 \\
        --models llama-q4_0,qwen3moe-q8_0 --output /tmp/loader-diff.csv

Verdicts: ``agree`` (both refuse, or both load), ``false-acceptance`` (llama.cpp refused the file,
layerfit estimated it), ``false-refusal`` (llama.cpp ran it, layerfit refused it),
``layerfit-crash`` (an exception other than a refusal), ``llama-timeout``.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).parent))
from loader_diff_files import GgufModel, base_model, write_model
from loader_diff_mutations import mutate

from layerfit.domain.choices import ModelKind
from layerfit.domain.params import LlamaParams
from layerfit.errors import EstimationError, InputError
from layerfit.estimators import estimate_profile, read_gguf
from layerfit.testing.arch_fixtures import ARCH_MODELS

COLUMNS = ("index", "model", "kind", "mutation", "llama_exit", "llama_error", "layerfit", "verdict")
PROMPT = "a a a a"
CONTEXT = 256
_ERROR = re.compile(
    r"(error loading model: .+|GGML_ASSERT\(.+|[\w./-]+\.(?:cpp|c|h):\d+: .+"
    r"|terminate called .+|error: .+|failed to .+)"
)


class Case(NamedTuple):
    index: str
    """The mutation's number, ``base`` for the unchanged model."""
    kind: str
    mutation: str
    model: GgufModel


def run_llama(build: Path, model: Path, encoder: bool, timeout: float, tries: int = 3) -> tuple[str, str]:
    """llama.cpp's exit status on the file (``timeout`` past the limit) and its first error line.

    llama.cpp logs from a thread that may not flush before the process exits, so a failed run whose
    log has no error line is run again (up to ``tries`` runs; the status is the last run's)."""
    tool = "llama-embedding" if encoder else "llama-completion"
    generation = ["-p", PROMPT] if encoder else ["-no-cnv", "-n", "2", "--ignore-eos", "-p", PROMPT]
    command = [str(build / tool), "-m", str(model), "-c", str(CONTEXT), *generation, "-t", "1", "-s", "1"]
    environment = {**os.environ, "LD_LIBRARY_PATH": str(build), "GGML_NO_BACKTRACE": "1"}
    status, line = "", ""
    for _ in range(tries):
        try:
            done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", ""
        if done.returncode == 0:
            return "0", ""
        log = done.stdout + "\n" + done.stderr
        match = _ERROR.search(log)
        status = str(done.returncode)
        line = (match[1] if match else next((x for x in reversed(log.splitlines()) if x.strip()), "")).strip()
        if match:
            break
    return status, line[:300]


def layerfit_verdict(model: Path) -> str:
    """``accepted``, ``refused: WHERE: PROBLEM`` or ``crashed: TYPE: MESSAGE``."""
    try:
        shape = read_gguf(str(model))
        kind = ModelKind.LLM if shape.causal else ModelKind.EMBEDDING
        estimate_profile(shape, LlamaParams(ctx_size=CONTEXT), kind=kind)
    except EstimationError as error:
        return f"refused: {error.where}: {error.problem}"
    except InputError as error:
        return f"refused: {error}"
    except Exception as error:  # any other exception is a finding of its own
        return f"crashed: {type(error).__name__}: {error}"
    return "accepted"


def verdict(llama_exit: str, layerfit: str) -> str:
    if llama_exit == "timeout":
        return "llama-timeout"
    if layerfit.startswith("crashed"):
        return "layerfit-crash"
    llama_loads, layerfit_accepts = llama_exit == "0", layerfit == "accepted"
    if llama_loads == layerfit_accepts:
        return "agree"
    return "false-refusal" if llama_loads else "false-acceptance"


def cases(models: Sequence[str], seed: int, count: int) -> Iterator[Case]:
    """Each model unchanged, then ``count`` mutations over the models (mutation ``i`` seeded by
    ``seed`` and ``i`` alone, so a longer run repeats a shorter one's mutations)."""
    bases = {name: base_model(name) for name in models}
    for model in bases.values():
        yield Case("base", "none", "unchanged", model)
    for index in range(count):
        rng = random.Random(f"{seed}/{index}")
        model = bases[rng.choice(list(models))]
        kind, description, mutated = mutate(model, rng)
        yield Case(str(index), kind, description, mutated)


def run_case(build: Path, directory: Path, case: Case, timeout: float) -> dict[str, str]:
    path = write_model(directory / f"{case.model.name}-{case.index}.gguf", case.model)
    try:
        status, error = run_llama(build, path, case.model.encoder, timeout)
        ours = layerfit_verdict(path).replace(str(directory) + "/", "")
    finally:
        path.unlink()
    row = {"index": case.index, "model": case.model.name, "kind": case.kind, "mutation": case.mutation}
    return row | {"llama_exit": status, "llama_error": error, "layerfit": ours, "verdict": verdict(status, ours)}


def summary(rows: Sequence[dict[str, str]]) -> str:
    """Counts by verdict, and the disagreements by mutation kind."""
    mutated = [row for row in rows if row["index"] != "base"]
    verdicts = Counter(row["verdict"] for row in mutated)
    lines = [f"{len(mutated)} mutations: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items()))]
    refused = sum(row["llama_exit"] != "0" for row in mutated)
    lines.append(f"llama.cpp refused {refused}, ran {len(mutated) - refused}")
    by_kind = Counter((row["kind"], row["verdict"]) for row in mutated if row["verdict"] != "agree")
    lines += [f"  {kind:16} {v:18} {n}" for (kind, v), n in sorted(by_kind.items())]
    bases = [row for row in rows if row["index"] == "base" and row["verdict"] != "agree"]
    lines += [f"unchanged model disagrees: {row['model']} ({row['llama_error']}; {row['layerfit']})" for row in bases]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="folder with llama-completion")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=200, help="mutations in all (default 200)")
    parser.add_argument("--models", default="", help="comma-separated ARCH_MODELS names (default: all)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per llama.cpp run")
    parser.add_argument("--output", type=Path, help="CSV to write")
    args = parser.parse_args(argv)
    models = [name for name in args.models.split(",") if name] or list(ARCH_MODELS)
    unknown = sorted(set(models) - set(ARCH_MODELS))
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases(models, args.seed, args.count):
            row = run_case(args.llama_cpp, Path(scratch), case, args.timeout)
            rows.append(row)
            if row["verdict"] != "agree":
                print(f"{row['index']:>5} {row['model']:18} {row['verdict']:16} {row['mutation']}", flush=True)
                print(f"      llama.cpp {row['llama_exit']}: {row['llama_error'][:150]}")
                print(f"      layerfit: {row['layerfit'][:150]}", flush=True)
    print(summary(rows))
    if args.output is not None:
        with open(args.output, "w", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
