"""Guard mode's H200 run still reads the same with today's code (tests/data/guard/h200/PROVENANCE.md).

The run's ledgers and Xid 31 lines are real: each fault's page, read through the run reader and
the ledger reader and judged by `guard_verdict`, must give the very text the H200 run printed; the
validation's own judge over the run directory must give the recorded rows; the mapper must give
the same verdicts. The planted stage of that run collected nothing (a faulthunt bug since fixed):
the recorded command line pins why, so the docs cannot claim those rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

from faulthunt.guard import GuardIndex, guard_verdict
from faulthunt.ledger.reader import load_ledger, read_ledger_file
from faulthunt.mapper import map_run
from faulthunt.rundir import RunDir
from gpuscript import load_gpu_script

D = Path(__file__).parent / "data" / "guard" / "h200"
RUN = D / "faults_run"
RESULTS = json.loads((D / "results.json").read_text())
#: the fault tests and the verdict each must get (scripts/gpu/guard_validate.py FAULTS)
WANT = {"test_cupy_write_one_past": "past_end", "test_cupy_read_one_past": "past_end",
        "test_numba_write_one_past": "past_end", "test_cupy_use_after_free": "freed"}


def _validator() -> ModuleType:
    return load_gpu_script("guard_validate")


def _printed() -> dict[str, dict]:
    return {r["test"]: r for r in RESULTS["faults"]["rows"]}


def test_the_probe_guarded_every_hook_and_its_ledger_says_so() -> None:
    rows = [r for r in RESULTS["probe"]["rows"] if r["framework"] != "totals"]
    assert [r["framework"] for r in rows] == ["cuda_bindings", "cupy", "numba", "cuda_core", "torch"]
    assert all(r["guarded"] and r["data_ok"] and r["unmapped"] and r["ok"] for r in rows)
    index = GuardIndex.from_records(read_ledger_file(D / "probe_ledger" / "489.jsonl").records)
    totals = RESULTS["probe"]["rows"][-1]["counts"]
    assert index.skipped == 0 and len(index) == totals["guarded"] == 7
    assert all(s.t_free is not None and s.unmapped for s in index.slots)
    assert {s.framework for s in index.slots} == {r["framework"] for r in rows}
    # each probe address is a slot the ledger has
    assert {int(r["address"], 16) for r in rows} <= {s.address for s in index.slots}


def test_each_xid31_page_gets_the_verdict_text_the_h200_printed() -> None:
    run = RunDir(RUN)
    assert run.problems() == ()
    ledger = load_ledger(run.ledger_dir())
    printed = _printed()
    got = {}
    for x in run.xids():
        assert x.xid == 31 and x.mmu is not None and x.mmu.address is not None
        pl = ledger.pid(x.pid)
        assert pl is not None and pl.mono_offset is not None
        records = read_ledger_file(run.ledger_dir() / f"{x.pid}.jsonl").records
        v = guard_verdict(records, x.mmu.address, page=True, at=x.ts + pl.mono_offset)
        assert v is not None and v.caught
        name = x.nodeid.split("::")[-1]
        got[name] = v.verdict
        assert v.text == printed[name]["text"]
        assert hex(x.mmu.address) == printed[name]["page"]
    assert got == WANT
    log = (D / "log.txt").read_text()
    assert all(printed[n]["text"] in log for n in WANT)


def test_the_validation_judge_gives_the_recorded_rows(tmp_path: Path) -> None:
    """Today's judge also asks the run's own mapping.json (written by stress since the mapper
    took guard verdicts) to name each fault the same way: the recorded run's mapping predates
    that, so it is remapped first; every recorded field stays what the H200 run printed."""
    v = _validator()
    shutil.copytree(RUN, tmp_path / "run")
    map_run(tmp_path / "run")
    rows = v.judge_run(tmp_path / "run", v.FAULTS, v.TWINS)
    recorded = RESULTS["faults"]["rows"]
    assert [{k: r[k] for k in w} for r, w in zip(rows, recorded)] == recorded
    assert all(r["ok"] for r in rows) and len(rows) == 8
    assert [r["outcomes"] for r in rows if r["want"] == "clean"] == [["passed"]] * 4
    faults = [r for r in rows if r["want"] != "clean"]
    assert all(r["mapped_basis"] == "guard" and r["mapped_text"] == r["text"] for r in faults)
    # the recorded mapping.json (a mapper without guard verdicts) is not enough for it
    stale = v.judge_run(RUN, v.FAULTS, v.TWINS)
    assert [r["mapped_basis"] for r in stale if r["want"] != "clean"] == ["ledger"] * 4
    assert not any(r["ok"] for r in stale if r["want"] != "clean")


def test_the_mapper_gives_the_same_verdicts_on_the_same_allocations(tmp_path: Path) -> None:
    shutil.copytree(RUN, tmp_path / "run")  # map_run writes mapping.json
    entries = map_run(tmp_path / "run")
    assert sorted(e["pid"] for e in entries) == [558, 561, 619, 622]
    recorded = {e["pid"]: e for e in json.loads((RUN / "mapping.json").read_text())}
    for e in entries:
        name = e["attributed_nodeid"].split("::")[-1]
        assert e["verdict"] == WANT[name] == recorded[e["pid"]]["verdict"]
        slot = int(_printed()[name]["text"].split(" allocation at ")[1].split(",")[0], 16)
        assert e["allocation"]["address"] == slot


def test_the_planted_stage_ran_nothing_because_pytest_got_a_double_dash() -> None:
    """Why the planted rows of this run are not validated: pytest read what followed the `--` as
    paths and, with `-k`, collected nothing. Today's command line parsing drops that `--`."""
    from faulthunt.cli import build_parser
    from faulthunt.cli.stress import _pytest_args

    for align in ("256", "16"):
        d = D / "planted" / f"planted_{align}"
        info = json.loads((d / "run.json").read_text())
        summary = json.loads((d / "summary.json").read_text())
        assert info["pytest_argv"][-3:] == ["--", "-p", "no:cacheprovider"]
        assert summary["tests_run"] == 0 and summary["pytest_exit_status"] == 5 and summary["exit_status"] == 2
        assert all(not r["outcomes"] and not r["ok"] for r in RESULTS[f"planted_{align}"]["rows"])
        args, extra = build_parser().parse_known_args(info["argv"][1:])
        args.extra = extra
        assert _pytest_args(args, None) == ("kernels/suite", "-p", "no:cacheprovider")


def test_the_loop_figures_quoted_in_the_docs_are_the_recorded_ones() -> None:
    loops = {(r["framework"], r["spec"]): r for r in RESULTS["loops"]}
    assert {k: (r["n"], r["seconds"], r["guarded"]) for k, r in loops.items()} == {
        ("cupy", "off"): (3000, 0.0174, 0), ("cupy", "1"): (3000, 0.4185, 3000),
        ("cupy", "100"): (3000, 0.0353, 28), ("numba", "off"): (1000, 0.0574, 0),
        ("numba", "1"): (1000, 0.2188, 1000), ("numba", "100"): (1000, 0.0638, 8)}
    log = (D / "log.txt").read_text()
    assert all(x in log for x in ("x24.05", "x2.03", "x3.81", "x1.11"))
