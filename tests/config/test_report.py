"""config/report.py: how the checker's findings are printed. A finding with its YAML path and line, or
either alone; a file's block with its header (problems, OK with the entries checked, or cannot be
checked), errors then warnings then notes, each by line; the exit status launchers rely on (0, 1
problems, 2 unusable); counted nouns; and the import noise silenced at the file descriptors, then
restored."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mindformers_tbplugin.config.report import Finding, Report, count, quiet_output


@pytest.mark.parametrize(
    ("finding", "rendered"),
    [
        (Finding("callbacks[2].log_every", 7, "expected integer"), "callbacks[2].log_every (line 7): expected integer"),
        (Finding("callbacks[2]", None, "no line"), "callbacks[2]: no line"),
        (Finding("", 3, "no path"), "line 3: no path"),
        (Finding("", None, "file not found: x.yaml"), "file not found: x.yaml"),
        (Finding("tensorboard", 0, "line 0 is no line"), "tensorboard: line 0 is no line"),
    ],
)
def test_a_finding_names_its_path_and_line_when_known(finding: Finding, rendered: str) -> None:
    assert finding.render() == rendered


def test_an_ok_report_counts_the_entries_it_checked() -> None:
    assert Report(Path("a.yaml"), entries_checked=1).render() == "a.yaml: OK (1 callback entry checked)"
    assert Report(Path("a.yaml")).render() == "a.yaml: OK (0 callback entries checked)"
    assert Report(Path("a.yaml"), entries_checked=1).exit_code == 0


def test_a_report_lists_errors_warnings_and_notes_each_by_line() -> None:
    report = Report(
        Path("cfg.yaml"),
        errors=[Finding("b", 9, "second"), Finding("a", 2, "first"), Finding("", None, "whole file")],
        warnings=[Finding("w", 5, "warned")],
        notes=[Finding("n", 1, "noted")],
        entries_checked=3,
    )
    assert report.exit_code == 1
    assert report.render() == (
        "cfg.yaml: 3 problems\n"
        "  error: whole file\n"  # no line sorts first
        "  error: a (line 2): first\n"
        "  error: b (line 9): second\n"
        "  warning: w (line 5): warned\n"
        "  note: n (line 1): noted"
    )


def test_warnings_alone_exit_0_and_an_unusable_file_exits_2() -> None:
    warned = Report(Path("w.yaml"), warnings=[Finding("x", 1, "careful")], entries_checked=2)
    assert (warned.exit_code, warned.render()) == (
        0,
        "w.yaml: OK (2 callback entries checked)\n  warning: x (line 1): careful",
    )
    unusable = Report(Path("u.yaml"), errors=[Finding("", 4, "cannot parse")], unusable=True)
    assert (unusable.exit_code, unusable.render()) == (2, "u.yaml: cannot be checked\n  error: line 4: cannot parse")
    assert Report(Path("one.yaml"), errors=[Finding("k", 1, "bad")]).render().splitlines()[0] == "one.yaml: 1 problem"


def test_count_says_one_or_many() -> None:
    assert [count(n, "problem") for n in (0, 1, 2)] == ["0 problems", "1 problem", "2 problems"]
    assert count(2, "callback entry", "callback entries") == "2 callback entries"


def test_quiet_output_silences_both_descriptors_and_restores_them(capfd: pytest.CaptureFixture[str]) -> None:
    print("before", flush=True)
    with quiet_output():
        os.write(1, b"noise from a C extension\n")
        os.write(2, b"a deprecation warning\n")
    print("after", flush=True)
    os.write(2, b"errors again\n")
    out, err = capfd.readouterr()
    assert (out, err) == ("before\nafter\n", "errors again\n")


def test_quiet_output_restores_the_descriptors_after_an_exception(capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RuntimeError), quiet_output():
        raise RuntimeError("import failed")
    os.write(1, b"visible\n")
    assert capfd.readouterr().out == "visible\n"
