""":func:`echo_view.cli.main` on hostile I/O: gzip bombs end with the limit error (and
``--max-inflated-bytes`` lifts it), write errors are one line, SIGTERM and Ctrl-C remove
temporary files and half-written outputs."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from echo_view.cli import main
from echo_view.errors import stop_requested
from echo_view.formats import INFLATION_FLOOR
from tests.cli.hostile_io import DLRM, ROOT, SAMPLES, fingerprint, gzip_bomb, listing, refused
from tests.cli.sigint import as_in_a_terminal

BOMB = 4 * INFLATION_FLOOR  # scaled: the ratio of a 10 GB whitespace bomb, 64 MiB of it
NSYS = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private TMPDIR, to see what is left in it."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    monkeypatch.setenv("TMPDIR", str(d))
    monkeypatch.setattr("tempfile.tempdir", None)  # re-read TMPDIR
    return d


@pytest.mark.parametrize(
    ("command", "head", "tail"),
    [
        (["info"], b'{"traceEvents": [', b"]}"),
        (["check"], b"", b'{"traceEvents": []}'),
        (["export", "-o", "{tmp}/out.json"], b'{"traceEvents": [', b"]}"),
        (["simulate"], b'{"format": "echo-view.traced-graph", "pad": "', b'"}'),
    ],
)
def test_whitespace_bombs_end_with_the_limit(
    command: list[str],
    head: bytes,
    tail: bytes,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.json.gz", BOMB, head, tail)
    argv = [command[0], str(bomb), *(a.format(tmp=tmp_path) for a in command[1:])]
    err = refused(argv, capsys, tmp_path, [bomb], "gzip data inflates more than 300x")
    assert f"{bomb}: gzip data" in err and "--max-inflated-bytes" in err


def test_a_sqlite_gz_bomb_stops_and_leaves_nothing_in_tmpdir(
    tmp_path: Path, tmpdir_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.sqlite.gz", BOMB, b"SQLite format 3\x00", fill=b"\0")
    refused(["info", str(bomb)], capsys, tmp_path, [bomb], "gzip data inflates more than 300x")
    assert listing(tmpdir_env) == []


def test_max_inflated_bytes_caps_and_lifts_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = DLRM[0]  # 53 KB inflating to 903 KB
    for argv in (
        ["--max-inflated-bytes", "100K", "info", str(trace)],
        ["info", str(trace), "--max-inflated-bytes", "100KiB"],
    ):
        refused(argv, capsys, tmp_path, [trace], "past --max-inflated-bytes 102,400")
    padded = gzip_bomb(tmp_path / "padded.json.gz", BOMB, b"", b'{"traceEvents": []}')
    assert main(["check", str(padded), "--json", "--max-inflated-bytes", "1G"]) in (0, 1)
    (facts,) = json.loads(capsys.readouterr().out)["files"]
    assert facts["form"] == "object" and facts["usable"]  # read to its end
    argv = ["info", str(trace), "--max-inflated-bytes", "0"]
    refused(argv, capsys, tmp_path, [trace], "must be positive")


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_write_errors_are_one_line(
    code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only file system, no permission, a full disk: the temporary file cannot be created,
    or the rename fails after it was written; nothing is left either way."""

    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    trace = DLRM[0]
    out = tmp_path / "out.pftrace"
    for target in ("tempfile.mkstemp", "os.replace"):
        with monkeypatch.context() as m:
            m.setattr(target, fail)
            argv = ["export", str(trace), "-o", str(out)]
            err = refused(argv, capsys, tmp_path, [trace], os.strerror(code))
        assert err.startswith(f"echo-view: error: {out}: cannot write the output")


