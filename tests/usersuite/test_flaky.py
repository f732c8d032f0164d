"""An intermittent failure, reproducible from a seed: USERSUITE_FLAKY_SEED picks which runs fail
(each run of a repeated test has its own id, so its own draw); unset, it never fails."""

import os
import random


def test_sometimes(request):
    seed = os.environ.get("USERSUITE_FLAKY_SEED")
    if seed is None:
        return
    draw = random.Random(f"{seed}:{request.node.nodeid}").random()
    assert draw >= 0.3, f"flaky: draw {draw:.3f} below 0.3 (seed {seed})"
