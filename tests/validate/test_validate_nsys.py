"""``echo-view check`` on Nsight Systems exports: the real samples, a small capture with known
defects, and unusable inputs (one-line errors, exit code 2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from echo_view.cli import main
from tests.importers.nsys.capture import Proc, build
from tests.importers.nsys.helpers import SAMPLE_NAMES, sample, unpacked

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["check", "--json", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, (json.loads(out) if out else {}), err


def _finding(doc: dict[str, Any], code: str) -> dict[str, Any]:
    return next((f for f in doc["findings"] if f["code"] == code), {"count": 0, "first": []})


def _orphan_gpu_work(path: Path) -> int:
    """GPU work rows whose correlation id has no CUDA API row in the same process (SQL)."""
    con = sqlite3.connect(path)
    try:
        sql = " UNION ALL ".join(
            f"SELECT correlationId, globalPid FROM {t}"
            for t in (KERNELS, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        )
        return int(
            con.execute(
                f"SELECT count(*) FROM ({sql}) g WHERE NOT EXISTS (SELECT 1 FROM "
                "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = g.correlationId "
                "AND (r.globalTid >> 24) = (g.globalPid >> 24))"
            ).fetchone()[0]
        )
    finally:
        con.close()


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_check_reads_each_sample(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = _check(capsys, str(sample(name)))
    assert code in (0, 1) and doc["exit_code"] == code
    (facts,) = doc["files"]
    assert facts["form"] == "nsys" and facts["usable"] and facts["events"] > 20_000
    # GPU work without a launch: exactly the rows SQL finds, located by table and row keys.
    ev601 = _finding(doc, "EV601")
    assert ev601["count"] == _orphan_gpu_work(unpacked(name, tmp_path))
    for f in ev601["first"]:
        assert f["file"] == str(sample(name)) and f["rank"] in (0, 1)
        assert f["where"].startswith("CUPTI_ACTIVITY_KIND_") and "correlationId=" in f["where"]
    for f in _finding(doc, "EV602")["first"]:
        assert f["where"].startswith("CUPTI_ACTIVITY_KIND_RUNTIME row (start=")
        assert isinstance(f["pid"], int) and isinstance(f["tid"], int)
    # The samples mark no steps: one info per rank, never an error.
    assert _finding(doc, "EV605")["count"] == 2


def test_plain_sqlite_text_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = unpacked("mfu_2gpu_before", tmp_path)
    code = main(["check", "--show", "1", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1) and not err
    assert f"{path}: 32249 events, nsys" in out
    assert "CUPTI_ACTIVITY_KIND_KERNEL row (start=" in out


def _capture(tmp_path: Path) -> Path:
    return build(tmp_path / "cap.sqlite", [Proc(100, (0,), 1), Proc(200, (1,), 3)])


def test_clean_capture_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = _check(capsys, str(_capture(tmp_path)))
    assert code == 0 and doc["findings"] == []
    assert doc["files"][0]["events"] > 0


def test_capture_defects_are_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _capture(tmp_path)
    con = sqlite3.connect(path)
    # Rank 0: the GEMM of correlation 1001 runs before its launch; the copy of 1003 loses its
    # launch. Rank 1 (pid 200): one all-reduce kernel is missing (its launch stays).
    con.execute(f"UPDATE {KERNELS} SET start = start - 20000 WHERE correlationId = 1001")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = 1003")
    (victim,) = con.execute(
        f"SELECT correlationId FROM {KERNELS} WHERE globalPid >> 24 & 16777215 = 200 "
        "AND demangledName = 4 ORDER BY start LIMIT 1"
    ).fetchone()
    con.execute(f"DELETE FROM {KERNELS} WHERE correlationId = ?", (victim,))
    con.commit()
    con.close()

    code, doc, _ = _check(capsys, str(path))
    assert code == 1
    (early,) = _finding(doc, "EV603")["first"]
    assert early["rank"] == 0 and "correlationId=1001" in early["where"]
    assert early["where"].startswith(f"{KERNELS} row (start=")
    (orphan,) = _finding(doc, "EV601")["first"]
    assert (
        orphan["where"].startswith("CUPTI_ACTIVITY_KIND_MEMCPY row") and "=1003" in orphan["where"]
    )
    (lost,) = _finding(doc, "EV602")["first"]
    assert lost["rank"] == 1 and f"correlationId={victim}" in lost["where"]
    # Two ranks, 2 against 1 all-reduce: the count mismatch is reported on one of them.
    (fewer,) = _finding(doc, "EV703")["first"]
    assert fewer["file"] == str(path) and "collective" in fewer["message"]


def test_different_collective_located_by_kernel_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _capture(tmp_path)
    con = sqlite3.connect(path)
    con.execute("INSERT INTO StringIds VALUES (50, 'ncclKernel_AllGather_RING_LL_Sum_float()')")
    con.execute(
        f"UPDATE {KERNELS} SET demangledName = 50 WHERE rowid = (SELECT rowid FROM {KERNELS} "
        "WHERE globalPid >> 24 & 16777215 = 200 AND demangledName = 4 ORDER BY start LIMIT 1)"
    )
    con.commit()
    con.close()
    code, doc, _ = _check(capsys, str(path))
    assert code == 1
    (f,) = _finding(doc, "EV704")["first"]
    assert f["rank"] == 1 and f["where"].startswith(f"{KERNELS} row (start=")
    assert "index" not in f  # a model row is not a traceEvents index


def _one_line_error(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and not out
    assert err.startswith("echo-view: error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    return err


def test_corrupt_sqlite_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    assert str(garbage) in _one_line_error(capsys, garbage)
    whole = unpacked("h100_2gpu_1s", tmp_path).read_bytes()
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(whole[: len(whole) // 3])
    assert str(truncated) in _one_line_error(capsys, truncated)


def test_report_without_nsys_names_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00" * 64)
    monkeypatch.setenv("PATH", str(tmp_path))
    err = _one_line_error(capsys, report)
    assert "nsys export --type sqlite" in err


def test_fix_refuses_an_nsys_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["check", "--fix", "-o", str(tmp_path / "out.json"), str(sample("h100_2gpu_1s"))])
    _, err = capsys.readouterr()
    assert code == 2 and "JSON traces only" in err
