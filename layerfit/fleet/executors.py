"""Running independent per-deployment tasks (candidate generation, pricing) on the configured
executor: serially, on a local process pool or as Ray tasks. Results come back in task order, so
every executor gives the same answer."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Any, TypeVar

from layerfit.domain.fleet import Executor, FleetConfig
from layerfit.errors import InputError

Task = TypeVar("Task")
Result = TypeVar("Result")
Shared = TypeVar("Shared")


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


def start_executor(config: FleetConfig) -> None:
    """Start what the executor needs before a time limit's clock starts: Ray's local instance takes
    2.5 s to start on an idle two-core machine (much more under load), which inside the limit left
    the plan's stages no time (replan of the example fleet at --time-limit 3 ended its search at
    the greedy start), and its workers start on their first tasks, each loading the fleet package:
    one such task per CPU is run here. Nothing for the other executors."""
    if config.executor is Executor.RAY:
        ray = _ray(config)
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        ray.get([ray.remote(_load_fleet).remote() for _ in range(workers)])


def _load_fleet() -> None:
    """A Ray worker's first task: the fleet package loaded, as every later task needs it (by name,
    as unpickling a task loads it: this module is part of the package)."""
    importlib.import_module("layerfit.fleet")


def _ray(config: FleetConfig) -> Any:
    """Ray, started if it is not yet."""
    try:
        import ray
    except ImportError:
        raise InputError("executor", "ray is not installed: pip install 'layerfit[ray]'") from None
    if not ray.is_initialized():
        ray.init(num_cpus=config.processes or None, include_dashboard=False, log_to_driver=False)
    return ray


def _ray_map(function: Callable[[Task], Result], tasks: Sequence[Task], config: FleetConfig) -> list[Result]:
    ray = _ray(config)
    remote = ray.remote(function)
    return list(ray.get([remote.remote(task) for task in tasks]))


_SHARED: list[Any] = []
"""In a pool's process: what every task shares (set once, by ``_keep``)."""


def _keep(shared: object) -> None:
    _SHARED[:] = [shared]


def _with_kept(function: Callable[[Any, Task], Result], task: Task) -> Result:
    return function(_SHARED[0], task)


def _with_given(function: Callable[[Shared, Task], Result], shared: Shared, task: Task) -> Result:
    return function(shared, task)


def run_shared(
    function: Callable[[Shared, Task], Result], shared: Shared, tasks: Sequence[Task], config: FleetConfig
) -> list[Result]:
    """``function(shared, task)`` over ``tasks`` on the configured executor; results in task order.

    ``shared`` (a large cluster, say) goes to each process once, not with every task: a cluster of
    30,000 GPUs takes 0.3 s to unpickle, which per task made a pool slower than no pool.
    """
    if config.executor is Executor.SERIAL or len(tasks) <= 1:
        return [function(shared, task) for task in tasks]
    if config.executor is Executor.RAY:
        ray = _ray(config)
        held = ray.put(shared)  # a top-level argument: each task gets the object, fetched once per node
        remote = ray.remote(_with_given)
        return list(ray.get([remote.remote(function, held, task) for task in tasks]))
    processes = config.processes or os.cpu_count() or 1
    if processes <= 1:
        return [function(shared, task) for task in tasks]
    with ProcessPoolExecutor(max_workers=processes, initializer=_keep, initargs=(shared,)) as pool:
        chunks = max(1, len(tasks) // (processes * 4))
        return list(pool.map(partial(_with_kept, function), tasks, chunksize=chunks))
