"""Prediction intervals from what was measured (orchestrator/model/interval.py): the compute
part from the measured run's per-iteration quantiles where its iterations are at hand (the
normal approximation from ``t_iter_std`` only where they are not), and coverage said with its
count, and as no calibration figure below 10 scored intervals. Synthetic iterations whose
answer is known by hand."""

from __future__ import annotations

import pytest

from orchestrator.model import interval


@pytest.mark.parametrize(("inside", "n", "expect"), [
    (1, 2, "interval coverage 1 of 2 inside = 50% (nominal 80%); n = 2 < 10: n too small to "
           "judge calibration"),
    (7, 9, "interval coverage 7 of 9 inside = 78% (nominal 80%); n = 9 < 10: n too small to "
           "judge calibration"),
    (8, 10, "interval coverage 8 of 10 inside = 80% (nominal 80%)"),
    (0, 0, ""),
])
def test_coverage_says_its_count_and_when_it_is_too_small_to_judge(inside, n, expect):
    assert interval.coverage_text(inside, n, 0.8) == expect
