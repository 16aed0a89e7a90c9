"""The CP-SAT model of one deployment, and one call of the solver on it.

The instance (GPU classes, scaled sizes, the deployment's rules), the costs read from
``layerfit.memory``, the capacity arithmetic they share with the bounds (``capacity``), the
variables, one module per constraint family (``constraints``), the objective tiers of
``docs/design.md``, decoding a solution back into a ``Layout``, and ``runner``. This layer imports
nothing from ``shortcuts`` or ``search``.
"""
