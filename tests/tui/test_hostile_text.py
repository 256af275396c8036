"""Input strings (lane, kernel and file names, typed queries) reach the screen as written: control
characters escaped, rich/Textual markup shown rather than parsed (``[/]`` used to end the app,
``[@click=app.quit]`` to make a click quit it), and wide characters measured in cells."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len, set_cell_size
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.strip import Strip
from textual.widgets import Label

from echo_view.formats import Progress
from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, TraceBuilder
from echo_view.text import printable
from echo_view.tui.app import EchoViewApp
from echo_view.tui.diffscreen import DiffScreen
from echo_view.tui.panel import STATUS_LABEL_CELLS, StatusLine, TimelinePanel
from echo_view.tui.screens import LoadingScreen, TimelineScreen
from echo_view.tui.summary import SummaryScreen
from echo_view.tui.timeline import TimelineView, fit_label
from tests.tui import appkit
from tests.tui.appkit import US, run_app, synth_job

MARKUP = "[bold red]RED[/] [@click=app.quit]CLICK[/]"
CONTROLS = "esc\x1b[31mX\x1b[0m\u202eevil"


def hostile_job(threads: list[str], kernel: str = "gemm", source: str = "hostile") -> Job:
    """One rank: a CPU thread lane named after each of ``threads`` with one op, and one kernel
    named ``kernel`` on a GPU stream."""
    b = TraceBuilder(0, source=source)
    for i, name in enumerate(threads):
        lane = b.lane(LaneKind.CPU_THREAD, 100, 200 + i, name)
        b.event(EventKind.CPU_OP, f"op{i}", 10 * US, 50 * US, lane)
    b.event(EventKind.KERNEL, kernel, 20 * US, 30 * US, b.gpu_stream(0, 7))
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, source)


def _status(app: EchoViewApp) -> tuple[str, Strip]:
    status = app.screen.query_one("#status", StatusLine)
    return status.text, status.render_line(0)


def _assert_plain(strip: Strip) -> None:
    """No segment of ``strip`` is a link, carries an action, or holds a control character."""
    for seg in strip:
        assert printable(seg.text) == seg.text, seg.text
        style = seg.style
        if style is not None:
            actions = [key for key in style.meta if key.startswith("@")]
            assert not style.link and not actions and not style.bold, (seg.text, style)


def _label_row(tl: TimelineView, label: str) -> int:
    return next(i for i, r in enumerate(tl.rows) if r.track is not None and r.track.label == label)


def test_status_line_shows_lane_names_as_written() -> None:
    names = [MARKUP, "BOOM[/]", "[link=http://evil]L", CONTROLS]

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = app.screen.query_one(TimelineView)
        for name in names:
            tl.cursor = _label_row(tl, printable(name))
            await pilot.pause()
            text, strip = _status(app)
            where = f"r0 {printable(name)}"
            if cell_len(where) > STATUS_LABEL_CELLS:  # cut to its share of the line
                where = set_cell_size(where, STATUS_LABEL_CELLS - 1) + "…"
            assert f"{where} │" in text
            assert f"{where} │" in strip.text
            _assert_plain(strip)
        assert app.crash is None

    app = run_app([hostile_job(names)], body, size=(120, 24))
    assert app.crash is None


def test_status_line_is_plain_printable_text() -> None:
    """Whatever a caller puts in it: a search run through the API may hold an ESC."""

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield StatusLine(id="status")

    app = Host()

    async def main() -> None:
        async with app.run_test(size=(120, 3)) as pilot:
            status = app.query_one(StatusLine)
            status.show(f"/{CONTROLS} {MARKUP}: 0")
            await pilot.pause()
            strip = status.render_line(0)
            assert f"/{printable(CONTROLS)} {MARKUP}: 0" in strip.text
            _assert_plain(strip)

    asyncio.run(main())


@pytest.mark.parametrize("query", ["[/]", "[bold red]zz", "[@click=app.quit]zz", "op\\[/]"])
def test_a_typed_query_is_shown_as_written(query: str) -> None:
    notes: list[tuple[str, bool]] = []

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        notify = app.notify

        def recording(message: str, *args: Any, markup: bool = True, **kw: Any) -> None:
            notes.append((message, markup))
            notify(message, *args, markup=markup, **kw)

        app.notify = recording  # type: ignore[method-assign]
        await pilot.press("slash", *query, "enter")
        await pilot.pause()
        text, strip = _status(app)
        assert f"/{query}: " in text and f"/{query}: " in strip.text
        _assert_plain(strip)
        assert app.crash is None

    run_app([hostile_job(["main"])], body, size=(120, 24))
    quoting = [markup for message, markup in notes if "[" in message]
    assert quoting and not any(quoting), notes


def test_a_kernel_picked_in_the_summary_is_shown_as_written() -> None:
    kernel = "\x1b[31mK[bold red]RED[/]"

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("S")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, SummaryScreen)
        await pilot.press("2", "enter")
        await pilot.pause()
        assert isinstance(app.screen, TimelineScreen)
        panel = app.screen.query_one(TimelinePanel)
        assert panel.matches is not None and len(panel.matches) == 1
        text, strip = _status(app)
        assert f"/{printable(kernel)}: 1/1" in text and f"/{printable(kernel)}: 1/1" in strip.text
        _assert_plain(strip)
        assert app.crash is None

    run_app([hostile_job(["main"], kernel=kernel)], body, size=(120, 24))


def test_titles_show_control_characters_escaped() -> None:
    titles = [f"/tmp/{CONTROLS}.json", "/tmp/[bold]x[/].json"]
    jobs = [hostile_job(["main"]), hostile_job(["main"])]
    app = EchoViewApp(jobs, titles=titles)

    async def main() -> None:
        async with app.run_test(size=(160, 24)) as pilot:
            await appkit.wait_loaded(pilot)
            assert isinstance(app.screen, DiffScreen)
            want = f"A: {printable(titles[0])}  vs  B: {titles[1]}"
            assert app.screen.sub_title == want
            await pilot.press("escape")
            assert isinstance(app.screen, TimelineScreen)
            assert app.screen.sub_title == f"A: {printable(titles[0])}"

    asyncio.run(main())
    assert app.loaded is not None and app.loaded.titles == [printable(t) for t in titles]


def test_default_titles_show_control_characters_escaped() -> None:
    """Without titles the header names a job's source, or the path it was read from."""
    job = hostile_job(["main"], source=CONTROLS)

    def loader(path: Path, progress: Progress) -> Job:
        return job

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        pass

    app = run_app([job], body)
    assert app.loaded is not None and app.loaded.titles == [printable(CONTROLS)]
    app = run_app([Path(f"{CONTROLS}.json")], body, loader=loader)
    assert app.loaded is not None and app.loaded.titles == [printable(f"{CONTROLS}.json")]


