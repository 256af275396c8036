"""``echo-view tui``: argument handling; a bad path fails before the screen is taken."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.cli import build_parser, main
from echo_view.cli import tui as tui_cli


def test_parser_takes_one_or_two_paths() -> None:
    args = build_parser().parse_args(["tui", "a.json"])
    assert args.path == Path("a.json") and args.path2 is None
    args = build_parser().parse_args(["tui", "a.json", "b.json"])
    assert args.path2 == Path("b.json")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["tui"])


def test_a_missing_input_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tui", "samples/dlrm_kineto", "no/such/trace.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("echo-view: error: no/such/trace.json: no such file")
    assert len(err.strip().splitlines()) == 1


def test_a_crash_inside_the_app_exits_non_zero_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug in the app (here: indexing failing with a non-input error) used to leave
    Textual's traceback on the screen and exit 0."""
    from echo_view.tui import app
    from echo_view.tui.app import EchoViewApp

    def broken(*args: object) -> None:
        raise RuntimeError("index 7 out of range")

    run = EchoViewApp.run
    monkeypatch.setattr(tui_cli, "has_terminal", lambda: True)
    monkeypatch.setattr(app, "prepare", broken)
    monkeypatch.setattr(EchoViewApp, "run", lambda self: run(self, headless=True))
    assert main(["tui", "samples/dlrm_kineto"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("echo-view: error: the terminal UI stopped on an internal error")
    assert "RuntimeError: index 7 out of range" in err and "Traceback" not in err


def test_without_a_terminal_it_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """Under pytest neither standard stream is a terminal: the app would draw to a pipe and
    wait for keys forever."""
    assert main(["tui", "samples/dlrm_kineto"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("echo-view: error: the terminal UI needs a terminal")
    assert len(err.strip().splitlines()) == 1
