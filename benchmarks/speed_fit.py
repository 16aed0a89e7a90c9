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
CPU prompt speeds, each GPU family's bandwidth and compute shares and one fixed cost per layer
shared by the GPU families on the scoreboard rows. ``unknown`` gets the lowest shares and the
highest cost found. The fitted constants are set in ``calibration`` for the report that follows
and printed for ``layerfit/speed/calibration.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from math import inf
from typing import Any

import numpy as np
from speed_truth import Case

from layerfit.speed import calibration

Setter = Callable[[float], None]


@contextmanager
def patched(**values: Any) -> Iterator[None]:
    saved = {name: getattr(calibration, name) for name in values}
    for name, value in values.items():
        setattr(calibration, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(calibration, name, value)


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
    shares = linear_fit(
        gpu,
        {f"{family}.bandwidth": _family(family, "bandwidth", True) for family in families}
        | {"layer_us": _shared_layer(families)},
        prompt=False,
        lower={f"{family}.bandwidth": 1.0 for family in families},  # no GPU reads faster than its spec
    )
    compute = linear_fit(
        gpu,
        {f"{family}.compute": _family(family, "compute", True) for family in families},
        prompt=True,
        lower={f"{family}.compute": 1.0 for family in families},
    )
    print("\nfitted on", len(cpu), "CPU rows and", len(gpu), "scoreboard rows:")
    for name, theta in {**decode, **prompt}.items():
        value = getattr(calibration, name)
        print(f"  {name} = {value:.4g}" + ("  (fitted as its inverse)" if "GBPS" in name or "GFLOPS" in name else ""))
        del theta
    rows = {family: calibration.FAMILIES[family] for family in families}
    for family, row in rows.items():
        print(f"  FAMILIES[{family!r}] = Family(bandwidth={row.bandwidth:.3f}, compute={row.compute:.3f}, "
              f"layer_us={row.layer_us:.1f})")  # fmt: skip
    del shares, compute
    worst = calibration.Family(
        bandwidth=min(row.bandwidth for row in rows.values()),
        compute=min(row.compute for row in rows.values()),
        layer_us=max(row.layer_us for row in rows.values()),
    )
    calibration.FAMILIES = {**calibration.FAMILIES, "unknown": worst}
    print(f"  FAMILIES['unknown'] = {worst}")
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


def _shared_layer(families: Sequence[str]) -> Setter:
    def set_it(theta: float) -> None:
        calibration.FAMILIES = {
            **calibration.FAMILIES,
            **{family: calibration.FAMILIES[family]._replace(layer_us=theta) for family in families},
        }

    return set_it
