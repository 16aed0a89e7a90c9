"""Shared test settings: hypothesis profiles ``dev`` (quick), ``ci`` (more examples) and ``stress``.

Select with ``HYPOTHESIS_PROFILE=ci``; ``.ci/run`` does.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=40, deadline=None, derandomize=True)
settings.register_profile(
    "ci", max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "stress", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # random seeds, many examples: for hunting edge cases by hand
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
