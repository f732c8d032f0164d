"""JUnit XML of a stress run: one ``<testcase>`` per base test (all its repeated runs together).

Every CI system shows JUnit. A stress run's unit is the base test: its runs, its failures and its
failure rate with the 95% interval go into the testcase's ``<failure message>`` and
``<system-out>``, each failing run (id, outcome, worker, pid, GPU, message) into the failure's
text. A test whose failing runs include a crash or a hang gets ``<error>`` (the run did not end by
itself), otherwise ``<failure>``; a test whose every run was skipped gets ``<skipped>``.

The shape is the common one (Ant / Jenkins / GitLab / junitparser): ``testsuites > testsuite >
testcase``, ``properties`` on the suite only. Built with :mod:`xml.etree.ElementTree`, so every id
and message is escaped by the XML writer; characters XML 1.0 cannot hold are replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from faulthunt.report.common import (SIMULATED, gpu_text, headline, outcome_text, pid_text,
                                     rate_text)
from faulthunt.report.model import ReportModel

# characters XML 1.0 forbids even as references (control characters but tab, LF, CR; surrogates)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
#: failing runs listed in one testcase's failure text
MAX_RUNS_LISTED = 50


def _x(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def split_nodeid(nodeid: str) -> tuple[str, str, str]:
    """``(classname, name, file)`` the way pytest's own junitxml names them.

    ``tests/test_k.py::TestA::test_b[x]`` -> ``("tests.test_k.TestA", "test_b[x]", "tests/test_k.py")``.
    """
    head, bracket, params = nodeid.partition("[")  # parameters may hold "::" themselves
    parts = head.split("::")
    parts[-1] += bracket + params
    path = parts[0]
    module = re.sub(r"\.py$", "", path).replace("/", ".").replace("\\", ".")
    name = parts[-1] if len(parts) > 1 else path
    classname = ".".join([module, *parts[1:-1]]) if len(parts) > 1 else module
    return classname, name, path


def _durations(model: ReportModel) -> dict[str, float]:
    """Seconds spent in each base test, summed over its timed runs."""
    out: dict[str, float] = {}
    for lane in model.lanes:
        for s in lane.spans:
            t0, t1 = s.get("t0"), s.get("t1")
            if isinstance(t0, (int, float)) and isinstance(t1, (int, float)) and s.get("base_nodeid"):
                out[str(s["base_nodeid"])] = out.get(str(s["base_nodeid"]), 0.0) + max(0.0, t1 - t0)
    return out


def _run_line(f: Mapping[str, Any], model: ReportModel) -> str:
    gpu = gpu_text(f.get("device"), model)
    where = f"worker {f.get('worker')}, pid {pid_text(f)}" + (f", GPU {gpu}" if gpu else "")
    return f"{f.get('nodeid')}: {outcome_text(f)} ({where})\n    {f.get('message') or '(no message)'}"


def _testcase(parent: ET.Element, t: Mapping[str, Any], failures: Sequence[Mapping[str, Any]],
              seconds: float, model: ReportModel) -> tuple[int, int, int]:
    """Add one testcase; returns (failures, errors, skipped) counted for the suite."""
    base = str(t.get("base_nodeid"))
    classname, name, path = split_nodeid(base)
    case = ET.SubElement(parent, "testcase", classname=_x(classname), name=_x(name), file=_x(path),
                         time=f"{seconds:.3f}")
    runs, nfail = int(t.get("runs") or 0), int(t.get("failures") or 0)
    stats = f"{nfail} of {runs} runs failed, rate {rate_text(t)}, {t.get('xids') or 0} Xid(s)"
    outcomes = t.get("outcomes") or {}
    if nfail:
        mine = [f for f in failures if f.get("base_nodeid") == base and f.get("outcome") != "collateral"]
        kinds = sorted({str(f.get("outcome")) for f in mine})
        # a crash, a hang or a failed fixture is an <error> (as pytest's own junitxml says a
        # fixture's); a plain assertion a <failure>
        tag = "error" if {"crashed", "hung", "error"} & set(kinds) else "failure"
        label = f"{SIMULATED}: " if model.simulated else ""
        el = ET.SubElement(case, tag, message=_x(label + stats), type=_x(",".join(kinds) or "failed"))
        text = [_run_line(f, model) for f in mine[:MAX_RUNS_LISTED]]
        if len(mine) > MAX_RUNS_LISTED:
            text.append(f"... and {len(mine) - MAX_RUNS_LISTED} more failing runs (report.json has them all)")
        el.text = _x("\n".join(text))
        counts = (1, 0, 0) if tag == "failure" else (0, 1, 0)
    elif runs == 0 and any(outcomes.get(k) for k in ("skipped", "xfailed", "xpassed")):
        unrated = ", ".join(f"{outcomes[k]} {k}" for k in ("skipped", "xfailed", "xpassed")
                            if outcomes.get(k))
        ET.SubElement(case, "skipped", message=f"no run could fail ({unrated})")
        counts = (0, 0, 1)
    else:
        counts = (0, 0, 0)
    ET.SubElement(case, "system-out").text = _x(f"{stats}; outcomes: "
                                               + ", ".join(f"{k} {v}" for k, v in outcomes.items()))
    return counts


def render(model: ReportModel) -> str:
    """The JUnit XML text of the run (UTF-8, with an XML declaration)."""
    root = ET.Element("testsuites", name="faulthunt stress")
    suite = ET.SubElement(root, "testsuite", name=_x(f"faulthunt stress {model.run_id}"))
    props = ET.SubElement(suite, "properties")
    for key, value in (("run_id", model.run_id), ("headline", headline(model)),
                       ("rate", model.rate.get("text")), ("reproduce", model.reproduce),
                       ("simulated", model.simulated)):
        if value:
            ET.SubElement(props, "property", name=key, value=_x(value))
    durations = _durations(model)
    totals = [0, 0, 0]
    for t in model.by_test:
        counts = _testcase(suite, t, model.failures, durations.get(str(t.get("base_nodeid")), 0.0), model)
        totals = [a + b for a, b in zip(totals, counts)]
    seconds = sum(durations.values())
    for el in (suite, root):
        el.set("tests", str(len(model.by_test)))
        el.set("failures", str(totals[0]))
        el.set("errors", str(totals[1]))
        el.set("time", f"{seconds:.3f}")
    suite.set("skipped", str(totals[2]))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