def cli(*argv: str, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``python -m echo_view ARGV`` in a child process (text output unless ``text=False``),
    run from the repository root unless ``cwd`` says otherwise."""
    kwargs.setdefault("cwd", ROOT)
    kwargs.setdefault("timeout", 120)
    kwargs.setdefault("text", True)
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs["capture_output"] = True
    return subprocess.run([sys.executable, "-m", "echo_view", *argv], **kwargs)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize(
    "argv",
    [
        ["info", str(DLRM[0])],
        ["info", str(DLRM[0]), "--json"],
        ["simulate", str(DLRM[0])],
        ["check", str(DLRM[0]), "--json"],  # (bytes, written to the binary stream)
        # argparse drops an OSError writing these: they once exited 0 with nothing written.
        ["--version"],
        ["--help"],
        ["info", "--help"],
    ],
)
def test_a_full_standard_output_is_one_line(argv: list[str]) -> None:
    """`> /dev/full`: every command once ended in an OSError traceback from its first print."""
    with open("/dev/full", "w") as full:
        run = cli(*argv, stdout=full, stderr=subprocess.PIPE)
    assert run.returncode == 2, run.stderr
    assert run.stderr == (
        "echo-view: error: standard output: cannot write the output (No space left on device) "
        "(the disk is full; free space or write elsewhere)\n"
    )


def test_an_ascii_output_encoding_gets_escapes_not_a_traceback() -> None:
    # info prints µs and a per-GPU table; it ended in a UnicodeEncodeError traceback.
    run = cli("info", str(DLRM[0]), text=False, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert run.returncode == 0, run.stderr
    assert b"\\xb5s" in run.stdout and run.stdout.isascii()


@pytest.mark.parametrize(
    "argv",
    [["info", str(DLRM[0])], ["check", str(DLRM[0])], ["info", str(DLRM[0]), "--json"]],
    ids=["info", "check", "info-json"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(argv: list[str]) -> None:
    """`| head -1`: rich's tables exited with status 1 (`check`'s "errors found")."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "echo_view", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(5)
    proc.stdout.close()  # the reader goes: every later write meets a closed pipe
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == b""


def test_a_current_directory_removed_is_one_line(tmp_path: Path) -> None:
    # `plan --workers 2` hung (its workers could not start), `trace` printed a foreign error.
    gone = tmp_path / "gone"
    gone.mkdir()

    def enter_and_remove() -> None:
        os.chdir(gone)
        os.rmdir(gone)

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = cli("info", str(DLRM[0]), cwd=None, env=env, preexec_fn=enter_and_remove)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        "echo-view: error: the current directory no longer exists (cd to one that does)\n"
    )


def test_an_input_repair_is_one_warning_line(tmp_path: Path) -> None:
    trace = tmp_path / "neg.json"
    x = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 10, "dur": -5}
    trace.write_text(json.dumps([x, {**x, "ts": 20, "dur": 2}]))
    run = cli("info", str(trace))
    assert run.returncode == 0 and run.stdout
    assert run.stderr == (
        f"echo-view: warning: {trace}: 1 slice(s) of negative duration read as 0 long "
        "(Perfetto drops them)\n"
    )


def test_running_out_of_memory_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Under `ulimit -v`, a MemoryError from the importer ended in a 27-line traceback.
    import importers.kineto.columns as columns

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(columns.Columns, "add", exhausted)
    assert main(["info", str(DLRM[0])]) == 2
    assert capsys.readouterr().err == (
        "echo-view: error: out of memory (run it where more memory is free or allowed, "
        "ulimit -v; or read fewer ranks at once: --workers 1)\n"
    )


