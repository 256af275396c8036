"""``check --fix``: the output passes check for every code --fix claims to repair, the input
is never touched, and only what needs changing changes."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from echo_view.cli import main
from echo_view.cli.check import fix_file
from echo_view.errors import UsageError
from echo_view.validate import CODES
from echo_view.validate.fix import FIXABLE
from tests.conftest import data_path
from tests.validate.helpers import fixture, run_check

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _claimed(changes: list[str]) -> set[str]:
    return {c.split(":")[0] for c in changes if c[:2] == "EV" and ":" in c}


def test_fixable_flags_match_the_fixer() -> None:
    assert {c for c, info in CODES.items() if info.fixable} == set(FIXABLE)


@pytest.mark.parametrize("code", FIXABLE)
def test_fix_repairs_the_failing_fixture(code: str, tmp_path: Path) -> None:
    src = fixture(code, "fail")
    before = _digest(src)
    out = tmp_path / "fixed.json"
    changes = fix_file(src, out)
    assert code in _claimed(changes), changes
    assert _digest(src) == before  # the input is never modified
    after = run_check(out)
    for claimed in _claimed(changes):
        assert after.count(claimed) == 0, (
            claimed,
            [f.text() for f in after.tallies[claimed].first],
        )
    json.loads(out.read_text())  # strict JSON


def test_fix_moves_overlaps_to_named_lanes_and_keeps_every_slice(tmp_path: Path) -> None:
    src = fixture("EV301", "fail")
    out = tmp_path / "fixed.json"
    fix_file(src, out)
    doc = json.loads(out.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert sorted((e["name"], e["ts"], e["dur"]) for e in slices) == [
        ("child", 5, 10),
        ("parent", 0, 10),
    ]
    child = next(e for e in slices if e["name"] == "child")
    parent = next(e for e in slices if e["name"] == "parent")
    assert child["tid"] != parent["tid"] and child["pid"] == parent["pid"]
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert "overlap lane 1" in names[(child["pid"], child["tid"])]


def test_fix_rebases_big_float_timestamps_exactly(tmp_path: Path) -> None:
    out = tmp_path / "fixed.json"
    fix_file(fixture("EV212", "fail"), out)
    text = out.read_text()
    assert '"ts":0.797' in text.replace(" ", "")  # 4458676524648.797 - 4458676524648 exactly
    assert json.loads(text)["metadata"]["ts_offset_us"] == 4458676524648


def test_fix_writes_gzip_and_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(fixture("EV104", "fail").read_bytes())
    out = tmp_path / "out.json.gz"
    fix_file(src, out)
    assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    with pytest.raises(UsageError):
        fix_file(src, src)


@pytest.mark.parametrize(
    "rel",
    [
        "hta-tests/nccl_parser_config/nccl_data.json.gz",  # EV212, EV503
        "tracelens/b200/eager_trace.json.gz",  # EV301, EV503
        "hta-tests/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    ],
)
def test_fix_repairs_real_traces(rel: str, tmp_path: Path) -> None:
    src = data_path(rel)
    before = run_check(src)
    out = tmp_path / "fixed.json.gz"
    changes = fix_file(src, out)
    claimed = _claimed(changes)
    assert claimed & {t.code for t in before}, changes
    after = run_check(out)
    for code in claimed:
        assert after.count(code) == 0, (code, [f.text() for f in after.tallies[code].first[:3]])

    # Nothing is lost: the same number of complete slices with the same total duration.
    def slices(path: Path) -> tuple[int, float]:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        return len(xs), round(sum(float(e["dur"]) for e in xs), 3)

    assert slices(out) == slices(src)


def test_a_true_pid_is_not_pid_1(tmp_path: Path) -> None:
    # true == 1 == 1.0 as dict keys: `"pid": true` shared pid 1's raw pair, was not refused,
    # and --fix moved the valid event of pid 1.0 into a process named "pid True".
    events = [
        {"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 0, "dur": 10, "pid": True, "tid": 1},
        {"ph": "X", "name": "c", "ts": 20, "dur": 1, "pid": 1.0, "tid": 1},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    assert run_check(src).count("EV503") == 1
    out = tmp_path / "fixed.json"
    changes = fix_file(src, out)
    assert any("(True, 1) -> (2, 1)" in c for c in changes), changes
    fixed = {e["name"]: e["pid"] for e in json.loads(out.read_text())["traceEvents"] if "dur" in e}
    assert fixed == {"a": 1, "b": 2, "c": 1.0}


def test_a_list_or_object_tid_is_shown_as_its_json(tmp_path: Path) -> None:
    # A list or object tid was shown by the key that kept it apart: `tid=('unhashable', '[1,
    # 2]')` in the finding and the fix's report.
    events = [
        {"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": [1, 2]},
        {"ph": "X", "name": "b", "ts": 2, "dur": 1, "pid": 1, "tid": {"x": 1}},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    texts = [f.message for f in run_check(src).tallies["EV503"].first]
    assert texts == [
        "tid=[1,2] on 1 event(s) becomes pid=1 tid=1 in Perfetto",
        'tid={"x":1} on 1 event(s) becomes pid=1 tid=1 in Perfetto',
    ]
    changes = fix_file(src, tmp_path / "fixed.json")
    assert any('(1, [1,2]) -> (1, 2); (1, {"x":1}) -> (1, 3)' in c for c in changes), changes


def test_a_remapped_thread_keeps_its_own_name(tmp_path: Path) -> None:
    # The fix named the new tid "tid -1" beside the thread's own "sync" (moved with it): the
    # repaired file had an EV502 the input had not; the same for a process (EV501).
    events = [
        {"ph": "X", "name": "b", "ts": 0, "dur": 10, "pid": 1, "tid": -1},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": -1, "args": {"name": "sync"}},
        {"ph": "X", "name": "c", "ts": 0, "dur": 10, "pid": -1, "tid": 5},
        {"ph": "M", "name": "process_name", "pid": -1, "args": {"name": "Overhead"}},
        {"ph": "X", "name": "d", "ts": 0, "dur": 5, "pid": 1, "tid": 1.5},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "fixed.json"
    fix_file(src, out)
    after = run_check(out)
    assert after.count("EV501") == after.count("EV502") == after.count("EV503") == 0
    names = sorted(
        e["args"]["name"] for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "M"
    )
    assert names == ["Overhead", "sync", "tid 1.5"]


def test_fix_writes_numeric_strings_as_their_numbers(tmp_path: Path) -> None:
    # `info` refused a ts written as "100.5" (EV207: Perfetto parses it) and --fix left it.
    src = tmp_path / "s.json"
    events = [
        {"ph": "X", "name": "a", "ts": "100.5", "dur": " 10.25 ", "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": "1234567890123.4567", "dur": 5, "pid": 1, "tid": 1},
    ]
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "fixed.json"
    assert any(c.startswith("EV207: wrote 3 ") for c in fix_file(src, out))
    text = out.read_text().replace(" ", "")
    assert '"ts":100.5,"dur":10.25' in text and '"ts":1234567890123.4567' in text  # digit for digit
    assert main(["info", str(out)]) == 0
