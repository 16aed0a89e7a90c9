"""A port of GPUStack's strategy-ordered GGUF selector, driven by layerfit's memory model.

``plan(cluster, deployment)`` tries GPUStack's five strategies in order: one GPU, several GPUs of
one worker, a main worker plus RPC servers, partial offload on one worker, CPU only. The first
strategy with a candidate wins; its candidates are ordered by GPUStack's placement score and the
best one comes back with up to ``config.alternatives`` others. Every layout is judged by
``memory.claims`` and checked with ``check.check_layout`` before it is returned.

Kept from GPUStack, as documented and configurable limits: the strategy order; at most
``max_rpc_servers`` RPC servers and no distributed search with more than
``max_rpc_candidate_gpus`` candidate GPUs (a warning); the main worker uses all its GPUs that can
hold a layer; one GPU per RPC server; splits proportional to allocatable VRAM; a
``--tensor-split`` maps onto GPUs ``0..n-1`` of a worker (in a distributed layout, onto the
devices in llama.cpp order); the skip rules for ``--gpu-layers``,
``--tensor-split``, manual selection, image models and the two switches.

Fixed on purpose:

* a worker short of RAM that owns the largest GPU no longer ends the single-GPU search;
* the distributed main worker must have RAM for the main process, not only the most VRAM, and
  its GPUs too small for a layer are left out of its devices, as in the other strategies;
* a user ``--tensor-split`` goes through llama.cpp's split rule (GPUStack adds its shares up as
  if they were bytes, so a user split never fits);
* multi-GPU partial offload does not stop at a GPU count that found nothing (GPUStack's stop
  means that with ``--gpu-layers`` it tries one GPU count: the fewest GPUs whose VRAM adds up to
  the layers' one-GPU claim);
* single-GPU partial offload returns every GPU reaching the most layers, not one per worker;
* a manual selection is never left: a ``--tensor-split`` maps onto the selected GPUs instead of
  overriding the selection (``layerfit.domain.selection``);
* the RPC search is budgeted (``heuristics.budget``) instead of trying every combination;
* a unified-memory worker's RAM and VRAM claims must fit its one pool together in every strategy
  (GPUStack's distributed search checks them one at a time, and can over-commit the pool).

Also different: every combination of a worker's equally sized GPUs is returned (GPUStack keeps
the first two); CPU only is tried with a ``--tensor-split`` (llama.cpp ignores the split when no
layer is on a GPU), and a combination whose split leaves one of its GPUs without a layer counts as
the smaller one (except a distributed main worker's GPUs, which stay idle, as in GPUStack, and a
manual selection's, where the empty GPU takes a layer from the GPU holding the most). The
README's "Differences from GPUStack's selector" lists every difference ``benchmarks/gpustack_diff.py``
finds, with its reason.
"""

from layerfit.heuristics.selector import plan

__all__ = ["plan"]
