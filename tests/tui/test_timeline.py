"""The timeline widget's drawing machinery: rows drawn ahead while idle are the rows the next
key shows, the colour filter is skipped only where it changes nothing, and a row is exactly as
wide as the view even when names hold wide characters."""

from __future__ import annotations

from rich.cells import cell_len
from textual.filter import ANSIToTruecolor
from textual.pilot import Pilot
from textual.theme import BUILTIN_THEMES

from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, TraceBuilder
from echo_view.tui.app import EchoViewApp
from echo_view.tui.palette import palette_for
from echo_view.tui.timeline import LIKELY_MOVES, TimelineView
from tests.tui.appkit import run_app

KEY_OF_MOVE = dict(zip(LIKELY_MOVES, "wsad", strict=True))


async def _prefetched(pilot: Pilot[None], view: TimelineView) -> None:
    for _ in range(500):
        if view.prefetched:
            return
        await pilot.pause(0.01)
    raise AssertionError("the likely next views were never all drawn")


def _visible_rows(view: TimelineView) -> range:
    top = int(view.scroll_offset.y)
    return range(top, min(len(view.rows), top + view.size.height))


def test_after_idle_each_zoom_and_pan_draws_no_row_cold(synth: Job) -> None:
    cold: list[int] = []
    framing = [False]

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        draw, line = view._render_row, view.render_line

        def counting(*args: object) -> object:
            cold.extend([1] if framing[0] else [])
            return draw(*args)  # type: ignore[arg-type]

        def framed(y: int) -> object:  # a row the frame asks for (not one drawn ahead)
            framing[0] = True
            try:
                return line(y)
            finally:
                framing[0] = False

        view._render_row = counting  # type: ignore[method-assign]
        view.render_line = framed  # type: ignore[method-assign,assignment]
        for move, key in [*KEY_OF_MOVE.items(), (LIKELY_MOVES[0], "w")]:
            await _prefetched(pilot, view)
            expected = view._after(move)
            cold.clear()
            await pilot.press(key)
            assert (view.t0, view.ns_per_cell) == expected, key
            await pilot.pause()
            assert not cold, f"{key}: {len(cold)} rows drawn cold"
            # The prefetched rows are the rows a cold draw gives.
            for row_no in _visible_rows(view):
                ref = view.rows[row_no]
                sel = view._selected_position(ref.track)
                fresh = draw(ref, row_no, sel, view.window)
                assert list(line(row_no - int(view.scroll_offset.y))) == list(fresh)

    run_app([synth], body, size=(100, 30))


def test_a_moved_view_drops_the_prefetch_in_progress(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        await _prefetched(pilot, view)
        stale = view._prefetch_generation
        await pilot.press("w")
        drawn: list[int] = []
        draw = view._render_row
        view._render_row = lambda *a: drawn.append(1) or draw(*a)  # type: ignore[method-assign]
        view._cache.clear()
        view._prefetch(stale, view._likely_views(), 0)  # an old generation: nothing drawn
        assert not drawn

    run_app([synth], body)


def test_the_truecolor_filter_is_skipped_only_for_rgb_rows(synth: Job) -> None:
    assert palette_for(BUILTIN_THEMES["textual-dark"]).truecolor
    assert palette_for(BUILTIN_THEMES["textual-light"]).truecolor
    assert not palette_for(BUILTIN_THEMES["ansi-dark"]).truecolor  # colours by name

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        assert any(isinstance(f, ANSIToTruecolor) for f in app.get_line_filters())
        assert not any(isinstance(f, ANSIToTruecolor) for f in view.get_line_filters())
        # Force the filter on with ANSI row colours: the timeline keeps it.
        app.ansi_color = False
        app.theme = "ansi-dark"
        await pilot.pause()
        assert not view.palette.truecolor
        assert any(isinstance(f, ANSIToTruecolor) for f in view.get_line_filters())

    run_app([synth], body)


def _wide_name_job() -> Job:
    b = TraceBuilder(0, source="wide")
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1, "thread main")
    b.event(EventKind.USER_ANNOTATION, "数据加载 (data loading) " * 4, 0, 1_000_000, cpu)
    b.event(EventKind.CPU_OP, "aten::linear", 1_000_000, 500_000, cpu)
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "wide", False)


def test_rows_are_as_wide_as_the_view_with_wide_characters_in_names() -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        texts = []
        for y in range(len(view.rows)):
            strip = view.render_line(y)
            assert strip.cell_length == view.size.width
            assert sum(len(s.text) for s in strip) <= view.size.width
            texts.append(strip.text)
        assert any("数据" in t for t in texts)

    run_app([_wide_name_job()], body, size=(80, 24))


def _aligned_names_job() -> Job:
    b = TraceBuilder(0, source="aligned")
    for tid, name in ((1, "漢字" * 8), (2, "e\u0301" * 12), (3, "ab" * 16)):
        lane = b.lane(LaneKind.CPU_THREAD, 1, tid, f"thread {tid}")
        b.event(EventKind.CPU_OP, name, 0, 300_000, lane)
        b.event(EventKind.CPU_OP, "LATER", 600_000, 300_000, lane)
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "aligned", False)


def test_an_event_sits_under_its_time_whatever_the_names_before_it() -> None:
    # A wide character counted as one cell pushed every later event on its row to the right
    # (and combining marks pulled them left): "LATER" was drawn 16 cells late.
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        cells = []
        for y in range(len(view.rows)):
            text = view.render_line(y).text
            if "LATER" in text:
                cells.append(cell_len(text[: text.index("LATER")]))
        assert len(cells) == 3 and len(set(cells)) == 1, cells

    run_app([_aligned_names_job()], body, size=(100, 12))


def _far_apart_job() -> Job:
    b = TraceBuilder(0, source="far")
    lane = b.lane(LaneKind.CPU_THREAD, 1, 1, "thread 1")
    # 146 years apart, as the importer accepts: zooming out reached past 2**63 ns.
    b.event(EventKind.CPU_OP, "first", -(4_600 * 10**15), 10_000, lane)
    b.event(EventKind.CPU_OP, "last", 4_600 * 10**15, 10_000, lane)
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "far", False)


def test_the_view_stays_on_the_job_however_far_it_is_zoomed_or_panned() -> None:
    # Panning had no end, and a click past 2**63 ns raised OverflowError.
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        view = app.screen.query_one(TimelineView)
        lo, hi = view.index.span
        await pilot.press(*"sss")
        row = next(i for i, r in enumerate(view.rows) if not r.header)
        for x in range(view.label_width, view.size.width, 6):
            await pilot.click(TimelineView, offset=(x, row))
        await pilot.press(*"d" * 20)
        assert view.t0 <= hi and view.window.t1 < 2.0**63
        await pilot.press(*"a" * 40)
        assert view.window.t1 >= lo and view.t0 > -(2.0**63)
        assert app.return_code is None  # still running: nothing raised

    run_app([_far_apart_job()], body, size=(80, 12))
