"""Bad Nsight Systems inputs give one-line :class:`InputError` messages that say what to do."""

from __future__ import annotations

import gzip
import os
import sqlite3
import stat
import sys
import warnings
from pathlib import Path

import pytest

from echo_view.errors import InputError
from echo_view.model import EventKind, LaneKind
from importers.nsys import NsysImporter
from tests.importers.nsys.capture import Proc, build
from tests.importers.nsys.helpers import export_2022_4, sample, unpacked


def _edit(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """Run one statement on the export at ``path`` and commit it."""
    con = sqlite3.connect(path)
    try:
        con.execute(sql, params)
        con.commit()
    finally:
        con.close()


def _error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        NsysImporter().read([path])
    err = info.value
    assert "\n" not in err.one_line()
    assert err.path == str(path)
    return err


def test_truncated_sqlite(tmp_path: Path) -> None:
    good = unpacked("mfu_2gpu_before", tmp_path)
    bad = tmp_path / "truncated.sqlite"
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 3 + 100])
    err = _error(bad)
    assert "cut short" in err.message and "not a whole number of 4,096-byte pages" in err.message
    # Cut inside the last page, the zeros SQLite reads past the end were rows with NULL times.
    bad.write_bytes(data[:-2000])
    assert "not a whole number" in _error(bad).message
    # Cut at a page boundary: the header's page count tells.
    bad.write_bytes(data[: len(data) // 2 // 4096 * 4096])
    assert "its header counts" in _error(bad).message


def test_writes_pending_beside_the_file_are_refused(tmp_path: Path) -> None:
    # The file is read immutable (no recovery): a crashed writer's hot journal was ignored
    # and its half-made changes read as data; a live WAL's committed rows were not seen.
    path = unpacked("mfu_2gpu_before", tmp_path)
    journal = path.with_name(path.name + "-journal")
    journal.write_bytes(bytes.fromhex("d9d505f920a163d7") + bytes(504))
    assert "-journal beside the file holds writes" in _error(path).message
    journal.write_bytes(bytes(512))  # a committed journal left in PERSIST mode: zeroed
    NsysImporter().read([path])
    journal.unlink()
    wal = path.with_name(path.name + "-wal")
    wal.write_bytes(bytes(32))  # a header only: nothing pending
    NsysImporter().read([path])
    wal.write_bytes(bytes(32 + 4120))
    assert "-wal beside the file holds writes" in _error(path).message


def test_writes_pending_beside_a_linked_file_are_refused(tmp_path: Path) -> None:
    # Opened through a symbolic link, the journal was looked for beside the link's name, not
    # beside the file SQLite writes it next to: a half-applied transaction was read as data.
    path = unpacked("mfu_2gpu_before", tmp_path)
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "link.sqlite"
    link.symlink_to(path)
    journal = path.with_name(path.name + "-journal")
    journal.write_bytes(bytes.fromhex("d9d505f920a163d7") + bytes(504))
    assert "-journal beside the file holds writes" in _error(link).message
    journal.unlink()
    path.with_name(path.name + "-wal").write_bytes(bytes(32 + 4120))
    assert "-wal beside the file holds writes" in _error(link).message


def test_garbage_after_sqlite_header(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    assert "SQLite" in _error(bad).message


def test_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": []}')
    err = _error(bad)
    assert "no SQLite header" in err.message
    assert "nsys export --type sqlite" in (err.hint or "")


def test_a_capture_of_a_folder_that_cannot_be_read_is_named_not_skipped(tmp_path: Path) -> None:
    # Skipped, the folder's other captures were read as the whole job, with exit 0.
    (tmp_path / "node0.sqlite.gz").write_bytes(sample("h100_2gpu_1s").read_bytes())
    fifo = tmp_path / "node1.sqlite"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as info:
        NsysImporter().read([tmp_path])
    assert info.value.path == str(fifo) and "not a regular file" in info.value.message
    fifo.unlink()
    (tmp_path / "node1.nsys-rep").symlink_to(tmp_path / "gone.nsys-rep")
    with pytest.raises(InputError, match="cannot read this file"):
        NsysImporter().read([tmp_path])


def test_truncated_gzip(tmp_path: Path) -> None:
    data = sample("h100_2gpu_1s").read_bytes()
    bad = tmp_path / "cut.sqlite.gz"
    bad.write_bytes(data[: len(data) // 2])
    assert "truncated gzip" in _error(bad).message


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    _edit(path, "CREATE TABLE t (x INTEGER)")
    assert "not an Nsight Systems export" in _error(path).message


def test_export_without_kernel_table(tmp_path: Path) -> None:
    path = export_2022_4(tmp_path / "nokernels.sqlite", drop=["CUPTI_ACTIVITY_KIND_KERNEL"])
    err = _error(path)
    assert err.where == "CUPTI_ACTIVITY_KIND_KERNEL"
    assert "--lazy=false" in (err.hint or "")
    assert "--trace=cuda" in (err.hint or "")


def test_names_that_are_not_in_the_string_table(tmp_path: Path) -> None:
    # Without StringIds every kernel read as <missing name> and the NCCL ones as compute
    # (rank 0: comm 0 ns, not 17,172,652), with no word; a row deleted from it went unsaid.
    path = unpacked("mfu_2gpu_before", tmp_path)
    con = sqlite3.connect(path)
    nccl = con.execute("SELECT id FROM StringIds WHERE value LIKE 'ncclDevKernel%'").fetchall()
    con.executemany("DELETE FROM StringIds WHERE id = ?", nccl)
    con.commit()
    with pytest.warns(UserWarning, match=r"name id\(s\) have no StringIds row"):
        NsysImporter().read([path])
    con.execute("DROP TABLE StringIds")
    con.commit()
    con.close()
    assert "has no StringIds table" in _error(path).message


def test_kernel_table_without_required_column(tmp_path: Path) -> None:
    path = export_2022_4(tmp_path / "odd.sqlite")
    _edit(path, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN correlationId")
    err = _error(path)
    assert "correlationId" in err.message


@pytest.mark.parametrize("version", ["4.0.0", "2.1", "three"])
def test_unknown_schema_version(tmp_path: Path, version: str) -> None:
    err = _error(export_2022_4(tmp_path / "future.sqlite", version=version))
    assert "unsupported Nsight Systems export schema" in err.message
    assert version in err.message


def test_newer_minor_schema_warns_and_reads(tmp_path: Path) -> None:
    path = build(tmp_path / "newer.sqlite", [Proc(100, (0,), 1)])
    _edit(path, "UPDATE EXPORT_META_DATA SET value = '3.99.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    with pytest.warns(UserWarning, match=r"schema 3\.99\.0 is newer"):
        job = NsysImporter().read([path])
    assert job.meta["notes"]
    assert job.traces[0].mask(EventKind.KERNEL).sum() == 4


def test_export_without_any_event(tmp_path: Path) -> None:
    err = _error(export_2022_4(tmp_path / "empty.sqlite"))
    assert "no GPU activity" in err.message
    assert "--trace=cuda" in (err.hint or "")


def test_report_without_nsys_says_which_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    report = tmp_path / "run 1.nsys-rep"
    report.write_bytes(b"not read")
    err = _error(report)
    assert "`nsys` CLI" in err.message
    assert "nsys export --type sqlite" in (err.hint or "")
    assert "'" + str(tmp_path / "run 1.sqlite") + "'" in (err.hint or "")  # quoted for the shell


def _fake_nsys(bin_dir: Path, body: str) -> None:
    """An ``nsys`` on PATH that runs ``body`` (Python) with the command line in ``argv``."""
    bin_dir.mkdir()
    exe = bin_dir / "nsys"
    exe.write_text(f"#!{sys.executable}\nimport sys, shutil\nargv = sys.argv[1:]\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


@pytest.mark.skipif(os.name != "posix", reason="a shell-less script on PATH needs POSIX")
def test_report_is_exported_with_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = unpacked("h100_2gpu_1s", tmp_path)
    _fake_nsys(
        tmp_path / "bin",
        "assert argv[:3] == ['export', '--type', 'sqlite'], argv\n"
        f"shutil.copy({str(source)!r}, argv[argv.index('--output') + 1])",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"a report")
    job = NsysImporter().read([report])
    assert job.ranks == (0, 1)
    assert report.read_bytes() == b"a report"


@pytest.mark.skipif(os.name != "posix", reason="a shell-less script on PATH needs POSIX")
def test_failing_nsys_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nsys(
        tmp_path / "bin",
        "print('Processing...')\nprint('ERROR: the report is damaged', file=sys.stderr)\n"
        "sys.exit(1)",
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    report = tmp_path / "bad.nsys-rep"
    report.write_bytes(b"x")
    err = _error(report)
    assert "the report is damaged" in err.message


def test_gzip_of_something_else(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json.gz"
    with gzip.open(bad, "wb") as fh:
        fh.write(b'{"traceEvents": []}')
    assert not NsysImporter().sniff(bad)
    assert "no SQLite header" in _error(bad).message


def test_missing_file(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "no such file" in _error(tmp_path / "absent.sqlite").message


def _error_with(tmp_path: Path, table: str, column: str, value: int | None) -> InputError:
    """The import error of a small capture whose ``table`` row 2 has ``column`` = ``value``."""
    path = build(tmp_path / "capture.sqlite", [Proc(100, (0,), 1)])
    _edit(path, f"UPDATE {table} SET {column} = ? WHERE rowid = 2", (value,))
    return _error(path)


@pytest.mark.parametrize(
    ("table", "column", "value", "where", "message"),
    [
        # (The schema has start NOT NULL; a stored -2**63 is what a NULL reads as.)
        (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "start",
            -(2**63),
            "start",
            "have no start time (NULL or -2^63)",
        ),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "start", 10**15, "end", "end before they start"),
        # Read as int64 these reached info, check and export (a kernel lasting 292 years) or
        # made a duration that wrapped around (`export`: a negative duration).
        ("CUPTI_ACTIVITY_KIND_KERNEL", "end", 2**63 - 1, "end", "have end times beyond"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "start", -(2**62) - 1, "start", "have start times beyond"),
        ("NVTX_EVENTS", "start", -(2**63), "start", "have start times beyond"),
        ("NVTX_EVENTS", "end", 2**62, "end", "have end times beyond"),
    ],
)
def test_times_that_are_missing_backwards_or_out_of_range(
    tmp_path: Path, table: str, column: str, value: int, where: str, message: str
) -> None:
    err = _error_with(tmp_path, table, column, value)
    assert err.where == f"{table}.{where}"
    if message.endswith("beyond"):
        message += " ±146 years of the capture's clock"
    assert err.message == f"1 row(s) {message}; first at rowid 2"


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        # deviceId -3 broke the lane table (an IndexError); 2^40 and 2^62 spilled into the
        # lane key's other fields and merged lanes, silently.
        ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", -3),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId", 2**40),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId", 2**62),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId", -2),
        # Launches are matched on a correlation id's low 32 bits: 2^32 + n met launch n.
        ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId", 2**32 + 1),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", -5),
    ],
)
def test_device_stream_and_correlation_ids_out_of_range(
    tmp_path: Path, table: str, column: str, value: int
) -> None:
    err = _error_with(tmp_path, table, column, value)
    assert err.where == f"{table}.{column}"
    hi = "65,535" if column == "deviceId" else "4,294,967,295"
    assert err.message == f"1 row(s) have {column} values outside 0..{hi}; first {value} at rowid 2"


def test_gpu_work_without_a_device_is_refused(tmp_path: Path) -> None:
    # Nsight's schema declares deviceId NOT NULL; in a table rebuilt without the constraint a
    # NULL was read as GPU 0: that GPU's rank got another GPU's work, silently.
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    path = build(tmp_path / "capture.sqlite", [Proc(100, (0,), 1)])
    _edit(path, f"CREATE TABLE k AS SELECT * FROM {table}")
    _edit(path, f"DROP TABLE {table}")
    _edit(path, f"ALTER TABLE k RENAME TO {table}")
    _edit(path, f"UPDATE {table} SET deviceId = NULL WHERE rowid = 2")
    err = _error(path)
    assert err.where == f"{table}.deviceId"
    assert err.message == "1 row(s) have no deviceId (NULL); first at rowid 2"


@pytest.mark.parametrize("value", [None, 0, -1])
def test_gpu_work_without_a_process_is_refused(tmp_path: Path, value: int | None) -> None:
    # A NULL globalPid read as process 0: a rank of its own, holding that one kernel, and the
    # real ranks renumbered.
    err = _error_with(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid", value)
    assert err.where == "CUPTI_ACTIVITY_KIND_KERNEL.globalPid"
    assert err.message == "1 row(s) have no process (globalPid NULL or below 1); first at rowid 2"


def test_gpu_lanes_of_many_processes(tmp_path: Path) -> None:
    """Past 16,384 processes with GPU work the lane key's process field overflowed into its
    sign: GPU streams were read as CPU threads."""
    path = unpacked("h100_2gpu_1s", tmp_path)
    con = sqlite3.connect(path)
    for _ in range(3):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL"
        )
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = (rowid << 24) | (globalPid & 16777215)"
    )
    n = con.execute("SELECT count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[
        0
    ]
    con.commit()
    con.close()
    assert n > 1 << 14
    job = NsysImporter().read([path])
    kernels, streams = 0, 0
    for t in job.traces:
        on = t.events.kind == int(EventKind.KERNEL)
        kernels += int(on.sum())
        used = {t.lanes[int(i)] for i in set(t.events.lane[on].tolist())}
        assert {lane.kind for lane in used} <= {LaneKind.GPU_STREAM}  # no kernel on a thread
        streams += len(used)
    assert kernels == 8 * 3442 and streams >= n  # a stream per process: none merged


def test_a_capture_given_twice_is_refused(tmp_path: Path) -> None:
    # Read twice, its ranks came back as four, "all captures ran on host modal", exit 0.
    path = unpacked("h100_2gpu_1s", tmp_path)
    link = tmp_path / "again.sqlite"
    link.symlink_to(path)
    for paths in ([path, path], [tmp_path, path], [path, link]):
        with pytest.raises(InputError, match="the capture is given twice") as info:
            NsysImporter().read(paths)
        assert "\n" not in info.value.one_line()


def test_a_gpu_description_that_is_no_number_is_named(tmp_path: Path) -> None:
    # Was: "unexpected content in the export (TypeError: '>' not supported between ...)".
    path = build(tmp_path / "capture.sqlite", [Proc(100, (0,), 1)])
    _edit(path, "UPDATE TARGET_INFO_GPU SET smCount = 'abc'")
    err = _error(path)
    assert err.where == "TARGET_INFO_GPU.smCount"
    assert err.message == "smCount is 'abc', not an integer (row 1)"


def test_optional_values_of_another_kind_leave_the_export_readable(tmp_path: Path) -> None:
    # A thread name row without its thread id (the column allows NULL) and a session start
    # time written as text refused the whole file: "unexpected content (TypeError: int()
    # argument must be ..., not 'NoneType')".
    base = unpacked("mfu_2gpu_before", tmp_path)
    path = tmp_path / "odd.sqlite"
    path.write_bytes(base.read_bytes())
    _edit(path, "UPDATE ThreadNames SET globalTid = NULL WHERE rowid = 1")
    _edit(path, "UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'abc'")
    odd, good = NsysImporter().read([path]), NsysImporter().read([base])
    assert [len(t) for t in odd.traces] == [len(t) for t in good.traces]
