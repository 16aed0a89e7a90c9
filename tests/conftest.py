"""Shared test settings: hypothesis profiles ``dev`` (quick), ``ci`` (more examples) and ``stress``.

Select with ``HYPOTHESIS_PROFILE=ci``; ``.ci/run`` does. Also the remote-header tests' fixtures:
``env`` (a private cache, no token or mirror) and ``hub`` (Hugging Face-like servers).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_fixtures import Server, serving
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=40, deadline=None, derandomize=True)
settings.register_profile(
    "ci", max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "stress", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # random seeds, many examples: for hunting edge cases by hand
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private cache folder, no token, no proxy, no mirror but the ones a test sets."""
    for name in ("HF_TOKEN", "HF_ENDPOINT", "LAYERFIT_CACHE", "LAYERFIT_REMOTE_TIMEOUT", "MODELSCOPE_DOMAIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def hub(env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Server, Server]]:
    """Hugging Face: a resolve endpoint (HF_ENDPOINT) redirecting to a CDN on another port."""
    with serving(Server()) as cdn, serving(Server(redirect_to=None)) as front:
        front.redirect_to = cdn.base
        monkeypatch.setenv("HF_ENDPOINT", front.base)
        yield front, cdn
