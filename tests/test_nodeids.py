"""Node ids as data: checked, and selected exactly whatever --count does to their names."""

from __future__ import annotations

import sys

import pytest

from faulthunt.errors import UsageError
from faulthunt.nodeids import (check_node_id, collection_root, is_node_id, not_found_text,
                               problem, pytest_selection, selected_by, unmatched, without_step)

pytest_plugins = ["pytester"]

ODD = '''
import pytest

@pytest.mark.parametrize("p", ["a b", "x/y", "bold", "-dash", "a::b[c]"])
def test_odd(p):
    pass

def test_plain():
    pass
'''


@pytest.mark.parametrize("nodeid", [
    "tests/test_k.py::test_a", "t.py::T::test_b[float32-x/y]", "t.py::test_odd[a b]",
    "t.py::test_odd[-dash]", "t.py::test_p[a::b[c]]", "t.py", "dir/t.py::test_a[\u00e9]",
])
def test_node_ids_accepted(nodeid: str) -> None:
    assert is_node_id(nodeid), problem(nodeid)


@pytest.mark.parametrize("text, why", [
    ("--basetemp=/tmp/victim", "starts with '-'"), ("-k", "starts with '-'"),
    ("", "empty"), ("   ", "empty"), ("t.py::test_a\n--junitxml=x", "control character"),
    ("::test_a", "no file path"), ("t.py::", "no test name"), ("t.py::[x]", "no test name"),
    (None, "empty"), (["t.py"], "empty"),
])
def test_non_node_ids_refused_with_the_reason(text: object, why: str) -> None:
    assert why in (problem(text) or "")
    with pytest.raises(UsageError) as err:
        check_node_id(text, "summary.json")
    assert "summary.json" in err.value.message and err.value.fix


def test_collection_root_drops_only_the_parameters() -> None:
    assert collection_root("t.py::T::test_b[x/y]") == "t.py::T::test_b"
    assert collection_root("t.py::test_p[a::b[c]]") == "t.py::test_p"
    assert collection_root("t.py") == "t.py"


def test_selection_puts_ids_behind_options_and_roots_after_double_dash() -> None:
    args = pytest_selection(["t.py::test_odd[a b]", "t.py::test_odd[x/y]", "t.py::test_plain"])
    assert args == ["--faulthunt-id=t.py::test_odd[a b]", "--faulthunt-id=t.py::test_odd[x/y]",
                    "--faulthunt-id=t.py::test_plain", "--", "t.py::test_odd", "t.py::test_plain"]
    with pytest.raises(UsageError):
        pytest_selection(["--junitxml=/tmp/victim"])


@pytest.mark.parametrize("count", [1, 3])
def test_selection_runs_exactly_the_named_parametrized_tests(pytester: pytest.Pytester,
                                                            count: int) -> None:
    pytester.makepyfile(test_m=ODD)
    ids = ["test_m.py::test_odd[a b]", "test_m.py::test_odd[-dash]", "test_m.py::test_odd[a::b[c]]"]
    args = ["-p", "faulthunt", "-p", "repeat", "-v", "--count", str(count), *pytest_selection(ids)]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=3 * count, deselected=2 * count)
    result.stdout.no_fnmatch_line("*test_odd?x/y*PASSED*")


def test_selection_with_the_repeat_step_runs_that_one_step(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=ODD)
    args = ["-p", "faulthunt", "-p", "repeat", "-v", "--count", "3",
            *pytest_selection(["test_m.py::test_odd[a b-2-3]"])]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1, deselected=14)
    result.stdout.fnmatch_lines(["*test_odd?a b-2-3? PASSED*"])


def test_selection_by_absolute_or_cwd_relative_path_matches_pytests_id(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """An id written with the file's absolute path (the demo's silent tests, a shell completion)
    or relative to where pytest starts selects the test pytest names relative to its rootdir."""
    sub = pytester.mkpydir("sub")
    (sub / "test_m.py").write_text(ODD)
    pytester.makeini("[pytest]\n")
    absolute = f"{sub / 'test_m.py'}::test_odd[a b]"
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-v",
                                           *pytest_selection([absolute], rootdir=pytester.path))
    result.assert_outcomes(passed=1, deselected=4)
    result.stdout.fnmatch_lines(["sub/test_m.py::test_odd?a b? PASSED*"])
    # the same file named from inside sub/, where the user stands
    monkeypatch.chdir(sub)
    result = pytester.run(sys.executable, "-m", "pytest", "-p", "faulthunt", "-v",
                          f"--rootdir={pytester.path}", "--faulthunt-id=test_m.py::test_plain",
                          "--", "test_m.py")
    result.assert_outcomes(passed=1, deselected=5)
    result.stdout.fnmatch_lines(["test_m.py::test_plain PASSED*"])  # -v names it from the cwd


