"""Every validation code has a tiny failing and a tiny passing fixture, and the rule agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo_view.validate import CODES
from tests.validate.helpers import FIXTURES, fixture, run_check


@pytest.mark.parametrize("code", sorted(CODES))
def test_failing_fixture_trips_the_code(code: str) -> None:
    report = run_check(fixture(code, "fail"))
    assert report.count(code) >= 1, f"{code} not reported; got {report.codes()}"
    first = report.tallies[code].first[0]
    assert first.message
    assert first.location.file


@pytest.mark.parametrize("code", sorted(CODES))
def test_passing_fixture_does_not(code: str) -> None:
    report = run_check(fixture(code, "pass"))
    assert report.count(code) == 0, [f.text() for f in report.tallies[code].first]


def test_no_fixture_without_a_code() -> None:
    stems = {p.name.split("_")[0] for p in FIXTURES.iterdir() if p.name.startswith("EV")}
    assert stems == set(CODES)


def test_exit_codes_follow_severity() -> None:
    assert run_check(fixture("EV301", "pass")).exit_code() == 0
    assert run_check(fixture("EV301", "fail")).exit_code() == 1
    assert run_check(fixture("EV101", "fail")).exit_code() == 2
    # Warnings alone keep the exit code at 0.
    warn = run_check(fixture("EV401", "fail"))
    assert warn.count("EV401") and warn.exit_code() == 0


def test_a_time_that_reads_as_no_finite_number_is_named(tmp_path: Path) -> None:
    # "NaN", "Infinity" and "1e400" parse as floats: the message left them out and read
    # ":  is not a number".
    events = [
        {"ph": "X", "name": "a", "ts": t, "dur": 1, "pid": 1, "tid": 1} for t in ("NaN", "1e400")
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    texts = [f.text() for f in run_check(path).tallies["EV206"].first]
    assert [t.rsplit(": ", 1)[1] for t in texts] == [
        "ts='NaN' is not a number",
        "ts='1e400' is not a number",
    ]


def test_a_dur_beyond_double_precision_is_named_as_the_dur(tmp_path: Path) -> None:
    # It was reported as the event's ts ("ts=1 µs ... off by up to 0 ns").
    path = tmp_path / "t.json"
    path.write_text(
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 4458676524648.797, '
        '"pid": 1, "tid": 1}]}'
    )
    (text,) = [f.text() for f in run_check(path).tallies["EV212"].first]
    assert "dur=4458676524648.797 µs is >= 2**42 with sub-µs digits" in text
    assert "off by up to 1 ns" in text


def test_a_category_that_is_no_string_is_named(tmp_path: Path) -> None:
    # `info` refuses `"cat": ["x", "y"]` (traceEvents[0].cat: expected `str`) while `check`
    # reported nothing: an array is not interned, so it looked like an absent category.
    events = [
        {"ph": "X", "name": "a", "cat": ["x", "y"], "ts": 0, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 0, "dur": 5, "pid": 1, "tid": 2},  # absent: fine
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    (text,) = [f.text() for f in run_check(path).tallies["EV216"].first]
    assert "traceEvents[0]" in text and "cat=['x', 'y']" in text
