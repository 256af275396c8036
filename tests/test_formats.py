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
    TRACED_GRAPH,
    Registry,
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


def test_atomic_output_to_a_name_near_the_limit(tmp_path: Path) -> None:
    # ".NAME.<pid>-XXXXXXXX.tmp" passed 255 bytes for names of 236-255: "File name too long"
    # once the whole input had been read.
    for length in (230, 245, 255):
        out = tmp_path / ("a" * (length - 5) + ".json")
        with atomic_output(out) as tmp:
            assert len(tmp.name.encode()) <= 255
            tmp.write_text("{}")
        assert out.read_text() == "{}"
        assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
        out.unlink()


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
    # Replacing a file keeps its mode, as writing it in place does (a 0600 file became 0644).
    private = tmp_path / "private.json"
    private.write_text("old")
    private.chmod(0o600)
    with atomic_output(private) as tmp:
        tmp.write_text("new")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() == "new"


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
        # A workload config was "JSON text" (its "[model]" read as an array), and "text" with
        # a comment header, as every shipped config has (no pointer to simulate).
        (b"# GPT\n\n[model]\nlayers = 2\n", "a TOML file"),
        (b"# a README\n[1, 2]\n", "text"),
        (b"[model]\nlayers = 2\n", "a TOML file"),
        (b"[[roles]] # one\n", "a TOML file"),
        (b"[1, 2]\n", "JSON text"),
        (b'{"format":"echo-view.traced-graph","version":1}', TRACED_GRAPH),
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
    # A traced graph, gzip-compressed as `trace` writes it, was "a gzip file".
    graph = tmp_path / "g.graph.json.gz"
    graph.write_bytes(gzip.compress(b'{"format":"echo-view.traced-graph","version":1}'))
    err = not_a_trace(graph, ["x"])
    assert err.message == f"not a trace: {TRACED_GRAPH}"
    assert "(workload configs and traced graphs are for simulate" in (err.hint or "")
    # A gzip file is described by what it holds, or how it is damaged: each was "a gzip file".
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b"x" * 100)[:12])
    assert describe_file(cut).startswith("a damaged gzip file (Compressed file ended")
    crc = tmp_path / "crc.json.gz"
    crc.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-8] + bytes(8))
    assert describe_file(crc).startswith("a damaged gzip file (CRC check failed")
    empty = tmp_path / "empty.json.gz"
    empty.write_bytes(gzip.compress(b""))
    assert describe_file(empty) == "a gzip file holding an empty file"
    png_gz = tmp_path / "plot.png.gz"
    png_gz.write_bytes(gzip.compress(PNG))
    assert describe_file(png_gz) == "a gzip file holding a PNG image"


def test_an_output_link_is_written_through_and_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    with atomic_output(link) as tmp:
        tmp.write_text("new")
    assert link.is_symlink() and real.read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to("made.json")  # a link to a file yet to be written: it is created
    with atomic_output(dangling) as tmp:
        tmp.write_text("made")
    assert dangling.is_symlink() and (tmp_path / "made.json").read_text() == "made"
    names = sorted(p.name for p in tmp_path.iterdir())  # no temporary file left
    assert names == ["dangling.json", "link.json", "made.json", "real.json"]


needs_proc = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")


@needs_proc
def test_output_links_are_judged_by_where_they_lead(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "no" / "out.json")
    with pytest.raises(UsageError, match=f"output directory '{tmp_path / 'no'}' does not exist"):
        check_output(link)
    read_end, write_end = os.pipe()
    gone = tmp_path / "gone.json"
    fd = os.open(gone, os.O_CREAT | os.O_WRONLY)
    gone.unlink()  # /proc/self/fd/N now reads "/…/gone.json (deleted)"
    try:
        link.unlink()
        link.symlink_to(f"/proc/self/fd/{read_end}")  # as /dev/stdout into a pipe
        with pytest.raises(UsageError, match="the output is a FIFO"):
            check_output(link)
        link.unlink()
        link.symlink_to(f"/proc/self/fd/{fd}")  # as /dev/stdout into a deleted file
        with pytest.raises(OutputError, match="leads to a file that has no name"):
            check_output(link)
    finally:
        for n in (read_end, write_end, fd):
            os.close(n)
    assert link.is_symlink()


def test_inputs_that_cannot_be_reached_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "loop_a").symlink_to("loop_b")
    (tmp_path / "loop_b").symlink_to("loop_a")
    (tmp_path / "file").write_text("x")
    cases = {
        tmp_path / ("n" * 300 + ".json"): "the name is too long for the file system",
        tmp_path / "loop_a": "too many levels of symbolic links",
        tmp_path / "file" / "x.json": "a part of the path is a file, not a directory",
    }
    registry = Registry()
    for path, what in cases.items():
        for call in (check_input, registry.importer_for):
            with pytest.raises(InputError) as err:
                call(path)
            assert err.value.path == str(path) and err.value.message == what


def test_a_directory_that_cannot_be_listed_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    # Root may list anything: deny the permission check as a chmod 000 would for a user.
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != job)
    for call in (check_input, Registry().importer_for):
        with pytest.raises(InputError, match="permission denied") as err:
            call(job)
        assert err.value.path == str(job)
    check_input(tmp_path)


def test_a_sniffer_meeting_an_unreadable_file_names_it(tmp_path: Path) -> None:
    locked = tmp_path / "rank0.json"

    class Sniffer:
        name = "sniffer"

        def sniff(self, path: Path) -> bool:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(locked))

    registry = Registry()
    registry.add_importer(Sniffer())  # type: ignore[arg-type]  # sniff is all it needs
    with pytest.raises(InputError) as err:
        registry.importer_for(tmp_path)
    assert err.value.one_line().startswith(f"{locked}: permission denied (")


def test_an_output_directory_that_cannot_be_looked_up_is_one_error(tmp_path: Path) -> None:
    # A name too long or a symbolic-link loop above the output was a traceback (is_dir() lets
    # those errors through); a file in the directory's place read "does not exist".
    with pytest.raises(OutputError, match=r"cannot write the output \(File name too long\)"):
        check_output(tmp_path / ("d" * 300) / "x.json")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OutputError, match="Too many levels of symbolic links"):
        check_output(loop / "x.json")
    a_file = tmp_path / "f.json"
    a_file.write_text("{}")
    with pytest.raises(UsageError, match="is not a directory"):
        check_output(a_file / "x.json")


def test_an_output_that_cannot_be_written_is_refused_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write-protected file was replaced (the rename ignores its mode); a directory without
    # write permission was found only when the output was ready. As the kernel answers for
    # an unprivileged user (root may write anything):
    kept = tmp_path / "kept.json"
    kept.write_text("keep")
    folder = tmp_path / "ro"
    folder.mkdir()
    denied = {str(kept), str(folder)}
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: str(p) not in denied and real_access(p, mode))
    with pytest.raises(OutputError, match="write-protected"):
        check_output(kept)
    with pytest.raises(OutputError, match=r"\(Permission denied\)"):
        check_output(folder / "x.json")
    assert kept.read_text() == "keep"
    # On a read-only file system the reason was "Permission denied" too.
    real_statvfs = os.statvfs

    class _ReadOnly:
        f_flag = os.ST_RDONLY

    monkeypatch.setattr(
        os, "statvfs", lambda p: _ReadOnly() if str(p) == str(folder) else real_statvfs(p)
    )
    with pytest.raises(OutputError, match=r"Read-only file system.*write elsewhere"):
        check_output(folder / "x.json")
