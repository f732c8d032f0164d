"""Byte-identity of the parse commands' output, before and after a change to the parsers.

    python scripts/parse_identity.py save  MANIFEST [--bench]   # record a sha256 of every output
    python scripts/parse_identity.py check MANIFEST [--bench]   # compare; exits 1 on a difference

Runs ``faulthunt xid parse`` (table, ``--json``, ``--incidents``, both) on every committed kernel-log
capture (tests/data/kernlog, the H200 dmesg captures) and ``faulthunt sanitize parse`` (table,
``--json``) on every committed sanitizer capture (tests/data/sanitizer/text, tests/data/h200 san_*,
xml*, xmlrun_*), each as a process, stdout and stderr and the exit status hashed. ``--bench`` adds
the generated bench inputs of scripts/benchrows (kernlog: plain 1%, multi-era 2%, 31+43 unrelated;
sanitizer: 100,000-record memcheck, merged every-tool log), written to a temporary directory from
their fixed seeds. The test suite holds the captures' outputs the same way
(tests/test_parse_identity.py, against tests/data/parse_identity.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"

XID_MODES = [[], ["--json"], ["--incidents"], ["--json", "--incidents"]]
SAN_MODES = [[], ["--json"]]


def kernlog_inputs() -> list[Path]:
    found = sorted(p for p in (DATA / "kernlog").rglob("*") if p.is_file() and p.suffix in (".log", ".txt"))
    return found + sorted((DATA / "h200").glob("dmesg*.txt"))


def sanitizer_inputs() -> list[Path]:
    h200 = DATA / "h200"
    return (sorted((DATA / "sanitizer" / "text").glob("*")) + sorted(h200.glob("san_*.txt"))
            + sorted(h200.glob("xml_*.xml")) + sorted(h200.glob("xmlrun_*.txt")))


def cases() -> list[tuple[list[str], Path]]:
    out = [(["xid", "parse", *mode], p) for p in kernlog_inputs() for mode in XID_MODES]
    out += [(["sanitize", "parse", *mode], p) for p in sanitizer_inputs() for mode in SAN_MODES]
    return out


def bench_cases(tmp: Path) -> list[tuple[list[str], Path]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from benchrows import kernlog, sanitizer

    logs = {"plain": lambda p: kernlog._write(p, 1_000_000, 0.01, kernlog._XID_580),
            "multi": lambda p: kernlog._write(p, 1_000_000, 0.02, kernlog._XID_ERAS, containers=True),
            "unrelated": lambda p: kernlog._write_unrelated(p, 1_000_000, 0.02)}
    out: list[tuple[list[str], Path]] = []
    for name, write in logs.items():
        write(tmp / f"{name}.log")
        out += [(["xid", "parse", *mode], tmp / f"{name}.log") for mode in XID_MODES]
    sanitizer.make_log(tmp / "memcheck.log", 100_000)
    sanitizer.make_mixed_log(tmp / "mixed.log", 100_000)
    out += [(["sanitize", "parse", *mode], tmp / name) for name in ("memcheck.log", "mixed.log")
            for mode in SAN_MODES]
    return out


def digest(argv: list[str], path: Path) -> str:
    """sha256 of the command's exit status, stdout and stderr (paths in stderr made relative)."""
    args = argv[:2] + [str(path)] + argv[2:] if argv[0] == "sanitize" else [*argv, str(path)]
    proc = subprocess.run([sys.executable, "-m", "faulthunt", *args], capture_output=True, cwd=path.parent)
    h = hashlib.sha256(str(proc.returncode).encode())
    h.update(proc.stdout)
    h.update(proc.stderr.replace(str(path).encode(), path.name.encode()))
    return h.hexdigest()


def key(argv: list[str], path: Path) -> str:
    try:
        name = str(path.relative_to(ROOT))
    except ValueError:
        name = "bench/" + path.name
    return " ".join([*argv, name])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("action", choices=("save", "check"))
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--bench", action="store_true", help="also the generated 1M-line / 100,000-record inputs")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="faulthunt-identity-") as tmp:
        todo = cases() + (bench_cases(Path(tmp)) if args.bench else [])
        got = {key(argv, path): digest(argv, path) for argv, path in todo}
    if args.action == "save":
        args.manifest.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{len(got)} outputs recorded in {args.manifest}")
        return 0
    want = json.loads(args.manifest.read_text())
    bad = sorted(k for k in got if want.get(k) != got[k])
    for k in bad:
        print(f"DIFFERENT: {k}" if k in want else f"NOT RECORDED: {k}")
    print(f"{len(got) - len(bad)} of {len(got)} outputs identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
