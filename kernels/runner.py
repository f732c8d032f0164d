"""Run one planted kernel in a fresh process: ``python -m faulthunt.kernels.runner NAME``.

A memory fault poisons the CUDA context of the process it happens in, so a kernel that must be
judged on its own (the validation script, ``faulthunt kernels run``) gets a process of its own.
The child prints one line ``FAULTHUNT-KERNEL-RESULT {json}`` and exits 0 (result correct),
1 (wrong result or a CUDA error), 3 (this flavour cannot run here); a native crash shows as the
signal that ended it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

RESULT_PREFIX = "FAULTHUNT-KERNEL-RESULT "
EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class RunnerOutcome:
    """What one fresh-process run of a planted kernel left behind."""

    name: str
    variant: str
    flavour: str
    returncode: int | None      # None: it ran past the timeout and was killed
    stdout: str
    stderr: str
    result: dict[str, Any] | None  # the child's result line, if it got that far
    duration: float

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "variant": self.variant, "flavour": self.flavour,
                "returncode": self.returncode, "signal": self.signal, "result": self.result,
                "duration": round(self.duration, 3), "stderr_tail": self.stderr[-2000:]}


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The last ``FAULTHUNT-KERNEL-RESULT`` object in ``stdout`` (None if there is none)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                obj = json.loads(line[len(RESULT_PREFIX):])
            except ValueError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


def run_isolated(name: str, variant: str = "bug", flavour: str = "cuda", *,
                 backend: str | None = None, timeout: float = 120.0,
                 env: Mapping[str, str] | None = None,
                 prefix: Sequence[str] = ()) -> RunnerOutcome:
    """Run one planted kernel in a fresh ``python -m faulthunt.kernels.runner`` process.

    ``prefix`` goes in front of the interpreter, e.g. ``("compute-sanitizer", "--tool",
    "racecheck")``. The timeout is a backstop only: every planted kernel ends by itself.
    """
    cmd = [*prefix, sys.executable, "-m", "faulthunt.kernels.runner", name,
           "--variant", variant, "--flavour", flavour]
    if backend:
        cmd += ["--backend", backend]
    child_env = dict(os.environ)
    child_env.update(env or {})
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return RunnerOutcome(name, variant, flavour, None, out, err, parse_result(out),
                             time.monotonic() - t0)
    return RunnerOutcome(name, variant, flavour, proc.returncode, proc.stdout, proc.stderr,
                         parse_result(proc.stdout), time.monotonic() - t0)


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(RESULT_PREFIX + json.dumps(record) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    from faulthunt.kernels import catalog
    from faulthunt.kernels.results import VARIANTS, Unavailable

    parser = argparse.ArgumentParser(prog="python -m faulthunt.kernels.runner",
                                     description="run one planted kernel in this process")
    parser.add_argument("name", choices=catalog.names())
    parser.add_argument("--variant", choices=VARIANTS, default="bug")
    parser.add_argument("--flavour", choices=(catalog.CUDA, catalog.NUMBA), default=catalog.CUDA)
    parser.add_argument("--backend", choices=("gpu", "sim", "auto"), default=None)
    args = parser.parse_args(argv)

    from faulthunt.kernels import backend as be

    chosen = be.prepare(None if args.backend in (None, "auto") else args.backend)
    record: dict[str, Any] = {"name": args.name, "variant": args.variant,
                              "flavour": args.flavour, "backend": chosen, "pid": os.getpid()}
    print(f"planted {args.name} ({args.variant}, {args.flavour}, backend {chosen}) pid={os.getpid()}",
          flush=True)
    try:
        check = be.run(args.name, args.variant, args.flavour, chosen)
    except Unavailable as exc:
        _emit({**record, "status": "unavailable", "detail": str(exc)})
        return EXIT_UNAVAILABLE
    except Exception as exc:  # noqa: BLE001 - the planted error itself, of any type: report it as the test would see it
        traceback.print_exc()
        _emit({**record, "status": "error", "error": f"{type(exc).__name__}: {exc}"})
        return EXIT_FOUND
    _emit({**record, "status": "correct" if check.correct else "wrong", "detail": check.detail})
    return EXIT_OK if check.correct else EXIT_FOUND


if __name__ == "__main__":
    sys.exit(main())
