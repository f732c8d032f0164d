"""``python -m faulthunt``."""

from faulthunt.cli import console_main

console_main()
