"""The shared rich console: piped output keeps its width, and COLUMNS never makes it too narrow
to print (at 0 columns rich printed nothing, exit 0)."""

from __future__ import annotations

import pytest
from rich.console import Console

from echo_view.cli import main
from echo_view.cli.console import MIN_WIDTH, console
from tests.conftest import SAMPLES


@pytest.mark.parametrize(("columns", "width"), [("0", MIN_WIDTH), ("5", MIN_WIDTH), ("120", 120)])
def test_a_terminal_is_drawn_at_least_min_width(
    monkeypatch: pytest.MonkeyPatch, columns: str, width: int
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich then takes the output for a terminal
    monkeypatch.setenv("COLUMNS", columns)
    assert Console().is_terminal
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
