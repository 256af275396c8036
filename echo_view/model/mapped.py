"""Text held in a read-only file mapping that stands for the ``bytes`` it holds (a rank's raw
``args`` handed over by a worker through shared memory, :mod:`echo_view.spool`)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator


class MappedBytes(mmap.mmap):
    """Read-only text mapped from a file, standing for the ``bytes`` it holds: indexing,
    slices (``bytes``), ``len``, ``find``, ``re`` and the buffer protocol (``np.frombuffer``,
    msgspec) work as on ``bytes``; ``in``, iteration and ``==`` are made to (a plain mapping
    looks for a single byte, yields 1-byte ``bytes`` and compares by identity); it pickles as
    ``bytes``. What ``bytes`` has and a mapping lacks (``decode``, ``split``, ...) raises."""

    def __contains__(self, sub: object) -> bool:
        if isinstance(sub, int):
            sub = bytes((sub,))
        if not isinstance(sub, bytes | bytearray | memoryview):
            raise TypeError(f"a bytes-like object is required, not {type(sub).__name__!r}")
        return self.find(sub) >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self[:])

    def __reduce__(self) -> tuple[type[bytes], tuple[bytes]]:
        return bytes, (self[:],)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, bytes | bytearray | memoryview | mmap.mmap):
            return self[:] == bytes(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
