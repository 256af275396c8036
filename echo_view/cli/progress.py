"""Import/export progress on stderr: on a terminal, or when asked with ``--progress``.

Captured or redirected stderr holds results and errors only, however long a command runs, so a
script or test that reads it never sees progress lines unless it asks for them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO


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

    On a terminal it redraws one line. Elsewhere it prints nothing unless ``forced``
    (``--progress``); then plain lines, at most one a second, once the work has run ``delay_s``.
    """

    def __init__(self, stream: TextIO, *, forced: bool = False, delay_s: float = 1.0) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.enabled = self.tty or forced
        self.delay_s = delay_s
        self.t0 = time.monotonic()
        self.last = -1.0e9
        self.drawn = False

    def __call__(self, message: str, fraction: float) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.tty and now - self.t0 < self.delay_s:
            return
        if now - self.last < (0.1 if self.tty else 1.0) and fraction < 1.0:
            return
        self.last = now
        text = message if fraction < 0 else f"{message} {100 * fraction:.0f}%"
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
            self.drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Clear the redrawn line, if any."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
