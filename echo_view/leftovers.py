"""What a killed command leaves behind, and its removal by the next command.

A command removes its temporary files and folders on every exit it can handle (SIGTERM and
Ctrl-C included); a SIGKILL runs no clean-up. So each one's name carries the process id of
its command, ``<prefix><pid>-<random>``, and a command about to make one of a kind first
removes those of that kind whose command is gone (this user's only).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path


def tagged(prefix: str) -> str:
    """``prefix`` followed by this process's id and a dash: the start of a temporary name."""
    return f"{prefix}{os.getpid()}-"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):  # no such process id
        return False
    return True


def sweep(where: Path, prefix: str, suffix: str = "") -> list[Path]:
    """Remove this user's entries of ``where`` named ``<prefix><pid>-...<suffix>`` whose
    process is gone; returns them."""
    gone: list[Path] = []
    for entry in Path(where).glob(glob.escape(prefix) + "*"):
        name = entry.name
        pid = name[len(prefix) :].partition("-")[0]
        if not name.endswith(suffix) or not pid.isdigit():
            continue
        try:
            if entry.lstat().st_uid != os.getuid() or alive(int(pid)):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink()
        except OSError:  # removed meanwhile, or not ours to remove
            continue
        gone.append(entry)
    return gone
