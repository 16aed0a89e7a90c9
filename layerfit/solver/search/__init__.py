"""The search for one deployment, driving ``solver.model`` and ``solver.shortcuts``.

``solve`` decides which models to build and in which order: the layer ceiling per worker count
(``steps``), the tie-break with the strict tiers fixed (``tie_break_stage``), more layouts as good
(``alternatives``), experts on the host as a decision (``expert_search``); ``trace`` records every
CP-SAT call and ``result`` is what a solve returns.
"""
