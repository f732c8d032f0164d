"""Statistics for flaky failures: rates with intervals, and how many runs make a miss unlikely.

Pure functions; used by the stress summary (``by_test.ci95``), the report ("37 of 400 runs, 95%
interval") and bisect (how many passing runs make "good" believable).
"""

from __future__ import annotations

import math

_Z = {0.80: 1.2815515655446004, 0.90: 1.6448536269514722, 0.95: 1.959963984540054,
      0.99: 2.5758293035489004, 0.999: 3.2905267314919255}


def z_for(confidence: float) -> float:
    """Two-sided normal quantile for ``confidence`` (0.95 -> 1.96)."""
    if confidence in _Z:
        return _Z[confidence]
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    # Acklam-free: bisection on erf is plenty for a handful of calls.
    target = 1.0 - (1.0 - confidence) / 2.0
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def wilson_interval(failures: int, runs: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a failure rate ``failures/runs``.

    Well-behaved at 0 and at ``runs`` (unlike the normal approximation), which is where flaky
    tests live: 0 of 50 gives ``(0.0, 0.071)``, not ``(0, 0)``.
    """
    if runs <= 0:
        return (0.0, 1.0)
    if not 0 <= failures <= runs:
        raise ValueError(f"failures must be within 0..{runs}, not {failures}")
    z = z_for(confidence)
    p = failures / runs
    denom = 1.0 + z * z / runs
    centre = (p + z * z / (2 * runs)) / denom
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / denom
    lo = 0.0 if failures == 0 else max(0.0, centre - half)
    hi = 1.0 if failures == runs else min(1.0, centre + half)
    return (lo, hi)


def runs_to_detect(rate: float, confidence: float = 0.95) -> int:
    """Runs needed so that a bug failing at ``rate`` per run shows at least once w.p. ``confidence``.

    ``(1 - rate) ** n <= 1 - confidence``  =>  ``n = ceil(log(1 - confidence) / log(1 - rate))``.
    """
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], not {rate}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if rate >= 1.0:
        return 1
    return max(1, math.ceil(math.log(1.0 - confidence) / math.log(1.0 - rate)))


def miss_probability(rate: float, runs: int) -> float:
    """Probability that ``runs`` runs of a bug failing at ``rate`` all pass."""
    return (1.0 - rate) ** runs


def rate_ruled_out(runs: int, confidence: float = 0.95) -> float:
    """The failure rate that ``runs`` passing runs in a row rule out at ``confidence``.

    The inverse of :func:`runs_to_detect`: a bug failing at a rate above the returned value would
    have shown at least once in ``runs`` runs with probability ``confidence``, so "not reproduced
    in 41 runs" reads "a rate above 7% is unlikely". ``runs`` 0 rules out nothing (1.0).
    """
    if runs < 0:
        raise ValueError(f"runs must be >= 0, not {runs}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if runs == 0:
        return 1.0
    return 1.0 - math.pow(1.0 - confidence, 1.0 / runs)


def fisher_greater(fails_a: int, runs_a: int, fails_b: int, runs_b: int) -> float:
    """One-sided Fisher exact test: the chance, were both groups to fail at the same rate, that
    group A would show ``fails_a`` failures or more given the failures of both together. Small
    (<= 0.05) means A fails more often than B by more than chance (isolate: after predecessors
    vs alone)."""
    total_fails, total = fails_a + fails_b, runs_a + runs_b
    if not runs_a or not runs_b or not total_fails:
        return 1.0
    denom = math.comb(total, total_fails)
    hi = min(runs_a, total_fails)
    return sum(math.comb(runs_a, k) * math.comb(runs_b, total_fails - k)
               for k in range(fails_a, hi + 1)) / denom
