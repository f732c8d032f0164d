"""unittest-style tests, as many GPU suites (numba-cuda's among them) are written."""

import unittest

from ops import scale


class TestScale(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.factors = [1, 2, 3]

    def setUp(self):
        self.values = [1.0, 2.0]

    def test_each_factor(self):
        for factor in self.factors:
            with self.subTest(factor=factor):
                self.assertEqual(scale(self.values, factor)[1], 2.0 * factor)

    def test_empty(self):
        self.assertEqual(scale([], 5), [])
