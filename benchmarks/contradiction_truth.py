"""Run the GGUF files whose metadata contradicts their tensors through llama.cpp and the estimator.

For every case of ``layerfit.testing.contradiction_fixtures`` (``CONTRADICTIONS``, which llama.cpp
should refuse, and ``LOADABLE``, which it should run) this writes the sparse file, runs
``llama-completion`` on it (CPU, a short context, two tokens; ``llama-embedding`` for encoders) and
reads it with the estimator, and writes one CSV row: llama.cpp's exit status and error line, the
estimator's verdict::

    python benchmarks/contradiction_truth.py --llama-cpp ~/.cache/llamacpp-cpu-11434 \\
        --output tests/gguf_fixtures/ground_truth/cpu-contradictions.csv

``tests/test_estimator_tensor_check.py`` checks that the estimator refuses exactly the recorded refusals.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import tempfile
from pathlib import Path

from layerfit.errors import EstimationError
from layerfit.estimators import read_gguf
from layerfit.testing.arch_fixtures import ARCH_MODELS
from layerfit.testing.contradiction_fixtures import CONTRADICTIONS, LOADABLE, write_contradiction

COLUMNS = ("case", "model", "llama_exit", "llama_error", "layerfit")
_ERROR = re.compile(r"(llama_model_load: error loading model: .+|GGML_ASSERT\(.+)")


def run_llama(build: Path, model: Path, encoder: bool = False) -> tuple[int, str]:
    """llama.cpp's exit status on the file and its load error line ("" when it ran); an encoder runs
    under llama-embedding."""
    if encoder:
        command = [str(build / "llama-embedding"), "-m", str(model), "-c", "256"]
    else:
        command = [str(build / "llama-completion"), "-m", str(model), "-c", "256", "-no-cnv", "-n", "2"]
        command += ["--ignore-eos"]
    command += ["-p", "a a a a", "-lv", "4", "-s", "1", "-t", "1"]
    environment = {**os.environ, "LD_LIBRARY_PATH": str(build)}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300)
    match = _ERROR.search(done.stdout + "\n" + done.stderr)
    return done.returncode, match[1].strip() if match else ""


def layerfit_verdict(model: Path) -> str:
    try:
        read_gguf(str(model))
    except EstimationError as error:
        return f"refused: {error.where}: {error.problem}"
    return "accepted"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="folder with llama-completion")
    parser.add_argument("--output", type=Path, help="CSV to write (default: print)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name, case in {**CONTRADICTIONS, **LOADABLE}.items():
            path = write_contradiction(directory, name, case, data="sparse")
            status, error = run_llama(args.llama_cpp, path, ARCH_MODELS[case.model].encoder)
            verdict = layerfit_verdict(path)
            path.unlink()
            rows.append({"case": name, "model": case.model, "llama_exit": str(status), "llama_error": error})
            rows[-1]["layerfit"] = verdict.replace(directory + "/", "")
            print(f"{name:32} llama.cpp {status:>3} {error[:90]!s:92} | layerfit {verdict[:100]}")
    if args.output is not None:
        with open(args.output, "w", newline="") as handle:
            writer = csv.DictWriter(handle, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
