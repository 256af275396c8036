"""Progress on stderr: never on captured stderr unless ``--progress``; throttled plain lines when
forced; one redrawn line on a terminal. Slowness is simulated with ``delay_s=0``, not sleeping."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

import echo_view.cli as cli
from echo_view.cli import progress as progress_mod
from echo_view.cli.progress import StderrProgress

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_captured_stderr_gets_no_progress_even_when_slow() -> None:
    quiet = io.StringIO()
    p = StderrProgress(quiet, delay_s=0.0)  # past the delay at once, as a slow import would be
    p("reading rank0", 0.25)
    p("done", 1.0)
    p.close()
    assert quiet.getvalue() == ""


def test_forced_progress_prints_throttled_lines_after_the_delay() -> None:
    quiet = io.StringIO()
    p = StderrProgress(quiet, forced=True, delay_s=60.0)
    p("reading", 0.5)
    assert quiet.getvalue() == ""
    loud = io.StringIO()
    p = StderrProgress(loud, forced=True, delay_s=0.0)
    p("reading rank0", 0.25)
    p("parsing", -1.0)  # throttled: under a second since the last line
    p("done", 1.0)
    p.close()
    assert loud.getvalue() == "reading rank0 25%\ndone 100%\n"


def test_terminal_gets_one_redrawn_line_cleared_at_the_end() -> None:
    term = Terminal()
    p = StderrProgress(term)
    p("parsing", -1.0)
    p.close()
    assert term.getvalue() == "\r\x1b[Kparsing\r\x1b[K"


def test_file_names_in_progress_are_escaped_and_cut_to_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rank file named with a colour and a window-title sequence once reached the terminal raw.
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(progress_mod.shutil, "get_terminal_size", lambda: os.terminal_size((21, 5)))
    term = Terminal()
    p = StderrProgress(term)
    p("r0_\x1b[31mRED\x1b]0;pwned\x07.json.gz", 0.5)
    # 20 cells: a wrapped line could not be redrawn with a carriage return.
    assert term.getvalue() == "\r\x1b[Kr0_\\x1b[31mRED\\x1b]0"
    forced = io.StringIO()
    p = StderrProgress(forced, forced=True, delay_s=0.0)
    p("r0_\x1b[31mRED\u202e.json.gz", 1.0)
    assert forced.getvalue() == "r0_\\x1b[31mRED\\u202e.json.gz 100%\n"
    # Wide characters take two cells each: 10 of them fill 20.
    term = Terminal()
    StderrProgress(term)("中" * 15, -1.0)
    assert term.getvalue() == "\r\x1b[K" + "中" * 10


def test_a_dumb_terminal_gets_spaces_not_erase_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setattr(progress_mod.shutil, "get_terminal_size", lambda: os.terminal_size((80, 5)))
    term = Terminal()
    p = StderrProgress(term)
    p("reading", 0.5)
    p.last = -1.0e9  # past the redraw interval
    p("done", 1.0)
    p.close()
    assert "\x1b" not in term.getvalue()
    assert term.getvalue() == "\rreading 50%\r           \rdone 100%\r         \r"


def test_slow_export_keeps_captured_stderr_to_the_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:

    class Slow(StderrProgress):  # every import "takes longer than the delay"
        def __init__(self, stream: io.TextIOBase, *, forced: bool = False) -> None:
            super().__init__(stream, forced=forced, delay_s=0.0)  # type: ignore[arg-type]

    monkeypatch.setattr(progress_mod, "StderrProgress", Slow)
    paths = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[:2]
    out = tmp_path / "two.json"
    assert cli.main(["export", *map(str, paths), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"echo-view: wrote {out}") and err.count("\n") == 1, err
    assert cli.main(["export", *map(str, paths), "-o", str(out), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "%" in err.splitlines()[0] and err.splitlines()[-1].startswith("echo-view: wrote"), err


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "{dlrm}", "-o", "{out}.json"],
        ["interference", "{dlrm}"],
        ["calibrate", "interference", "{dlrm}", "-o", "{out}.toml"],
        ["calibrate", "compute", "{dlrm}", "-o", "{out}.toml"],
        ["check", "{dlrm}"],
        ["check", "{nsys}"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_every_command_that_reads_a_job_reports_progress_when_asked(
    argv: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # These read a job as info and export do, but had no --progress (docs/cli.md).

    class Slow(StderrProgress):
        def __init__(self, stream: io.TextIOBase, *, forced: bool = False) -> None:
            super().__init__(stream, forced=forced, delay_s=0.0)  # type: ignore[arg-type]

    monkeypatch.setattr(progress_mod, "StderrProgress", Slow)
    subs = {
        "dlrm": str(SAMPLES / "dlrm_kineto"),
        "nsys": str(SAMPLES / "nsys" / "mfu_2gpu_before.sqlite.gz"),
        "out": str(tmp_path / "out"),
    }
    args = [a.format(**subs) for a in argv]
    cli.main(args)
    assert "%" not in capsys.readouterr().err
    cli.main([*args, "--progress"])
    err = capsys.readouterr().err
    assert (".trace.json.gz: " in err or ".sqlite.gz: " in err) and "100%" in err, err
