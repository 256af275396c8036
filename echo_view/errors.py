"""Domain exceptions.

Every error a user can cause is an :class:`EchoViewError`. It carries the file, the place inside
the file (``traceEvents[1234]``, ``line 3 column 7``, ``table.column``) and a hint on what to do,
so that the CLI can print exactly one line and exit with code 2.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from echo_view.text import cut_middle, printable


class EchoViewError(Exception):
    """Base of all errors that are the input's or the user's fault (exit code 2)."""

    exit_code: int = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        where: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else None
        self.where = where
        self.hint = hint

    def one_line(self) -> str:
        """The error as a single line: ``file: place: message (hint)``, with any control
        character an input put into it shown as an escape (see :mod:`echo_view.text`)."""
        # Each part bounded: a key or a path an input spelt can be a megabyte long.
        parts = [cut_middle(str(p)) for p in (self.path, self.where) if p]
        text = ": ".join([*parts, cut_middle(self.message)])
        if self.hint:
            text += f" ({cut_middle(self.hint)})"
        return printable(text.replace("\n", " "))

    def __str__(self) -> str:
        return self.one_line()


class InputError(EchoViewError):
    """A file the user gave cannot be read as what it claims to be."""


class LimitError(InputError):
    """An input goes past a stated resource limit (a gzip stream inflating too far, say): always
    an error, never a finding to report and go on from."""


class ConfigError(EchoViewError):
    """A configuration value (TOML key, ``--set`` override, preset name) is wrong."""


class UsageError(EchoViewError):
    """The command line itself is inconsistent (wrong output suffix, missing argument...)."""


class OutputError(EchoViewError):
    """An output cannot be written (read-only file system, no permission, disk full)."""


class SimulationError(EchoViewError):
    """The workload cannot be simulated (a collective that never completes, a dependency cycle)."""


@contextmanager
def in_file(path: str | Path | None) -> Iterator[None]:
    """Errors raised inside that name no file are given ``path`` (for checks that validate a
    value without knowing where it was read from)."""
    try:
        yield
    except EchoViewError as err:
        if path and err.path is None:
            err.path = str(path)
        raise


class InputNote(UserWarning):
    """What reading an input repaired or left out that the results carry (a slice of negative
    duration read as 0 long, a trace cut short): the CLI prints it as one ``echo-view:
    warning:`` line; Python callers see a ``UserWarning``."""


class Deprecated(FutureWarning):
    """A deprecated spelling (config key, option) that still works for one release. The CLI
    prints it as one ``echo-view: warning:`` line; Python callers see a ``FutureWarning``."""


def warn_deprecated(old: str, new: str, note: str = "") -> None:
    """Warn once that ``old`` is deprecated and ``new`` replaces it (``note``: how the old
    value was read)."""
    warnings.warn(f"{old} is deprecated: use {new}{note}", Deprecated, stacklevel=3)


def known_keys_hint(key: str, known: Iterable[str], noun: str = "known keys") -> str:
    """``did you mean 'x'? known keys: ...``: the nearest valid name first (difflib), when
    one is close enough, then every valid name (for hints on unknown or misspelt keys)."""
    names = list(dict.fromkeys(known))
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    listing = f"{noun}: {', '.join(names)}"
    return f"did you mean {close[0]!r}? {listing}" if close else listing


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that ``finally`` blocks run: temporary files and
    half-written outputs are removed (a SIGKILL cannot be caught and may leave them)."""


#: Set once SIGTERM arrived: the one :class:`Terminated` raised may be swallowed where Python
#: ignores exceptions (a finalizer running when the signal came), so writers check it too.
_stop = [False]


def request_stop() -> None:
    """Record that the process was asked to stop (SIGTERM)."""
    _stop[0] = True


def stop_requested() -> bool:
    """Whether :func:`request_stop` was called (and not cleared by :func:`clear_stop`)."""
    return _stop[0]


def clear_stop() -> None:
    """Forget a stop request (a command's end, or a test's)."""
    _stop[0] = False
