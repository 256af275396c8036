"""What a command line's paths must satisfy before any work starts, for every command.

Inputs must be regular files, or directories where a command reads a job's directory; FIFOs,
devices and sockets are refused before anything opens them. No output may be an input, nor a
file inside an input directory (:func:`echo_view.formats.check_output` compares files, not
spellings). Commands that find more inputs on the way (a config's traced graph) call
``check_output`` again with those.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from echo_view.formats import check_input, check_output

#: Argument names (``dest``) that are outputs; every other path argument is an input.
OUTPUTS = frozenset({"output", "plot"})
#: Inputs that must be files (other path arguments may be job directories).
FILES_ONLY = frozenset({"config", "compute", "model", "logs"})


def _paths(value: Any) -> list[Path]:
    if isinstance(value, Path):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Path)]
    return []


def setting_files(args: argparse.Namespace) -> list[Path]:
    """Files named by ``--set interference=FILE`` (the one ``--set`` key that takes a file)."""
    out: list[Path] = []
    for item in getattr(args, "overrides", None) or []:
        key, sep, value = str(item).partition("=")
        if sep and key.strip() == "interference" and os.path.exists(value.strip()):
            out.append(Path(value.strip()))
    return out


def check_command_paths(args: argparse.Namespace) -> None:
    """Refuse special or misplaced inputs and outputs that would replace an input."""
    inputs: list[Path] = []
    for dest, value in vars(args).items():
        if dest in OUTPUTS:
            continue
        for path in _paths(value):
            check_input(path, directory_ok=dest not in FILES_ONLY)
            inputs.append(path)
    for path in setting_files(args):
        check_input(path, directory_ok=False)
        inputs.append(path)
    for dest in sorted(OUTPUTS):
        out = getattr(args, dest, None)
        if isinstance(out, Path):
            check_output(out, inputs)
