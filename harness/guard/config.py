"""Guard mode settings: what ``--guard [RATE]`` and ``FAULTHUNT_GUARD`` say, parsed and checked.

The whole configuration travels to workers as one spec string in :data:`GUARD_ENV` (the way
``FAULTHUNT_LEDGER`` carries the ledger mode): ``RATE`` alone, or ``RATE`` followed by
``key=value`` pairs separated by commas::

    FAULTHUNT_GUARD=1                         guard every allocation
    FAULTHUNT_GUARD=100,side=left             1 in 100 on average, guard page before the start
    FAULTHUNT_GUARD=1,align=16,max_bytes=4G   16-byte placement, 4 GiB of live guarded memory

Pure: :func:`parse_spec` takes text and returns a :class:`GuardConfig` or raises a
:class:`~faulthunt.errors.UsageError` that says the fix.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from faulthunt.errors import UsageError

#: environment variable carrying the guard spec to workers (unset or "off": guard mode off)
GUARD_ENV = "FAULTHUNT_GUARD"
#: 1 allocation in DEFAULT_RATE is guarded when ``--guard`` has no RATE. Each guarded allocation
#: costs at least one 2 MiB granule of device memory while it lives plus a few driver calls, so the
#: rate keeps both small; :data:`DEFAULT_MAX_BYTES` bounds the memory whatever the rate.
DEFAULT_RATE = 100
#: cudaMalloc's documented alignment: frameworks and libraries may rely on it
DEFAULT_ALIGN = 256
#: live guarded device memory (mapped granules) per process; allocations beyond it go unguarded
DEFAULT_MAX_BYTES = 1 << 30
#: freed guarded slots kept unmapped and reserved (not reused) before their VA is released
DEFAULT_QUARANTINE_SLOTS = 1024
#: and at most this much reserved (unmapped) VA in quarantine: VA costs no device memory
DEFAULT_QUARANTINE_BYTES = 16 << 30
SIDES = ("right", "left")

_SIZE = re.compile(r"^(\d+)([kKmMgGtT]?)(i?[bB]?)?$")
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclasses.dataclass(frozen=True)
class GuardConfig:
    """One process's guard settings (see docs/guard.md)."""

    rate: int = DEFAULT_RATE
    side: str = "right"
    align: int = DEFAULT_ALIGN
    max_bytes: int = DEFAULT_MAX_BYTES
    quarantine_slots: int = DEFAULT_QUARANTINE_SLOTS
    quarantine_bytes: int = DEFAULT_QUARANTINE_BYTES
    #: combined with each test's node id to seed the sampler; None: derived from the run
    seed: int | None = None
    #: frameworks to hook (empty: every one available)
    only: tuple[str, ...] = ()

    def to_spec(self) -> str:
        """The :data:`GUARD_ENV` text that parses back to this config."""
        parts = [str(self.rate)]
        defaults = GuardConfig()
        for f in dataclasses.fields(self):
            if f.name == "rate":
                continue
            v = getattr(self, f.name)
            if v != getattr(defaults, f.name):
                parts.append(f"{f.name}={'+'.join(v) if isinstance(v, tuple) else v}")
        return ",".join(parts)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["only"] = list(self.only)
        return d


def parse_size(text: str, what: str) -> int:
    """``4096``, ``64k``, ``2M``, ``4GiB`` -> bytes."""
    m = _SIZE.match(text.strip())
    if not m:
        raise UsageError(f"{what}: {text!r} is not a size",
                         fix="give bytes, optionally with k, M, G or T (powers of 1024): 4096, 2M, 4G")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _int(text: str, what: str, lo: int) -> int:
    try:
        v = int(text.strip(), 0)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an integer", fix=f"give an integer >= {lo}") from None
    if v < lo:
        raise UsageError(f"{what} must be >= {lo}, not {v}", fix=f"give an integer >= {lo}")
    return v


_KEYS = ("side", "align", "max_bytes", "quarantine_slots", "quarantine_bytes", "seed", "only")
_FIX = ("write RATE[,key=value...], e.g. 1 or 100,side=left,align=16; keys: " + ", ".join(_KEYS))


