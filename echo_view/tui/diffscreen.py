"""The diff screen for two inputs: the verdict and step-time bars per rank, both timelines
stacked per rank and aligned at a chosen step's start, and the diff tables."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from echo_view.analysis.diff import CATEGORIES, ItemDiff, JobDiff, rank_names
from echo_view.text import printable
from echo_view.tui.index import Source, TimelineIndex
from echo_view.tui.panel import Steps, TimelinePanel, view_steps
from echo_view.tui.tables import SortableTable, delta_cell, name_cell, ns_cell, pct_cell
from echo_view.units import format_duration

_CAT_COLOURS = {
    "compute": "#98c379",
    "exposed_comm": "#c678dd",
    "memory": "#d19a66",
    "idle": "#3e4451",
}
_A_STYLE, _B_STYLE = "#61afef", "#e5c07b"


#: Ranks drawn as step-time bars at most; beyond, those whose step changed most (a grid of
#: 2,000 bars for 1,000 ranks took 8-11 s to lay out on each tab switch or resize).
MAX_BAR_RANKS = 32


def step_bars(diff: JobDiff, width: int = 40, limit: int = MAX_BAR_RANKS) -> Table:
    """Per rank, one bar for A and one for B, on one scale; with more than ``limit`` ranks,
    the ``limit`` whose step time changed most (by |B - A|), in rank order."""
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True, justify="right")
    for _ in range(3):
        table.add_column(no_wrap=True)
    top = max([max(r.step.a_ns, r.step.b_ns) for r in diff.ranks] or [1]) or 1
    shown = diff.ranks
    names = dict(zip(map(id, shown), rank_names(shown), strict=True))
    if len(shown) > limit:
        by_change = sorted(shown, key=lambda r: (-abs(r.step.b_ns - r.step.a_ns), r.rank))
        shown = sorted(by_change[:limit], key=lambda r: r.rank)
    for r in shown:
        for side, ns, style in (("A", r.step.a_ns, _A_STYLE), ("B", r.step.b_ns, _B_STYLE)):
            cells = ns / top * width
            bar = "█" * int(cells) + (" ▏▎▍▌▋▊▉"[int((cells % 1) * 8)] if cells < width else "")
            pct = r.step.delta_pct()
            tail = f"{pct:+.1f}%" if side == "B" and pct is not None else ""
            colour = "" if pct is None or abs(pct) < 0.05 else "#e06c75" if pct > 0 else "#98c379"
            table.add_row(
                f"r{names[id(r)]} A" if side == "A" else "B",
                Text(bar.ljust(width), style=style),
                Text(format_duration(ns), justify="right"),
                Text(tail, style=colour),
            )
    return table


def category_bars(diff: JobDiff, width: int = 40) -> Table:
    """The job's step split into compute, exposed comm, memory and idle, A above B."""
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    parts = ("compute", "exposed_comm", "memory", "idle")
    totals = {
        side: sum(getattr(diff.categories[c], f"{side}_ns") for c in parts) for side in ("a", "b")
    }
    top = max(totals.values()) or 1
    for side in ("a", "b"):
        bar = Text()
        # Rounded at the cumulative edges, not part by part: each part's own rounding drew a
        # 16.008 ms step 41 cells long and a 16.014 ms one 39.
        done = edge = 0
        for c in parts:
            done += getattr(diff.categories[c], f"{side}_ns")
            cells = round(done / top * width) - edge
            edge += cells
            bar.append(" " * cells, style=f"on {_CAT_COLOURS[c]}")
        table.add_row(side.upper(), bar)
    legend = Text()
    for c in parts:
        legend.append("  ", style=f"on {_CAT_COLOURS[c]}")
        legend.append(f" {c}  ")
    table.add_row("", legend)
    return table


