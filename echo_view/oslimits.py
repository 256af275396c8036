"""This process's limit on open files, the one operating-system limit echo-view raises, and
a child's death with its parent (Linux's parent-death signal).

Two readers need many files at once: a read through shared memory maps each rank's result
(:mod:`echo_view.spool`), and a local Dask cluster opens sockets and pipes per worker
(:mod:`echo_view.workers`). Both raise the soft limit here, within the hard one.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from contextlib import suppress
from pathlib import Path

#: Stands for "no limit": more files than any read opens.
UNLIMITED = 1 << 30


def raise_open_files(target: int | None = None) -> int:
    """The soft limit on open files raised to ``target`` (default: as far as allowed, the hard
    limit, or the kernel's cap ``fs.nr_open`` when the hard limit is unlimited); never lowered.
    Returns the soft limit in force afterwards; where the system refuses, the one before."""
    try:
        import resource
    except ImportError:
        return UNLIMITED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED
    if target is None:
        target = hard if hard != resource.RLIM_INFINITY else _kernel_cap()
    if soft >= target:
        return int(soft)
    if hard != resource.RLIM_INFINITY and target > hard:
        return int(soft)
    with suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return int(soft)


def _kernel_cap() -> int:
    """The most files a process may open with an unlimited hard limit (``fs.nr_open``)."""
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20  # the kernel's default


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: signal.Signals, parent_pid: int) -> None:
    """Linux: have ``sig`` sent to this process when its parent (``parent_pid``, the process
    that started it) dies, ``kill -9`` and the out-of-memory killer included; exit at once if
    it died before the request took effect. Elsewhere (no ``prctl``), nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:
        os._exit(1)
