"""The loading screen (progress of the import and indexing) and the timeline screen."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Center, Middle
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, ProgressBar

from echo_view.text import printable
from echo_view.tui.index import TimelineIndex
from echo_view.tui.panel import Steps, TimelinePanel


class LoadingScreen(Screen[None]):
    """A message and a progress bar while the worker reads and indexes the inputs."""

    DEFAULT_CSS = """
    LoadingScreen Label { width: 100%; content-align: center middle; }
    LoadingScreen ProgressBar { width: auto; }
    """

    def compose(self) -> ComposeResult:
        with Middle(), Center():
            yield Label("loading…", id="message")
            yield ProgressBar(total=100, show_eta=False, id="progress")

    def report(self, message: str, fraction: float) -> None:
        """Show ``message``; ``fraction`` in [0, 1], or negative when unknown."""
        # The message names the input file: shown as written, never parsed as markup.
        self.query_one("#message", Label).update(Content(printable(message)))
        bar = self.query_one("#progress", ProgressBar)
        if fraction < 0:
            bar.update(total=None)
        else:
            bar.update(total=100, progress=round(100 * min(fraction, 1.0)))


class TimelineScreen(Screen[None]):
    """One input's timeline with details, search and filter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("S", "app.summary", "Summary"),
        Binding("D", "app.diff", "Diff", show=False),
        Binding("b", "app.other_input", "Other input", show=False),
    ]

    def __init__(self, index: TimelineIndex, steps: Steps, title: str) -> None:
        super().__init__()
        self.index = index
        self.steps = steps
        self.sub_title = title

    def compose(self) -> ComposeResult:
        yield Header()
        yield TimelinePanel(self.index, self.steps)
        yield Footer(compact=True, show_command_palette=False)

    @property
    def panel(self) -> TimelinePanel:
        return self.query_one(TimelinePanel)
