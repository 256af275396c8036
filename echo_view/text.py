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

import unicodedata

#: Categories a terminal shows as nothing or as a line break, or cannot encode: controls,
#: format characters (zero-width spaces and joiners, bidi marks and controls, the word joiner,
#: the byte-order mark, tag characters that hide text in plain sight), lone surrogates (a file
#: name that is not UTF-8) and the line and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}


def _escape(code: int) -> str:
    if code in _NAMED:
        return _NAMED[code]
    if code <= 0xFF:  # C0 controls, DEL, C1 controls
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with control, invisible and bidi characters (the bidi controls of "Trojan
    Source", CVE-2021-42574, among them) written as visible escapes: ``\\x1b``, ``\\n``,
    ``\\u200b``."""
    if text.isprintable():  # the common case, and cheap
        return text
    # One table for the string's distinct hidden characters: C-speed over the text however
    # long it is, and as current as the interpreter's Unicode database.
    table = {
        ord(c): _escape(ord(c))
        for c in set(text)
        if not c.isprintable() and unicodedata.category(c) in _HIDDEN
    }
    return text.translate(table)


def printable_lines(text: str) -> str:
    """:func:`printable` line by line: the line breaks kept, for text printed as it comes (a
    traced script's own output)."""
    return "\n".join(printable(line) for line in text.split("\n"))


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
