"""Summarise the CPU speed ground truth that ``benchmarks/speed_record.py`` recorded.

Prints, from ``tests/gguf_fixtures/ground_truth/speed/cpu-speed.csv``:

- the CPU-only rows: decode ms per token (median and range), the weight bytes a token reads over
  that time (GB/s), and that figure as a fraction of the host copy bandwidth measured beside it;
- every other sweep as ms per token and prompt tokens/s by configuration;
- the RPC hop: for each group of ``proxy`` rows that differ only in the delay, a least-squares line
  of ms per token against the proxy's measured one-way hold, its slope read as round trips per token
  (each round trip waits the delay twice), per proxied rpc-server::

    python benchmarks/speed_record_summary.py tests/gguf_fixtures/ground_truth/speed/cpu-speed.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

Row = dict[str, str]


def read_rows(path: Path) -> list[Row]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def achieved_gbps(row: Row) -> float:
    """Weight bytes read per decoded token over the median time per token."""
    return float(row["decode_read_bytes"]) / (float(row["ms_per_token"]) * 1e6)


def host_gbps(row: Row) -> float:
    """The copy bandwidth measured beside the row, for the cores the run used."""
    return float(row["host_copy_gbps_2core" if row["threads"] == "2" else "host_copy_gbps_1core"])


def print_cpu(rows: Sequence[Row]) -> None:
    print("CPU only: model, split, threads, tg tok/s [min-max], ms/token, pp tok/s, GB/s read, x host copy")
    for row in rows:
        if row["sweep"] != "cpu":
            continue
        print(
            f"  {row['model']:26s} {row['split']:8s} t{row['threads']} "
            f"{float(row['tg_tok_s']):8.2f} [{float(row['tg_tok_s_min']):7.2f}-{float(row['tg_tok_s_max']):7.2f}] "
            f"{float(row['ms_per_token']):8.2f} ms {float(row['pp_tok_s']):8.1f} "
            f"{achieved_gbps(row):6.2f} {achieved_gbps(row) / host_gbps(row):5.2f}"
        )


def print_sweeps(rows: Sequence[Row]) -> None:
    for sweep in ("ngl", "ncmoe", "rpc2", "knobs"):
        chosen = [row for row in rows if row["sweep"] == sweep]
        if not chosen:
            continue
        print(f"{sweep}: id, tg ms/token [spread %], pp tok/s")
        for row in chosen:
            print(
                f"  {row['id']:60s} {float(row['ms_per_token']):8.2f} [{float(row['ms_per_token_spread_pct']):4.1f}] "
                f"{float(row['pp_tok_s']):8.1f}"
            )


def hop_groups(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """The proxy rows grouped by everything but the delay (rows without a proxy left out)."""
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        if row["sweep"] == "proxy" and row["proxy_delay_ms"]:
            groups[row["id"].rsplit("_delay", 1)[0]].append(row)
    return groups


def print_hops(rows: Sequence[Row]) -> None:
    direct = {row["id"]: row for row in rows if row["sweep"] == "proxy" and not row["proxy_delay_ms"]}
    print("RPC hop: group, servers, ms/token at delays, slope ms/ms, round trips per token per server, proxy cost")
    for group, members in hop_groups(rows).items():
        if len(members) < 2:
            continue
        held = np.array([float(row["proxy_held_ms"] or row["proxy_delay_ms"]) for row in members])
        nominal = np.array([float(row["proxy_delay_ms"]) for row in members])
        ms = np.array([float(row["ms_per_token"]) for row in members])
        slope, intercept = np.polyfit(held, ms, 1)
        servers = int(members[0]["rpc_devices"])
        at = ", ".join(f"{d:g}:{m:.1f}" for d, m in sorted(zip(nominal, ms, strict=True)))
        baseline = direct.get(group)
        proxy_cost = f"{intercept - float(baseline['ms_per_token']):+.2f} ms" if baseline else "n/a"
        print(
            f"  {group:52s} {servers} [{at}] slope {slope:5.2f} -> {slope / 2 / servers:4.2f} round trips, "
            f"proxy at 0 ms {proxy_cost}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path, help="cpu-speed.csv")
    rows = read_rows(parser.parse_args().csv)
    print_cpu(rows)
    print_sweeps(rows)
    print_hops(rows)


if __name__ == "__main__":
    main()
