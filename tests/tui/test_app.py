"""Pilot tests: every interaction of the app, driven with keys (and the mouse) at 80x24."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Input, SelectionList, Static, TabbedContent, Tree

from echo_view.errors import InputError
from echo_view.formats import Progress
from echo_view.model import ClockAlignment, EventKind, Job, LaneKind, TraceBuilder
from echo_view.tui.app import EchoViewApp
from echo_view.tui.calltree import CallTreeScreen
from echo_view.tui.details import DetailsPane, ancestry
from echo_view.tui.diffscreen import DiffScreen
from echo_view.tui.help import HelpScreen, help_table
from echo_view.tui.index import Source, TimelineIndex
from echo_view.tui.marks import MarksScreen, mark_rows
from echo_view.tui.panel import StatusLine, TimelinePanel
from echo_view.tui.ruler import TimeRuler
from echo_view.tui.screens import TimelineScreen
from echo_view.tui.search import KindFilterScreen, search
from echo_view.tui.summary import SummaryScreen
from echo_view.tui.tables import SortableTable, signed_duration
from echo_view.tui.timeline import Selection, TimelineView
from echo_view.tui.tracks import COMM, Track, _Shown
from echo_view.units import format_duration
from tests.tui.appkit import US, run_app, synth_job


def _tl(app: EchoViewApp) -> TimelineView:
    return app.screen.query_one(TimelineView)


def _panel(app: EchoViewApp) -> TimelinePanel:
    return app.screen.query_one(TimelinePanel)


def _details(app: EchoViewApp) -> str:
    body = app.screen.query_one(DetailsPane).query_one(Static)
    return str(body.render())


def _kind(app: EchoViewApp, sel: Selection | None) -> EventKind:
    assert sel is not None
    job = app.loaded.jobs[sel.source] if app.loaded else None
    assert job is not None
    return job.traces[sel.trace].kind(sel.row)


async def _lane(pilot: Pilot[None], tl: TimelineView, label: str, group: int = 0) -> None:
    """Put the cursor on the lane labelled ``label`` of group ``group``."""
    target = next(
        i
        for i, r in enumerate(tl.rows)
        if r.group == group and not r.header and r.track is not None and r.track.label == label
    )
    while tl.cursor != target:
        await pilot.press("down" if tl.cursor < target else "up")


async def _palette(pilot: Pilot[None], command: str) -> None:
    """Run ``command`` from the command palette (Ctrl+P)."""
    await pilot.press("ctrl+p")
    await pilot.pause()
    await pilot.press(*command)
    await pilot.pause(0.3)
    await pilot.press("enter")
    await pilot.pause()


def test_loads_paths_in_a_worker_with_progress() -> None:
    seen: list[tuple[str, float]] = []
    job = synth_job()

    def loader(path: Path, progress: Progress) -> Job:
        progress("reading", 0.5)
        seen.append((str(path), 0.5))
        return job

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, TimelineScreen)
        assert app.loaded is not None and app.loaded.jobs == [job]
        assert {"import_s", "index_s", "ready_s"} <= set(app.timings)

    run_app([Path("some/job")], body, loader=loader)
    assert seen == [("some/job", 0.5)]


def test_an_input_error_ends_the_app_with_it() -> None:
    def loader(path: Path, progress: Progress) -> Job:
        raise InputError("not a trace", path=path, hint="check it")

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.pause()

    app = run_app([Path("bad.json")], body, loader=loader)
    assert app.error is not None and "bad.json: not a trace" in app.error.one_line()
    assert app.return_code == 2


def test_zoom_pan_reset(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        dt0, t00 = tl.ns_per_cell, tl.t0
        await pilot.press("w")
        assert tl.ns_per_cell == pytest.approx(dt0 / 1.5)
        await pilot.press("plus")
        assert tl.ns_per_cell == pytest.approx(dt0 / 2.25)
        await pilot.press("s", "minus")
        assert tl.ns_per_cell == pytest.approx(dt0)
        await pilot.press("d")
        assert tl.t0 == pytest.approx(t00 + 0.25 * tl.cells * dt0)
        await pilot.press("left", "left")
        assert tl.t0 == pytest.approx(t00 - 0.25 * tl.cells * dt0)
        await pilot.press("w", "w", "a", "0")
        assert (tl.t0, tl.ns_per_cell) == pytest.approx((t00, dt0))
        assert tl.window.t0 <= 0 and tl.window.t1 >= tl.index.span[1]

    run_app([synth], body)


def test_tab_walks_the_lane_and_f_fits_the_selection(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await _lane(pilot, tl, "gpu0 s7")
        await pilot.press("tab")
        first = tl.selection
        assert first is not None and _kind(app, first) == EventKind.KERNEL
        trace = synth.traces[0]
        kernels = np.flatnonzero(trace.events.lane == trace.events.lane[first.row])
        assert first.row == int(kernels[np.argmin(trace.events.start_ns[kernels])])
        await pilot.press("tab")
        second = tl.selection
        assert second is not None
        assert trace.events.start_ns[second.row] > trace.events.start_ns[first.row]
        await pilot.press("shift+tab")
        assert tl.selection == first
        await pilot.press("f")
        start, end = tl.selection_span() or (0, 0)
        assert tl.window.t0 < start and tl.window.t1 > end
        assert tl.window.t1 - tl.window.t0 < 1.5 * (end - start)
        assert "gpu0 s7" in _panel(app).query_one("#status", StatusLine).text

    run_app([synth], body)


def test_collapse_and_step_selector(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        n = len(tl.rows)
        await pilot.press("enter")
        assert len(tl.rows) == n - 3 and 0 in tl.index.collapsed
        await pilot.press("x")
        assert len(tl.rows) == 2
        await pilot.press("x")
        assert len(tl.rows) == n
        await pilot.press("right_square_bracket")
        steps = _panel(app).steps
        assert [s[0] for s in steps] == [0, 1]
        assert tl.step_index == 0
        await pilot.press("right_square_bracket")
        _, start, end = steps[1]
        assert tl.window.t0 <= start and tl.window.t1 >= end
        assert tl.window.t1 - tl.window.t0 < 1.1 * (end - start)
        assert "step 1" in _panel(app).query_one("#status", StatusLine).text

    run_app([synth], body)


def test_details_partner_and_peer_jumps(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await _lane(pilot, tl, "gpu0 s13")
        await pilot.press("tab")
        sel = tl.selection
        assert sel is not None and sel.trace == 0
        text = _details(app)
        assert "all_reduce" in text and "group 'dp'" in text and "seq 0" in text
        assert "peers: r1" in text and "launch: cudaLaunchKernel" in text
        await pilot.press("c")
        peer = tl.selection
        assert peer is not None and peer.trace == 1
        assert synth.traces[1].collectives.seq[0] == 0
        assert peer.row == int(synth.traces[1].collectives.event[0])
        assert tl.rows[tl.cursor].track is not None and tl.rows[tl.cursor].track.trace == 1
        await pilot.press("p")
        launch = tl.selection
        assert _kind(app, launch) == EventKind.RUNTIME
        await pilot.press("p")
        assert tl.selection == peer
        details = app.screen.query_one(DetailsPane)
        await pilot.press("shift+down")
        assert details.scroll_y > 0  # the args are below the fold at 80x24

    run_app([synth], body)


def test_search_and_match_navigation(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        panel = _panel(app)
        await pilot.press("slash")
        box = panel.query_one("#search", Input)
        assert box.has_focus
        await pilot.press(*"linear_[34]", "enter")
        assert panel.matches is not None and len(panel.matches) == 2 * 2 * 2
        assert tl.has_focus
        first = tl.selection
        assert first is not None
        name = synth.traces[first.trace].name(first.row)
        assert name in ("aten::linear_3", "aten::linear_4")
        seen = {(first.trace, first.row)}
        for _ in range(7):
            await pilot.press("n")
            assert tl.selection is not None
            seen.add((tl.selection.trace, tl.selection.row))
        assert len(seen) == 8
        await pilot.press("n")
        assert tl.selection == first  # wraps around
        await pilot.press("N")
        assert tl.selection != first
        status = panel.query_one("#status", StatusLine)
        assert "/linear_[34]: 8/8" in status.text
        # Another event selected (Tab, click): the position follows it, or is left out.
        at = panel.match_at
        await pilot.press("tab")
        assert tl.selection is not None and tl.selection != panel._match_selection(at)
        name = synth.traces[tl.selection.trace].name(tl.selection.row)
        if name in ("aten::linear_3", "aten::linear_4"):
            assert panel._match_selection(panel.match_at) == tl.selection
            assert f"/linear_[34]: {panel.match_at + 1}/8" in status.text
        else:
            assert "/linear_[34]: 8" in status.text and "8/8" not in status.text
        await pilot.press("escape")
        assert panel.matches is None

    run_app([synth], body)


def test_a_bad_regex_is_searched_literally(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        panel = _panel(app)
        await pilot.press("slash", *"DtoH (", "enter")
        assert panel.matches is not None and len(panel.matches) == 2 * 2

    run_app([synth], body)


def _backtracking_name_job() -> Job:
    b = TraceBuilder(0, source="names")
    lane = b.lane(LaneKind.CPU_THREAD, 1, 1, "thread 1")
    b.event(EventKind.CPU_OP, "a" * 60 + "b", 0, 1_000, lane)
    b.event(EventKind.CPU_OP, "aten::linear", 2_000, 1_000, lane)
    return Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "names", False)


def test_a_search_that_backtracks_without_end_is_stopped() -> None:
    # (a|aa)+$ on "aaa...ab" tries every split of the a's: the re module's one C call held the
    # interpreter for hours, and the terminal with it (keys, Ctrl-C).
    index_job = _backtracking_name_job()
    with pytest.raises(TimeoutError):
        search(TimelineIndex.build([Source(index_job, "")]), "(a|aa)+$", limit_s=0.2)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        panel = _panel(app)
        await pilot.press("slash", *"(a|aa)+$", "enter")
        assert panel.matches is None  # stopped: no partial result
        await pilot.press("slash", *"linear", "enter")  # the app goes on
        assert panel.matches is not None and len(panel.matches) == 1

    run_app([index_job], body)


def test_filter_by_kind(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await pilot.press("k")
        assert isinstance(app.screen, KindFilterScreen)
        sl = app.screen.query_one(SelectionList)
        assert sl.has_focus
        # Untick everything but "comm" (the last entry), then apply.
        for _ in range(sl.option_count - 1):
            await pilot.press("space", "down")
        await pilot.press("enter")
        assert _panel(app).shown_classes == frozenset({COMM})
        await _lane(pilot, tl, "gpu0 s7")
        await pilot.press("tab")
        assert tl.selection is None  # nothing shown on the GEMM stream
        header = tl.index.groups[0].header
        assert header is not None and set(header.coverage) == {COMM}
        await pilot.press("k", *["down"] * (sl.option_count - 1), "space", "enter")  # no comm
        assert _panel(app).shown_classes == frozenset()
        assert _panel(app).query_one("#status", StatusLine).text.endswith("kinds: none")
        await pilot.press("k", "a", "enter")
        assert _panel(app).shown_classes is None
        # Closing the filter unchanged re-filtered every lane (3.8 s on 100,000 threads).
        panel = _panel(app)
        calls: list[int] = []
        real = panel._apply_filter
        panel._apply_filter = lambda: (calls.append(1), real())[1]  # type: ignore[method-assign]
        await pilot.press("k", "escape")
        await pilot.press("k", "enter")
        assert calls == []

    run_app([synth], body)


def test_summary_screen_tables_sort(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("S")
        assert isinstance(app.screen, SummaryScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        ranks = app.screen.query_one("#ranks", SortableTable)
        assert ranks.row_count == 2 and ranks.has_focus
        await pilot.press("2")
        kernels = app.screen.query_one("#kernel-table", SortableTable)
        assert kernels.has_focus and kernels.row_count == 2  # GEMM and NCCL
        first = kernels.get_row_at(0)[0].plain
        await pilot.press("r")  # ascending total
        assert kernels.get_row_at(0)[0].plain != first
        await pilot.press("o")  # next column: mean
        assert kernels.sort_column == 3
        await pilot.press("3")
        colls = app.screen.query_one("#coll-table", SortableTable)
        assert colls.row_count == 1 and colls.get_row_at(0)[0].plain == "all_reduce"
        await pilot.press("escape")
        assert isinstance(app.screen, TimelineScreen)

    run_app([synth], body)


def test_help_lists_every_binding(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = " ".join(
            f"{k} {d}" for _, rows in app.screen.sections for k, d in rows
        )  # fmt: skip
        for b in [*TimelineView.BINDINGS, *TimelinePanel.BINDINGS]:
            assert b.description in text  # type: ignore[union-attr]
        assert "ctrl+p" in text and "Help" in text
        # One input: nothing that needs two (the diff screen, its keys, the other input).
        titles = [title for title, _ in app.screen.sections]
        assert not any("Diff" in t for t in titles), titles
        rows = {d for _, rows in app.screen.sections for _, d in rows}
        assert not rows & {"Diff", "Other input"}
        assert not rows & {"Align at previous step", "Align at next step"}  # diff screen only
        await pilot.press("escape")
        assert isinstance(app.screen, TimelineScreen)

    run_app([synth], body)


def test_help_with_two_inputs_lists_the_diff_keys(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("escape")  # from the diff screen to the timeline of A
        assert isinstance(app.screen, TimelineScreen)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {d for _, rows in app.screen.sections for _, d in rows}
        assert {"Diff", "Other input"} <= rows
        assert {b.description for b in DiffScreen.BINDINGS} <= rows  # type: ignore[union-attr]

    run_app([synth, synth_job(scale=1.5)], body)


def test_command_palette_goes_to_a_step(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await _palette(pilot, "step 1")
        tl = _tl(app)
        assert tl.step_index == 1

    run_app([synth], body)


def test_mouse_click_selects_the_event_under_it(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        row = next(i for i, r in enumerate(tl.rows) if r.track and r.track.label == "gpu0 s13")
        trace = synth.traces[0]
        k = int(trace.collectives.event[0])
        mid = int(trace.events.start_ns[k] + trace.events.dur_ns[k] // 2)
        x = tl.label_width + int((mid - tl.t0) / tl.ns_per_cell)
        await pilot.click(TimelineView, offset=(x, row))
        assert tl.selection == Selection(0, 0, k)
        await pilot.click(TimelineView, offset=(1, 0))  # the rank label toggles it
        assert 0 in tl.index.collapsed

    run_app([synth], body)


def test_two_inputs_open_the_diff_screen(synth: Job) -> None:
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        screen = app.screen
        verdict = str(screen.query_one("#verdict", Static).render())
        assert "B is" in verdict and "slower" in verdict
        assert "prediction error of the step time 13.83% (measured: A)" in verdict
        assert screen.query_one("#rank-table", SortableTable).row_count == 2
        await pilot.press("2")
        tl = screen.query_one(TimelineView)
        assert tl.has_focus
        assert [(g.rank, g.source) for g in tl.index.groups] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert len(tl.rows) == 4  # collapsed: one GPU row per rank and input
        assert [s.shift_ns for s in tl.index.sources] == [0, 0]
        await pilot.press("full_stop")
        assert screen.align_at == 1
        assert [s.shift_ns for s in tl.index.sources] == [1000 * 1000, 1000 * 1000]
        assert tl.window.t0 <= 0 < tl.window.t1
        await pilot.press("4")
        kt = screen.query_one("#kernel-table", SortableTable)
        assert kt.row_count == 2 and kt.get_row_at(0)[0].plain == "cutlass::Kernel"
        await pilot.press("escape")
        assert isinstance(app.screen, TimelineScreen)
        await pilot.press("b")
        assert app.current == 1 and isinstance(app.screen, TimelineScreen)
        assert app.screen.sub_title.startswith("B: ")
        await pilot.press("D")
        # The same diff screen, as it was left: a new one each time lost its alignment.
        assert app.screen is screen and screen.align_at == 1
        aligned = str(app.screen.query_one("#aligned", Static).render())
        assert aligned.startswith("placed so that step 1 (A) and step 1 (B) start together")
        assert "no rank" not in aligned

    run_app([synth, slower], body)


def test_the_palettes_search_from_another_diff_tab_types_into_the_box(synth: Job) -> None:
    # From the Overview, Ctrl+P "Search names" opened the Timelines tab and its search box,
    # but the focus went back to the timeline: the query typed ran as keys (e, m, m...).
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        await _palette(pilot, "Search names")
        panel = app.screen.query_one(TimelinePanel)
        assert app.focused is panel.query_one("#search", Input)
        await pilot.press(*"linear_0", "enter")
        assert panel.matches is not None and len(panel.matches) == 2 * 2 * 2

    run_app([synth, slower], body)


def test_diff_realigned_moves_bookmarks_and_has_no_single_clock(synth: Job) -> None:
    # After "." the mark stayed at its old view time, now another step's event, while the
    # jump from the marks list went to the event (at its new time).
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("2")
        panel = app.screen.query_one(TimelinePanel)
        tl = panel.timeline
        tl.select(Selection(0, 0, 0))  # A r0's first event, ProfilerStep#0
        await pilot.pause()
        sel = tl.selection
        assert sel is not None
        await pilot.press("M", "enter")
        (t,) = [m.t for m in panel.marks]
        await pilot.press("full_stop")  # align at step 1: every time moves by -1 ms
        assert [s.shift_ns for s in tl.index.sources] == [1000 * US, 1000 * US]
        assert [m.t for m in panel.marks] == [t - 1000 * US]
        # t: from the step start, then back to the job start; never A's trace clock for both.
        await pilot.press("t")
        assert panel.axis == "step"
        await pilot.press("t")
        assert panel.axis == "job"

    run_app([synth, slower], body)


def test_the_diff_overview_warns_of_unrelated_jobs_and_ranks_sort_as_numbers() -> None:
    # The Overview left out `diff`'s warning that the two inputs look like different jobs, and
    # the Ranks tab sorted r10 before r2.
    from tests.tui.appkit import synth_rank

    def job(ranks: int, scale: float) -> Job:
        traces = tuple(synth_rank(r, scale=scale) for r in range(ranks))
        align = ClockAlignment("shared-host-clock", (0,) * ranks, 0)
        return Job(traces, align, ranks, f"j{ranks}", False)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        verdict = str(app.screen.query_one("#verdict", Static).render())
        assert "warning: A and B look like different jobs: A has 12 rank(s), B 11" in verdict
        await pilot.press("3", "o", "r")  # by rank, ascending
        table = app.screen.query_one("#rank-table", SortableTable)
        ranks = [table.get_row_at(i)[0].plain for i in range(table.row_count)]
        assert ranks == [f"r{r}" for r in range(11)]  # the ranks both ran

    run_app([job(12, 1.0), job(11, 1.5)], body)


def test_esc_leaves_the_diff_from_its_timelines_once_nothing_is_left_to_clear(
    synth: Job,
) -> None:
    # The timeline panel took esc even with nothing to clear: the Timelines tab never left.
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("2", "tab")  # an event selected
        tl = app.screen.query_one(TimelineView)
        assert tl.selection is not None
        await pilot.press("escape")  # clears the selection
        assert isinstance(app.screen, DiffScreen) and tl.selection is None
        await pilot.press("escape")
        assert isinstance(app.screen, TimelineScreen)
        await pilot.press("escape", "escape")  # the first screen stays
        assert isinstance(app.screen, TimelineScreen) and app.current == 0

    run_app([synth, slower], body)


def test_a_click_on_a_diff_tab_focuses_its_content(synth: Job) -> None:
    # The focus stayed on the tab bar: w did not zoom, o did not sort.
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.click("#--content-tab-kernels")
        assert app.focused is app.screen.query_one("#kernel-table", SortableTable)
        await pilot.click("#--content-tab-timelines")
        assert isinstance(app.focused, TimelineView)

    run_app([synth, slower], body)


def test_a_kernel_picked_in_a_summary_over_the_diff_is_found_on_its_timelines(
    synth: Job,
) -> None:
    # The summary (opened from the diff screen by the command palette) closed and found
    # nothing: only a timeline screen below it was searched.
    slower = synth_job(scale=1.5, predicted=True)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        app.action_summary()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("2")
        kernels = app.screen.query_one("#kernel-table", SortableTable)
        picked = kernels.get_row_at(0)[0].plain
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        assert screen.query_one(TabbedContent).active == "timelines"
        panel = screen.query_one(TimelinePanel)
        assert panel.matches is not None and len(panel.matches) > 0
        assert picked.startswith("cutlass::Kernel") and "cutlass::Kernel" in panel.match_label

    run_app([synth, slower], body)


def test_a_filter_in_the_diffs_timelines_stays_there(synth: Job) -> None:
    # The views shared their tracks, so hiding short events on the diff's Timelines tab hid
    # them on A's and B's own timelines as well, whose status lines said nothing of it.
    slower = synth_job(scale=1.5, predicted=True)

    def shown(app: EchoViewApp) -> int:
        tl = app.screen.query_one(TimelineView)
        return sum(
            len(t) if t.shown is None else int(t.shown.sum())
            for g in tl.index.groups
            for t in g.lanes
        )

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("escape")
        everything = shown(app)
        await pilot.press("D", "2", "h", "h", "h", "h")  # hide what lasts under 1 ms
        panel = app.screen.query_one(TimelinePanel)
        assert panel.min_dur == 1_000_000 and shown(app) < 2 * everything
        await pilot.press("full_stop")  # a new alignment keeps the panel's filter
        assert shown(app) < 2 * everything
        await pilot.press("1", "escape")
        assert isinstance(app.screen, TimelineScreen) and shown(app) == everything
        await pilot.press("b")
        assert shown(app) == everything

    run_app([synth, slower], body)


def test_the_timelines_tab_does_not_claim_a_comparison_the_overview_could_not_make(
    synth: Job,
) -> None:
    # With no rank in common the Overview said "no rank and step could be aligned" while the
    # Timelines tab said "aligned at the start of step 0 (A) and step 0 (B)".
    b = TraceBuilder(7, source="other")
    lane = b.lane(LaneKind.CPU_THREAD, 1, 1, "thread 1")
    b.event(EventKind.CPU_OP, "aten::linear", 0, 1_000, lane)
    other = Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 8, "other", False)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        assert "no rank" in str(app.screen.query_one("#verdict", Static).render())
        aligned = str(app.screen.query_one("#aligned", Static).render())
        assert "no rank of A and B could be compared" in aligned and "aligned at" not in aligned

    run_app([synth, other], body)


def test_a_short_terminal_keeps_lanes_beside_the_details(synth: Job) -> None:
    # The details pane took its 7 rows whatever the height: at 80x12 one lane row was left.
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await pilot.press("down", "down", "tab")
        await pilot.pause()
        assert tl.selection is not None and tl.size.height >= 3

    run_app([synth], body, size=(80, 12))


def test_usable_at_80x24(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        assert tl.size.height >= 10 and tl.size.width == 80
        assert tl.cells >= 60
        await pilot.press("down", "tab", "i")
        assert not app.screen.query_one(DetailsPane).display or app.screen.query_one(
            DetailsPane
        ).has_class("-hidden")
        assert tl.size.height >= 16

    run_app([synth], body)


def test_dlrm_sample_every_rank_and_collective_peers(dlrm: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        assert [g.rank for g in tl.index.groups] == list(range(8))
        panel = _panel(app)
        await pilot.press("slash", *"ncclK", "enter")
        assert panel.matches is not None and len(panel.matches) >= 8 * 8
        sel = tl.selection
        assert sel is not None
        ranks = {sel.trace}
        for _ in range(7):
            await pilot.press("c")
            assert tl.selection is not None
            ranks.add(tl.selection.trace)
        assert ranks == set(range(8))
        await pilot.press("p")
        assert _kind(app, tl.selection) == EventKind.RUNTIME
        await pilot.press("w", "w", "d", "s", "0", "S")
        assert isinstance(app.screen, SummaryScreen)

    run_app([dlrm], body, size=(120, 40))


def test_f_without_a_selection_fits_the_step_in_view(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        assert tl.selection is None and tl.step_index == -1
        await pilot.press("f")  # the whole job is in view: its centre lies in step 1's span
        _, start, end = tl.steps[tl.step_index]
        assert tl.step_at((start + end) / 2) == tl.step_index
        w = tl.window
        assert w.t0 <= start and end <= w.t1 and (w.t1 - w.t0) < 1.1 * (end - start)

    run_app([synth], body)


def test_empty_details_pane_is_one_line(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        pane = app.screen.query_one(DetailsPane)
        tl = _tl(app)
        assert pane.size.height == 1 and pane.has_class("-empty")
        empty_rows = tl.size.height
        await pilot.press("down", "tab")
        assert pane.outer_size.height == 7 and tl.size.height == empty_rows - 6
        await pilot.press("escape")
        assert pane.size.height == 1 and tl.size.height == empty_rows

    run_app([synth], body)


def test_summary_marks_the_sort_and_enter_finds_a_kernel(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("S")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("2")
        kernels = app.screen.query_one("#kernel-table", SortableTable)
        labels = [c.label.plain for c in kernels.columns.values()]
        assert labels == ["kernel  ", "count  ", "total ▼", "mean  ", "ranks  "]
        await pilot.press("r")
        assert [c.label.plain for c in kernels.columns.values()][2] == "total ▲"
        name = kernels.get_row_at(0)[0].plain  # ascending: the shorter total first
        count = int(kernels.get_row_at(0)[1].plain)
        await pilot.press("enter")
        assert isinstance(app.screen, TimelineScreen)
        sel = _tl(app).selection
        assert sel is not None and app.loaded is not None
        found = app.loaded.jobs[0].traces[sel.trace].name(sel.row)
        assert found.removeprefix("void ").startswith(name.rstrip("…"))
        assert len(_panel(app).matches or []) == count  # n / N walk every launch of it

    run_app([synth], body)


def test_lane_column_fits_the_labels_and_resizes(dlrm: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        labels = [tl._label_text(r) for r in tl.rows]
        assert max(map(len, labels)) < tl.label_width  # nothing cut at 160 wide
        width = tl.label_width
        await pilot.press("less_than_sign", "less_than_sign")
        assert tl.label_width == width - 4
        await pilot.press("greater_than_sign")
        assert tl.label_width == width - 2

    run_app([dlrm], body, size=(160, 48))


def test_before_after_pair_is_a_comparison_not_an_error(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        assert isinstance(app.screen, DiffScreen)
        verdict = str(app.screen.query_one("#verdict", Static).render())
        assert "comparison of two measured runs: step-time change B vs A +" in verdict
        assert "error" not in verdict

    run_app([synth, synth_job(scale=1.2)], body)


def test_help_headings_and_kind_filter_title_are_whole(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        body = app.screen.query_one(Static)
        console = Console(width=body.content_size.width, record=True, file=io.StringIO())
        console.print(help_table(app.screen.sections))
        lines = console.export_text().splitlines()
        for title, _ in app.screen.sections:
            assert title in lines  # a heading is a whole line
        await pilot.press("escape", "k")
        assert isinstance(app.screen, KindFilterScreen)
        title = "Show kinds (space toggles, enter applies, a: all)"
        label = app.screen.query("Label").first()
        assert title in "".join(s.text for s in label.render_line(0)) or label.size.height > 1

    run_app([synth], body)


def test_stacked_lane_rows_per_depth(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await _lane(pilot, tl, "cpu 100")
        lane = tl.rows[tl.cursor].track
        assert lane is not None and lane.max_depth == 2  # step > aten::linear > launch
        n = len(tl.rows)
        await pilot.press("e")
        stacked = [r for r in tl.rows if r.depth >= 0]
        assert len(tl.rows) == n + 2 and [r.depth for r in stacked] == [0, 1, 2]
        names = [
            {app.loaded.jobs[0].traces[0].name(int(x)) for x in r.track.rows}  # type: ignore[union-attr]
            for r in stacked
        ]
        assert names[0] == {"ProfilerStep#0", "ProfilerStep#1"}
        assert names[1] >= {f"aten::linear_{i}" for i in range(6)}
        assert "cudaLaunchKernel" in names[2] and "aten::linear_0" not in names[2]
        # Tab walks the depth the cursor is on; selecting elsewhere finds the right depth row.
        await pilot.press("down", "tab")
        sel = tl.selection
        assert sel is not None and app.loaded.jobs[0].traces[0].name(sel.row).startswith("aten::")  # type: ignore[union-attr]
        tl.select(Selection(0, 0, int(stacked[2].track.rows[0])))  # type: ignore[union-attr]
        assert tl.rows[tl.cursor].depth == 2
        await pilot.press("left_curly_bracket")
        assert tl.depth_limit == 7
        tl.depth_limit = 2
        await pilot.press("right_curly_bracket", "left_curly_bracket")
        assert [r.depth for r in tl.rows if r.depth >= 0] == [0, 1]
        await pilot.press("e")
        assert len(tl.rows) == n and all(r.depth == -1 for r in tl.rows)
        await pilot.press("E")
        assert {r.track.trace for r in tl.rows if r.depth >= 0} == {0, 1}  # type: ignore[union-attr]

    run_app([synth], body)


def test_details_show_a_kernels_operator_path(dlrm: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        trace = dlrm.traces[0]
        ev = trace.events
        row = next(
            int(r)
            for r in np.flatnonzero(ev.kind == int(EventKind.KERNEL))
            if "relu" in " ".join(trace.name(a) for a in ancestry(trace, int(r)))
        )
        tl.select(Selection(0, 0, row))
        await pilot.pause()
        text = _details(app)
        assert "path: ProfilerStep#" in text and "## forward ## › " in text
        assert "aten::relu" in text

    run_app([dlrm], body, size=(160, 48))


def test_call_tree_of_a_lane_with_minimum_duration(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await _lane(pilot, tl, "cpu 100")
        await pilot.press("T")
        assert isinstance(app.screen, CallTreeScreen)
        tree = app.screen.query_one(Tree)
        steps = tree.root.children
        assert [str(n.label).split("  ")[0] for n in steps] == ["ProfilerStep#0", "ProfilerStep#1"]
        ops = [str(n.label) for n in steps[0].children]
        assert len(ops) == 6 + 2  # six aten::linear, then the NCCL and copy launches
        assert ops[0].startswith("aten::linear_0  60.000 µs  7%")  # of the 900 µs step
        assert [str(n.label).split("  ")[0] for n in steps[0].children[0].children] == [
            "cudaLaunchKernel"
        ]
        await pilot.press("greater_than_sign", "greater_than_sign")  # at least 10 µs
        ops = [str(n.label).split("  ")[0] for n in tree.root.children[0].children]
        assert ops == [f"aten::linear_{i}" for i in range(6)]  # 8 µs and 6 µs calls hidden
        assert not tree.root.children[0].children[0].children  # the 8 µs launch too
        tree.move_cursor(tree.root.children[0].children[2])
        await pilot.press("enter")
        assert isinstance(app.screen, TimelineScreen)
        sel = tl.selection
        assert sel is not None and synth.traces[0].name(sel.row) == "aten::linear_2"

    run_app([synth], body)


def test_the_call_tree_shows_its_range_on_the_rulers_axis(synth: Job) -> None:
    # From a step's start (t) the ruler read -18 µs..909 µs while the tree said "between
    # +982.000 µs and +1.909 ms", from the job's start.
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await _lane(pilot, tl, "cpu 100")
        await pilot.press("right_square_bracket", "right_square_bracket", "t")  # step 1's start
        origin, name = panel.origin()
        assert name == "step 1"
        w = tl.window
        await pilot.press("T")
        assert isinstance(app.screen, CallTreeScreen)
        text = str(app.screen.query_one("#tree-status", Static).render())
        lo, hi = round(w.t0 - origin), round(w.t1 - origin)
        assert f"between {signed_duration(lo)} and {signed_duration(hi)}" in text

    run_app([synth], body)


def test_bookmarks_name_list_jump_and_range(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await _lane(pilot, tl, "cpu 100")
        await pilot.press("tab")  # ProfilerStep#0 at 0
        first = tl.selection
        await pilot.press("M", *"fwd", "enter")
        await pilot.press("escape")
        await pilot.press("right_square_bracket", "right_square_bracket")  # step 1 in view
        await pilot.press("M", "enter")  # the view's centre, default name
        assert [m.name for m in panel.marks] == ["fwd", "mark 2"]
        ruler = str(app.screen.query_one(TimeRuler).render())
        assert "◆" in ruler  # the second mark is in view
        await pilot.press("apostrophe")
        assert isinstance(app.screen, MarksScreen)
        rows = mark_rows(app.screen.marks, None)
        t2 = panel.marks[1].t
        assert rows[1][3] == format_duration(t2 - panel.marks[0].t)
        await pilot.press("space", "down")
        assert mark_rows(app.screen.marks, 0)[1][4] == format_duration(t2)
        await pilot.press("f")  # fit from mark 1 to mark 2
        assert isinstance(app.screen, TimelineScreen)
        w = tl.window
        assert w.t0 <= 0 < t2 <= w.t1 and (w.t1 - w.t0) < 1.1 * t2
        await pilot.press("w", "w", "w", "apostrophe", "enter")  # jump back to mark 1's event
        assert tl.selection == first
        await pilot.press("apostrophe", "d", "escape")
        assert [m.name for m in panel.marks] == ["mark 2"]

    run_app([synth], body)


def test_hide_unmatched_and_minimum_duration(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await _lane(pilot, tl, "cpu 100")
        lane = tl.rows[tl.cursor].track
        assert lane is not None
        await pilot.press("F")  # nothing searched yet: a warning, no filter
        assert not panel.hide_unmatched and lane.shown is None
        await pilot.press("slash", *"linear_[0-2]", "enter", "F")
        assert panel.hide_unmatched and lane.shown is not None
        names = {synth.traces[0].name(int(r)) for r in lane.rows[lane.shown]}
        assert names == {f"aten::linear_{i}" for i in range(3)}
        assert "only matches" in app.screen.query_one(StatusLine).text
        await pilot.press("escape")  # clearing the search drops the filter too
        assert not panel.hide_unmatched and lane.shown is None
        await pilot.press("h", "h")  # at least 10 µs
        assert panel.min_dur == 10_000 and "≥10.0 µs" in app.screen.query_one(StatusLine).text
        assert lane.shown is not None
        durs = (lane.ends - lane.starts)[lane.shown]
        assert len(durs) and durs.min() >= 10_000
        assert (~lane.shown).sum() == 2 * 8  # per step 7 launches and a copy
        await pilot.press("H", "H")
        assert panel.min_dur == 0 and lane.shown is None

    run_app([synth], body)


def test_n_selects_only_matches_the_filter_shows(synth: Job) -> None:
    # n/N walked every hit of the search, those the filter hid too: n selected a hidden
    # 2 µs cudaLaunchKernel under "≥10.0 µs".
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await pilot.press("slash", *"^cuda", "enter")
        assert panel.matches is not None and len(panel.matches) == 2 * 16
        await pilot.press("h", "h")  # at least 10 µs: every cuda* call here is shorter
        assert len(panel.matches) == 0 and "/^cuda: 0" in panel.query_one(StatusLine).text
        before = tl.selection
        await pilot.press("n")
        assert tl.selection == before
        assert any("the filter hides every match" in str(n.message) for n in app._notifications)
        await pilot.press("slash", *"^(cuda|aten)", "enter")  # under the filter already
        assert panel.matches is not None and len(panel.matches) == 2 * 12
        for _ in range(len(panel.matches)):
            sel = tl.selection
            assert sel is not None and synth.traces[sel.trace].name(sel.row).startswith("aten")
            await pilot.press("n")
        await pilot.press("H", "H")  # the hidden hits come back
        assert len(panel.matches) == 2 * 28

    run_app([synth], body)


def test_the_filter_hides_the_selection_and_what_p_leads_to(synth: Job) -> None:
    # With every kind hidden the selected kernel stayed selected and drawn, and p selected
    # its hidden launch.
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await _lane(pilot, tl, "gpu0 s7")
        await pilot.press("tab")
        kernel = tl.selection
        assert kernel is not None
        await pilot.press("p")
        assert tl.selection is not None and tl.selection != kernel  # its launch
        await pilot.press("p")
        assert tl.selection == kernel
        await pilot.press("h", "h")  # at least 10 µs: the 8 µs launch is hidden, the kernel not
        assert tl.selection == kernel
        await pilot.press("p")
        assert tl.selection == kernel
        assert any("the filter hides where it leads" in str(n.message) for n in app._notifications)
        await pilot.press("k")
        sl = app.screen.query_one(SelectionList)
        for _ in range(sl.option_count):  # untick every kind
            await pilot.press("space", "down")
        await pilot.press("enter")
        assert panel.shown_classes == frozenset() and tl.selection is None

    run_app([synth], body)


def test_a_filter_rebuilds_only_the_lanes_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every lane's coverages were rebuilt on each filter change and at open: on a job with a
    # thread per event (100,000 lanes) opening took 20 s and each `h` 3-9 s.
    b = TraceBuilder(0)
    for i in range(3_000):
        lane = b.lane(LaneKind.CPU_THREAD, 1, i)
        b.event(EventKind.CPU_OP, f"op{i % 7}", i * 1_000, 100 + 10 * (i % 5), lane)
    job = Job((b.build(),), ClockAlignment("none", (0,), 0), 1, "threads")
    built: list[Track] = []
    of = _Shown.of

    def counted(track: Track, *args: object) -> _Shown:
        built.append(track)
        return of(track, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_Shown, "of", counted)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl, panel = _tl(app), _panel(app)
        await pilot.pause(0.3)  # let the idle prefetch run
        lanes = len(app.screen.query_one(TimelinePanel).index.groups[0].lanes)
        assert lanes == 3_000
        assert 0 < len(built) <= 100  # 21 rows on the screen (24 lines less the bars)
        built.clear()
        await pilot.press("h", "h")  # at least 10 µs: hides every event (100-140 ns)
        await pilot.pause(0.3)
        assert panel.min_dur == 10_000
        assert 0 < len(built) <= 2 * 100
        await pilot.press("down", "down")
        lane = tl.rows[tl.cursor].track
        assert lane is not None and lane in built

    run_app([job], body)


def test_time_axis_from_job_step_or_clock(dlrm: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        panel = _panel(app)
        ruler = app.screen.query_one(TimeRuler)
        assert str(ruler.render()).startswith("time")
        await pilot.press("right_square_bracket", "t")
        tl = _tl(app)
        n, start, _ = tl.steps[tl.step_index]
        assert panel.origin() == (float(start), f"step {n}")
        assert str(ruler.render()).startswith(f"step {n}") and "╵0" in str(ruler.render())
        await pilot.press("t")
        origin, name = panel.origin()
        assert name == "clock" and origin == -float(dlrm.start_ns())
        text = str(ruler.render())
        ticks = [w for w in text.split("╵")[1:] if w.strip()]
        assert ticks and all(t.strip().endswith("s") for t in ticks)  # seconds of the clock
        await pilot.press("t")
        assert panel.origin() == (0.0, "time")

    run_app([dlrm], body, size=(160, 48))


def test_jump_back_returns_to_the_view_before_a_jump(synth: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        await pilot.press("grave_accent")  # nothing to go back to yet
        await pilot.press("w", "w")
        before = (tl.t0, tl.ns_per_cell, tl.cursor, tl.selection)
        await pilot.press("slash", *"AllReduce", "enter")  # a jump to the first match
        after = (tl.t0, tl.ns_per_cell, tl.cursor, tl.selection)
        assert after != before and tl.selection is not None
        await pilot.press("grave_accent")
        assert (tl.t0, tl.ns_per_cell, tl.cursor, tl.selection) == before
        await pilot.press("grave_accent")  # and back again
        assert (tl.t0, tl.ns_per_cell, tl.cursor, tl.selection) == after

    run_app([synth], body)


def test_a_cut_lane_name_ends_with_an_ellipsis(dlrm: Job) -> None:
    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        row = next(i for i, r in enumerate(tl.rows) if len(tl._label_text(r)) >= tl.label_width)
        tl.cursor = row
        await pilot.pause()
        text = tl.render_line(tl.cursor - int(tl.scroll_offset.y)).text
        assert text[: tl.label_width].endswith("…│")
        while len(tl._label_text(tl.rows[row])) >= tl.label_width:
            await pilot.press("greater_than_sign")
        text = tl.render_line(tl.cursor - int(tl.scroll_offset.y)).text
        assert "…" not in text[: tl.label_width]

    run_app([dlrm], body, size=(80, 24))


def test_the_status_line_names_the_lane_briefly_and_a_rank_without_gpu_work() -> None:
    # A 200-character thread name pushed the view's bounds off the line, and a rank with no
    # GPU work read "gpu (all)" on its header row.
    b = TraceBuilder(0, source="cpu")
    lane = b.lane(LaneKind.CPU_THREAD, 1, 1, "t" * 200)
    b.event(EventKind.CPU_OP, "aten::linear", 0, 1_000_000, lane)
    job = Job((b.build(),), ClockAlignment("shared-host-clock", (0,), 0), 1, "cpu", False)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        panel, tl = _panel(app), _tl(app)
        status = panel.query_one("#status", StatusLine)
        tl.cursor = 0  # the rank's header row
        await pilot.pause()
        assert status.text.startswith("r0 (no GPU work) │ ")
        tl.cursor = 1  # the thread
        await pilot.pause()
        where, bounds = status.text.split(" │ ")[:2]
        assert where.endswith("…") and len(where) == 32 and "…" in bounds

    run_app([job], body)


def test_a_resize_keeps_the_span_and_redraws_the_ruler_and_status(synth: Job) -> None:
    # The status line kept the old span and cell size, and the ruler the old label column; a
    # view first fitted 8 cells wide showed the whole trace in a few cells once widened.
    def shown(status: StatusLine) -> tuple[str, str]:
        m = re.search(r"\(([^,()]+), ([^()]+)/cell\)", status.text)
        assert m is not None, status.text
        return m.group(1), m.group(2)

    async def body(app: EchoViewApp, pilot: Pilot[None]) -> None:
        tl = _tl(app)
        status = _panel(app).query_one("#status", StatusLine)
        ruler = _panel(app).query_one(TimeRuler)
        await pilot.pause()
        span, cell = shown(status)
        assert tl.cells < 10
        for width in (120, 60):
            await pilot.resize_terminal(width, 24)
            await pilot.pause()
            assert tl.cells > width - 30
            assert shown(status)[0] == span and shown(status)[1] != cell
            cell = shown(status)[1]
            assert ruler.render().plain.index("│") == tl.label_width - 1

    run_app([synth], body, size=(12, 10))
