"""The ``?`` help screen: every key binding of the app, its screens and the timeline, read from
their ``BINDINGS`` so that the list cannot drift from what the keys do."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

Section = tuple[str, Sequence[tuple[str, str]]]

MOUSE_HELP: Section = (
    "Mouse (where the terminal sends it)",
    [
        ("click", "select the event under the pointer; on a rank label: collapse/expand"),
        ("wheel", "scroll lanes"),
        ("ctrl+wheel", "zoom at the pointer"),
        ("horizontal wheel", "pan"),
    ],
)


_KEY_NAMES = {
    "equals_sign": "=",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "question_mark": "?",
    "slash": "/",
    "comma": ",",
    "full_stop": ".",
    "grave_accent": "`",
    "apostrophe": "'",
    "less_than_sign": "<",
    "greater_than_sign": ">",
    "left_curly_bracket": "{",
    "right_curly_bracket": "}",
    "plus": "+",
    "minus": "-",
    "escape": "esc",
    "left": "←",
    "right": "→",
    "up": "↑",
    "down": "↓",
    "shift+left": "shift+←",
    "shift+right": "shift+→",
    "shift+up": "shift+↑",
    "shift+down": "shift+↓",
}


def _key_text(binding: Binding) -> str:
    keys = [k.strip() for k in binding.key.split(",")]
    return " ".join(_KEY_NAMES.get(k, k) for k in keys)


def binding_rows(
    bindings: Iterable[BindingType], leave_out: Collection[str] = ()
) -> list[tuple[str, str]]:
    """``(keys, description)`` for each binding that has a description and whose action is
    not in ``leave_out`` (actions that do not apply now)."""
    rows = []
    for b in bindings:
        if isinstance(b, Binding):
            binding = b
        elif len(b) == 2:
            binding = Binding(b[0], b[1])
        else:
            binding = Binding(b[0], b[1], b[2])
        if binding.description and binding.action not in leave_out:
            rows.append((_key_text(binding), binding.description))
    return rows


def help_table(sections: Sequence[Section]) -> Group:
    """The help: per section a heading on its own line (never cut to the key column) and a
    two-column table of keys and what they do."""
    width = max((len(k) for _, rows in sections for k, _ in rows), default=8)
    parts: list[Text | Table] = []
    for title, rows in sections:
        parts.append(Text(title, style="bold underline"))
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True, width=min(width, 24))
        table.add_column()
        for keys, desc in rows:
            table.add_row(keys, desc)
        parts += [table, Text("")]
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    """Every binding, grouped by where it applies; Escape, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close help"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; max-width: 100; height: 90%; border: round $primary; background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, sections: Sequence[Section]) -> None:
        super().__init__()
        self.sections = [*sections, MOUSE_HELP]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(help_table(self.sections))
