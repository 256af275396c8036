"""Strings from input files made safe to show on a terminal.

A trace, config or log is untrusted: an event name may hold terminal escape sequences (``ESC[2J``
clears the screen, OSC 8 makes a hyperlink, ``\\r`` and ``\\b`` overwrite what was printed), bidi
controls that reorder the text on screen, or rich markup (``[bold]``, ``[link=...]``, ``[/]``,
which rich interprets and may fail on). :func:`printable` shows the control characters as
escapes; :func:`markup_safe` also escapes markup, for strings that rich or Textual parse as
markup (table cells, ``console.print`` text). Every input string that reaches the terminal goes
through one of them.
"""

from __future__ import annotations

#: C0 controls, DEL and C1 controls (``\\x1b``, ``\\x9b``...) and the bidi embeddings,
#: overrides and isolates (U+202A-202E, U+2066-2069; "Trojan Source", CVE-2021-42574).
_ESCAPES: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
    **{c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}


def printable(text: str) -> str:
    """``text`` with control and bidi characters written as visible escapes (``\\x1b``)."""
    if text.isprintable():  # the common case, and cheap
        return text
    return text.translate(_ESCAPES)


def markup_safe(text: str) -> str:
    """:func:`printable` ``text`` with rich markup escaped: shown as written, never parsed."""
    from rich.markup import escape  # only the CLI and the TUI need rich

    return escape(printable(text))


def clipped(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, ``...`` marking the cut: an input's value quoted in
    a one-line message stays short however long the value is."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Longest input-derived message a one-line error or a check finding prints whole.
MESSAGE_LIMIT = 500


def cut_middle(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` with its middle cut out past ``limit`` characters (`` ... `` marks the cut;
    the start and the end stay): a value an input put into a message whole (a name of 100,000
    characters, a number of 5,000 digits) leaves a line of bounded length."""
    if len(text) <= limit:
        return text
    tail = min(120, limit // 4)
    return f"{text[: limit - tail - 5]} ... {text[-tail:]}"
