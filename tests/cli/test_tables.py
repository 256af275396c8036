"""Long tables drawn directly (echo_view.cli.tables) are the bytes rich draws."""

from __future__ import annotations

import io
import random

import pytest
from rich import box
from rich.console import Console
from rich.table import Table

from echo_view.cli import tables
from echo_view.cli.tables import FAST_ROWS, print_rows


def _table(justify: tuple[str, ...], title: str | None = "Per rank") -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
    for j, how in enumerate(justify):
        t.add_column(f"col {j}", justify=how)  # type: ignore[arg-type]
    return t


def _console(width: int, terminal: bool) -> Console:
    return Console(
        file=io.StringIO(),
        width=width,
        force_terminal=terminal,
        color_system="truecolor" if terminal else None,
        highlight=False,
    )


def _both(
    rows: list[list[str]], justify: tuple[str, ...], width: int, terminal: bool, **kw: object
) -> tuple[str, str]:
    """(print_rows's text, rich's text) of one table."""
    fast = _console(width, terminal)
    print_rows(fast, _table(justify, **kw), rows)  # type: ignore[arg-type]
    slow = _console(width, terminal)
    t = _table(justify, **kw)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(*r)
    slow.print(t)
    return fast.file.getvalue(), slow.file.getvalue()  # type: ignore[attr-defined]


def _rows(n: int, seed: int, alphabet: str) -> list[list[str]]:
    rnd = random.Random(seed)
    return [
        [
            str(i),
            *("".join(rnd.choices(alphabet, k=rnd.randint(1, 12))).strip() or "x" for _ in "abc"),
        ]
        for i in range(n)
    ]


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("width", [160, 40, 12])
@pytest.mark.parametrize("seed", range(4))
def test_long_tables_are_the_text_rich_draws(seed: int, width: int, terminal: bool) -> None:
    # Wide characters (µ is one cell, 表 two), inner spaces, markup and emoji syntax, at widths
    # where rich keeps every row on one line and where it must wrap or squeeze columns.
    alphabet = "0123456789 .%msµ表-" + ("[]:\\" if seed == 3 else "")
    rows = _rows(FAST_ROWS + 50 + seed, seed, alphabet)
    justify = ("right", "left", "right", "left")
    title = "Per rank" if seed % 2 else None
    fast, slow = _both(rows, justify, width, terminal, title=title)
    assert fast == slow
    direct = tables._direct(_console(width, terminal), _table(justify, title), rows)
    assert (direct is not None) == (width == 160 and seed != 3)  # the path these rows took


def test_rows_are_formatted_directly_when_rich_would_draw_them_unchanged() -> None:
    rows = [[str(i), f"{i * 1.5:.3f} ms ({i % 100}.0%)", "-"] for i in range(5000)]
    justify = ("right", "right", "left")
    for terminal in (False, True):
        c = _console(160, terminal)
        assert tables._direct(c, _table(justify), rows) is not None
        fast, slow = _both(rows[:300], justify, 160, terminal)
        assert fast == slow
    # Too narrow for one line a row, markup, a trailing space: rich draws it all.
    narrow = _console(20, False)
    assert tables._direct(narrow, _table(justify), rows) is None
    for odd in ("[bold]x", "x ", ":smile:", "a\tb"):
        bad = [*rows[:100], [odd, "1", "2"]]
        assert tables._direct(_console(160, False), _table(justify), bad) is None


def test_short_tables_and_other_tables_go_to_rich() -> None:
    rows = [[str(i), "1"] for i in range(FAST_ROWS)]
    fast, slow = _both(rows, ("right", "right"), 80, False)
    assert fast == slow
    centred = [[str(i), "1"] for i in range(FAST_ROWS + 1)]
    assert tables._direct(_console(80, False), _table(("center", "right")), centred) is None
    lined = _table(("right", "right"))
    lined.show_lines = True
    assert tables._direct(_console(80, False), lined, centred) is None
