"""Large task results handed from a worker process to the command's process through shared
memory instead of the cluster's connection.

A rank file's columns are megabytes; sent back over Dask's TCP connection they are pickled and
copied by the worker, received by the command's event loop, and unpickled and copied again, on
the cores the workers read on. When the worker runs on the command's machine (a local cluster,
or a ``--scheduler`` whose workers share it), the worker writes the result's pickle into a file
in a folder of ``/dev/shm`` that the command made for the read (its arrays' memory in a file of
their own), and returns only the files' name and layout (:class:`Spooled`); the command maps
both files, removes them, and unpickles the result with its arrays pointing into the mapping,
so no array is copied. A worker that cannot see the folder (on another machine) or cannot
write the files (``/dev/shm`` full) returns the result itself, as before; so does one whose
result is small. The folder goes when the read ends, or
on a later read if the command was killed first (its name holds the command's process id).
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where the folders go: a RAM-backed file system on Linux (nowhere else: no spooling).
SHM = Path("/dev/shm")
#: Results whose pickle (arrays included) is smaller than this travel as before: a file and a
#: mapping per result cost more than they save on kilobytes (a rank's digest for ``info``).
MIN_BYTES = 1 << 20
#: Each array starts at a multiple of this in its file, as numpy would allocate it.
_ALIGN = 64
#: A folder's name: this, the command's process id, a dash, random letters.
PREFIX = "echo-view-"
#: What the arrays file of a result adds to the name of its pickle file.
ARRAYS = ".arrays"


@dataclass(frozen=True, slots=True)
class Spooled:
    """A result written to two files: ``path``, its pickle, and ``path`` + ``.arrays``, its
    out-of-band buffers (numpy arrays' memory), each at ``(offset, size)``."""

    path: str
    buffers: tuple[tuple[int, int], ...]

    def load(self) -> Any:
        """The result, its arrays in a mapping of the arrays file; both files are removed."""
        with open(self.path, "rb") as f:
            # Mapped only while unpickling, which copies the pickle's own values (text such as
            # the raw args) out of it; its memory goes with the file. (Reading it instead costs
            # one more copy: 13 against 5 ms for a 30 MB rank file's result.)
            size = os.fstat(f.fileno()).st_size
            pickled = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        os.unlink(self.path)
        arrays = self.path + ARRAYS
        with open(arrays, "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            # A shared, writable mapping: the arrays are writable (joining may shift a rank's
            # times in place), and a write changes the file's page itself rather than a private
            # copy of it (copy-on-write would hold both); the file is removed at once, so the
            # mapping is this process's alone and its memory goes when the arrays do.
            mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_WRITE) if size else b""
        os.unlink(arrays)
        view = memoryview(mapped)
        with pickled, memoryview(pickled) as inline:
            return pickle.loads(inline, buffers=[view[o : o + n] for o, n in self.buffers])


@dataclass(frozen=True, slots=True)
class SpoolTo:
    """Where workers write results of at least ``min_bytes`` (sent to them with each task)."""

    folder: str
    min_bytes: int


@contextmanager
def spool_folder() -> Iterator[SpoolTo | None]:
    """A new private folder for one read's results (``None`` where there is no ``/dev/shm``),
    removed with whatever is left in it when the block ends."""
    if not sys.platform.startswith("linux") or not SHM.is_dir():
        yield None
        return
    sweep_stale(SHM)
    try:
        folder = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=SHM)
    except OSError:
        yield None
        return
    try:
        yield SpoolTo(folder, MIN_BYTES)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sweep_stale(where: Path) -> list[Path]:
    """Remove this user's folders in ``where`` whose command is gone (killed before it could
    remove its own): a folder's name carries its command's process id. Returns them."""
    gone: list[Path] = []
    for folder in where.glob(f"{PREFIX}*"):
        pid = folder.name[len(PREFIX) :].partition("-")[0]
        try:
            if not pid.isdigit() or folder.stat().st_uid != os.getuid() or _alive(int(pid)):
                continue
        except OSError:  # removed meanwhile
            continue
        shutil.rmtree(folder, ignore_errors=True)
        gone.append(folder)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def spool(result: Any, to: SpoolTo | None) -> Any:
    """``result`` written into ``to``'s folder (a :class:`Spooled` to send instead), or
    ``result`` itself where that folder is not on this machine, the write fails or the result
    is small."""
    if to is None or not os.path.isdir(to.folder):
        return result
    try:  # (the folder may belong to another user: a shared cluster's workers)
        fd, path = tempfile.mkstemp(dir=to.folder)
    except OSError:
        return result
    files = (path, path + ARRAYS)
    buffers: list[pickle.PickleBuffer] = []
    layout: list[tuple[int, int]] = []
    try:
        # Pickled straight into the file: no copy of the pickle in memory first (6 against
        # 11 ms for a 30 MB rank file's result).
        with os.fdopen(fd, "wb") as f:
            pickle.dump(result, f, protocol=5, buffer_callback=buffers.append)
            inline = f.tell()
        raws = [b.raw() for b in buffers]
        if inline + sum(r.nbytes for r in raws) < to.min_bytes:
            os.unlink(path)
            return result
        with open(files[1], "xb") as f:
            at = 0
            for raw in raws:
                pad = -at % _ALIGN
                f.write(b"\0" * pad)
                at += pad
                f.write(raw)
                layout.append((at, raw.nbytes))
                at += raw.nbytes
    except OSError:  # /dev/shm full, or the folder removed under the worker
        _remove(files)
        return result
    except BaseException:
        _remove(files)
        raise
    return Spooled(path, tuple(layout))


def _remove(paths: tuple[str, ...]) -> None:
    for name in paths:
        with suppress(OSError):
            os.unlink(name)


def unspool(item: Any) -> Any:
    """What :func:`spool` was given: ``item`` loaded if it is :class:`Spooled`, else itself."""
    return item.load() if isinstance(item, Spooled) else item
