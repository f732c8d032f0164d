"""Planted faults and their twins, as a user's test suite would exercise them.

``test_planted`` runs each planted bug (in intermittent mode: the bug in 1 run of N, the twin
otherwise) and asserts what a correct kernel computes, so a bug fails the test only where the
catalog says it shows in a plain run: a CUDA error, a wrong result, a crash, a hang. Silent
corruption (a write one past the end inside a mapped page) passes: compute-sanitizer is what sees
it. ``test_twin`` runs the correct twin and must always pass.
"""

from __future__ import annotations

import os

import pytest

from faulthunt.kernels import backend, catalog
from faulthunt.kernels.results import BUG, TWIN, Unavailable

BACKEND = os.environ.get(backend.BACKEND_ENV) or backend.prepare()
EVERY = int(os.environ.get("FAULTHUNT_PLANT_EVERY", "1") or 1)
#: "random": a fresh draw every run, independent of the test id (not reproducible by seed)
_SEED = os.environ.get("FAULTHUNT_PLANT_SEED", "0") or "0"
SEED = None if _SEED == "random" else int(_SEED)

CASES = [pytest.param(f.name, flavour, id=f"{f.name}-{flavour}")
         for f in catalog.CATALOG for flavour in backend.flavours_for(f, BACKEND)]


def _run(name: str, variant: str, flavour: str) -> None:
    try:
        check = backend.run(name, variant, flavour, BACKEND)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert check.correct, f"planted {name} ({variant}, {flavour}): {check.detail}"


@pytest.mark.parametrize("name,flavour", CASES)
def test_planted(name: str, flavour: str, request: pytest.FixtureRequest) -> None:
    variant = BUG if catalog.fires(request.node.nodeid, EVERY, SEED) else TWIN
    _run(name, variant, flavour)


@pytest.mark.parametrize("name,flavour", CASES)
def test_twin(name: str, flavour: str) -> None:
    _run(name, TWIN, flavour)
