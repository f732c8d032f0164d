"""A 200-test suite with planted faults, for scripts/gpu/sanitize_validate.sh and sanitize_bench.sh.

198 (or 199) passing tests each launch a small kernel; test_oob has the off-by-one write (its write
counter shows n + 1); test_streamrace (only with PLANTED_STREAMRACE=1) reads a stream-ordered
allocation on the wrong stream. The library is built by the scripts: $PLANTED_LIB.
"""
import ctypes
import os

import pytest

lib = ctypes.CDLL(os.environ["PLANTED_LIB"])
RACE = os.environ.get("PLANTED_STREAMRACE") == "1"
N_OK = 198 if RACE else 199


@pytest.mark.parametrize("i", range(N_OK))
def test_ok(i):
    assert lib.run_ok() == 0


def test_oob():
    assert lib.run_oob() == 1000, "the reducer wrote more elements than it has"


@pytest.mark.skipif(not RACE, reason="PLANTED_STREAMRACE=1 adds the stream-ordered race")
def test_streamrace():
    assert lib.run_streamrace() == 2000, "scale_stream read data that was not there yet"
