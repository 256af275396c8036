"""The file rules of :mod:`echo_view.formats`: what an unreadable input appears to be and the
one error for inputs no reader accepts; special inputs refused without opening them, outputs
compared with inputs by file identity, atomic writes with the umask's mode and one-line write
errors, bounded gzip inflation, strict JSON."""

from __future__ import annotations

import errno
import gzip
import json
import os
import socket
import stat
import zlib
from pathlib import Path

import pytest

from echo_view.errors import InputError, LimitError, OutputError, UsageError
from echo_view.formats import (
    INFLATION_FLOOR,
    MAX_INFLATION_RATIO,
    atomic_output,
    check_inflation,
    check_input,
    check_output,
    describe_content,
    describe_file,
    json_text,
    not_a_trace,
    output_mode,
    set_max_inflated_bytes,
)


def test_special_inputs_are_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # opening it for reading would block: the check must only stat it
    with pytest.raises(InputError, match="is a FIFO"):
        check_input(fifo)
    link = tmp_path / "zero.json.gz"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="is a character device") as err:
        check_input(link)
    assert err.value.path == str(link)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s.sock"))
        with pytest.raises(InputError, match="is a socket"):
            check_input(tmp_path / "s.sock")


def test_directories_only_where_a_job_directory_is_read(tmp_path: Path) -> None:
    check_input(tmp_path)  # a job directory
    with pytest.raises(InputError, match="is a directory, not a file"):
        check_input(tmp_path, directory_ok=False)
    check_input(tmp_path / "missing.json")  # left to the reader, which names it


def test_an_output_that_is_an_input_is_refused_whatever_the_spelling(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    rank0 = job / "rank0.json"
    rank0.write_text("{}")
    hard = tmp_path / "hard.json"
    os.link(rank0, hard)
    soft = tmp_path / "soft.json"
    soft.symlink_to(rank0)
    dotted = job / ".." / "job" / "rank0.json"
    for out in (rank0, hard, soft, dotted):
        with pytest.raises(UsageError, match=r"the output is also an input \(.*rank0.json\)"):
            check_output(out, [job])  # the file found inside the input directory
        with pytest.raises(UsageError, match="also an input"):
            check_output(out, [rank0])
    other = tmp_path / "other.json"
    check_output(other, [job, rank0])  # does not exist yet
    other.write_text("{}")
    check_output(other, [job, rank0])


def test_outputs_that_cannot_be_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the output is a directory"):
        check_output(tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        check_output(tmp_path / "no" / "out.json")
    with pytest.raises(UsageError, match="is a character device"):
        check_output(Path("/dev/null"))


def test_atomic_output_gets_the_umask_mode_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        import echo_view.formats as formats

        formats._umask.cache_clear()
        with atomic_output(tmp_path / "out.txt") as tmp:
            tmp.write_text("x")
        assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == 0o640 == output_mode()
    finally:
        os.umask(old)
        formats._umask.cache_clear()
    with atomic_output(tmp_path / "out2.txt") as tmp:
        tmp.write_text("x")
    assert stat.S_IMODE((tmp_path / "out2.txt").stat().st_mode) == 0o666 & ~old


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_write_errors_are_one_line_and_leave_nothing(tmp_path: Path, code: int) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(OutputError) as err, atomic_output(target) as tmp:
        tmp.write_text("partial")
        raise OSError(code, os.strerror(code))
    line = err.value.one_line()
    assert line.startswith(f"{target}: cannot write the output ({os.strerror(code)})")
    assert "\n" not in line
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_directory_that_refuses_the_temporary_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    with pytest.raises(OutputError, match="read-only"), atomic_output(tmp_path / "o.json"):
        raise AssertionError("not reached")


def test_inflation_ratio_and_override() -> None:
    path = Path("bomb.json.gz")
    check_inflation(path, INFLATION_FLOOR, 1)  # below the floor: any ratio
    check_inflation(path, MAX_INFLATION_RATIO * 10 << 20, 10 << 20)
    with pytest.raises(LimitError) as err:
        check_inflation(path, (MAX_INFLATION_RATIO * 10 << 20) + 1, 10 << 20)
    assert f"more than {MAX_INFLATION_RATIO}x" in err.value.message
    assert "--max-inflated-bytes" in (err.value.hint or "")
    set_max_inflated_bytes(1 << 40)
    try:
        check_inflation(path, 1 << 40, 1)
        with pytest.raises(LimitError, match="past --max-inflated-bytes 1,099,511,627,776"):
            check_inflation(path, (1 << 40) + 1, 1 << 30)
    finally:
        set_max_inflated_bytes(None)


def test_real_gzip_traces_stay_far_below_the_ratio(samples_dir: Path) -> None:
    for path in sorted(samples_dir.rglob("*.gz")):
        data = path.read_bytes()
        ratio = len(zlib.decompress(data, wbits=31)) / len(data)
        assert ratio * 4 < MAX_INFLATION_RATIO, (path, ratio)


def test_json_text_is_strict() -> None:
    doc = {"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5], "c": (2, "x")}
    text = json_text(doc)
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": [2, "x"]}
    assert "NaN" not in text and "Infinity" not in text and text.endswith("}\n")


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"


@pytest.mark.parametrize(
    ("head", "what"),
    [
        (b"", "an empty file"),
        (PNG, "a PNG image"),
        (b"%PDF-1.7\n", "a PDF document"),
        (b"PK\x03\x04\x14\x00", "a ZIP archive"),
        (b"SQLite format 3\x00\x10\x00", "an SQLite database"),
        (gzip.compress(b"{}", mtime=0), "a gzip file"),
        (b'\xef\xbb\xbf {"traceEvents": []}', "JSON text"),
        (b"  \n\t", "a file holding only whitespace"),
        (b"# a README\n", "text"),
        (bytes(range(128, 256)), "binary data"),
    ],
)
def test_describe_content(head: bytes, what: str) -> None:
    assert describe_content(head) == what


def test_not_a_trace_says_what_the_input_is_and_what_was_expected(tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    png.write_bytes(PNG)
    err = not_a_trace(png, ["Kineto JSON (.json)", "Nsight (.sqlite)"])
    assert err.one_line() == (
        f"{png}: not a trace: a PNG image "
        "(expected Kineto JSON (.json), Nsight (.sqlite), or a directory of them)"
    )
    assert describe_file(tmp_path) == "a directory"
    assert not_a_trace(tmp_path, ["x"]).message == "no trace files in this directory"
