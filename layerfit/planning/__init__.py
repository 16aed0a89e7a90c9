"""Planning one deployment: ``plan()`` and ``evaluate()`` (``planner``), the context as a decision
(``context_range``), why nothing fits (``explain``), the device limit's cut (``device_cap``), simple
layouts shared with the fleet (``layouts``) and what a layout leaves free (``usage``).

The planner runs the heuristic, hands its layout to the CP-SAT solver as a hint, and checks the
answer with ``layerfit.check``; the fleet planner and the command line build on it.
"""
