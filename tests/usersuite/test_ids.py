"""Parameter ids that are data, not markup or options: a slash, a space, brackets, HTML."""

import pytest

from ops import scale


@pytest.mark.parametrize("factor", [1, 2, 3, 4],
                         ids=["x/y", "a b", "[bold]", "<script>alert(1)</script>"])
def test_odd(factor):
    assert scale([1], factor) == [factor]
