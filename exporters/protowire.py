"""Column-wise protobuf encoding: the bytes of many small messages at once, with numpy.

The pftrace exporter writes one ``TracePacket`` per slice begin/end; building each with the
generated protobuf classes costs ~5 µs (measured with the ``perfetto`` package's
``StreamingTraceProtoBuilder``), too slow for millions of slices. :class:`Rows` encodes field
``k`` of every row in one vectorised step instead, into an ``(n, width)`` byte matrix with a
length per row. The wire format is the standard one (varint, fixed64, length-delimited); the
tests parse the result with ``perfetto_trace_pb2`` to check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import spans

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

VARINT = 0
FIXED64 = 1
LEN = 2


def tag(field: int, wire: int) -> bytes:
    """The encoded key of ``field`` with wire type ``wire``."""
    return varint_bytes((field << 3) | wire)


def varint_bytes(value: int) -> bytes:
    """One varint (negative values as 64-bit two's complement, as protobuf does for int64)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def varint_len(values: npt.NDArray[Any]) -> I64:
    """Encoded length of each varint (1..10)."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    n = np.ones(len(v), dtype=np.int64)
    top = int(v.max()) if len(v) else 0
    k = 1
    while k < 10 and top >= 1 << (7 * k):
        n += v >= np.uint64(1 << (7 * k))
        k += 1
    return n


class Rows:
    """The bytes of ``n`` messages, appended to field by field.

    Row ``i`` occupies ``buf[i, start : start + len[i]]``. With ``start`` > 0 a header whose
    length depends on the body (a length prefix) can be put in front later with
    :meth:`prepend`, without moving the body: :meth:`flat` then skips the gap between them.
    Writes go through flat indices into ``buf``, the fastest form of numpy scatter.
    """

    def __init__(self, n: int, width: int = 64, start: int = 0) -> None:
        self.start = start
        self.buf = np.zeros((n, max(width, start + 1)), dtype=np.uint8)
        self.len = np.zeros(n, dtype=np.int64)
        self.head_len = np.zeros(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.len)

    def _rows(self, mask: Mask | None) -> npt.NDArray[np.intp]:
        return np.arange(len(self.len)) if mask is None else np.flatnonzero(mask)

    def _at(self, rows: npt.NDArray[np.intp], extra: int) -> tuple[U8, I64]:
        """Flat buffer and flat write positions of ``rows``, grown for ``extra`` more bytes."""
        at = self.len[rows] + self.start
        need = int(at.max()) + extra if len(rows) else 0
        width = self.buf.shape[1]
        if need > width:
            # Grow to what is needed plus a little: flat() costs rows x width.
            grown = np.zeros((len(self.len), need + 16), dtype=np.uint8)
            grown[:, :width] = self.buf
            self.buf = grown
            width = grown.shape[1]
        flat: U8 = self.buf.reshape(-1)
        return flat, rows * width + at

    def raw(self, data: bytes, mask: Mask | None = None) -> None:
        """Append the same bytes to every row (or the rows of ``mask``)."""
        rows = self._rows(mask)
        if not len(rows) or not data:
            return
        flat, at = self._at(rows, len(data))
        for j, byte in enumerate(data):
            flat[at + j] = byte
        self.len[rows] += len(data)

    def varint(self, values: npt.NDArray[Any], mask: Mask | None = None) -> None:
        """Append one varint per row (``values`` has one entry per row of ``self``)."""
        rows = self._rows(mask)
        if not len(rows):
            return
        v = np.asarray(values)[rows].astype(np.int64).view(np.uint64)
        n = lengths = varint_len(v)
        most = int(n.max())
        flat, at = self._at(rows, most)
        for j in range(most):
            if j:
                m = n > j
                v, n, at = v[m], n[m], at[m]
            byte = (v & np.uint64(0x7F)).astype(np.uint8)
            byte |= ((n > j + 1) * 0x80).astype(np.uint8)
            flat[at + j] = byte
            v = v >> np.uint64(7)
        self.len[rows] += lengths

    def fixed64(self, values: npt.NDArray[Any], mask: Mask | None = None) -> None:
        """Append 8 little-endian bytes per row (int64 ids, or float64 bit patterns)."""
        rows = self._rows(mask)
        if not len(rows):
            return
        arr = np.asarray(values)[rows]
        as_bytes = np.ascontiguousarray(arr.astype(arr.dtype.newbyteorder("<"))).view(np.uint8)
        as_bytes = as_bytes.reshape(len(rows), 8)
        flat, at = self._at(rows, 8)
        for j in range(8):
            flat[at + j] = as_bytes[:, j]
        self.len[rows] += 8

    def pooled(self, pool: list[bytes], index: npt.NDArray[Any], mask: Mask | None = None) -> None:
        """Append ``pool[index[i]]`` to row ``i``: for a few short distinct values (one pass per
        value, rows widened to the longest); :func:`gathered` takes any."""
        rows = self._rows(mask)
        idx = np.asarray(index)
        for value in np.unique(idx[rows]).tolist():
            sel = np.zeros(len(self.len), dtype=bool)
            sel[rows] = idx[rows] == value
            self.raw(pool[value], sel)

    def prepend(self, head: Rows) -> None:
        """Put ``head``'s rows (built from column 0) in front of these rows."""
        width = head.buf.shape[1]
        if head.start or width > self.start:
            raise ValueError(
                f"a head of width {width} does not fit in front of column {self.start}"
            )
        self.buf[:, :width] = head.buf
        self.head_len = head.len.copy()

    def total_len(self) -> I64:
        """Length of each row, head included."""
        out: I64 = self.head_len + self.len
        return out

    def flat(self) -> U8:
        """All rows' bytes (head, then body), concatenated."""
        used = self.start + (int(self.len.max()) if len(self.len) else 0)
        cols = np.arange(used)[None, :]
        valid = (cols >= self.start) & (cols < (self.start + self.len)[:, None])
        if self.start:
            valid |= cols < self.head_len[:, None]
        out: U8 = self.buf[:, :used][valid]
        return out


def gathered(pool: Sequence[bytes], index: npt.NDArray[Any], mask: Mask) -> tuple[U8, I64]:
    """``pool[index[i]]`` for every row ``i`` of ``mask``, concatenated in row order, and each
    row's length (0 outside ``mask``): one gather, whatever the number of distinct values or
    their lengths (written row by row into :class:`Rows`, one long value would widen every
    row, and each distinct value would cost a pass)."""
    lens = np.zeros(len(index), dtype=np.int64)
    rows = np.flatnonzero(mask)
    if not len(rows):
        return np.zeros(0, dtype=np.uint8), lens
    sizes = np.fromiter((len(p) for p in pool), dtype=np.int64, count=len(pool))
    starts = np.cumsum(sizes) - sizes
    data = np.frombuffer(b"".join(pool), dtype=np.uint8)
    which = np.asarray(index)[rows]
    cnt = sizes[which]
    lens[rows] = cnt
    out: U8 = data[spans(starts[which], cnt)]
    return out, lens


def with_suffixes(head: U8, head_len: I64, tail: bytes, tail_len: I64) -> bytes:
    """Row ``i`` = ``head`` row ``i`` followed by ``tail`` row ``i`` (both given concatenated)."""
    if not len(tail):
        return head.tobytes()
    counts = np.stack((head_len, tail_len), axis=1).reshape(-1)
    in_tail = np.repeat(np.tile(np.array([False, True]), len(head_len)), counts)
    out = np.empty(len(in_tail), dtype=np.uint8)
    out[~in_tail] = head
    out[in_tail] = np.frombuffer(tail, dtype=np.uint8)
    return out.tobytes()
