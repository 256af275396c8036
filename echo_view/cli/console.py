"""The rich console the table-printing commands share (kept apart from heavier CLI modules so
that a command's ``--help`` does not import them)."""

from __future__ import annotations

from rich.console import Console


def console(width: int = 160) -> Console:
    """A console that does not squeeze tables when output is piped (``width`` columns then)."""
    out = Console(highlight=False)
    return out if out.is_terminal else Console(highlight=False, width=width)
