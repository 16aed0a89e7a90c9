"""Measure llama.cpp's limit on the devices of one process (``layerfit.domain.limits``).

Runs ``llama-completion`` (CPU build with RPC) on a 20-block synthetic llama with N local
``ggml-rpc-server`` devices, with and without a ``-ts``, and prints each run's exit status and
llama.cpp's own error line::

    python benchmarks/device_limit.py --llama-cpp ~/.cache/llamacpp-cpu-11434

Every run takes about 2 s and 250 MiB; the rpc-servers are started on 127.0.0.1 and stopped by PID.
The script exits non-zero when llama.cpp disagrees with ``MAX_DEVICES``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from truth_recording import _binary, _environment, rpc_servers

from layerfit.domain.limits import MAX_DEVICES
from layerfit.testing.arch_fixtures import ARCH_MODELS, TOKENIZER, arch_tensor_table
from layerfit.testing.synthetic import write_gguf

BLOCKS = 20
_ERROR = re.compile(r"GGML_ASSERT\(.*\) failed|error while handling argument.*|invalid value.*")


def _split(devices: int) -> tuple[str, ...]:
    return ("-ts", ",".join(["1"] * devices))


CASES: tuple[tuple[int, tuple[str, ...], bool], ...] = (
    # (rpc devices, extra flags, llama.cpp starts)
    (MAX_DEVICES, (), True),
    (MAX_DEVICES, _split(MAX_DEVICES), True),
    (1, _split(MAX_DEVICES), True),
    (1, _split(MAX_DEVICES + 1), False),
    (MAX_DEVICES + 1, (), False),
    (MAX_DEVICES + 1, _split(MAX_DEVICES), False),
    (MAX_DEVICES + 1, ("-ngl", "0"), False),
    (MAX_DEVICES + 1, ("--fit", "off"), False),
    (MAX_DEVICES + 1, ("--device", ",".join(f"RPC{i}" for i in range(MAX_DEVICES))), True),
    (MAX_DEVICES + 2, (), False),
)


def run_case(build: Path, model: Path, devices: int, extra: tuple[str, ...]) -> tuple[int, str]:
    """llama.cpp's exit status and its error line ('' when none)."""
    with rpc_servers(build, devices) as endpoints:
        command = [str(_binary(build, "llama-completion")), "-m", str(model), "-c", "512", "-ngl", "99"]
        command += ["--rpc", ",".join(endpoints), *extra, "-no-cnv", "-n", "1", "-p", "a a", "-t", "1", "-s", "1"]
        done = subprocess.run(command, env=_environment(build), capture_output=True, text=True, timeout=300)
    found = _ERROR.search(done.stdout + done.stderr)
    return done.returncode, found.group(0) if found else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="folder of the CPU build with RPC")
    args = parser.parse_args()
    spec = ARCH_MODELS["llama-q4_0"].model_copy(update={"block_count": BLOCKS, "name": f"llama{BLOCKS}"})
    disagreements = 0
    with tempfile.TemporaryDirectory() as scratch:
        model = Path(scratch) / "llama.gguf"
        tensors = arch_tensor_table(spec)
        write_gguf(model, spec, data="sparse", tokenizer=True, tensors=tensors, tokenizer_model=TOKENIZER)
        print(f"MAX_DEVICES = {MAX_DEVICES}; {BLOCKS}-block llama, -ngl 99 unless given")
        for devices, extra, starts in CASES:
            code, error = run_case(args.llama_cpp.expanduser(), model, devices, extra)
            agrees = (code == 0) == starts
            disagreements += not agrees
            flags = " ".join(extra) if len(" ".join(extra)) < 40 else f"{extra[0]} ({extra[1].count(',') + 1} names)"
            print(f"{devices:3d} rpc devices  {flags:<40} rc {code:4d}  {'ok ' if agrees else 'BAD'}  {error}")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
