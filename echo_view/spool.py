"""Large task results handed from a worker process to the command's process through shared
memory instead of the cluster's connection.

A rank file's columns are megabytes; sent back over Dask's TCP connection they are pickled and
copied by the worker, received by the command's event loop, and unpickled and copied again, on
the cores the workers read on. When the worker runs on the command's machine (a local cluster,
or a ``--scheduler`` whose workers share it), the worker writes the result's pickle into a file
in a folder of ``/dev/shm`` that the command made for the read (its arrays' memory in a file of
their own), and returns only the files' name and layout (:class:`Spooled`); the command maps
both files, removes them, and unpickles the result with its arrays pointing into the mapping,
so no array is copied. Large ``bytes`` in the result (a rank's raw ``args`` text, most of its
size) are written to the arrays file too, each on a page of its own, and come back as
:class:`~echo_view.model.mapped.MappedBytes`, a read-only mapping that slices, searches and
exports its buffer as the ``bytes`` it stands for, without being copied into the command's
memory. A worker that cannot see the folder (on another machine) or cannot write the files
(``/dev/shm`` full) returns the result itself, as before; so does one whose result is small.
The folder goes when the read ends, or on a later read if the command was killed first (its
name holds the command's process id).
"""

from __future__ import annotations

import mmap
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from echo_view.leftovers import sweep, tagged
from echo_view.model.mapped import MappedBytes
from echo_view.model.trace import Text
from echo_view.oslimits import raise_open_files

#: Where the folders go: a RAM-backed file system on Linux (nowhere else: no spooling).
SHM = Path("/dev/shm")
#: Results whose pickle (arrays included) is smaller than this travel as before: a file and a
#: mapping per result cost more than they save on kilobytes (a rank's digest for ``info``).
MIN_BYTES = 1 << 20
#: Each array starts at a multiple of this in its file, as numpy would allocate it.
_ALIGN = 64
#: ``bytes`` at least this long travel as :class:`MappedBytes` (a mapping costs a system call and
#: a page of slack; a rank's ``args`` text is megabytes).
TEXT_MIN_BYTES = 1 << 16
#: Each text starts on a page boundary of the arrays file, where a mapping of it must start.
_PAGE = mmap.ALLOCATIONGRANULARITY
#: Open files a read leaves free for everything else the command opens (the cluster's
#: connections, the next rank file, its output): each mapping holds one, as Python's ``mmap``
#: keeps a duplicate of its file's descriptor until it is unmapped.
FD_RESERVE = 256
#: Per folder (one read), how many more mappings its results may make in the command; past
#: that, results are copied into memory instead of mapped (see :func:`spool_folder`).
_BUDGETS: dict[str, int] = {}
#: A folder's name: this, the command's process id, a dash, random letters.
PREFIX = "echo-view-"
#: What the arrays file of a result adds to the name of its pickle file.
ARRAYS = ".arrays"


@dataclass(frozen=True, slots=True)
class Spooled:
    """A result written to two files: ``path``, its pickle, and ``path`` + ``.arrays``, its
    out-of-band buffers (numpy arrays' memory), each at ``(offset, size)``, then its large
    ``bytes`` (``texts``, each at a page-aligned ``(offset, size)``)."""

    path: str
    buffers: tuple[tuple[int, int], ...]
    texts: tuple[tuple[int, int], ...] = ()

    def load(self) -> Any:
        """The result, its arrays in a writable mapping of the arrays file and its large texts
        in read-only ones (:class:`MappedBytes`); both files are removed. Where its read has
        no open files to spare for the mappings, the arrays and texts are copied into memory
        instead (the same values; ``bytes`` for the texts)."""
        with open(self.path, "rb") as f:
            # Mapped only while unpickling, which copies the pickle's own values (names, small
            # texts) out of it; its memory goes with the file. (Reading it instead costs
            # one more copy: 13 against 5 ms for a 30 MB rank file's result.)
            pickled = mmap.mmap(f.fileno(), os.fstat(f.fileno()).st_size, access=mmap.ACCESS_READ)
        os.unlink(self.path)
        arrays = self.path + ARRAYS
        size = self.buffers[-1][0] + self.buffers[-1][1] if self.buffers else 0  # the arrays
        with open(arrays, "r+b") as f:
            texts: list[Text]
            if _take_mappings(self.path, int(size > 0) + len(self.texts)):
                # A shared, writable mapping: the arrays are writable (joining may shift a
                # rank's times in place), and a write changes the file's page itself rather
                # than a private copy of it (copy-on-write would hold both); the file is removed
                # at once, so the mapping is this process's alone and its memory goes when the
                # arrays do.
                mapped: Any = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_WRITE) if size else b""
                texts = [
                    MappedBytes(f.fileno(), n, access=mmap.ACCESS_READ, offset=o)
                    for o, n in self.texts
                ]
            else:
                mapped = bytearray(f.read(size))  # writable, as the mapping is
                texts = []
                for o, n in self.texts:
                    f.seek(o)
                    texts.append(f.read(n))
        os.unlink(arrays)
        view = memoryview(mapped)
        with pickled:  # read in place: a mapping has the file methods an unpickler needs
            buffers = [view[o : o + n] for o, n in self.buffers]
            return _Unpickler(pickled, buffers, texts).load()


