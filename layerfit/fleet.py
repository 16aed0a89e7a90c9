"""plan_fleet(): place many deployments over a whole fleet at once (see the module docs once built)."""

from __future__ import annotations
