"""Import/export progress on stderr: on a terminal, or when asked with ``--progress``.

Captured or redirected stderr holds results and errors only, however long a command runs, so a
script or test that reads it never sees progress lines unless it asks for them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from echo_view.text import printable


def add_progress_option(parser: Any) -> None:
    """Add ``--progress`` to a sub-command that reads or writes traces."""
    parser.add_argument(
        "--progress",
        action="store_true",
        help="report import/export progress on stderr even when it is not a terminal",
    )


@contextmanager
def stderr_progress(args: argparse.Namespace) -> Iterator[StderrProgress]:
    """A :class:`StderrProgress` on ``sys.stderr`` for one command, its line cleared at the end."""
    progress = StderrProgress(sys.stderr, forced=bool(getattr(args, "progress", False)))
    try:
        yield progress
    finally:
        progress.close()


class StderrProgress:
    """A :data:`~echo_view.formats.Progress` that prints to ``stream``, if at all, once worth it.

    On a terminal it redraws one line, cut to the terminal's width (a wrapped line could not be
    redrawn), with ``\\r`` and spaces where ``TERM=dumb`` has no erase sequence. Elsewhere it
    prints nothing unless ``forced`` (``--progress``); then plain lines, at most one a second,
    once the work has run ``delay_s``. Messages hold input file names: they are shown with
    :func:`~echo_view.text.printable`, never as escape sequences.
    """

    def __init__(self, stream: TextIO, *, forced: bool = False, delay_s: float = 1.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.enabled = self.tty or forced
        self.delay_s = delay_s
        self.t0 = time.monotonic()
        self.last = -1.0e9
        self.drawn = 0  # cells of the line drawn on the terminal
        self.dumb = os.environ.get("TERM") == "dumb"

    def __call__(self, message: str, fraction: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.tty and now - self.t0 < self.delay_s:
            return
        if now - self.last < (0.1 if self.tty else 1.0) and fraction < 1.0:
            return
        self.last = now
        text = printable(message if fraction < 0 else f"{message} {100 * fraction:.0f}%")
        if self.tty:
            text, cells = _cut(text, shutil.get_terminal_size().columns - 1)
            self.stream.write(self._erase() + text)
            self.drawn = cells
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _erase(self) -> str:
        if not self.dumb:
            return "\r\x1b[K"
        return f"\r{' ' * self.drawn}\r" if self.drawn else "\r"

    def close(self) -> None:
        """Clear the redrawn line, if any."""
        if self.drawn:
            self.stream.write(self._erase())
            self.stream.flush()
            self.drawn = 0


def _cut(text: str, width: int) -> tuple[str, int]:
    """``text`` cut to ``width`` terminal cells as ``rich`` measures them (the tables and the
    TUI do too), and the cells it takes."""
    from rich.cells import cell_len, set_cell_size  # not at import: `--help` needs no rich

    width = max(width, 1)
    if cell_len(text) > width:
        text = set_cell_size(text, width)
    return text, cell_len(text)