def test_closed_standard_streams_are_one_line() -> None:
    """`>&-` and `<&-`: Python starts with the stream None; the commands once ended in an
    AttributeError traceback."""
    closed_out = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    run = cli("info", str(DLRM[0]), **closed_out, preexec_fn=lambda: os.close(1))
    assert run.returncode == 2
    assert run.stderr == (
        "echo-view: error: standard output is closed (give the command an output: > FILE, or "
        "| less)\n"
    )
    run = cli("tui", str(DLRM[0]), stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
    assert run.returncode == 2 and "the terminal UI needs a terminal" in run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_a_read_only_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        argv = ["export", str(DLRM[0]), "-o", str(ro / "out.json")]
        refused(argv, capsys, tmp_path, [DLRM[0]], "Permission denied")
    finally:
        ro.chmod(0o755)


# A child that runs the CLI with one step replaced by a stall: it creates the marker file and
# sleeps, so the signal surely arrives while the temporary file exists (no timing involved).
_STALLING_CLI = """
import os, sys, time
from collections.abc import Iterator
from pathlib import Path
import {module} as target
def stall(*args, **kwargs):
    Path(os.environ["MARKER"]).touch()
    time.sleep(600)
target.{name} = stall
from echo_view.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _signalled(stall: str, argv: list[str], sig: int, tmp_path: Path, env: dict[str, str]) -> str:
    module, name = stall.rsplit(".", 1)
    marker = tmp_path / "stalled"
    script = _STALLING_CLI.format(module=module, name=name)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT), "MARKER": str(marker), **env},
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_in_a_terminal,
    )
    try:
        deadline = time.monotonic() + 300  # a safety net, not a measurement
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_export_leaves_no_temporary_file(sig: int, tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for src in DLRM[:2]:
        shutil.copy(src, job / src.name)
    before = fingerprint(job)
    out = tmp_path / "out" / "job.json"
    out.parent.mkdir()
    _signalled("os.replace", ["export", str(job), "-o", str(out)], sig, tmp_path, {})
    assert listing(out.parent) == [] and fingerprint(job) == before


def test_a_sigterm_whose_exception_is_swallowed_still_stops_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Python drops an exception raised while a finalizer runs: the one Terminated was lost,
    # SIGTERM was ignored from then on, and the export wrote its output and exited 0.
    import echo_view.cli as cli
    import echo_view.formats as formats

    real = formats.output_mode

    def signalled_in_a_finalizer() -> int:
        with contextlib.suppress(BaseException):  # as Python does in a finalizer
            cli._on_sigterm(signal.SIGTERM, None)
        return real()

    monkeypatch.setattr(formats, "output_mode", signalled_in_a_finalizer)
    out = tmp_path / "job.json"
    assert main(["export", str(DLRM[0]), "-o", str(out)]) == 143
    assert "echo-view: terminated" in capsys.readouterr().err
    assert listing(tmp_path) == []
    assert not stop_requested()  # (cleared for what runs next in this process)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_sqlite_gz_import_empties_tmpdir(sig: int, tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {"TMPDIR": str(tmpdir)}
    err = _signalled("importers.nsys.db._connect", ["info", str(NSYS)], sig, tmp_path, env)
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err
    assert listing(tmpdir) == []


def test_a_full_or_read_only_tmpdir_is_one_line(
    tmp_path: Path,
    tmpdir_env: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``.sqlite.gz`` inflates into TMPDIR: a full disk while writing, or a TMPDIR where no
    directory can be made, is one line naming the input and what to do; nothing is left."""
    from importers.chrome_json_text import file_blocks

    def full_after_one_block(path: Path) -> Iterator[bytes]:
        yield next(file_blocks(path))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as m:
        m.setattr("importers.nsys.db.file_blocks", full_after_one_block)
        err = refused(["info", str(NSYS)], capsys, tmp_path, [NSYS], "No space left on device")
    assert "point TMPDIR to a larger directory" in err and listing(tmpdir_env) == []

    def read_only(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("tempfile.TemporaryDirectory", read_only)
    err = refused(["info", str(NSYS)], capsys, tmp_path, [NSYS], "Read-only file system")
    assert err.startswith(f"echo-view: error: {NSYS}: cannot create a temporary directory")


_UNREACHABLE_COMMANDS = [
    ["info", "{path}"],
    ["check", "{path}"],
    ["export", "{path}", "-o", "{tmp}/out.json"],
    ["simulate", "{path}"],
    ["diff", "{path}", str(DLRM[0])],
]


@pytest.mark.parametrize("command", _UNREACHABLE_COMMANDS, ids=lambda c: c[0])
def test_inputs_that_cannot_be_reached_are_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A too long name, a link loop, a file used as a directory: once OSError tracebacks."""
    (tmp_path / "loop_a").symlink_to("loop_b")
    (tmp_path / "loop_b").symlink_to("loop_a")
    (tmp_path / "file").write_text("x")
    for path, what in [
        (tmp_path / ("n" * 300 + ".json"), "the name is too long for the file system"),
        (tmp_path / "loop_a", "too many levels of symbolic links"),
        (tmp_path / "file" / "x.json", "a part of the path is a file, not a directory"),
    ]:
        argv = [a.format(path=path, tmp=tmp_path) for a in command]
        err = refused(argv, capsys, tmp_path, [tmp_path / "file"], what)
        assert err.startswith(f"echo-view: error: {path}: {what} (")


@pytest.mark.parametrize("command", _UNREACHABLE_COMMANDS, ids=lambda c: c[0])
def test_a_directory_that_cannot_be_listed_is_one_line(
    command: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(DLRM[0], job)
    # Root may list anything: deny the permission check as a chmod 000 would for a user.
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != job and access(p, mode))
    argv = [a.format(path=job, tmp=tmp_path) for a in command]
    err = refused(argv, capsys, tmp_path, [job], "permission denied")
    assert err.startswith(f"echo-view: error: {job}: permission denied (")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a directory without permissions anyway")
def test_an_unreadable_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    (job / "inner").mkdir(parents=True)
    shutil.copy(DLRM[0], job / "inner")
    for locked in (job, job / "inner"):
        locked.chmod(0)
        try:
            path = job / "inner" if locked == job else locked  # passing, then listing
            refused(["info", str(path)], capsys, tmp_path, [], "permission denied")
        finally:
            locked.chmod(0o755)


def test_export_writes_through_an_output_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "lo.json"
    link.symlink_to(real.name)
    assert main(["export", str(DLRM[0]), "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["traceEvents"]
    assert listing(tmp_path) == ["lo.json", "real.json"]


def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path: Path) -> None:
    # --debug re-raised: Python's exit code 1, which check, diff --fail-above and plan use for
    # their own verdicts.
    missing = str(tmp_path / "missing.json")
    for argv in (["check", missing], ["info", missing]):
        done = subprocess.run(
            [sys.executable, "-m", "echo_view", "--debug", *argv], capture_output=True, text=True
        )
        assert done.returncode == 2, done.stderr
        assert "Traceback" in done.stderr
        assert done.stderr.splitlines()[-1].startswith("echo-view: error: ")


@pytest.mark.slow
def test_debug_shows_what_inputs_put_in_the_traceback_escaped(tmp_path: Path) -> None:
    # The traceback of a traced script's exception carried its message raw: "\x1b[2J" cleared
    # the terminal.
    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text("def train_step():\n    raise ValueError('\\x1b[2J cleared')\n")
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(tmp_path / "g.json")]
    done = subprocess.run(
        [sys.executable, "-m", "echo_view", "--debug", *argv], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "Traceback" in done.stderr and "cleared" in done.stderr
    assert "\x1b" not in done.stderr


def test_an_output_name_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "wrote NAME" printed the name raw: an escape sequence in it reached the terminal.
    out = tmp_path / "a\x1b[31m\nb.json"
    assert main(["export", str(SAMPLES / "hta_nccl"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert out.exists() and "\x1b" not in err and err.count("\n") == 1
    assert "a\\x1b[31m\\nb.json" in err


@pytest.mark.parametrize(
    ("module", "code"),
    [
        # While the CLI's own imports load (numpy, via echo_view.formats).
        ("echo_view.formats", "import echo_view.cli"),
        # While a command's layers load, after the arguments are parsed.
        (
            "echo_view.loading",
            "from echo_view.cli import main; raise SystemExit(main(['info', 'x']))",
        ),
    ],
)
def test_ctrl_c_while_modules_load_is_one_line(module: str, code: str) -> None:
    # A Ctrl-C in the first moments printed a KeyboardInterrupt traceback. The interrupt is
    # raised by the import itself here, whenever it comes.
    patch = (
        "import builtins\n"
        "real = builtins.__import__\n"
        "def fake(name, *args, **kwargs):\n"
        f"    if name == {module!r}:\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = fake\n"
    )
    done = subprocess.run([sys.executable, "-c", patch + code], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "echo-view: interrupted\n"