def parse_spec(text: str) -> GuardConfig | None:
    """A guard spec -> its config; None for an empty spec or ``off``. Pure."""
    s = text.strip()
    if not s or s.lower() in ("off", "0", "none"):
        return None
    head, *pairs = [p.strip() for p in s.split(",")]
    if not head or "=" in head:
        raise UsageError(f"guard spec {text!r} has no RATE", fix=_FIX)
    fields: dict[str, Any] = {"rate": _int(head, "guard RATE", 1)}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in _KEYS:
            raise UsageError(f"guard spec {text!r}: {pair!r} is not one of its settings", fix=_FIX)
        fields[key] = _value(key, value.strip())
    return GuardConfig(**fields)


def _value(key: str, value: str) -> Any:
    if key == "side":
        if value not in SIDES:
            raise UsageError(f"guard side {value!r}", fix="use side=right (overruns) or side=left (underruns)")
        return value
    if key == "align":
        n = _int(value, "guard align", 1)
        if n & (n - 1) or n > 4096:
            raise UsageError(f"guard align {n} is not a power of two up to 4096",
                             fix="use 256 (cudaMalloc's alignment, the default) or 16 (CUDA's widest "
                                 "vector type) to leave less slack after each allocation")
        return n
    if key in ("max_bytes", "quarantine_bytes"):
        return parse_size(value, f"guard {key}")
    if key == "quarantine_slots":
        return _int(value, "guard quarantine_slots", 0)
    if key == "seed":
        return _int(value, "guard seed", 0)
    names = tuple(v for v in value.replace("+", " ").split() if v)
    unknown = [n for n in names if n not in FRAMEWORKS]
    if unknown or not names:
        raise UsageError(f"guard only={value!r}: unknown framework(s) {unknown}",
                         fix=f"name some of {', '.join(FRAMEWORKS)} joined with '+'")
    return names


#: the allocator hooks guard mode knows (docs/guard.md)
FRAMEWORKS = ("cupy", "numba", "cuda_core", "cuda_bindings", "torch")


def _reads_as_path(text: str) -> bool:
    """``tests/``, ``test_x.py``, ``t.py::test_a``, an existing file or directory: what argparse
    took for ``--guard``'s RATE but the user meant for pytest."""
    import os

    return ("/" in text or "::" in text or text.endswith(".py")
            or os.path.exists(text.split("::")[0]))


def spec_from_args(rate: str | None, side: str | None) -> tuple[str | None, str | None]:
    """``--guard [RATE]`` and ``--guard-side`` -> (the canonical spec for workers or None, a
    pytest argument that argparse took for RATE or None).

    ``--guard`` takes an optional value, so in ``--guard tests/`` argparse hands over ``tests/``
    as RATE: a value that does not start with a digit is given back as a test path.
    """
    leftover = None
    if rate is not None and rate.strip() and not rate.strip()[0].isdigit():
        if rate.strip().lstrip("-").isdigit():  # `--guard -3`
            raise UsageError(f"--guard {rate.strip()}: RATE must be >= 1 (1 in RATE allocations "
                             "guarded)", fix="--guard alone (1 in 100) or --guard RATE, RATE >= 1")
        if not _reads_as_path(rate):
            raise UsageError(f"--guard {rate!r} is neither a RATE nor a test path",
                             fix="--guard alone (1 in 100), --guard RATE (an integer >= 1), or "
                                 f"--guard RATE,key=value...; {_FIX}")
        leftover, rate = rate, ""
    if rate is None:
        if side is not None:
            raise UsageError("--guard-side needs --guard", fix="add --guard (or --guard RATE)")
        return None, leftover
    cfg = parse_spec(rate or str(DEFAULT_RATE))
    if cfg is None:  # `--guard 0`: FAULTHUNT_GUARD=0 means off, a command line asks for guard
        raise UsageError(f"--guard {rate!r}: RATE must be >= 1 (1 in RATE allocations guarded)",
                         fix="leave --guard out to run without guard mode, or give --guard 1 "
                             "(every allocation) ... --guard 100 (the default)")
    if side is not None:
        cfg = dataclasses.replace(cfg, side=side)
    return cfg.to_spec(), leftover