def verdict_line(diff: JobDiff) -> str:
    """How B's step time relates to A's: an *error* when one side is a prediction and the other
    a measurement, a *change* when both are measured (before/after) or both predicted."""
    if diff.a_predicted != diff.b_predicted:
        err = diff.error_pct
        if err is None:
            return ""
        ref = "B" if diff.reference_is_b else "A"
        return f"\nprediction error of the step time {err:.2f}% (measured: {ref})"
    pct = diff.step_time.delta_pct()
    if pct is None:
        return ""
    what = "predictions" if diff.a_predicted else "measured runs"
    return f"\ncomparison of two {what}: step-time change B vs A {pct:+.2f}%"


def _item_rows(items: list[ItemDiff], width: int) -> list[list[object]]:
    return [
        [
            name_cell(it.name, width),
            ns_cell(it.time.a_ns),
            ns_cell(it.time.b_ns),
            delta_cell(it.time.delta_ns),
            pct_cell(it.time.delta_pct()),
        ]
        for it in items
    ]


class DiffScreen(Screen[None]):
    """Overview, aligned timelines, and per-rank, kernel and collective tables."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("1", "tab('overview')", "Overview", show=False),
        Binding("2", "tab('timelines')", "Timelines", show=False),
        Binding("3", "tab('ranks')", "Ranks", show=False),
        Binding("4", "tab('kernels')", "Kernels", show=False),
        Binding("5", "tab('collectives')", "Collectives", show=False),
        Binding("comma", "align(-1)", "Align at previous step", show=False),
        Binding("full_stop", "align(1)", "Align at next step", show=False),
    ]

    def __init__(self, full: TimelineIndex, diff: JobDiff, title: str) -> None:
        super().__init__()
        self.full = full
        self.diff = diff
        self.sub_title = title
        self.steps_a = view_steps(full.view(only_source=0), 0)
        self.steps_b = view_steps(full.view(only_source=1), 1)
        self.align_at = 0
        self.index = self._aligned(0)
        self.index.collapsed = set(range(len(self.index.groups)))

    def _pairs(self) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
        """Steps of A and B paired by number when they share numbers, else by order."""
        by_b = {s[0]: s for s in self.steps_b}
        common = [(s, by_b[s[0]]) for s in self.steps_a if s[0] in by_b]
        return common or list(zip(self.steps_a, self.steps_b, strict=False))

    def _aligned(self, k: int) -> TimelineIndex:
        pairs = self._pairs()
        a, b = self.full.sources
        if not pairs:
            return self.full.view(sources=[a, b])
        (_, sa, _), (_, sb, _) = pairs[k]
        return self.full.view(sources=[Source(a.job, "A", sa), Source(b.job, "B", sb)])

    def _aligned_steps(self) -> Steps:
        pairs = self._pairs()
        if not pairs:
            return []
        (n, sa, ea), (_, sb, eb) = pairs[self.align_at]
        return [(n, 0, max(ea - sa, eb - sb))]

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(id="tabs"):
            with TabPane("Overview [1]", id="overview"), VerticalScroll(id="overview-scroll"):
                yield Static(id="verdict")
                yield SortableTable(id="categories")
                yield Static(id="bars")
                yield Static(id="notes")
            with TabPane("Timelines [2]", id="timelines"):
                yield Static(id="aligned")
                steps = self._aligned_steps()
                first = (steps[0][1], steps[0][2]) if steps else None
                yield TimelinePanel(self.index, steps, initial_span=first, autofocus=False)
            with TabPane("Ranks [3]", id="ranks"):
                yield SortableTable(id="rank-table")
            with TabPane("Kernels [4]", id="kernels"):
                yield SortableTable(id="kernel-table")
            with TabPane("Collectives [5]", id="collectives"):
                yield SortableTable(id="coll-table")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        d = self.diff
        code, text = d.verdict
        colour = {"match": "#98c379", "b_slower": "#e06c75", "b_faster": "#61afef"}.get(code, "")
        head = Text(f"A: {printable(d.a_source)}\nB: {printable(d.b_source)}\n", style="dim")
        for warning in d.warnings:  # (the inputs look like different jobs), as `diff` has them
            head.append(f"warning: {printable(warning)}\n", style="bold #e5c07b")
        head.append(printable(text), style=f"bold {colour}")  # names the top kernel class
        head.append(verdict_line(d))
        self.query_one("#verdict", Static).update(head)
        bars = Table.grid()
        bars.add_row(Text("category breakdown (mean over ranks)", style="bold underline"))
        bars.add_row(category_bars(d))
        if len(d.ranks) > MAX_BAR_RANKS:
            title = (
                f"step time per rank: the {MAX_BAR_RANKS} of {len(d.ranks)} ranks whose step "
                "changed most (all in the Ranks tab)"
            )
        else:
            title = "step time per rank"
        bars.add_row(Text(title, style="bold underline"))
        bars.add_row(step_bars(d))
        self.query_one("#bars", Static).update(bars)
        cols = ("category", "A", "B", "delta", "delta %")
        cats = [
            [
                name_cell(c),
                ns_cell(d.categories[c].a_ns),
                ns_cell(d.categories[c].b_ns),
                delta_cell(d.categories[c].delta_ns),
                pct_cell(d.categories[c].delta_pct()),
            ]
            for c in CATEGORIES
        ]
        self.query_one("#categories", SortableTable).fill(cols, cats)
        self.query_one("#notes", Static).update(
            Text("\n".join(f"note: {printable(n)}" for n in d.notes))
        )
        ranks = [
            [
                name_cell(f"r{name}", value=r.rank),  # r2 before r10
                ns_cell(r.step.a_ns),
                ns_cell(r.step.b_ns),
                delta_cell(r.step.delta_ns),
                pct_cell(r.step.delta_pct()),
            ]
            for r, name in zip(d.ranks, rank_names(d.ranks), strict=True)
        ]
        self.query_one("#rank-table", SortableTable).fill(("rank", *cols[1:]), ranks)
        items = ("A / step", "B / step", "delta", "delta %")
        self.query_one("#kernel-table", SortableTable).fill(
            ("kernel class", *items), _item_rows(d.kernels, max(20, self.size.width - 50))
        )
        self.query_one("#coll-table", SortableTable).fill(
            ("collective", *items), _item_rows(d.collectives, max(20, self.size.width - 50))
        )
        self._show_alignment()
        self.query_one("#overview-scroll").focus()

    def _show_alignment(self) -> None:
        pairs = self._pairs()
        # The timelines are only placed side by side: "aligned" read as if the comparison of
        # the Overview had paired them, when it may have paired no rank at all.
        if not pairs:
            msg = "no steps to line up: both timelines start at their first event"
        else:
            (na, _, _), (nb, _, _) = pairs[self.align_at]
            msg = f"placed so that step {na} (A) and step {nb} (B) start together · , . other step"
        if not self.diff.ranks:
            msg += " · no rank of A and B could be compared (Overview)"
        self.query_one("#aligned", Static).update(Text(msg, style="dim"))

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self._focus_tab(tab)

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # A click on a tab's header left the focus on the tab bar: the tab's keys did nothing.
        if event.pane.id is not None:
            self._focus_tab(event.pane.id)

    def _focus_tab(self, tab: str) -> None:
        if tab == "timelines":
            panel = self.query_one(TimelinePanel)
            focused = self.focused
            # (the palette's "Search names" focuses the panel's search box, which opens the tab)
            if focused is None or panel not in focused.ancestors_with_self:
                panel.timeline.focus()
        else:
            target = {
                "overview": "#overview-scroll",
                "ranks": "#rank-table",
                "kernels": "#kernel-table",
                "collectives": "#coll-table",
            }[tab]
            self.query_one(target).focus()

    def action_align(self, delta: int) -> None:
        pairs = self._pairs()
        if not pairs:
            return
        self.align_at = min(max(self.align_at + delta, 0), len(pairs) - 1)
        collapsed = self.index.collapsed
        self.index = self._aligned(self.align_at)
        self.index.collapsed = collapsed
        panel = self.query_one(TimelinePanel)
        panel.set_index(self.index, self._aligned_steps())
        panel.timeline.step_index = 0
        panel.timeline.action_fit_selection()
        self._show_alignment()