def test_the_loading_message_names_a_file_as_written() -> None:
    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(LoadingScreen())

    app = Host()
    message = f"reading /tmp/BOOM[/]{CONTROLS}.json"

    async def main() -> None:
        async with app.run_test(size=(120, 10)) as pilot:
            screen = app.screen
            assert isinstance(screen, LoadingScreen)
            screen.report(message, -1)
            await pilot.pause()
            label = screen.query_one("#message", Label)
            shown = "".join(label.render_line(y).text for y in range(label.size.height))
            assert printable(message) in shown

    asyncio.run(main())


def test_the_diff_verdict_escapes_a_kernel_class() -> None:
    """The verdict names the kernel class that changed most: a name from the input."""
    mp = pytest.MonkeyPatch()
    mp.setattr(appkit, "GEMM", f"{CONTROLS}_gemm(int)")
    try:
        a, b = synth_job(), synth_job(scale=2.0)
    finally:
        mp.undo()

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        verdict = str(app.screen.query_one("#verdict").render())
        assert "top kernel class" in verdict
        assert f"top kernel class: {printable(CONTROLS)}_gemm" in verdict

    run_app([a, b], body, size=(120, 30))


WIDE = ["plain", "漢字", "漢字" * 20, "\U0001f600" * 20, "a\u0301bc"]


@pytest.mark.parametrize("label", ["", *WIDE, "x" * 40])
@pytest.mark.parametrize("width", [4, 5, 10, 11, 21])
def test_fit_label_is_width_cells(label: str, width: int) -> None:
    fitted = fit_label(label, width)
    assert cell_len(fitted) == width and fitted.endswith("│")
    if cell_len(label) > width - 1:
        assert fitted.endswith("…│")
    else:
        assert fitted.startswith(label)


def test_wide_lane_labels_keep_the_gutter_in_line() -> None:
    """A lane named in CJK or emoji (two cells a character) has its ``│`` and events in the
    same columns as the other lanes."""

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = app.screen.query_one(TimelineView)
        lw = tl.label_width
        for y in range(len(tl.rows)):
            text = tl.render_line(y).text
            gutter = text.index("│")
            assert cell_len(text[:gutter]) == lw - 1, text
            assert cell_len(text) == tl.size.width
        # The column fits the longest label's cells, not its characters.
        assert tl._longest_label == max(cell_len(tl._label_text(r)) for r in tl.rows)

    run_app([hostile_job(WIDE)], body, size=(80, 14))
