"""Test fixtures: small GGUF headers written with the ``gguf`` package's writer.

Synthetic models with real shapes (``synthetic``, its ``synthetic_spec`` and
``synthetic_catalogue``), one small model per modelled architecture (``arch_fixtures*``) and
headers that contradict themselves (``contradiction_fixtures``). They need the test extra
(``pip install 'layerfit[test]'``, for ``gguf``); no runtime module imports them.
"""
