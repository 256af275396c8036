"""Domain exceptions.

Every error a user can cause is an :class:`EchoViewError`. It carries the file, the place inside
the file (``traceEvents[1234]``, ``line 3 column 7``, ``table.column``) and a hint on what to do,
so that the CLI can print exactly one line and exit with code 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
        """The error as a single line: ``file: place: message (hint)``."""
        parts = [p for p in (self.path, self.where) if p]
        text = ": ".join([*parts, self.message])
        if self.hint:
            text += f" ({self.hint})"
        return text.replace("\n", " ")

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
