"""The diff screen's Overview drawings."""

from __future__ import annotations

from types import SimpleNamespace

from rich.text import Text

from echo_view.analysis.diff import diff_jobs
from echo_view.model import ClockAlignment, Job
from echo_view.tui.diffscreen import MAX_BAR_RANKS, category_bars, step_bars
from tests.tui.appkit import synth_rank


def _job(ranks: int, grow: float) -> Job:
    """``ranks`` ranks; with ``grow`` > 0 rank r's kernels run (2 + grow * r) times as long, so
    that its GPU work outlasts the step's 900 µs annotation more the higher its rank."""
    traces = tuple(synth_rank(r, scale=2.0 + grow * r if grow else 1.0) for r in range(ranks))
    return Job(traces, ClockAlignment("shared-host-clock", (0,) * ranks, 0), ranks, "j")


def test_step_bars_show_the_ranks_that_changed_most() -> None:
    # One bar per rank and input: 1,000 ranks took 8-11 s to lay out at each tab switch.
    ranks = MAX_BAR_RANKS + 8
    diff = diff_jobs(_job(ranks, 0.0), _job(ranks, 0.05))  # B's higher ranks slow down more
    table = step_bars(diff)
    assert table.row_count == 2 * MAX_BAR_RANKS
    labels = [str(c) for c in table.columns[0]._cells]
    shown = [int(label[1:].split()[0]) for label in labels[0::2]]
    assert shown == sorted(shown) and labels[1::2] == ["B"] * MAX_BAR_RANKS
    change = {r.rank: abs(r.step.b_ns - r.step.a_ns) for r in diff.ranks}
    hidden = set(change) - set(shown)
    assert len(hidden) == 8 and max(change[r] for r in hidden) <= min(change[r] for r in shown)
    assert max(change[r] for r in hidden) < max(change.values())
    few = diff_jobs(_job(3, 0.0), _job(3, 0.05))
    assert step_bars(few).row_count == 6


def test_category_bars_follow_their_totals() -> None:
    # Each part rounded on its own: A (40.0 units) drew 41 cells, B (40.04) 39 - the longer
    # step the shorter bar.
    def pair(a: float, b: float) -> SimpleNamespace:
        return SimpleNamespace(a_ns=a, b_ns=b)

    parts = {"compute": (10.6, 10.4), "exposed_comm": (10.6, 10.4), "memory": (10.6, 10.4)}
    cats = {c: pair(a * 1e6, b * 1e6) for c, (a, b) in parts.items()}
    cats["idle"] = pair(8.2e6, 8.84e6)
    table = category_bars(SimpleNamespace(categories=cats), width=40)  # type: ignore[arg-type]
    a_bar, b_bar = (c for c in table.columns[1]._cells[:2])
    assert isinstance(a_bar, Text) and isinstance(b_bar, Text)
    assert (len(a_bar), len(b_bar)) == (40, 40)
