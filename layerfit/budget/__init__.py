"""How much each stage may do, and the clocks that stop it.

Work budgets in nominal seconds, fixed by the input and the time limit so that the same input gives
the same answer under any load: ``work`` (``plan()``'s stages and the ``Allowance`` every budget
spends from), ``heuristic`` (the heuristic's counts) and ``fleet`` (``plan_fleet``'s stages). The
wall clock (``deadline``) is only a safety stop. ``progress`` reports long solves as they run.
"""
