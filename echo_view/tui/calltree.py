"""The call-tree screen: one lane's nested calls and ranges in the visible time window as a
collapsible tree, each node with its duration and its share of the parent, hiding calls shorter
than a minimum duration; Enter on a node selects that event on the timeline."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode

from echo_view.tui.raster import short_name
from echo_view.tui.tables import signed_duration
from echo_view.tui.tracks import Track
from echo_view.units import format_duration

#: The minimum-duration steps ``<`` / ``>`` move through (ns).
MIN_DURATIONS = (0, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
#: At most this many nodes are built (a whole 1 M-event lane would not be readable anyway).
MAX_NODES = 5000


@dataclass(frozen=True, slots=True)
class Node:
    """One call: its position on the track, its parent's index in the node list (-1: a root),
    and its depth."""

    pos: int
    parent: int
    depth: int


def call_tree(track: Track, t0: int, t1: int, min_dur: int = 0) -> tuple[list[Node], int]:
    """The calls of ``track`` overlapping ``[t0, t1)`` that last at least ``min_dur`` ns, in
    start order with their parents (an enclosing call shorter than ``min_dur`` is skipped and
    its children hang from the next longer one); and how many more were left out past
    :data:`MAX_NODES`."""
    vis = track.visible(t0, t1, min_dur)
    shown = vis[:MAX_NODES]
    nodes: list[Node] = []
    stack: list[tuple[int, int]] = []  # (end, node index) of the calls still open
    for p in shown.tolist():
        start, end = int(track.starts[p]), int(track.ends[p])
        while stack and stack[-1][0] <= start:
            stack.pop()
        parent = stack[-1][1] if stack else -1
        nodes.append(Node(p, parent, len(stack)))
        stack.append((end, len(nodes) - 1))
    return nodes, len(vis) - len(shown)


class CallTreeScreen(Screen[int | None]):
    """The call tree of one lane; dismisses with the track position picked (Enter)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_none", "Back"),
        Binding("greater_than_sign", "min_dur(1)", "Longer minimum duration"),
        Binding("less_than_sign", "min_dur(-1)", "Shorter minimum duration"),
        Binding("x", "expand_all", "Expand/collapse all", show=False),
    ]
    DEFAULT_CSS = """
    CallTreeScreen > Static { height: auto; padding: 0 1; color: $text-muted; }
    CallTreeScreen > Tree { height: 1fr; }
    """

    def __init__(
        self,
        track: Track,
        name_of: Callable[[int], str],
        t0: int,
        t1: int,
        title: str,
        origin: int = 0,
    ) -> None:
        """``name_of(p)``: the name of the event at track position ``p``; ``origin``: the track
        time the view's ruler calls 0 (the range is shown from it)."""
        super().__init__()
        self.track = track
        self.name_of = name_of
        self.t0, self.t1 = t0, t1
        self.origin = origin
        self.sub_title = title
        self.step = 0
        self._expanded = True

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="tree-status")
        yield Tree[int](Text("calls"), id="calls")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self._fill()
        self.query_one(Tree).focus()

    def _fill(self) -> None:
        min_dur = MIN_DURATIONS[self.step]
        nodes, left_out = call_tree(self.track, self.t0, self.t1, min_dur)
        tree: Tree[int] = self.query_one(Tree)
        tree.clear()
        tree.root.expand()
        tree.show_root = False
        handles: list[TreeNode[int]] = []
        starts, ends = self.track.starts, self.track.ends
        for n in nodes:
            dur = int(ends[n.pos] - starts[n.pos])
            label = Text(short_name(self.name_of(n.pos)))
            label.append(f"  {format_duration(dur)}", style="bold")
            if n.parent >= 0:
                pd = int(ends[nodes[n.parent].pos] - starts[nodes[n.parent].pos])
                if pd > 0:
                    label.append(f"  {100 * dur / pd:.0f}%", style="dim")
            parent = tree.root if n.parent < 0 else handles[n.parent]
            handle = parent.add(label, data=n.pos, expand=n.depth < 2)
            handles.append(handle)
        for h in handles:
            if not h.children:
                h.allow_expand = False
        status = (
            f"{len(nodes):,} calls between {signed_duration(self.t0 - self.origin)} and "
            f"{signed_duration(self.t1 - self.origin)}"
            f"{f', at least {format_duration(min_dur)}' if min_dur else ''}"
            f"{f' ({left_out:,} more not shown: raise the minimum with >)' if left_out else ''}"
            " · < > minimum duration · enter: show on the timeline"
        )
        self.query_one("#tree-status", Static).update(Text(status))

    def action_min_dur(self, delta: int) -> None:
        self.step = min(max(self.step + delta, 0), len(MIN_DURATIONS) - 1)
        self._fill()

    def action_expand_all(self) -> None:
        root = self.query_one(Tree).root
        self._expanded = not self._expanded
        for child in root.children:
            if self._expanded:
                child.expand_all()
            else:
                child.collapse_all()

    def on_tree_node_selected(self, event: Tree.NodeSelected[int]) -> None:
        if event.node.data is not None:
            event.stop()
            self.dismiss(event.node.data)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
