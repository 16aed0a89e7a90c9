"""``LayerfitGGUFSelector``: GPUStack's GGUF candidate selector interface, answered by layerfit.

GPUStack builds its GGUF selector as ``GGUFResourceFitSelector(model, model_instances, cache_dir,
resource_view=resource_view)`` and calls ``await select_candidates(workers)`` then
``get_messages()``. This class takes the same arguments and answers the same calls, so swapping
it in is one line. Differences a GPUStack user sees: no gguf-parser subprocess per GPU
combination (one in-process estimate), placements proven optimal by the solver, every manual
selection honoured as GPUStack does, and typed reasons (``reasons``) beside the messages.

The model's memory comes from its own source (``layerfit.gpustack.sources``): a local path, or a
Hugging Face or ModelScope file (its repository listed as GPUStack lists it, for a file-name
pattern and a projector) whose header is read over HTTP (``layerfit.remote``). The reads and the
plan run in a worker thread: ``select_candidates`` never blocks GPUStack's event loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from layerfit.domain.cluster import Cluster
from layerfit.domain.config import PlannerConfig
from layerfit.domain.deployment import Deployment
from layerfit.domain.plan import Plan, Reason
from layerfit.domain.profile import MemoryProfile
from layerfit.errors import InputError
from layerfit.gpustack.candidates import candidate_dict, gpustack_available, to_gpustack_object
from layerfit.gpustack.fields import as_list, field, record
from layerfit.gpustack.inputs import (
    cluster_from_gpustack,
    config_from_gpustack,
    deployment_from_gpustack,
    workers_by_name,
)
from layerfit.gpustack.messages import gpustack_messages
from layerfit.gpustack.sources import ModelFiles, model_files, with_unified_costs
from layerfit.io.files import reading_once
from layerfit.planning.planner import plan as plan_deployment
from layerfit.planning.profiles import resolve_profile

ProfileSource = MemoryProfile | Callable[[Any], MemoryProfile] | Callable[[Any], Awaitable[MemoryProfile]]
"""A profile, or a function of the GPUStack model returning one (``async def`` too: awaited)."""


def schedule_candidates(
    workers: Sequence[Any],
    model: Any,
    model_instances: Sequence[Any] = (),
    *,
    gguf_path: str | None = None,
    profile: MemoryProfile | None = None,
    config: PlannerConfig = PlannerConfig(),
    resource_view: Any | None = None,
    mmproj: str | None = None,
) -> tuple[list[dict[str, Any]], Plan]:
    """Candidates as dicts in GPUStack's shape (best first, then equally good ones) and the plan.

    An empty list means nothing fits; ``plan.messages`` and ``plan.reasons`` say why. A profile
    estimated from ``gguf_path`` (a path or a remote location; with ``mmproj``, the projector
    found beside it) gets the cluster's unified-memory costs (``sources.with_unified_costs``); a
    profile given is used as given.
    """
    cluster = cluster_from_gpustack(workers, model_instances, resource_view)
    deployment = deployment_from_gpustack(model, gguf_path=gguf_path, profile=profile, cluster=cluster, mmproj=mmproj)
    planner_config = config_from_gpustack(model, config)
    if profile is None:
        profile = with_unified_costs(resolve_profile(deployment), cluster)
    if selects_missing_gpus(cluster, deployment):
        # GPUStack's scheduler passes only the workers it keeps (ready, matching the selector), so a
        # selection may name others: its selector then places nothing and says why, as the heuristic does.
        from layerfit.heuristics.selector import plan as heuristic_plan

        result = heuristic_plan(cluster, deployment, planner_config, profile)
    else:
        result = plan_deployment(cluster, deployment, planner_config, profile)
    chosen = ([result.best] if result.best is not None else []) + list(result.alternatives)
    by_name = workers_by_name(workers)
    return [candidate_dict(candidate, cluster, by_name) for candidate in chosen], result


def selects_missing_gpus(cluster: Cluster, deployment: Deployment) -> bool:
    """The manual selection names a worker or GPU that is not among the workers given."""
    return any(
        not cluster.has_worker(ref.worker) or not cluster.worker(ref.worker).has_gpu(ref.index)
        for ref in deployment.gpu_selection or ()
    )


class LayerfitGGUFSelector:
    """Drop-in for GPUStack's ``GGUFResourceFitSelector`` (same constructor, same calls).

    ``profile`` (a memory profile, or a function of the GPUStack model returning one, plain or
    ``async``) or ``gguf_path`` (a path or a remote location) says what the model needs; by default
    the files the model's own source names are estimated (``sources.model_files``: its
    ``local_path``, Hugging Face or ModelScope file and projector).
    ``output`` is ``"auto"`` (GPUStack's own candidate objects when ``gpustack`` imports and the
    workers are GPUStack objects), ``"objects"`` or ``"dicts"``.
    """

    def __init__(
        self,
        model: Any,
        model_instances: Sequence[Any],
        cache_dir: str | None = None,
        *,
        resource_view: Any | None = None,
        profile: ProfileSource | None = None,
        gguf_path: str | None = None,
        config: PlannerConfig = PlannerConfig(),
        output: str = "auto",
    ) -> None:
        if output not in ("auto", "objects", "dicts"):
            raise InputError("output", f"expected auto, objects or dicts, got {output!r}")
        if profile is not None and not isinstance(profile, MemoryProfile) and not callable(profile):
            shown = type(profile).__name__
            raise InputError("profile", f"expected a MemoryProfile or a function of the model, got {shown}")
        if not isinstance(config, PlannerConfig):
            raise InputError("config", f"expected a PlannerConfig, got {type(config).__name__}")
        self._model = record(model, "model")
        self._model_instances = as_list(model_instances, "model_instances")
        self._cache_dir = cache_dir
        self._resource_view = resource_view
        self._profile = profile
        self._gguf_path = gguf_path
        self._config = config
        self._output = output
        self._messages: list[str] = []
        self.plan: Plan | None = None
        """The last plan: layerfit's typed reasons, relaxations and command lines."""

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """layerfit's typed reasons for the last ``select_candidates`` call."""
        return () if self.plan is None else self.plan.reasons

    def get_messages(self) -> list[str]:
        """What GPUStack shows the user (its event messages) for the last call."""
        return list(self._messages)

    def get_resource_claim(self) -> None:
        """GGUF placements are priced per layer and per GPU: no single claim (as in GPUStack)."""
        return None

    async def _given_profile(self) -> MemoryProfile | None:
        """The profile given (a function of the model called in a worker thread, or awaited)."""
        if self._profile is None or isinstance(self._profile, MemoryProfile):
            return self._profile
        found = await asyncio.to_thread(self._profile, self._model)
        if inspect.isawaitable(found):
            found = await found
        if not isinstance(found, MemoryProfile):
            shown = type(found).__name__
            raise InputError("profile", f"the profile function returned {shown}, not a MemoryProfile")
        return found

    def _schedule(self, workers: Sequence[Any], profile: MemoryProfile | None) -> tuple[list[dict[str, Any]], Plan]:
        """The candidates and the plan; without a profile, from the model's own files (its
        repository listed, its headers read: network I/O, so run in a worker thread)."""
        files = None
        if profile is None:
            files = ModelFiles(model=self._gguf_path) if self._gguf_path else model_files(self._model)
        with reading_once():  # the profile's and the plan's reads of a header are one
            return schedule_candidates(
                workers,
                self._model,
                self._model_instances,
                gguf_path=None if files is None else files.model,
                profile=profile,
                config=self._config,
                resource_view=self._resource_view,
                mmproj=None if files is None else files.mmproj,
            )

    def _wants_objects(self, workers: Sequence[Any]) -> bool:
        if self._output == "auto":
            return gpustack_available() and not any(isinstance(worker, dict) for worker in workers)
        return self._output == "objects"

    async def select_candidates(self, workers: Sequence[Any]) -> list[Any]:
        """GPUStack's candidates for the model on these workers (empty when nothing fits)."""
        self._messages = []
        if not workers:
            self.plan = None
            return []
        profile = await self._given_profile()
        # Off the event loop: the listing and header reads, and the solver's search.
        found, plan = await asyncio.to_thread(self._schedule, workers, profile)
        self.plan = plan
        self._messages = gpustack_messages(plan, selected=field(self._model, "gpu_selector.gpu_ids", None))
        if self._wants_objects(workers):
            return [to_gpustack_object(candidate) for candidate in found]
        return found