def test_selected_by_reads_an_id_as_pytest_does() -> None:
    assert selected_by("a.py::C::t[x::y]") == ["a.py::C::t[x::y]", "a.py::C::t", "a.py::C"]
    assert selected_by("a.py::t") == ["a.py::t"]
    assert [without_step(i) for i in ("t.py::t[a b-2-3]", "t.py::t[2-3]", "t.py::t[a b]")] == [
        "t.py::t[a b]", "t.py::t", "t.py::t[a b]"]


def test_unmatched_names_the_asked_ids_nothing_selected() -> None:
    wanted = {"t.py::t[a b]": "t.py::t[a b]", "t.py::C": "t.py::C", "sub/t.py::u": "/r/sub/t.py::u",
              "/r/sub/t.py::u": "/r/sub/t.py::u", "t.py::t[a b-2-3]": "t.py::t[a b-2-3]",
              "t.py::t[nope]": "t.py::t[nope]"}
    collected = ["t.py::t[a b-1-3]", "t.py::C::test_a[2-3]", "t.py::t[a b-2-3]"]
    assert unmatched(wanted, collected) == ["/r/sub/t.py::u", "t.py::t[nope]"]
    text = not_found_text(["t.py::t[nope]"], ["t.py::t[a b]", "t.py::t[bold]", "t.py::other"])
    assert text.startswith("test id 't.py::t[nope]' matches no collected test (closest: ")
    assert "t.py::t[bold]" in text and "fix: " in text


@pytest.mark.parametrize("workers", ["0", "1"])
def test_an_id_that_selects_nothing_is_a_usage_error_naming_it(pytester: pytest.Pytester,
                                                             workers: str) -> None:
    """D11: with or without xdist, pytest says which id matched nothing (exit 4), not "no tests
    ran"; without xdist the closest collected ids too."""
    pytester.makepyfile(test_m=ODD)
    args = ["-p", "faulthunt", "-p", "repeat", "-p", "xdist", "-n", workers, "--count", "2",
            *pytest_selection(["test_m.py::test_odd[a b]", "test_m.py::test_odd[nonexistent]"])]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert ("ERROR: test id 'test_m.py::test_odd[nonexistent]' matches no collected test"
            in said), said
    assert "fix: name tests by the ids pytest lists" in said
    assert "test_odd[a b]'" not in said
    assert ("(closest: test_m.py::test_odd[" in said) == (workers == "0")


def test_ids_of_classes_methods_and_plain_tests_select_what_pytest_would(
        pytester: pytest.Pytester) -> None:
    """D10: beside a parametrized id, a unittest method, a class and an unparametrized name are
    selected as pytest reads them, each --count times (the repeat step matched or not)."""
    pytester.makepyfile(test_m=ODD + '''
import unittest

class TestUnit(unittest.TestCase):
    def test_fail(self):
        self.fail("no")
    def test_ok(self):
        pass

class TestC:
    def test_c1(self): pass
    def test_c2(self): pass
''')
    ids = ["test_m.py::test_odd[a b]", "test_m.py::TestUnit::test_fail", "test_m.py::TestC",
           "test_m.py::test_plain"]
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "repeat", "-v", "--count",
                                           "2", *pytest_selection(ids))
    result.assert_outcomes(passed=2 * 4, failed=2)
    result.stdout.fnmatch_lines(["*TestUnit::test_fail?2-2? FAILED*"])


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_collection_error_is_not_hidden_behind_a_missing_id(pytester: pytest.Pytester,
                                                             workers: str) -> None:
    """The named test may be in the module that failed to import: pytest's collection error is
    what is said, as before."""
    pytester.makepyfile(test_m=ODD, test_broken="import no_such_module_zz\ndef test_b(): pass\n")
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "xdist", "-n", workers,
                                           "--faulthunt-id=test_m.py::test_nope", "--",
                                           "test_m.py", "test_broken.py")
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)
    assert "matches no collected test" not in result.stderr.str()
    result.stdout.fnmatch_lines(["*ERROR*test_broken.py*"])


def test_a_named_test_left_out_by_k_is_not_called_missing(pytester: pytest.Pytester) -> None:
    """-k ran before the filter: the test exists, pytest's "deselected" is what is said."""
    pytester.makepyfile(test_m=ODD)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-k", "nothing",
                                           *pytest_selection(["test_m.py::test_odd[a b]"]))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "matches no collected test" not in result.stderr.str()


def test_not_found_fix_names_the_file_of_the_id():
    from faulthunt.nodeids import not_found_text

    text = not_found_text(["my dir/t.py::test_p[x/z]"], ["my dir/t.py::test_p[x/y]"])
    assert text.endswith("(python -m pytest --collect-only -q 'my dir/t.py'), with their "
                         "parameters as they are written there")
    assert "(closest: my dir/t.py::test_p[x/y])" in text
