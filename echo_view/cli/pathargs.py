"""The type of every path argument: an empty one is refused, where ``Path("")`` would quietly
be the current directory (``info ''`` read whatever traces lay there)."""

from __future__ import annotations

import argparse
from pathlib import Path

from echo_view.text import clipped, printable


def path_arg(text: str) -> Path:
    """``text`` as a :class:`~pathlib.Path`; argparse's one-line usage error when empty."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (give a file or directory name)")
    return Path(text)


def output_arg(text: str) -> Path:
    """An output file's name: :func:`path_arg`, and not ``-`` (standard output: a file is
    needed) nor a name ending in ``/`` (:class:`~pathlib.Path` drops the slash: ``-o out.json/``
    replaced the file ``out.json``)."""
    if text == "-":
        raise argparse.ArgumentTypeError("'-' (standard output) is not supported: give a file name")
    if text.endswith(("/", "/.")) or text in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"{printable(clipped(repr(text)))} names a directory: give a file name (the suffix "
            "picks the format)"
        )
    return path_arg(text)
