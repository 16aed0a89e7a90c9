"""Running independent per-deployment tasks (candidate generation, pricing) on the configured
executor: serially, on a local process pool or as Ray tasks. Results come back in task order, so
every executor gives the same answer."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

from layerfit.domain.fleet import Executor, FleetConfig
from layerfit.errors import InputError

Task = TypeVar("Task")
Result = TypeVar("Result")


def run_tasks(function: Callable[[Task], Result], tasks: Sequence[Task], config: FleetConfig) -> list[Result]:
    """``function`` over ``tasks`` on the configured executor; results in task order.

    ``function`` must be a module-level function (picklable) for the pool and Ray.
    """
    if config.executor is Executor.SERIAL or len(tasks) <= 1:
        return [function(task) for task in tasks]
    if config.executor is Executor.RAY:
        return _ray_map(function, tasks, config)
    processes = config.processes or os.cpu_count() or 1
    if processes <= 1:
        return [function(task) for task in tasks]
    with ProcessPoolExecutor(max_workers=processes) as pool:
        return list(pool.map(function, tasks, chunksize=max(1, len(tasks) // (processes * 4))))


def _ray_map(function: Callable[[Task], Result], tasks: Sequence[Task], config: FleetConfig) -> list[Result]:
    try:
        import ray
    except ImportError:
        raise InputError("executor", "ray is not installed: pip install 'layerfit[ray]'") from None
    if not ray.is_initialized():
        ray.init(num_cpus=config.processes or None, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(function)
    return list(ray.get([remote.remote(task) for task in tasks]))
