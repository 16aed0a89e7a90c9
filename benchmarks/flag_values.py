"""Record which values llama.cpp accepts for the pass-through options layerfit checks.

For every option of ``layerfit.llamacpp.flag_values.CHECKS`` that ``llama-completion`` knows (the
server-only ones, ``--port`` and the like, it does not), and every value of a battery of awkward
ones (signs, spaces, trailing letters, hex, 32-bit limits, subnormal and huge floats, ``inf``,
``nan``, empty), runs ``llama-completion OPTION VALUE --version``: llama.cpp parses the options in
order and ``--version`` exits 0 after a value it accepted, 1 after one it refused ("error while
handling argument"). Writes ``option,value,llama_cpp`` rows (``accepted`` / ``refused``)::

    python benchmarks/flag_values.py --llama-cpp ~/.cache/llamacpp-cpu-11434 \\
        --output tests/fixtures/flag_values.csv

``tests/test_llamacpp_flag_values.py`` checks that layerfit refuses exactly the values llama.cpp refused.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
from pathlib import Path

from layerfit.llamacpp.flag_values import CHECKS

VALUES = (
    "5", "-5", "0", "+7", " 7", "4x", "x4", "", "7.5", "0x10", "2147483647", "2147483648", "-2147483649",
    "18446744073709551616", "1e-40", "1e-45", "0x1p-149", "1.2e-38", "3.4028235e38", "3.4028236e38",
    "inf", "-inf", "nan", "nan(1)", "INFINITY", "1e", ".5", "5.", "-1", "3", "4", "1025", "1024",
    "on", "off", "auto", "none", "yarn", "isolate", "deepseek", "greedy", "ff", "0xff", "zz", "5-2",
    "0-511", "0-512", "-3", "15+1", "15-0.5", "abc+1", "0.5,0.25", "0.5,x",
)  # fmt: skip


def verdict(binary: Path, option: str, value: str) -> str | None:
    """``accepted`` / ``refused``, or ``None`` when llama-completion does not know the option."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    done = subprocess.run([str(binary), option, value, "--version"], capture_output=True, text=True, env=env)
    if f"invalid argument: {option}" in done.stderr:
        return None
    return "accepted" if done.returncode == 0 else "refused"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-cpp", type=Path, required=True, help="folder of the CPU build")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args()
    binary = args.llama_cpp / "llama-completion"
    rows = []
    for option in sorted(CHECKS):
        for value in VALUES:
            result = verdict(binary, option, value)
            if result is None:
                break
            rows.append((option, value, result))
    with open(args.output, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(("option", "value", "llama_cpp"))
        writer.writerows(rows)
    print(f"{len(rows)} values of {len({row[0] for row in rows})} options written to {args.output}")


if __name__ == "__main__":
    main()
