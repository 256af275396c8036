"""The files of a job folder that an importer considers: a rank file that cannot be read must not
drop out of the job unnoticed, so one that is not a regular file or cannot be opened is refused
by name instead of skipped (a job read from 127 of 128 ranks gives wrong numbers quietly)."""

from __future__ import annotations

import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from echo_view.errors import InputError


def folder_files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """The files of ``folder`` (not its sub-folders) whose names end with one of ``suffixes``
    (any case), sorted; an :class:`~echo_view.errors.InputError` names the first such entry
    that is not a regular file (a FIFO, a socket, a device, a dangling link) or cannot be
    opened for reading."""
    found = []
    for path in sorted(folder.iterdir()):
        if not path.name.lower().endswith(suffixes):
            continue
        try:
            mode = path.stat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):  # opening a FIFO would block until a writer comes
                raise _unreadable(path, "not a regular file")
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise _unreadable(path, f"cannot read this file ({exc.strerror})") from None
        found.append(path)
    return found


def first_repeat(files: Sequence[Path]) -> tuple[int, int] | None:
    """The positions of the first file of ``files`` that is an earlier one again (by device
    and inode: another spelling or a link counts), else ``None``; one that cannot be looked
    up is left to its reader."""
    seen: dict[tuple[int, int], int] = {}
    for i, f in enumerate(files):
        try:
            st = f.stat()
        except OSError:
            continue
        first = seen.setdefault((st.st_dev, st.st_ino), i)
        if first != i:
            return first, i
    return None


def refuse_repeats(files: Sequence[Path], noun: str) -> None:
    """Refuse a file given twice (a folder and a file in it, a name and a link to it): its
    ranks were read twice, as ranks of their own."""
    repeat = first_repeat(files)
    if repeat is not None:
        first, again = files[repeat[0]], files[repeat[1]]
        raise InputError(
            f"the {noun} is given twice (also as {first})",
            path=again,
            hint=f"name each {noun} once",
        )


def _unreadable(path: Path, message: str) -> InputError:
    return InputError(message, path=path, hint="make it readable, or move it out of the folder")


_DIGITS = re.compile(r"(\d+)")


def natural_key(path: Path) -> list[Any]:
    """Sort key of ``path``'s name with its numbers compared as numbers: rank-2 before rank-10."""
    return [int(t) if t.isdigit() else t for t in _DIGITS.split(path.name)]
