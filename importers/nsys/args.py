"""Per-event args JSON built column-wise: one byte buffer and offsets for a whole table, with no
Python object per event.

A table's args follow one template, ``{"device":%d,"stream":%d,...}``: :func:`assemble` lays out
every row's literal pieces and integers written in decimal with numpy; :class:`Packed` rows are
then selected, reordered and replaced without copying bytes until they are packed for a trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import byte_slices, spans

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

_POW10 = 10 ** np.arange(1, 20, dtype=np.uint64)


@dataclass(frozen=True)
class Ints:
    """Integers, written in decimal (a ``-`` before negatives)."""

    values: I64


@dataclass(frozen=True)
class Packed:
    """One bytes value per row: row ``i`` is ``data[start[i] : start[i] + length[i]]``.

    Rows are views into ``data``, so reordering, selecting and replacing rows move no bytes;
    :meth:`pack` lays them out back to back once, at the end."""

    data: U8
    start: I64
    length: I64

    def __len__(self) -> int:
        return len(self.start)

    @staticmethod
    def empty(n: int = 0) -> Packed:
        """``n`` rows without args."""
        zeros = np.zeros(n, dtype=np.int64)
        return Packed(np.zeros(0, dtype=np.uint8), zeros, zeros)

    @staticmethod
    def concat(parts: Sequence[Packed]) -> Packed:
        if not parts:
            return Packed.empty()
        shift = np.cumsum([0, *(len(p.data) for p in parts[:-1])])
        return Packed(
            np.concatenate([p.data for p in parts]),
            np.concatenate([p.start + s for p, s in zip(parts, shift, strict=True)]),
            np.concatenate([p.length for p in parts]),
        )

    def get(self, i: int) -> bytes:
        lo = int(self.start[i])
        return self.data[lo : lo + int(self.length[i])].tobytes()

    def take(self, rows: I64) -> Packed:
        """Rows ``rows``, in that order."""
        return Packed(self.data, self.start[rows], self.length[rows])

    def replace(self, new: Mapping[int, bytes]) -> Packed:
        """A copy with the rows in ``new`` set to the given bytes."""
        if not new:
            return self
        rows = np.fromiter(new, dtype=np.int64, count=len(new))
        extra = [new[int(r)] for r in rows.tolist()]
        lengths = np.fromiter(map(len, extra), dtype=np.int64, count=len(extra))
        start, length = self.start.copy(), self.length.copy()
        start[rows] = len(self.data) + np.cumsum(lengths) - lengths
        length[rows] = lengths
        data = np.concatenate([self.data, np.frombuffer(b"".join(extra), dtype=np.uint8)])
        return Packed(data, start, length)

    def replace_rows(self, rows: I64, new: Packed) -> Packed:
        """A copy with rows ``rows`` set to ``new``'s rows, in that order."""
        if not len(rows):
            return self
        start, length = self.start.copy(), self.length.copy()
        start[rows] = len(self.data) + new.start
        length[rows] = new.length
        return Packed(np.concatenate([self.data, new.data]), start, length)

    def pack(self) -> tuple[bytes, I64]:
        """The rows back to back, and the offset of each (``n + 1`` offsets)."""
        out = gather(self.data, self.start, self.length)
        return out.data.tobytes(), np.concatenate([out.start, [len(out.data)]])


def assemble(n: int, pieces: Sequence[bytes | Ints]) -> Packed:
    """``n`` rows, each the concatenation of ``pieces`` (a literal is the same in every row).

    The rows are laid out in a fixed-width grid first -- each literal at one column, each
    integer right-aligned in the widest width its column needs -- so that every piece is one
    column-wise write; the zero padding is then squeezed out (literals hold no NUL byte)."""
    layout: list[tuple[int, Any]] = []
    length = np.zeros(n, dtype=np.int64)
    for p in pieces:
        if isinstance(p, bytes):
            layout.append((len(p), np.frombuffer(p, dtype=np.uint8)))
            length += len(p)
            continue
        v = np.asarray(p.values, dtype=np.int64)
        neg = v < 0
        mag: npt.NDArray[Any] = v
        if neg.any():
            mag = v.astype(np.uint64)
            mag[neg] = ~mag[neg] + np.uint64(1)  # |v|, also for the most negative int64
        nd = np.searchsorted(_POW10, mag.astype(np.uint64), side="right") + 1
        length += nd + neg
        layout.append((int((nd + neg).max(initial=1)), (mag, nd, neg)))
    # Column-major while writing (each piece fills whole rows), row-major when squeezed.
    grid = np.zeros((sum(w for w, _ in layout), n), dtype=np.uint8)
    col = 0
    for (width, what), piece in zip(layout, pieces, strict=True):
        if isinstance(piece, bytes):
            grid[col : col + width] = what[:, None]
        else:
            mag, nd, neg = what
            end = col + width
            ten = mag.dtype.type(10)
            every = int(nd.min(initial=1))  # digits that every row has
            for d in range(int(nd.max(initial=1))):
                mag, digit = np.divmod(mag, ten)
                if d < every:
                    np.add(digit, 48, out=grid[end - 1 - d], casting="unsafe")
                else:  # leading zeros stay NUL and are squeezed out
                    grid[end - 1 - d] = np.where(nd > d, digit + 48, 0)
            if neg.any():
                rows = np.flatnonzero(neg)
                grid[end - 1 - nd[rows], rows] = ord("-")
        col += width
    flat = np.ascontiguousarray(grid.T)
    return Packed(flat[flat != 0], np.cumsum(length) - length, length)


#: Bytes gathered per step: the index arrays (8 bytes per byte) stay small enough to be
#: reused from cache, whatever the rows' lengths.
_CHUNK_BYTES = 1 << 18


def gather(src: U8, start: I64, length: I64) -> Packed:
    """Row ``i`` is ``src[start[i] : start[i] + length[i]]``, copied into one buffer."""
    first = np.cumsum(length) - length
    out = np.empty(int(length.sum()), dtype=np.uint8)
    for lo, hi in byte_slices(length, _CHUNK_BYTES):
        at = int(first[lo])
        end = int(first[hi - 1] + length[hi - 1])
        if hi - lo == 1:  # one row, perhaps longer than a step: a slice, no index
            out[at:end] = src[int(start[lo]) : int(start[lo]) + end - at]
        else:
            out[at:end] = src[spans(start[lo:hi], length[lo:hi])]
    return Packed(out, first, length)


def literal(n: int, text: bytes) -> Packed:
    """``n`` rows, each ``text`` (one copy of it, shared)."""
    return Packed(
        np.frombuffer(text, dtype=np.uint8),
        np.zeros(n, dtype=np.int64),
        np.full(n, len(text), dtype=np.int64),
    )


def concat_rows(parts: Sequence[Packed]) -> Packed:
    """Row ``i`` is row ``i`` of each part, one after another (copied :data:`_CHUNK_BYTES` at a
    time, so the index arrays stay small)."""
    total = np.sum([p.length for p in parts], axis=0).astype(np.int64)
    start = np.cumsum(total) - total
    out = np.empty(int(total.sum()), dtype=np.uint8)
    at = start.copy()
    for p in parts:
        for lo, hi in byte_slices(p.length, _CHUNK_BYTES):
            if hi - lo == 1:
                a, b, size = int(at[lo]), int(p.start[lo]), int(p.length[lo])
                out[a : a + size] = p.data[b : b + size]
            else:
                dst = spans(at[lo:hi], p.length[lo:hi])
                out[dst] = p.data[spans(p.start[lo:hi], p.length[lo:hi])]
        at += p.length
    return Packed(out, start, total)
