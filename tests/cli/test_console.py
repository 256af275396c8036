"""The shared rich console: piped output keeps its width, and COLUMNS never makes it too narrow
to print (at 0 columns rich printed nothing, exit 0)."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

import echo_view.cli.console as console_mod
from echo_view.cli import main
from echo_view.cli.console import MIN_WIDTH, console
from tests.conftest import SAMPLES


class _Terminal(Console):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(force_terminal=True, **kwargs)


@pytest.mark.parametrize(("columns", "width"), [("0", MIN_WIDTH), ("5", MIN_WIDTH), ("120", 120)])
def test_a_terminal_is_drawn_at_least_min_width(
    monkeypatch: pytest.MonkeyPatch, columns: str, width: int
) -> None:
    monkeypatch.setattr(console_mod, "Console", _Terminal)
    monkeypatch.setenv("COLUMNS", columns)
    assert console().width == width and console(soft_wrap=True).soft_wrap


@pytest.mark.parametrize(("command", "word"), [("interference", "overlap"), ("check", "events")])
def test_piped_output_ignores_a_zero_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, word: str
) -> None:
    argv = [command, str(SAMPLES / "hta_sampled_128")]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    monkeypatch.setenv("COLUMNS", "0")
    assert main(argv) == 0
    assert capsys.readouterr().out == plain and word in plain
    assert console().width == 160 and console(80).width == 80
