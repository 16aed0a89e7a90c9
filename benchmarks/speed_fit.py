"""Fit ``layerfit.speed.calibration`` on the ``fit`` rows of ``speed_truth``'s cases.

The predicted time per token is linear in the constants once each is written as the right
quantity (a bandwidth and a FLOPS rate as their inverses, costs as they are): ``t = t0 + sum_j
theta_j phi_j``. ``phi_j`` is read off the speed model itself (``speed.predict`` with every
constant at 1, and with one of them at 2), so the fit uses the model's own arithmetic and nothing written twice.
The constants are then the least-squares solution over the fit rows with every row weighted by
its measured time (relative errors); a constant the data would take below its bound (0; a GPU's
share of its spec sheet at most 1) is held there and the rest refitted. While reading the
``phi`` the RAM bandwidth bound is lifted (``CPU_BANDWIDTH_EFFICIENCY`` infinite), so the model is
exactly linear; whether that bound binds a row with the fitted figures is printed, and the report
after the fit is the whole model's.

Fitted: the CPU decode constants on the CPU decode times, ``CPU_PROMPT_GFLOPS_PER_THREAD`` on the
CPU prompt speeds; on the GPU decode times (scoreboard and sizes rows), each GPU family's bandwidth
share, and a cost per layer for each family with fit rows of several model sizes, fitted with one
extra per-layer cost per older build (``speed_truth.ERA_LAYER_US``: the sizes rows ran May 2024
builds, their shares taken as today's); the families with rows of one size only take the least
per-layer cost fitted and their shares from their rows. The FP16 shares on the scoreboards' prompt
speeds, and for a family without a scoreboard row on its sizes rows. ``unknown``, and a family with
no fit row, gets the lowest shares and the highest cost found. The fitted constants are set in
``calibration`` for the report that follows and printed for ``layerfit/speed/calibration.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import inf

import numpy as np
from speed_truth import ERA_LAYER_US, Case

from layerfit.speed import calibration

Setter = Callable[[float], None]


def _inverse(name: str) -> Setter:
    return lambda theta: setattr(calibration, name, inf if theta == 0 else 1 / theta)


def _plain(name: str) -> Setter:
    return lambda theta: setattr(calibration, name, theta)


def _family(family: str, field: str, inverse: bool) -> Setter:
    def set_it(theta: float) -> None:
        value = (inf if theta == 0 else 1 / theta) if inverse else theta
        calibration.FAMILIES = {**calibration.FAMILIES, family: calibration.FAMILIES[family]._replace(**{field: value})}

    return set_it


def _measure(cases: Sequence[Case], prompt: bool) -> np.ndarray:
    return np.array([1000 / case.prompt_tok_s if prompt else case.decode_ms for case in cases])


def _predicted(cases: Sequence[Case], prompt: bool) -> np.ndarray:
    speeds = [case.predict() for case in cases]
    return np.array([speed.prompt_ms_per_token if prompt else speed.decode_ms_per_token for speed in speeds])


def linear_fit(
    cases: Sequence[Case], setters: dict[str, Setter], *, prompt: bool, lower: dict[str, float] | None = None
) -> dict[str, float]:
    """The least-squares constants (relative errors) of ``setters`` on ``cases``, each at least its
    ``lower`` bound (default 0): one beyond it is held there and the rest refitted."""
    names = list(setters)
    saved_families, saved = calibration.FAMILIES, {name: getattr(calibration, name, None) for name in dir(calibration)}
    try:
        calibration.CPU_BANDWIDTH_EFFICIENCY = inf
        for setter in setters.values():  # every constant at 1: a time is never 0 there
            setter(1.0)
        reference = _predicted(cases, prompt)
        columns = []
        for name in names:
            setters[name](2.0)
            columns.append(_predicted(cases, prompt) - reference)
            setters[name](1.0)
        base = reference - sum(columns)
    finally:
        for name, value in saved.items():
            if name.isupper():
                setattr(calibration, name, value)
        calibration.FAMILIES = saved_families
    measured = _measure(cases, prompt)
    matrix, target = np.array(columns).T / measured[:, None], (measured - base) / measured
    floors = {name: (lower or {}).get(name, 0.0) for name in names}
    held: dict[int, float] = {}
    while True:
        free = [index for index in range(len(names)) if index not in held]
        rest = target - sum((matrix[:, index] * value for index, value in held.items()), np.zeros_like(target))
        solution, *_ = np.linalg.lstsq(matrix[:, free], rest, rcond=None)
        below = [(index, value) for index, value in zip(free, solution, strict=True) if value < floors[names[index]]]
        if not below:
            break
        index, _ = min(below, key=lambda item: item[1] - floors[names[item[0]]])
        held[index] = floors[names[index]]
    theta = {names[index]: value for index, value in held.items()}
    theta.update({names[index]: float(value) for index, value in zip(free, solution, strict=True)})
    held_at = [names[index] for index in held]
    if held_at:
        print(f"  held at their bound: {', '.join(held_at)}")
    for name, value in theta.items():
        setters[name](value)
    return theta


def fit_all(cases: Sequence[Case]) -> None:
    """Fit every constant on the fit rows, set them in ``calibration`` and print them."""
    cpu = [case for case in cases if case.kind == "cpu" and case.split == "fit"]
    decode = linear_fit(
        cpu,
        {
            "CPU_BANDWIDTH_PER_THREAD_GBPS": _inverse("CPU_BANDWIDTH_PER_THREAD_GBPS"),
            "CPU_DECODE_GFLOPS_PER_THREAD": _inverse("CPU_DECODE_GFLOPS_PER_THREAD"),
            "CPU_LAYER_US": _plain("CPU_LAYER_US"),
            "MAIN_TOKEN_MS": _plain("MAIN_TOKEN_MS"),
            "RPC_SERVER_FIXED_MS": _plain("RPC_SERVER_FIXED_MS"),
            "EXPERT_SPLIT_TRANSFERS": _plain("EXPERT_SPLIT_TRANSFERS"),
        },
        prompt=False,
    )
    prompt = linear_fit(cpu, {"CPU_PROMPT_GFLOPS_PER_THREAD": _inverse("CPU_PROMPT_GFLOPS_PER_THREAD")}, prompt=True)
    gpu = [case for case in cases if case.kind == "gpu" and case.split == "fit"]
    families = sorted({case.family for case in gpu})
    sized = sorted({case.family for case in gpu if case.source == "sizes"})
    pooled = [family for family in families if family not in sized]
    eras = sorted({case.era for case in gpu if case.era})
    shares = {f"{family}.bandwidth": _family(family, "bandwidth", True) for family in families}
    layers = {f"{family}.layer_us": _family(family, "layer_us", False) for family in sized}
    bound = {f"{family}.bandwidth": 1.0 for family in families}  # no GPU reads faster than its spec
    eras_us = {f"era {era}": _era(era) for era in eras}
    sized_shares = {name: setter for name, setter in shares.items() if name.split(".")[0] in sized}
    linear_fit(
        [case for case in gpu if case.family in sized], sized_shares | layers | eras_us, prompt=False, lower=bound
    )
    pooled_layer_us = min(calibration.FAMILIES[family].layer_us for family in sized)
    _shared_layer(pooled)(pooled_layer_us)
    pooled_shares = {name: setter for name, setter in shares.items() if name.split(".")[0] in pooled}
    linear_fit([case for case in gpu if case.family in pooled], pooled_shares, prompt=False, lower=bound)
    scoreboard = [case for case in gpu if case.source == "scoreboard"]
    rated = {case.family for case in scoreboard}
    prompt_rows = scoreboard + [case for case in gpu if case.family not in rated]
    linear_fit(
        prompt_rows,
        {f"{family}.compute": _family(family, "compute", True) for family in families},
        prompt=True,
        lower={f"{family}.compute": 1.0 for family in families},
    )
    print(f"\nfitted on {len(cpu)} CPU rows, {len(scoreboard)} scoreboard rows and {len(gpu) - len(scoreboard)} "
          f"rows of several sizes (decode; prompt: the scoreboard rows, and for {sorted(set(families) - rated)} "
          "their rows of several sizes):")  # fmt: skip
    for name, theta in {**decode, **prompt}.items():
        value = getattr(calibration, name)
        print(f"  {name} = {value:.4g}" + ("  (fitted as its inverse)" if "GBPS" in name or "GFLOPS" in name else ""))
        del theta
    rows = {family: calibration.FAMILIES[family] for family in families}
    for family, row in rows.items():
        own = "its own" if family in sized else f"the least of the others', {pooled_layer_us:.1f}"
        print(f"  FAMILIES[{family!r}] = Family(bandwidth={row.bandwidth:.3f}, compute={row.compute:.3f}, "
              f"layer_us={row.layer_us:.1f})  ({own} per-layer cost)")  # fmt: skip
    for era in eras:
        print(f"  builds {era}: {ERA_LAYER_US[era]:.1f} us more per layer than the current ones")
    worst = calibration.Family(
        bandwidth=min(row.bandwidth for row in rows.values()),
        compute=min(row.compute for row in rows.values()),
        layer_us=max(row.layer_us for row in rows.values()),
    )
    unfitted = sorted(set(calibration.FAMILIES) - set(families) - {"unknown"})
    calibration.FAMILIES = {**calibration.FAMILIES, **dict.fromkeys((*unfitted, "unknown"), worst)}
    print(f"  FAMILIES['unknown'] = {worst}, also for {', '.join(unfitted) or 'no other family'} (no fit row)")
    bound = (
        min(
            case.cluster.worker(case.layout.main_worker).ram_bandwidth_gbps or inf
            for case in cases
            if case.kind == "cpu"
        )
        * calibration.CPU_BANDWIDTH_EFFICIENCY
    )
    most = (
        max(case.settings.threads or 1 for case in cases if case.kind == "cpu")
        * calibration.CPU_BANDWIDTH_PER_THREAD_GBPS
    )
    print(
        f"  the RAM bound (least copy bandwidth x {calibration.CPU_BANDWIDTH_EFFICIENCY}: {bound:.1f} GB/s) "
        f"{'binds no row' if bound >= most else 'binds some rows: the fit is not exact'} (threads reach {most:.1f})"
    )


def _era(era: str) -> Setter:
    return lambda theta: ERA_LAYER_US.__setitem__(era, theta)


def _shared_layer(families: Sequence[str]) -> Setter:
    def set_it(theta: float) -> None:
        calibration.FAMILIES = {
            **calibration.FAMILIES,
            **{family: calibration.FAMILIES[family]._replace(layer_us=theta) for family in families},
        }

    return set_it