class _Pickler(pickle.Pickler):
    """Pickles large ``bytes`` by reference (their index in ``texts``), to be written apart."""

    def __init__(self, f: Any, buffers: list[pickle.PickleBuffer]) -> None:
        super().__init__(f, protocol=5, buffer_callback=buffers.append)
        self.texts: list[bytes] = []
        self._seen: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> int | None:
        # Called for every object pickled, before pickle's own fast paths (the only hook that
        # sees ``bytes``: ``reducer_override`` and the dispatch table do not) and before its
        # memo: a text referred to several times (a trace's args, by its lazily read tables
        # too) is written once by looking it up here.
        if type(obj) is not bytes or len(obj) < max(1, TEXT_MIN_BYTES):  # (no empty mapping)
            return None
        at = self._seen.get(id(obj))
        if at is None:
            at = self._seen[id(obj)] = len(self.texts)
            self.texts.append(obj)
        return at


class _Unpickler(pickle.Unpickler):
    """Unpickles a :class:`_Pickler`'s output: its texts by their index in ``texts``."""

    def __init__(self, f: Any, buffers: list[memoryview], texts: list[Text]) -> None:
        super().__init__(f, buffers=buffers)
        self.texts = texts

    def persistent_load(self, pid: Any) -> Text:
        text: Text = self.texts[int(pid)]
        return text


def _take_mappings(path: str, count: int) -> bool:
    """Whether a result of the read whose folder holds ``path`` may make ``count`` more
    mappings (and they are counted); always where the folder has no budget."""
    folder = os.path.dirname(path)
    left = _BUDGETS.get(folder)
    if left is None:
        return True
    if left < count:
        return False
    _BUDGETS[folder] = left - count
    return True


def _free_fds(limit: int) -> int:
    """How many more files this process may open under a soft ``limit``: less those open now."""
    try:
        return limit - len(os.listdir("/proc/self/fd"))
    except OSError:
        return limit


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
        folder = tempfile.mkdtemp(prefix=tagged(PREFIX), dir=SHM)
    except OSError:
        yield None
        return
    # A read of N ranks may hold 2N mappings, each with a file open; a soft limit of 1,024 is
    # common, hard limits are larger.
    _BUDGETS[folder] = _free_fds(raise_open_files()) - FD_RESERVE
    try:
        yield SpoolTo(folder, MIN_BYTES)
    finally:
        _BUDGETS.pop(folder, None)
        remove_folder(folder)


#: How many times :func:`remove_folder` empties a folder that a late writer keeps filling.
REMOVE_TRIES = 50


def remove_folder(folder: str) -> bool:
    """Remove ``folder`` and what is in it; True once it is gone. A task of a cluster this
    process did not start (``--scheduler``) may still be running after the command has stopped
    (at a file's error) and create a file while the folder is being removed, which leaves the
    folder behind: it is emptied again, a few times, 20 ms apart. Workers never create the
    folder, so once it is gone nothing more is written there."""
    for attempt in range(REMOVE_TRIES):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.lexists(folder):
            return True
        if attempt + 1 < REMOVE_TRIES:
            time.sleep(0.02)
    return False


def sweep_stale(where: Path) -> list[Path]:
    """Remove this user's folders in ``where`` whose command is gone (killed before it could
    remove its own): a folder's name carries its command's process id. Returns them."""
    return sweep(where, PREFIX)


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
    texts: list[tuple[int, int]] = []
    try:
        # Pickled straight into the file: no copy of the pickle in memory first (6 against
        # 11 ms for a 30 MB rank file's result).
        with os.fdopen(fd, "wb") as f:
            pickler = _Pickler(f, buffers)
            pickler.dump(result)
            inline = f.tell()
        raws = [b.raw() for b in buffers]
        apart = sum(r.nbytes for r in raws) + sum(map(len, pickler.texts))
        if inline + apart < to.min_bytes:
            os.unlink(path)
            return result
        with open(files[1], "xb") as f:
            at = 0
            for raw, align, out in [(r, _ALIGN, layout) for r in raws] + [
                (memoryview(t), _PAGE, texts) for t in pickler.texts
            ]:
                pad = -at % align
                f.write(b"\0" * pad)
                at += pad
                f.write(raw)
                out.append((at, raw.nbytes))
                at += raw.nbytes
    except OSError:  # /dev/shm full, or the folder removed under the worker
        _remove(files)
        return result
    except BaseException:
        _remove(files)
        raise
    return Spooled(path, tuple(layout), tuple(texts))


def _remove(paths: tuple[str, ...]) -> None:
    for name in paths:
        with suppress(OSError):
            os.unlink(name)


def unspool(item: Any) -> Any:
    """What :func:`spool` was given: ``item`` loaded if it is :class:`Spooled`, else itself."""
    return item.load() if isinstance(item, Spooled) else item
