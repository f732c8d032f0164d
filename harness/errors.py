"""One base exception for everything faulthunt reports to a user.

Every error carries the cause *and* what to do next (``fix``), in the manner of py-spy and austin:
the CLI prints both and turns the error into an exit code (see :mod:`faulthunt.cli`).
"""

from __future__ import annotations


class FaulthuntError(Exception):
    """Base of all user-facing faulthunt errors.

    ``message`` says what went wrong; ``fix`` says what the user can do about it.
    """

    exit_code: int = 2

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

    exit_code = 2


class InputError(FaulthuntError):
    """Input (a file, a log, a run directory) could not be read at all."""

    exit_code = 3


class RunDirError(FaulthuntError):
    """A run directory is missing or unreadable."""

    exit_code = 3


class ToolMissingError(FaulthuntError):
    """An external tool (compute-sanitizer, py-spy, tmux...) is not installed."""

    exit_code = 4
