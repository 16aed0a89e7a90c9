"""llama.cpp's limit on the devices of one process, measured with the b11434 CPU build (RPC emulation).

Every device of a layout (its RPC servers and the main worker's local GPUs) becomes one backend of
llama.cpp's scheduler, which takes at most 16 (``GGML_SCHED_MAX_BACKENDS``) and always holds the CPU
backend as well. ``-ts`` takes fewer shares than ``llama_max_devices()`` (16). Both come to 15.

Measured (``llama-completion`` with N ``ggml-rpc-server`` devices, ``-ngl 99``, a 20-block model):
15 devices load and generate, also with a 15-share ``-ts``; 16 and 17 abort (SIGABRT) with
``GGML_ASSERT(n_backends <= GGML_SCHED_MAX_BACKENDS) failed``, with or without ``-ts``, at
``-ngl 0`` and with ``--fit off``; 16 endpoints with ``--device`` naming 15 of them run. A 16-share
``-ts`` is refused before loading: ``error while handling argument "-ts": got 16 input configs, but
system only has 16 devices`` (exit 1). A build with an ACCEL backend (BLAS) has one backend, so one
device, fewer; layerfit does not model that.
"""

from __future__ import annotations

MAX_DEVICES = 15
"""Most devices (RPC servers + local GPUs) one llama.cpp process runs with, and most ``-ts`` shares."""

MAX_TIME_LIMIT_S = 1_000_000.0
"""Longest time limit accepted (about 11.6 days): far beyond any useful solve, and small enough that
every stage's share of it, in seconds or milliseconds, stays a finite number the solvers take
(``--time-limit 1e308`` made the fleet's LP time limit infinite: an OverflowError)."""
