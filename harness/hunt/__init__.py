"""Hunts that drive repeated runs as a flaky oracle: bisect (which commit/version) and isolate (which predecessors)."""
