"""doctor's rendering and verdicts on the real H200 outputs (tests/data/doctor/h200/).

Nothing here hard-codes what the H200 had: expectations come from the committed JSON and text.
"""
from __future__ import annotations

import io
import json
import os
import shlex
from pathlib import Path

from faulthunt.archcheck import Visibility, check_coverage, parse_arch, parse_listing
from faulthunt.cli.doctor import render
from faulthunt.identity import problems_of

DATA = Path(__file__).parent / "data" / "doctor" / "h200"
FULL = json.loads((DATA / "doctor.json").read_text())


def _text_body(name: str) -> str:
    """A captured doctor text without the ``rc=N`` line the script appended."""
    text = (DATA / name).read_text()
    assert text.rstrip().splitlines()[-1].startswith("rc=")
    return text.rstrip().rsplit("\n", 1)[0] + "\n"


def test_problems_recomputed_from_the_json_are_the_recorded_ones() -> None:
    assert problems_of(FULL) == FULL["problems"]


def test_text_and_json_render_the_same_report() -> None:
    out = io.StringIO()
    render(FULL, out, show_all=True)
    text = _text_body("doctor.txt")
    # Same lines; only the tools' order differs (--json sorts keys, the text run did not).
    assert sorted(out.getvalue().splitlines()) == sorted(text.splitlines())
    # and the problems part is identical, in order, and its count matches the JSON's
    rendered_problems = out.getvalue().split("problem(s):\n", 1)[1]
    assert rendered_problems == text.split("problem(s):\n", 1)[1]
    real = [p for p in FULL["problems"] if p["severity"] != "info"]
    assert f"\n{len(real)} problem(s):\n" in text
    for p in real:
        assert f"- [{p['severity']}] {p['message']}\n" in rendered_problems


def _listings(lib: dict) -> tuple:  # type: ignore[type-arg]
    elf = parse_listing("\n".join(f"ELF file {i + 1}: x.{i + 1}.{a}.cubin"
                                  for i, a in enumerate(lib["sass"])), "elf")
    ptx = parse_listing("\n".join(f"PTX file {i + 1}: x.{i + 1}.{a}.ptx"
                                  for i, a in enumerate(lib["ptx"])), "ptx")
    return elf, ptx


def _neighbours(lib: dict) -> tuple:  # type: ignore[type-arg]
    here = os.path.dirname(lib["path"])
    return tuple(sorted({parse_arch(a) for other in FULL["libraries"]
                         if other["path"] != lib["path"] and os.path.dirname(other["path"]) == here
                         for a in other["sass"]}))


def test_rejudging_the_h200_libraries_drops_only_the_false_cufft_problem() -> None:
    device = parse_arch(FULL["device_archs"][0])
    was_problem = {lib["library"] for lib in FULL["libraries"] if lib["verdict"] == "cannot_run"}
    assert was_problem, "the capture holds the false problem this test is about"
    for lib in FULL["libraries"]:
        elf, ptx = _listings(lib)
        cov = check_coverage(lib["library"], elf, ptx, device, Visibility(release_sass=_neighbours(lib)))
        if lib["verdict"] == "cannot_run":
            # cuFFT ran on this H200: the listing (one stub cubin) cannot prove otherwise
            assert cov.verdict == "unseen" and not cov.problem, cov.message
            assert "the other libraries beside it cover" in cov.message
        else:  # every other verdict and message is what the H200 run printed
            assert (cov.verdict, cov.message, cov.fix) == (lib["verdict"], lib["message"], lib["fix"])
    rejudged = dict(FULL, libraries=[
        dict(lib, **check_coverage(lib["library"], *_listings(lib), device,
                                   Visibility(release_sass=_neighbours(lib))).to_json())
        for lib in FULL["libraries"]])
    severities = {p["message"]: p["severity"] for p in problems_of(rejudged)}
    assert not any(sev == "problem" for sev in severities.values())
    assert all(any(m.startswith(f"{name}: cuobjdump lists") for m in severities) for name in was_problem)


def test_the_v100_verdict_on_cudnn_is_still_one_problem_line() -> None:
    lines = _text_body("doctor_cc70.txt").splitlines()
    cudnn = next(lib for lib in FULL["libraries"] if lib["library"] == "libcudnn_cnn")
    cov = check_coverage("libcudnn_cnn", *_listings(cudnn), parse_arch("7.0"),
                         Visibility(release_sass=_neighbours(cudnn)))
    assert cov.verdict == "cannot_run" and cov.problem
    assert f"- [problem] {cov.message}" in lines and "\n" not in cov.message


def test_the_kit_and_the_session_panes_agree() -> None:
    kit = json.loads((DATA / "kit" / ".faulthunt-kit.json").read_text())
    quoted = (DATA / "kit" / "tests.txt").read_text().splitlines()
    assert [shlex.split(line)[0] for line in quoted] == kit["tests"]
    panes = (DATA / "panes.txt").read_text()
    windows = [line[len("--- pane "):] for line in panes.splitlines() if line.startswith("--- pane ")]
    assert windows == ["shell", "reproducer", "xid", "py-spy", "limit"]
    shell = panes.split("--- pane shell\n", 1)[1].split("--- pane ", 1)[0]
    readme = [line for line in (DATA / "kit" / "README.md").read_text().splitlines() if line.strip()]
    # the shell window ran `cat README.md`; tmux wraps at 200 columns, so compare line starts
    shown = [line.rstrip() for line in shell.splitlines() if line.strip()]
    for line in readme:
        assert any(s.startswith(line[:150]) for s in shown), line
    for test in kit["tests"]:
        assert test in shell
    limit = panes.split("--- pane limit\n", 1)[1]
    assert "continue to end it now" in limit
