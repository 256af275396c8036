"""echo_view.text: input strings are shown, never interpreted, by a terminal or by rich."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from echo_view.errors import InputError
from echo_view.text import clipped, cut_middle, markup_safe, printable, printable_lines

HOSTILE = "[/] [bold]B[link=http://x]L \x1b[2J\x1b]8;;http://e\x07X\x1b]8;;\x07 \r\b\x9b \u202e"


def test_control_and_bidi_characters_become_visible_escapes() -> None:
    shown = printable(HOSTILE)
    assert shown.isprintable()
    assert "\\x1b[2J" in shown and "\\x07" in shown and "\\r" in shown and "\\x08" in shown
    assert "\\x9b" in shown and "\\u202e" in shown
    assert printable("aten::mm (void) é 中") == "aten::mm (void) é 中"


def test_invisible_characters_become_visible_escapes() -> None:
    # Zero-width space, joiners, bidi marks, word joiner, byte-order mark, a tag character,
    # a lone surrogate (a file name that is not UTF-8), the line separator: each hides text,
    # moves it, breaks a line or cannot be encoded for the terminal.
    hidden = "\u200b\u200c\u200d\u200e\u200f\u061c\u2060\ufeff\U000e0041\udcff\u2028"
    shown = printable(f"a{hidden}b")
    assert shown == (
        "a\\u200b\\u200c\\u200d\\u200e\\u200f\\u061c\\u2060\\ufeff\\U000e0041\\udcff\\u2028b"
    )
    assert shown.isprintable() and shown.encode("ascii")
    # Spaces other than U+0020 are visible gaps, not hidden text: kept.
    assert printable("a\u00a0b\u3000c") == "a\u00a0b\u3000c"


def test_markup_is_printed_as_written() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    table = Table()
    table.add_column("kernel")
    table.add_row(markup_safe(HOSTILE))
    console.print(table)
    console.print(f"note: {markup_safe(HOSTILE)}")
    text = out.getvalue()
    assert "[/] [bold]B[link=http://x]L" in text
    assert not any(c in text for c in "\x1b\x07\x08\r\x9b\u202e")


def test_an_error_line_shows_the_input_escaped() -> None:
    line = InputError(f"bad name {HOSTILE!s}", path="a\x1b[2J.json").one_line()
    assert line.isprintable() and "a\\x1b[2J.json" in line


def test_clipped_keeps_short_text_and_marks_a_cut() -> None:
    assert clipped("abc") == "abc"
    long = "x" * 1000
    assert clipped(long) == "x" * 77 + "..." and len(clipped(long, 10)) == 10


def test_cut_middle_keeps_the_start_and_the_end() -> None:
    assert cut_middle("x" * 500) == "x" * 500
    long = "start " + "A" * 100_000 + " end"
    cut = cut_middle(long)
    assert len(cut) <= 500 and cut.startswith("start AAA") and cut.endswith("AAA end")
    assert " ... " in cut and len(cut_middle(long, 100)) <= 100


def test_printable_lines_keeps_line_breaks_and_escapes_the_rest() -> None:
    assert printable_lines("a\x1b[2J\nb\r\n") == "a\\x1b[2J\nb\\r\n"
    assert printable_lines("plain\ntext") == "plain\ntext"
