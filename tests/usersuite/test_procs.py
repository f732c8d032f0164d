"""Tests that run part of their work in child processes, as suites that isolate crashes do."""

import multiprocessing
import subprocess
import sys


def _square(x):
    return x * x


def test_subprocess_helper():
    out = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "42"


def test_multiprocessing_pool():
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        assert pool.map(_square, [1, 2, 3]) == [1, 4, 9]
