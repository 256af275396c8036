"""``echo-view check`` through the real entry point: output forms, selection, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo_view.cli import main
from tests.conftest import SAMPLES
from tests.validate.helpers import fixture


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report_is_stable_and_documented(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(fixture("EV301", "fail")), "--json")
    doc = json.loads(out)
    assert code == 1 == doc["exit_code"]
    assert set(doc) == {"schema", "exit_code", "summary", "files", "findings"}
    assert doc["schema"] == "echo-view.check/1"
    assert set(doc["summary"]) == {"errors", "warnings", "infos"}
    (f,) = doc["files"]
    assert set(f) == {"path", "form", "events", "truncated", "rank", "world_size", "usable"}
    ev301 = next(x for x in doc["findings"] if x["code"] == "EV301")
    assert set(ev301) == {"code", "severity", "title", "hint", "fixable", "count", "first"}
    assert ev301["severity"] == "error" and ev301["fixable"] and ev301["count"] == 1
    loc = ev301["first"][0]
    assert loc["index"] == 1 and loc["ts"] == "5" and loc["pid"] == 1 and loc["tid"] == 1


def test_text_report_groups_by_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(SAMPLES / "hta_nccl" / "nccl_data.json.gz"), "--show", "1")
    assert code == 1
    assert "EV212" in out and "hint:" in out and "more" in out
    assert "ERRORS" in out.splitlines()[-1]


def test_select_and_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(fixture("EV301", "fail"))
    code, out, _ = _run(capsys, path, "--json", "--select", "EV3")
    assert {f["code"] for f in json.loads(out)["findings"]} == {"EV301"}
    code, out, _ = _run(capsys, path, "--json", "--ignore", "EV301,EV5")
    assert code == 0 and not json.loads(out)["findings"]


def test_warnings_alone_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(fixture("EV401", "fail")), "--json")
    assert code == 0 and json.loads(out)["summary"]["warnings"] >= 1


@pytest.mark.parametrize("code_", ["EV101", "EV102", "EV103", "EV108", "EV111"])
def test_unusable_input_exits_two(code_: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, str(fixture(code_, "fail")), "--json")
    doc = json.loads(out)
    assert code == 2 == doc["exit_code"]
    assert doc["findings"][0]["code"] == code_
    assert not doc["files"][0]["usable"]


def test_json_error_names_line_and_column(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _run(capsys, str(fixture("EV101", "fail")), "--json")
    where = json.loads(out)["findings"][0]["first"][0]["where"]
    assert where == "line 1 column 29"


@pytest.mark.parametrize(
    "argv",
    [
        ["--select", "EV999"],
        ["--fix"],
        ["-o", "x.json"],
    ],
)
def test_usage_errors_exit_two_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, str(fixture("EV301", "fail")), *argv)
    assert code == 2 and not out
    assert err.startswith("echo-view: error:") and err.count("\n") == 1


def test_missing_path_exits_two(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _run(capsys, str(tmp_path / "nope.json"))
    assert code == 2 and "no such file" in err


def test_fix_reports_changes_and_rechecks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_path = tmp_path / "fixed.json"
    code, out, _ = _run(
        capsys, str(fixture("EV503", "fail")), "--fix", "-o", str(out_path), "--json"
    )
    doc = json.loads(out)
    assert code == 1  # the report is about the input
    assert doc["fix"]["output"] == str(out_path)
    assert any(c.startswith("EV503:") for c in doc["fix"]["changes"])
    assert not any("still present" in c for c in doc["fix"]["changes"])
    code, out, _ = _run(capsys, str(out_path), "--json")
    assert code == 0


def test_fix_says_what_it_cannot_rebase(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Timestamps from 0.5 µs to 51.6 days: the fix "rebased 2 timestamp(s) by -0 µs", wrote
    # ts_offset_us 0 and reported what was left as a Python dict ({'EV212': 1}).
    events = [
        {"ph": "X", "name": "a", "ts": 0.5, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "b", "ts": 4458676524648.797, "dur": 2.5, "pid": 1, "tid": 1},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out_path = tmp_path / "fixed.json"
    _, out, _ = _run(capsys, str(src), "--fix", "-o", str(out_path), "--json")
    assert json.loads(out)["fix"]["changes"] == [
        "EV212: not rebased: the timestamps span 51.6 days, beyond the ~51 a double holds to "
        "the ns (2**42 µs); write them as integers",
        f"still present in {out_path}: EV212 ×1",
    ]
    assert "metadata" not in json.loads(out_path.read_text())


def test_job_flag_checks_loose_files_together(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in fixture("EV703", "fail").iterdir())
    _, out, _ = _run(capsys, *files, "--json")
    assert not any(f["code"] == "EV703" for f in json.loads(out)["findings"])
    _, out, _ = _run(capsys, *files, "--json", "--job")
    assert any(f["code"] == "EV703" for f in json.loads(out)["findings"])


@pytest.mark.parametrize(
    ("content", "what"),
    [(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not a trace: a PNG image, not JSON"),
     (b"", "empty file")],
)  # fmt: skip
def test_a_file_that_is_no_json_says_what_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, what: str
) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(content)
    code, out, _ = _run(capsys, str(path))
    assert code == 2
    assert out.splitlines()[0] == f"{path}: UNUSABLE"  # no "0 events, object"
    assert what in out
    code, out, _ = _run(capsys, str(path), "--json")
    assert json.loads(out)["files"][0]["form"] == "unknown"


def test_fix_takes_a_directory_holding_one_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "rank0.json").write_bytes(fixture("EV503", "fail").read_bytes())
    code, out, err = _run(capsys, str(folder), "--fix", "-o", str(tmp_path / "fixed.json"))
    assert code == 1 and err == "" and "EV503" in out
    assert (tmp_path / "fixed.json").is_file()
    (folder / "rank1.json").write_bytes(fixture("EV503", "fail").read_bytes())
    code, _, err = _run(capsys, str(folder), "--fix", "-o", str(tmp_path / "again.json"))
    assert code == 2 and "this directory holds 2" in err and not (tmp_path / "again.json").exists()


def test_info_and_check_word_an_empty_directory_alike(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["info", str(tmp_path)]) == 2
    info = capsys.readouterr().err
    code, _, check = _run(capsys, str(tmp_path))
    assert code == 2
    for err in (info, check):
        assert err.startswith(f"echo-view: error: {tmp_path}: no trace files in this directory (")
        assert err.count("\n") == 1


def test_an_empty_protobuf_trace_is_unusable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # It parsed as a trace of no packets: "0 events ... OK", where an empty .json is refused.
    path = tmp_path / "empty.pftrace"
    path.write_bytes(b"")
    code, out, _ = _run(capsys, str(path), "--json")
    doc = json.loads(out)
    assert code == 2 and not doc["files"][0]["usable"]
    assert doc["findings"][0]["code"] == "EV111"
    assert "empty file" in doc["findings"][0]["first"][0]["message"]


def test_an_xla_profile_beside_its_trace_is_no_perfetto_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # jax.profiler / TensorBoard write <host>.xplane.pb (an XSpace protobuf) beside the trace's
    # JSON: a directory check parsed it as a Perfetto trace ("Wire format was corrupt ...
    # write it again") and called the profile unusable; given alone it is named for what it is.
    run = tmp_path / "plugins" / "profile" / "2024_06_01_12_00_00"
    run.mkdir(parents=True)
    (run / "host0.trace.json").write_bytes(fixture("EV301", "pass").read_bytes())
    xspace = run / "host0.xplane.pb"
    xspace.write_bytes(b"\x0a\x08\x08\x01\x12\x04/gpu")  # XSpace.planes[0]: id 1, name
    code, out, _ = _run(capsys, str(tmp_path), "--json")
    doc = json.loads(out)
    assert code == 0 and [f["path"] for f in doc["files"]] == [str(run / "host0.trace.json")]
    code, out, _ = _run(capsys, str(xspace), "--json")
    doc = json.loads(out)
    assert code == 2 and "XLA profile" in doc["findings"][0]["first"][0]["message"]


def _deepep_rank(rank: int, kernels: list[str]) -> dict[str, object]:
    """One rank of a DeepEP job as the profiler writes it: launches and their kernels."""
    events: list[dict[str, object]] = []
    for i, op in enumerate(kernels):
        corr, ts = 100 + i, 10.0 + 100 * i
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
             "tid": 100, "ts": ts, "dur": 2, "args": {"correlation": corr}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"void dpsk::ep::internode::{op}<false, 8>(int4*)",
             "pid": 0, "tid": 7, "ts": ts + 5, "dur": 20,
             "args": {"correlation": corr, "device": 0, "stream": 7}}
        )  # fmt: skip
    return {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": events}  # fmt: skip


def test_deepep_kernels_are_the_collectives_ranks_are_compared_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """DeepEP's dispatch / combine are communication for the cross-rank rules too: a rank that
    skips a combine is reported like one that skips an NCCL collective."""
    for rank, ops in enumerate((["dispatch", "combine"], ["dispatch"])):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(_deepep_rank(rank, ops)))
    _, out, _ = _run(capsys, str(tmp_path), "--json")
    (ev703,) = [f for f in json.loads(out)["findings"] if f["code"] == "EV703"]
    assert ev703["count"] == 1


def test_findings_quote_long_names_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A finding that names an event of 100,000 characters prints a line of bounded length."""
    name = "A" * 100_000
    events = [
        {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": 5, "dur": 10},  # overlaps: EV301
    ]
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"traceEvents": events}))
    code, out, _ = _run(capsys, str(path))
    assert code == 1 and "EV301" in out and "AAA" in out
    assert max(map(len, out.splitlines())) < 1200


def test_a_time_beyond_decimal_range_is_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A one-byte edit of a real trace (a digit turned into "e") raised decimal.Overflow.
    path = tmp_path / "t.json"
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": ts, "dur": 3} for ts in ("TS", 5)]
    path.write_text(json.dumps({"traceEvents": events}).replace('"TS"', "1e94128201427195"))
    code, out, _ = _run(capsys, str(path), "--select", "EV211")
    assert code == 1
    assert "ts=1E+94128201427195 dur=3 is not a finite int64-ns time" in out
