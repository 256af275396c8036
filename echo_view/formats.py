"""Importer / Exporter protocols, their registry, and atomic output files.

Formats live outside the core (``importers/``, ``exporters/``); the CLI registers the built-in
ones and any third-party plug-ins found under the ``echo_view.importers`` /
``echo_view.exporters`` entry-point groups.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from echo_view.errors import InputError, UsageError

if TYPE_CHECKING:  # only annotations name it; importing the model (numpy) would slow startup
    from echo_view.model.job import Job

#: ``progress(message, fraction)``; fraction in [0, 1] or -1 when unknown.
Progress = Callable[[str, float], None]


def no_progress(message: str, fraction: float) -> None:
    """A :data:`Progress` that reports nothing."""


@runtime_checkable
class Importer(Protocol):
    """Reads files of one format into a :class:`Job`."""

    name: str

    def sniff(self, path: Path) -> bool:
        """True when ``path`` (a file or directory) looks like this format. Must be cheap."""
        ...

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        """Read ``paths`` (the files of one job) into a :class:`Job`.

        Raises :class:`~echo_view.errors.InputError` naming the file and place on bad input.
        """
        ...


@runtime_checkable
class Exporter(Protocol):
    """Writes a :class:`Job` in one format."""

    name: str
    suffixes: tuple[str, ...]

    def write(self, job: Job, path: Path, progress: Progress = no_progress) -> None:
        """Write ``job`` to ``path`` atomically (see :func:`atomic_output`)."""
        ...


class Registry:
    """The importers and exporters the CLI can use."""

    def __init__(self) -> None:
        self.importers: list[Importer] = []
        self.exporters: list[Exporter] = []

    def add_importer(self, importer: Importer) -> None:
        self.importers.append(importer)

    def add_exporter(self, exporter: Exporter) -> None:
        self.exporters.append(exporter)

    def load_plugins(self) -> None:
        """Add third-party formats declared as entry points."""
        from importlib.metadata import entry_points  # ~3 MB; only plug-in discovery needs it

        for ep in entry_points(group="echo_view.importers"):
            self.add_importer(ep.load()())
        for ep in entry_points(group="echo_view.exporters"):
            self.add_exporter(ep.load()())

    def importer_for(self, path: Path) -> Importer:
        """The first importer that recognises ``path``."""
        if not path.exists():
            raise InputError("no such file or directory", path=path, hint="check the path")
        for imp in self.importers:
            if imp.sniff(path):
                return imp
        known = ", ".join(i.name for i in self.importers)
        raise InputError(
            "not a trace echo-view can read",
            path=path,
            hint=f"known formats: {known}",
        )

    def exporter_for(self, path: Path) -> Exporter:
        """The exporter whose suffix ends ``path``'s name (longest suffix wins)."""
        name = path.name.lower()
        best: tuple[int, Exporter] | None = None
        for exp in self.exporters:
            for suffix in exp.suffixes:
                if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
                    best = (len(suffix), exp)
        if best is None:
            known = ", ".join(s for e in self.exporters for s in e.suffixes)
            raise UsageError(
                f"cannot tell the output format from {path.name!r}",
                hint=f"use one of: {known}",
            )
        return best[1]


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On any exception the temporary file is removed, so a failed run never leaves a
    half-written output behind.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"output directory {str(parent)!r} does not exist", path=path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise
