"""``layerfit replan`` on fleets from 10 to 30,000 GPUs and 1 to 8,192 replicas: wall time
against the time limit.

Each fleet is written by ``fleet_files.fleet_text`` (8 GPUs per worker, 2 on the 10-GPU fleet;
a quarter as many deployments as replicas, half of the replicas running now) to a temporary
YAML file, then ``python -m layerfit.cli replan FILE --time-limit S --json --quiet`` runs it in a
fresh process (``--executor`` as given; ``replan``'s limit counts reading the file). Each row:
the file's size, the command's wall time, the plan's own (``stats[0].wall_time_s``, from the
start of ``plan_fleet``), replicas placed, and the stages the wall clock cut (``safety_stops``).
PASS when every command returns within the limit plus ``ALLOWANCE_S``.

Run: ``.venv/bin/python benchmarks/fleet_scale.py [--gpus 10,1024,30000] [--replicas 1,200,8192]
[--limits 5] [--executor serial|local]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleet_files import fleet_text

ALLOWANCE_S = 1.0
"""Allowed time beyond the limit (as ``time_bounds.FLEET_OVERHEAD_S``)."""


def shape(gpus: int) -> tuple[int, int]:
    """Workers and GPUs per worker for about ``gpus`` GPUs."""
    per_worker = 2 if gpus < 64 else 8
    return max(1, gpus // per_worker), per_worker


def run(path: Path, limit: float, executor: str) -> tuple[float, dict[str, object] | None, str]:
    """The command's wall time, its JSON plan (``None`` when it printed none) and its exit status."""
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "layerfit.cli",
            "replan",
            str(path),
            "--time-limit",
            str(limit),
            "--json",
            "--quiet",
            "--executor",
            executor,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    try:
        plan = json.loads(done.stdout)
    except json.JSONDecodeError:
        return wall, None, f"exit {done.returncode}: {done.stderr.strip()[-200:]}"
    return wall, plan, f"exit {done.returncode}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="10,1024,30000", help="comma-separated GPU counts")
    parser.add_argument("--replicas", default="1,200,8192", help="comma-separated replica counts")
    parser.add_argument("--limits", default="5", help="comma-separated time limits (s)")
    parser.add_argument("--executor", default="serial", choices=["serial", "local"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    passed = True
    print(
        f"{'GPUs':>6} {'replicas':>8} {'limit':>5} {'MB':>5} {'replan':>7} {'plan':>6} {'over':>6} {'placed':>6}  stops"
    )
    with tempfile.TemporaryDirectory() as folder:
        for gpus in (int(g) for g in args.gpus.split(",")):
            for replicas in (int(r) for r in args.replicas.split(",")):
                workers, per_worker = shape(gpus)
                text = fleet_text(workers, per_worker, replicas, max(1, replicas // 4), seed=args.seed)
                path = Path(folder) / f"fleet-{gpus}-{replicas}.yaml"
                path.write_text(text, encoding="utf-8")
                for limit in (float(s) for s in args.limits.split(",")):
                    wall, plan, status = run(path, limit, args.executor)
                    ok = wall <= limit + ALLOWANCE_S
                    passed &= ok
                    if plan is None:
                        print(f"{workers * per_worker:>6} {replicas:>8} {limit:>5g} FAILED {status}")
                        passed = False
                        continue
                    stats = plan["stats"][0]
                    stops = ", ".join(stats.get("safety_stops", ())) or "none"
                    print(
                        f"{workers * per_worker:>6} {replicas:>8} {limit:>5g} {len(text) / 1e6:>5.1f} {wall:>6.2f}s "
                        f"{stats['wall_time_s']:>5.2f}s {wall - limit:>+5.2f}s {len(plan['placements']):>6}  "
                        f"{'' if ok else 'OVER '}{stops} (load {os.getloadavg()[0]:.1f})"
                    )
    print(f"{'PASS' if passed else 'FAIL'}: every replan within its limit + {ALLOWANCE_S} s")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
