"""The summary screen: the ``info`` breakdown per rank, and sortable kernel and collective
tables, computed in a worker thread."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import (
    DataTable,
    Footer,
    Header,
    LoadingIndicator,
    Static,
    TabbedContent,
    TabPane,
)
from textual.widgets.data_table import RowKey

from echo_view.analysis.summary import JobSummary, summarize
from echo_view.model import Job
from echo_view.tui.tables import SortableTable, name_cell, ns_cell, num_cell, short_duration

#: How many kernels the kernel table lists (the longest by total time).
KERNEL_ROWS = 2000

BREAKDOWN_COLUMNS = ("rank", "gpu", "steps", "step", "compute", "comm", "exposed", "memory", "idle")


def breakdown_rows(summary: JobSummary) -> list[list[object]]:
    """One row per (rank, device): mean per step of each category."""
    rows: list[list[object]] = []
    for r in summary.rows:
        cats = r.categories
        row: list[object] = [
            num_cell(r.rank, "{}"),
            num_cell(r.device, "{}"),
            num_cell(r.steps, "{}"),
            ns_cell(r.mean_step_ns if r.steps else None),
        ]
        for name in ("compute_ns", "comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns"):
            row.append(ns_cell(r.mean(cats[name]) if cats is not None and r.steps else None))
        rows.append(row)
    return rows


class SummaryScreen(Screen[str | None]):
    """Tabs: breakdown per rank, kernels, collectives. Enter on a kernel closes the screen with
    its name (the timeline then finds it)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("1", "tab('breakdown')", "Breakdown", show=False),
        Binding("2", "tab('kernels')", "Kernels", show=False),
        Binding("3", "tab('collectives')", "Collectives", show=False),
    ]

    def __init__(self, job: Job, title: str) -> None:
        super().__init__()
        self.job = job
        self.sub_title = title
        self.kernel_names: dict[RowKey, str] = {}
        """The full name of each kernel-table row (Enter shows it on the timeline)."""

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(id="tabs"):
            with TabPane("Breakdown [1]", id="breakdown"):
                yield Static(id="headline")
                yield SortableTable(id="ranks")
            with TabPane("Kernels [2]", id="kernels"):
                yield SortableTable(id="kernel-table")
            with TabPane("Collectives [3]", id="collectives"):
                yield SortableTable(id="coll-table")
        yield LoadingIndicator()
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(TabbedContent).display = False
        self._compute()

    @work(thread=True, exit_on_error=False)
    def _compute(self) -> None:
        summary = summarize(self.job, top=KERNEL_ROWS)
        self.app.call_from_thread(self._show, summary)

    def _show(self, summary: JobSummary) -> None:
        self.query_one(LoadingIndicator).display = False
        self.query_one(TabbedContent).display = True
        slow = summary.slowest
        head = f"{len(self.job)} rank(s), {self.job.event_count():,} events"
        if slow is not None:
            head += f"; slowest rank {slow.rank}: {short_duration(slow.mean_step_ns)} per step"
        self.query_one("#headline", Static).update(head)
        ranks = self.query_one("#ranks", SortableTable)
        ranks.fill(BREAKDOWN_COLUMNS, breakdown_rows(summary))
        width = max(24, self.size.width - 46)
        kernels = self.query_one("#kernel-table", SortableTable)
        keys = kernels.fill(
            ("kernel", "count", "total", "mean", "ranks"),
            [
                [
                    name_cell(k.name, width),
                    num_cell(k.count),
                    ns_cell(k.total_ns),
                    ns_cell(k.total_ns / k.count if k.count else None),
                    num_cell(k.extra, "{}"),
                ]
                for k in summary.top_kernels
            ],
        )
        self.kernel_names = dict(zip(keys, (k.name for k in summary.top_kernels), strict=True))
        kernels.sort_by(2, True)
        colls = self.query_one("#coll-table", SortableTable)
        colls.fill(
            ("collective", "count", "total", "mean", "bytes"),
            [
                [
                    name_cell(c.name),
                    num_cell(c.count),
                    ns_cell(c.total_ns),
                    ns_cell(c.total_ns / c.count if c.count else None),
                    num_cell(c.extra if c.extra >= 0 else None),
                ]
                for c in summary.top_collectives
            ],
        )
        colls.sort_by(2, True)
        ranks.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        name = self.kernel_names.get(event.row_key)
        if name is not None and event.data_table.id == "kernel-table":
            event.stop()
            self.dismiss(name)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        table = {"breakdown": "#ranks", "kernels": "#kernel-table", "collectives": "#coll-table"}
        self.query_one(table[tab], SortableTable).focus()
