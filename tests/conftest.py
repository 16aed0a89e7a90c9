"""Shared test settings: hypothesis profiles ``dev`` (quick) and ``ci`` (more examples).

Select with ``HYPOTHESIS_PROFILE=ci``; ``.ci/run`` does.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=40, deadline=None, derandomize=True)
settings.register_profile(
    "ci", max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
