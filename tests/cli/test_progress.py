"""Progress on stderr: never on captured stderr unless ``--progress``; throttled plain lines when
forced; one redrawn line on a terminal. Slowness is simulated with ``delay_s=0``, not sleeping."""

from __future__ import annotations

import io
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
