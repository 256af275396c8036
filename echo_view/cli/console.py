"""The rich console the table-printing commands share (kept apart from heavier CLI modules so
that a command's ``--help`` does not import them)."""

from __future__ import annotations

from rich.console import Console

#: Narrowest console drawn: rich takes ``COLUMNS`` as the width, and at 0 or a few columns it
#: prints tables as empty cells or nothing at all (exit 0); past the screen's edge, a terminal
#: wraps the lines instead, and nothing is lost.
MIN_WIDTH = 40


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich exits with status 1, which `check` uses for "errors found": let the CLI end
        # the command as for any other write to a closed pipe.
        self.quiet = True
        raise BrokenPipeError


def console(width: int = 160, *, soft_wrap: bool = False) -> Console:
    """A console that does not squeeze tables when output is piped (``width`` columns then)
    and never draws narrower than :data:`MIN_WIDTH`; ``soft_wrap``: long lines of text are
    left for the terminal to wrap, not folded."""
    out = _Console(highlight=False, soft_wrap=soft_wrap)
    if out.is_terminal and out.width >= MIN_WIDTH:
        return out
    return _Console(
        highlight=False,
        soft_wrap=soft_wrap,
        width=max(MIN_WIDTH, out.width) if out.is_terminal else width,
    )
