"""The wording of predicted figures: three significant digits, no exponent form, and only the decode
terms that matter named among the largest."""

from __future__ import annotations

import pytest

from layerfit.domain.speed import SpeedPrediction, SpeedTerm, figure


@pytest.mark.parametrize(
    ("value", "text"), [(0.5014, "0.501"), (62.74, "62.7"), (99.94, "99.9"), (138.6, "139"), (1998.2, "1,998")]
)
def test_a_figure_has_three_digits_and_no_exponent(value: float, text: str) -> None:
    assert figure(value) == text


def _prediction(*ms: float) -> SpeedPrediction:
    terms = tuple(SpeedTerm(where=f"d{i}", ms=value, why="test") for i, value in enumerate(ms))
    return SpeedPrediction(context_fill=0, terms=terms, prompt_terms=(SpeedTerm(where="p", ms=1.0, why="test"),))


def test_a_term_under_one_percent_is_not_named_unless_it_is_the_largest() -> None:
    assert [t.where for t in _prediction(62.7, 0.004).largest_terms()] == ["d0"]
    assert [t.where for t in _prediction(25.0, 22.2, 0.2).largest_terms()] == ["d0", "d1"]
    assert [t.where for t in _prediction(0.004).largest_terms()] == ["d0"]
    assert _prediction(1998.0, 30.0).largest_text() == "d0 1,998 ms, d1 30 ms"
