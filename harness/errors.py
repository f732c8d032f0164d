"""One base exception for everything faulthunt reports to a user.

Every error carries the cause *and* what to do next (``fix``), in the manner of py-spy and austin:
the CLI prints both and turns the error into an exit code (see :mod:`faulthunt.cli`).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit statuses of every faulthunt command (docs/stress.md).

    Here, at the bottom of the import graph, so that engines (stress, sanitize) can record the
    status of a run in its documents without importing the CLI; :func:`faulthunt.cli.main` is
    still the one place that turns results and errors into the process's exit status.
    """

    OK = 0
    #: the command ran and found something: failures, crashes, hangs, Xids, sanitizer errors
    FOUND = 1
    USAGE = 2
    BAD_INPUT = 3
    TOOL_MISSING = 4
    INTERRUPTED = 130


class FaulthuntError(Exception):
    """Base of all user-facing faulthunt errors.

    ``message`` says what went wrong; ``fix`` says what the user can do about it.
    """

    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        if self.fix:
            return f"{self.message}\n  fix: {self.fix}"
        return self.message


class UsageError(FaulthuntError):
    """The command line asks for something that cannot be done."""

    exit_code = ExitCode.USAGE


class InputError(FaulthuntError):
    """Input (a file, a log, a run directory) could not be read at all."""

    exit_code = ExitCode.BAD_INPUT


class RunDirError(FaulthuntError):
    """A run directory is missing or unreadable."""

    exit_code = ExitCode.BAD_INPUT


class ToolMissingError(FaulthuntError):
    """An external tool (compute-sanitizer, py-spy, tmux...) is not installed."""

    exit_code = ExitCode.TOOL_MISSING
