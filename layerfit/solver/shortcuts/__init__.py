"""Answers that avoid building or searching a CP-SAT model, each exact for the tiers it is used for.

Proofs without a model (``proofs``), bounds on layers and GPUs (``layer_bound``, ``gpu_count``),
dominance pruning (``prune``), the spread tie-break in a fixed order (``ordered_reserve``), a
tie-break decided by a bound (``tie_break_bound``), a better tie-break without a search
(``reassign``) and greedy witnesses that hint a model (``witness``). Built on ``solver.model``
only; ``solver.search`` decides when each is used.
"""
