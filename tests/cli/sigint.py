"""Children that must see Ctrl-C the way a terminal delivers it.

A shell starts background jobs with SIGINT ignored, and Python then installs no
KeyboardInterrupt handler, so a test runner started in the background would pass its children
an ignored SIGINT. Pass :func:`as_in_a_terminal` as ``preexec_fn`` to give them the default.
"""

from __future__ import annotations

import os
import signal


def as_in_a_terminal() -> None:
    """Restore SIGINT's default disposition in the child before it starts Python."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def as_a_terminal_job() -> None:
    """:func:`as_in_a_terminal`, in a process group of its own: ``os.killpg(pid, SIGINT)``
    then reaches the command and every process it started, as a terminal's Ctrl-C does."""
    as_in_a_terminal()
    os.setpgid(0, 0)
