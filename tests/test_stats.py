from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from faulthunt.stats import miss_probability, runs_to_detect, wilson_interval, z_for


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(37, 400)
    # reference: statsmodels proportion_confint(37, 400, method="wilson") = (0.0678, 0.1249)
    assert lo == pytest.approx(0.0678, abs=5e-4) and hi == pytest.approx(0.1249, abs=5e-4)
    lo, hi = wilson_interval(0, 50)
    assert lo == 0.0 and hi == pytest.approx(0.0713, abs=5e-4)
    assert wilson_interval(5, 5)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


@given(st.integers(1, 5000), st.data())
def test_wilson_contains_point_estimate(runs: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(0, runs))
    lo, hi = wilson_interval(k, runs)
    assert 0.0 <= lo <= k / runs <= hi <= 1.0


def test_runs_to_detect() -> None:
    # a 1-in-8 failure: 23 runs give >= 95% chance to see it at least once
    n = runs_to_detect(1 / 8, 0.95)
    assert n == 23
    assert miss_probability(1 / 8, n) <= 0.05 < miss_probability(1 / 8, n - 1)
    assert runs_to_detect(1.0) == 1
    with pytest.raises(ValueError):
        runs_to_detect(0.0)


def test_z_for_bisection_matches_table() -> None:
    assert z_for(0.975) == pytest.approx(2.2414, abs=1e-3)
    assert math.isclose(z_for(0.95), 1.96, abs_tol=1e-3)
