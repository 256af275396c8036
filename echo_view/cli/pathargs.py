"""The type of every path argument: an empty one is refused, where ``Path("")`` would quietly
be the current directory (``info ''`` read whatever traces lay there)."""

from __future__ import annotations

import argparse
from pathlib import Path


def path_arg(text: str) -> Path:
    """``text`` as a :class:`~pathlib.Path`; argparse's one-line usage error when empty."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (give a file or directory name)")
    return Path(text)
