"""SVG snapshots of the main screens on the real DLRM sample, at 80x24 and 160x48.

Regenerate after an intended change with ``pytest tests/tui/test_snapshots.py --snapshot-update``
and look at the report before committing the new SVGs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
from textual.pilot import Pilot

from echo_view.model import Job
from echo_view.tui.app import EchoViewApp
from tests.analysis.test_diff import stretch_gpu
from tests.tui.appkit import wait_loaded

SIZES = [(80, 24), (160, 48)]
Before = Callable[[Pilot[None]], Awaitable[None]]


@pytest.fixture(scope="module")
def job(dlrm: Job) -> Job:
    # A stable title: the importer records the absolute path.
    return replace(dlrm, source="samples/dlrm_kineto")


@pytest.fixture(scope="module")
def predicted(job: Job) -> Job:
    """The sample with its kernels 1.3x longer, marked predicted (a stand-in prediction)."""
    traces = tuple(stretch_gpu(t, 1.3) for t in job.traces)
    return Job(traces, job.alignment, job.world_size, "predicted (kernels x1.3)", predicted=True)


def _keys(*keys: str) -> Before:
    async def before(pilot: Pilot[None]) -> None:
        await wait_loaded(pilot)
        await pilot.press(*keys)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    return before


SCREENS = {
    "timeline": (),
    "details": ("down", "down", "down", "tab", "tab", "tab"),
    "summary": ("S",),
    "help": ("question_mark",),
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screens(
    snap_compare: Callable[..., bool], job: Job, screen: str, size: tuple[int, int]
) -> None:
    app = EchoViewApp([job])
    assert snap_compare(app, terminal_size=size, run_before=_keys(*SCREENS[screen]))


def test_search_marks_matches(snap_compare: Callable[..., bool], job: Job) -> None:
    keys = ("slash", *"AllRed", "enter")
    assert snap_compare(EchoViewApp([job]), terminal_size=(80, 24), run_before=_keys(*keys))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("tab", ["1", "2"], ids=["overview", "timelines"])
def test_diff_screen(
    snap_compare: Callable[..., bool],
    job: Job,
    predicted: Job,
    tab: str,
    size: tuple[int, int],
) -> None:
    app = EchoViewApp([job, predicted])
    assert snap_compare(app, terminal_size=size, run_before=_keys(tab))


def _themed(theme: str, *keys: str) -> Before:
    async def before(pilot: Pilot[None]) -> None:
        pilot.app.theme = theme
        await _keys(*keys)(pilot)

    return before


#: Zoomed in on a selected kernel, so that event names and the details pane show.
ZOOMED = ("down", "down", "down", "tab", "tab", "tab", "w", "w", "w", "w")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", ["textual-light", "textual-dark"])
def test_timeline_themes(
    snap_compare: Callable[..., bool], job: Job, theme: str, size: tuple[int, int]
) -> None:
    app = EchoViewApp([job])
    assert snap_compare(app, terminal_size=size, run_before=_themed(theme, *ZOOMED))


#: The views that show call depth: every nesting lane stacked (zoomed into the first step's
#: forward pass), and the call tree of rank 0's main thread.
DEPTH_VIEWS = {
    "stacked": ("down", "E", "right_square_bracket", "w", "w", "w"),
    "calltree": ("down", "right_square_bracket", "T"),
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("theme", ["textual-light", "textual-dark"])
@pytest.mark.parametrize("view", list(DEPTH_VIEWS))
def test_depth_views(
    snap_compare: Callable[..., bool], job: Job, view: str, theme: str, size: tuple[int, int]
) -> None:
    app = EchoViewApp([job])
    assert snap_compare(app, terminal_size=size, run_before=_themed(theme, *DEPTH_VIEWS[view]))
