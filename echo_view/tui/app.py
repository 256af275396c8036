"""The echo-view terminal app: indexes one or two jobs (reading them first through a ``loader``
when given paths) in a worker thread with progress, then shows the timeline; with two inputs it
opens the diff screen on top.

The app reads files only through the ``loader`` it is given, so the TUI knows no file format.
``echo-view tui`` reads its inputs before it starts the app and passes the jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.worker import WorkerFailed, get_current_worker

from echo_view.analysis.diff import JobDiff, diff_jobs
from echo_view.errors import EchoViewError
from echo_view.formats import Progress
from echo_view.model import Job
from echo_view.text import printable
from echo_view.tui.calltree import CallTreeScreen
from echo_view.tui.commands import EchoCommands
from echo_view.tui.diffscreen import DiffScreen
from echo_view.tui.help import HelpScreen, Section, binding_rows
from echo_view.tui.index import Source, TimelineIndex
from echo_view.tui.panel import Steps, TimelinePanel, view_steps
from echo_view.tui.screens import LoadingScreen, TimelineScreen
from echo_view.tui.search import KindFilterScreen
from echo_view.tui.summary import SummaryScreen
from echo_view.tui.tables import SortableTable
from echo_view.tui.timeline import TimelineView

#: Reads one input (file or directory) into a job, reporting progress.
JobLoader = Callable[[Path, Progress], Job]
# Progress reaches the UI thread at most this often. Each update redraws the loading screen on
# the UI thread, which holds the GIL the import needs: at 20 updates a second that thread took
# about 10% of a 1 M-event import's CPU, at 4 a second about 4%.
_PROGRESS_INTERVAL_S = 0.25


@dataclass(eq=False)
class Loaded:
    """What the loading worker hands to the UI."""

    jobs: list[Job]
    titles: list[str]
    full: TimelineIndex
    views: list[TimelineIndex]
    steps: list[Steps]
    diff: JobDiff | None
    timings: dict[str, float] = field(default_factory=dict)


def prepare(jobs: Sequence[Job], titles: Sequence[str]) -> Loaded:
    """Index the jobs for the timeline (and diff them when there are two)."""
    t0 = time.perf_counter()
    labels = ["A", "B"][: len(jobs)] if len(jobs) > 1 else [""]
    full = TimelineIndex.build([Source(j, lab) for j, lab in zip(jobs, labels, strict=True)])
    views = [full.view(only_source=i) for i in range(len(jobs))]
    steps = [view_steps(v, i) for i, v in enumerate(views)]
    t1 = time.perf_counter()
    diff = diff_jobs(jobs[0], jobs[1]) if len(jobs) == 2 else None
    t2 = time.perf_counter()
    return Loaded(
        list(jobs), list(titles), full, views, steps, diff, {"index_s": t1 - t0, "diff_s": t2 - t1}
    )


#: The name the diff screen is installed under (built once, kept while the app runs).
_DIFF_SCREEN = "diff"
#: Actions that need two inputs (``echo-view tui A B``).
TWO_INPUT_ACTIONS = frozenset({"app.diff", "app.other_input"})


class EchoViewApp(App[None]):
    """Browse one job's timeline, or diff two."""

    TITLE = "echo-view"
    COMMANDS = App.COMMANDS | {EchoCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
    ]

    def __init__(
        self,
        inputs: Sequence[Path | Job],
        loader: JobLoader | None = None,
        titles: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= len(inputs) <= 2:
            raise ValueError("echo-view tui takes one or two inputs")
        if titles is not None and len(titles) != len(inputs):
            raise ValueError("one title per input")
        self.inputs = list(inputs)
        self.titles = list(titles) if titles is not None else None
        """What the header calls each input (default: its path, or the job's source)."""
        self.loader = loader
        self.loaded: Loaded | None = None
        self.error: EchoViewError | None = None
        #: An exception of the app's own that ended it (a bug); ``echo-view tui`` reports it in
        #: one line and exits non-zero.
        self.crash: BaseException | None = None
        #: Print Textual's full report of :attr:`crash` (``--debug``).
        self.show_traceback = False
        self.timings: dict[str, float] = {}
        self.current = 0
        self._screens: dict[int, TimelineScreen] = {}
        self._last_progress = 0.0

    def on_mount(self) -> None:
        self._t_mount = time.perf_counter()
        self.push_screen(LoadingScreen())
        self.load()

    # -- loading -------------------------------------------------------------------------------

    class LoadProgress(Message):
        """Posted by the loading worker (``on_echo_view_app_load_progress``)."""

        def __init__(self, message: str, fraction: float) -> None:
            super().__init__()
            self.message = message
            self.fraction = fraction

    def _progress(self, message: str, fraction: float) -> None:
        # Called on the worker thread: post (thread-safe, does not wait) rather than
        # call_from_thread, which would stall the import on every update.
        now = time.perf_counter()
        if now - self._last_progress < _PROGRESS_INTERVAL_S and 0 <= fraction < 1:
            return
        self._last_progress = now
        self.post_message(self.LoadProgress(message, fraction))

    def on_echo_view_app_load_progress(self, event: LoadProgress) -> None:
        if isinstance(self.screen, LoadingScreen):
            self.screen.report(event.message, event.fraction)

    @work(thread=True, group="load")
    def load(self) -> None:
        """Read and index the inputs off the UI thread."""
        worker = get_current_worker()
        jobs: list[Job] = []
        titles: list[str] = []
        t0 = time.perf_counter()
        try:
            for i, item in enumerate(self.inputs):
                if isinstance(item, Job):
                    jobs.append(item)
                    title = item.source or f"input {i + 1}"
                else:
                    if self.loader is None:
                        raise ValueError("a path was given but no loader")
                    self._progress(f"reading {item}", -1)
                    jobs.append(self.loader(item, self._progress))
                    title = str(item)
                if self.titles is not None:
                    title = self.titles[i]
                # File names and sources are input: an ESC or U+202E in one would reach the
                # terminal through every header that shows it.
                titles.append(printable(title))
                if worker.is_cancelled:
                    return
        except EchoViewError as exc:
            self.call_from_thread(self._failed, exc)
            return
        t1 = time.perf_counter()
        # A known fraction keeps the bar still: an animated one would compete for the GIL.
        self._progress(f"indexing {sum(j.event_count() for j in jobs):,} events", 1.0)
        loaded = prepare(jobs, titles)
        loaded.timings["import_s"] = t1 - t0
        if not worker.is_cancelled:
            self.call_from_thread(self._on_loaded, loaded)

    def _handle_exception(self, error: Exception) -> None:
        # Textual's hook for an unhandled exception (it then exits with return code 1).
        self.crash = self.crash or (error.error if isinstance(error, WorkerFailed) else error)
        super()._handle_exception(error)

    def _print_error_renderables(self) -> None:
        # Textual prints its traceback report here; without --debug the CLI's one line replaces it.
        if self.show_traceback:
            super()._print_error_renderables()
        else:
            self._exit_renderables.clear()

    def _failed(self, exc: EchoViewError) -> None:
        self.error = exc
        self.exit(return_code=exc.exit_code)

    def _on_loaded(self, loaded: Loaded) -> None:
        self.loaded = loaded
        self.timings = dict(loaded.timings)
        self.timings["ready_s"] = time.perf_counter() - self._t_mount
        self.switch_screen(self._timeline_screen(0))
        if loaded.diff is not None:
            self.action_diff()

    def _timeline_screen(self, i: int) -> str:
        """Name of input ``i``'s timeline screen, installed once so that switching keeps its
        zoom and selection."""
        assert self.loaded is not None
        name = f"timeline-{i}"
        if i not in self._screens:
            title = self.loaded.titles[i]
            if len(self.loaded.jobs) > 1:
                title = f"{'AB'[i]}: {title}"
            screen = TimelineScreen(self.loaded.views[i], self.loaded.steps[i], title)
            self._screens[i] = screen
            self.install_screen(screen, name)
        return name

    # -- actions -------------------------------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        sections: list[Section] = [("Everywhere", binding_rows(self.BINDINGS))]
        two = self.loaded is not None and len(self.loaded.jobs) == 2
        # With one input, the keys that need two (the diff, the other input) do nothing.
        skip = () if two else TWO_INPUT_ACTIONS
        screen_type = type(self.screen)
        if screen_type in (TimelineScreen, DiffScreen, SummaryScreen, CallTreeScreen):
            sections.append(("This screen", binding_rows(screen_type.BINDINGS, skip)))
        sections += [
            ("Timeline", binding_rows(TimelineView.BINDINGS)),
            ("Timeline panel", binding_rows(TimelinePanel.BINDINGS)),
            ("Tables", binding_rows(SortableTable.BINDINGS)),
            ("Kind filter", binding_rows(KindFilterScreen.BINDINGS)),
        ]
        if screen_type is not TimelineScreen:
            sections.append(("Timeline screen", binding_rows(TimelineScreen.BINDINGS, skip)))
        if screen_type is not DiffScreen and two:
            sections.append(("Diff screen", binding_rows(DiffScreen.BINDINGS)))
        if screen_type is not SummaryScreen:
            sections.append(("Summary screen", binding_rows(SummaryScreen.BINDINGS)))
        self.push_screen(HelpScreen(sections))

    def action_summary(self) -> None:
        if self.loaded is None or isinstance(self.screen, SummaryScreen):
            return
        i = self.current
        screen = SummaryScreen(self.loaded.jobs[i], self.loaded.titles[i])
        self.push_screen(screen, self._show_kernel)

    def _show_kernel(self, name: str | None) -> None:
        """Find kernel ``name`` (picked in the summary) on the timeline of the screen below:
        the current input's, or the diff screen's Timelines tab (both inputs)."""
        if name is None:
            return
        if isinstance(self.screen, DiffScreen):
            self.screen.action_tab("timelines")
            self.screen.query_one(TimelinePanel).find_exact(name)
            return
        screen = self._screens.get(self.current)
        if screen is not None and self.screen is screen:
            screen.panel.find_exact(name)

    def action_diff(self) -> None:
        loaded = self.loaded
        if loaded is None or isinstance(self.screen, DiffScreen):
            return
        if loaded.diff is None:
            self.notify("the diff screen needs two inputs: echo-view tui A B", severity="warning")
            return
        if not self.is_screen_installed(_DIFF_SCREEN):
            # Installed, so that leaving it and coming back keeps its alignment, zoom, filters
            # and bookmarks (a new one each time lost them, and took 0.3-0.9 s to build).
            title = f"A: {loaded.titles[0]}  vs  B: {loaded.titles[1]}"
            self.install_screen(DiffScreen(loaded.full, loaded.diff, title), _DIFF_SCREEN)
        self.push_screen(_DIFF_SCREEN)

    def action_other_input(self) -> None:
        if self.loaded is None or len(self.loaded.jobs) < 2:
            self.notify("only one input is open", severity="warning")
            return
        if not isinstance(self.screen, TimelineScreen):
            return
        self.current = 1 - self.current
        self.switch_screen(self._timeline_screen(self.current))
