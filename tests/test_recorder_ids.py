"""The worker's base node id without a regular expression per test: the same answers as the
pattern it replaced (pytest-repeat's ``<step>-<count>`` between ``-`` or the ends, the last one)."""

from __future__ import annotations

import itertools
import re

from faulthunt.recorder import _without_step


def _by_pattern(ids: str, step: int, count: int | None) -> str:
    """What _without_step answered with ``re.finditer`` (its earlier form)."""
    n = str(count) if count is not None else r"\d+"
    found = list(re.finditer(rf"(?<![^-]){step + 1}-{n}(?![^-])", ids))
    if not found:
        return ids
    left, right = ids[:found[-1].start()], ids[found[-1].end():]
    if left and right:
        return left[:-1] + right
    return left[:-1] if left else right[1:]


def test_without_step_answers_as_the_pattern_did_for_every_short_id() -> None:
    # every id of up to 6 pieces from digits, dashes and a two-digit number: overlapping steps
    # ("1-1-1"), a step inside a longer number ("11-1"), a step at either end or alone
    for k in range(1, 7):
        for parts in itertools.product(("1", "-", "2", "11"), repeat=k):
            ids = "".join(parts)
            for step, count in itertools.product((0, 1, 10), (1, 2, 11, None)):
                assert _without_step(ids, step, count) == _by_pattern(ids, step, count), \
                    (ids, step, count)


def test_without_step_keeps_a_user_parameter_that_looks_like_a_step() -> None:
    assert _without_step("float32-3-50", 2, 50) == "float32"
    assert _without_step("3-50-3-50", 2, 50) == "3-50"
    assert _without_step("13-50", 2, 50) == "13-50"
    assert _without_step("2-5", 1, 5) == ""
