"""What the suite tests: a few small functions, one with a doctest.

>>> scale([1, 2], 3)
[3, 6]
"""


def scale(values, factor):
    """Each value times ``factor``.

    >>> scale([0.5], 2)
    [1.0]
    """
    return [v * factor for v in values]
