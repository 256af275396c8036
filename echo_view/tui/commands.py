"""Command palette (Ctrl+P) entries: go to a step or a rank, open the screens, search, filter."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen

from echo_view.tui.panel import TimelinePanel
from echo_view.tui.tables import signed_duration
from echo_view.tui.timeline import TimelineView


def _panel_of(screen: Screen[object]) -> TimelinePanel | None:
    found = list(screen.query(TimelinePanel))
    return found[0] if found else None


class EchoCommands(Provider):
    """Commands that act on the timeline of the screen the palette was opened from."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        out: list[tuple[str, Callable[[], object], str]] = [
            ("Summary", partial(app.run_action, "summary"), "breakdown, kernels, collectives"),
            ("Diff", partial(app.run_action, "diff"), "compare the two inputs"),
            ("Help", partial(app.run_action, "help"), "every key binding"),
            ("Other input", partial(app.run_action, "other_input"), "show the other timeline"),
        ]
        panel = _panel_of(self.screen)
        if panel is None:
            return out
        tl = panel.timeline
        out += [
            ("Search names", panel.action_search, "regex over event names"),
            ("Filter kinds", panel.action_filter_kinds, "show only some event kinds"),
            ("Fit everything", tl.action_reset, "zoom out to the whole job"),
            ("Collapse or expand all ranks", tl.action_toggle_all, "one row per rank or all lanes"),
        ]
        for i, (number, start, _end) in enumerate(panel.steps):
            out.append(
                (
                    f"Go to step {number}",
                    partial(self._goto_step, tl, i),
                    f"at {signed_duration(start)}",
                )
            )
        index = panel.index
        for gi, g in enumerate(index.groups):
            label = index.sources[g.source].label
            name = f"Go to rank {g.rank}" + (f" ({label})" if len(index.sources) > 1 else "")
            out.append((name, partial(self._goto_group, tl, gi), "put the cursor on its lanes"))
        return out

    @staticmethod
    def _goto_step(tl: TimelineView, i: int) -> None:
        tl.step_index = i - 1
        tl.action_goto_step(1)

    @staticmethod
    def _goto_group(tl: TimelineView, gi: int) -> None:
        tl.index.collapsed.discard(gi)
        tl.rebuild_rows()
        tl.cursor = next(i for i, r in enumerate(tl.rows) if r.group == gi)
        tl.focus()

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> AsyncGenerator[Hit, None]:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
