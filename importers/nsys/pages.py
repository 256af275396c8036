"""Table columns read straight from the pages of an SQLite file, with no Python object per value.

Python's ``sqlite3`` module builds a tuple per row and an object per value; for an Nsight export
that costs more than everything else an import does. The SQLite file format
(https://www.sqlite.org/fileformat2.html) is stable and documented: a table is a B-tree whose
leaf pages hold one record per row, a header of varint serial types followed by the values, big
endian. :class:`PageFile` walks the tree and decodes the records of all leaves at once with
numpy. It covers what Nsight writes (UTF-8, rollback journal, rowid tables, rows that fit in
their page); for anything else -- another text encoding, WAL, a record spilling to overflow
pages, an unexpected page type, a float where an integer is expected -- it returns ``None`` and
the caller reads the table with SQL instead.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import spans

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

_MAGIC = b"SQLite format 3\x00"
_LEAF, _INTERIOR = 13, 5  # table B-tree page types
# Value size by serial type: 0 NULL, 1-6 integers of 1, 2, 3, 4, 6, 8 bytes, 7 a float, 8 and 9
# the constants 0 and 1, 10 and 11 reserved (-1: refused), then blobs (even) and texts (odd) of
# (t - 12) // 2 bytes; a record that fits in a page (<= 64 KiB) needs no larger type.
_SIZE = np.concatenate(
    [[0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1], (np.arange(12, (1 << 17) + 14) - 12) >> 1]
).astype(np.int32)
# Right shift that turns 8 big-endian bytes read at a value into the value (sign-extended).
_SHIFT = np.array([63, 56, 48, 40, 32, 16, 0, 0, 63, 63], dtype=np.int64)
_ROWID = -1  # stand-in serial type of an INTEGER PRIMARY KEY column: the value is the rowid
_PAD = 64  # bytes of zero padding after the file's tail copy (see ``_window``)
#: Records whose multi-byte headers are decoded at once (at most 64 header bytes each).
_HEADER_ROWS = 1 << 15


@dataclass(frozen=True)
class Text:
    """A text column: row ``i`` is ``data[start[i] : start[i] + length[i]]`` (UTF-8), or NULL
    where ``null[i]``."""

    data: U8
    start: I64
    length: I64
    null: Bools

    def __len__(self) -> int:
        return len(self.start)


@dataclass(frozen=True)
class Records:
    """The decoded records of one table: per wanted column, its serial type and value offset."""

    file: PageFile
    rowid: I64
    types: dict[str, npt.NDArray[Any]]
    offsets: dict[str, I64]

    def __len__(self) -> int:
        return len(self.rowid)

    def ints(self, column: str, default: int) -> I64 | None:
        """The column as integers, NULL as ``default``; ``None`` when a value is not an
        integer (the caller then reads the table with SQL)."""
        got = self.int_columns({column: default})
        return None if got is None else got[column]

    def int_columns(self, defaults: dict[str, int]) -> dict[str, I64] | None:
        """Several columns as integers at once (NULL as each one's default); ``None`` when a
        value is not an integer."""
        out: dict[str, I64] = {}
        cols = []
        for c in defaults:
            if len(self.types[c]) and int(self.types[c][0]) == _ROWID:
                out[c] = self.offsets[c].copy()
            else:
                cols.append(c)
        if not cols or not len(self):
            return {**out, **{c: np.zeros(0, dtype=np.int64) for c in cols}}
        t = np.stack([self.types[c] for c in cols])
        off = np.stack([self.offsets[c] for c in cols])
        low, top = int(t.min()), int(t.max())
        if top >= 10 or (top >= 7 and (t == 7).any()):
            return None
        if (low == 0 or top >= 8) and int(off.max()) >= len(self.file.buf) - 8:
            # NULL, 0 and 1 take no bytes: their offset may be the end of the file.
            off = np.where((t >= 1) & (t <= 6), off, 0)
        # The first byte of a value is its most significant: read 8 bytes big endian and shift
        # the surplus out (arithmetic shift, so the sign extends).
        values = self.file.int64_at(off.reshape(-1)).reshape(off.shape) >> _SHIFT[t]
        if top >= 8:
            values[t == 8] = 0
            values[t == 9] = 1
        if low == 0:
            fill = np.array([defaults[c] for c in cols], dtype=np.int64)[:, None]
            values = np.where(t == 0, fill, values)
        out.update(zip(cols, values, strict=True))
        return out

    def set(self, column: str) -> Bools:
        """Whether each row's value is not NULL."""
        return np.asarray(self.types[column] != 0)

    def text(self, column: str) -> Text | None:
        """The column as UTF-8 text (blobs are taken as their bytes); ``None`` when a value is
        a number."""
        t = self.types[column].astype(np.int64)
        if ((t != 0) & (t < 12)).any():
            return None
        length = np.where(t >= 12, (t - 12) >> 1, 0)
        return Text(self.file.buf, self.offsets[column], length, t == 0)


def page_size(head: bytes) -> int | None:
    """The page size a SQLite file's first 100 bytes state, or ``None`` when they are no
    SQLite header with a valid one (a power of two, 512 to 65,536)."""
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if not head.startswith(_MAGIC) or page < 512 or page & (page - 1):
        return None
    return page


class PageFile:
    """An SQLite file opened for reading tables page by page."""

    def __init__(self, mapped: mmap.mmap, page_size: int, usable: int) -> None:
        self.buf: U8 = np.frombuffer(mapped, np.uint8)
        self.page_size = page_size
        self.usable = usable
        n = len(self.buf)
        # Big-endian integers at every byte offset (stride 1): one gather reads a value.
        self._u16 = np.ndarray((n - 1,), ">u2", buffer=mapped, strides=(1,))
        self._i64 = np.ndarray((n - 7,), ">i8", buffer=mapped, strides=(1,))
        tail = np.zeros(2 * _PAD, dtype=np.uint8)
        tail[:_PAD] = self.buf[n - _PAD :]
        self._tail, self._tail_at = tail, n - _PAD

    @staticmethod
    def open(path: Path) -> PageFile | None:
        """The file's pages, or ``None`` when its layout is not one this reader handles."""
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < 512:
                    return None
                # Mapped, not read: only the pages of the tables asked for are touched.
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            return None
        head = mapped[:100]
        page = page_size(head)
        if (
            page is None
            or head[18:20] != b"\x01\x01"  # 2 = WAL: pages may live in the -wal file
            or int.from_bytes(head[56:60], "big") != 1  # UTF-8
            or size % page
        ):
            mapped.close()
            return None
        return PageFile(mapped, page, page - head[20])

    def int64_at(self, at: I64) -> I64:
        """The 8 bytes at each offset as a big-endian int64 (zeros past the end of the file)."""
        if not len(at) or int(at.max()) < len(self._i64):
            return self._i64[at].astype(np.int64)
        out = np.empty(len(at), dtype=np.int64)
        near = at >= len(self._i64)
        out[~near] = self._i64[at[~near]]
        win = self._window(at[near], 8)
        out[near] = np.ascontiguousarray(win).view(">i8").reshape(-1)
        return out

    def records(
        self,
        root: int,
        ncols: int,
        columns: dict[str, int],
        rowid_alias: str | None,
        flags: dict[str, int] | None = None,
    ) -> Records | None:
        """Decode the rows of the table (of ``ncols`` columns) whose B-tree starts at page
        ``root``: ``columns`` maps a name to its position in the record; ``rowid_alias`` names
        an INTEGER PRIMARY KEY column (stored as the rowid); of ``flags`` columns only the
        serial types are wanted (whether they are set). ``None`` when the pages are not as
        expected."""
        try:
            return self._records(root, ncols, columns, rowid_alias, flags or {})
        except IndexError:  # an offset outside the file: corrupt, let SQLite say so
            return None

    def _records(
        self,
        root: int,
        ncols: int,
        columns: dict[str, int],
        rowid_alias: str | None,
        flags: dict[str, int],
    ) -> Records | None:
        cells = self._leaf_cells(root)
        if cells is None:
            return None
        n = len(cells)
        payload, pos = self._varints(cells)
        if (payload > self.usable - 35).any():  # spills to overflow pages
            return None
        rowid, pos = self._varints(pos)
        hsize, first = self._varints(pos)
        values = max(columns.values(), default=-1) + 1
        want = max(values, max(flags.values(), default=-1) + 1)
        # One one-byte type a column: the header is that long and none of its bytes continues a
        # varint (a row written before an ALTER TABLE ADD COLUMN has fewer columns, and a
        # two-byte type can make up the length).
        simple = (first - pos) + ncols == hsize
        if ncols and simple.any():
            at = np.flatnonzero(simple)
            simple[at] = (self._window(first[at], ncols) < 0x80).all(axis=1)
        types = self._serial_types(first, pos + hsize, want, simple)
        if types is None or int(types[:values].max(initial=0)) >= len(_SIZE):
            return None
        sizes = _SIZE[types[:values]]
        if int(sizes.min(initial=0)) < 0:
            return None  # reserved serial types: not a record this reader knows
        # Each value starts where the previous one ended.
        body = pos + hsize
        wanted = {k for name, k in columns.items() if name != rowid_alias}
        starts: dict[int, I64] = {}
        at = body
        for k in range(values):
            if k in wanted:
                starts[k] = at
            at = at + sizes[k]
        if values and (at > pos + payload).any():
            return None
        tcols: dict[str, npt.NDArray[Any]] = {}
        ocols: dict[str, I64] = {}
        for name, k in columns.items():
            if name == rowid_alias:
                # Stored as NULL in the record: the value is the rowid.
                tcols[name], ocols[name] = np.full(n, _ROWID, dtype=np.int32), rowid
            else:
                tcols[name], ocols[name] = types[k], starts[k]
        for name, k in flags.items():
            tcols.setdefault(name, types[k])
        return Records(self, rowid, tcols, ocols)

    # -- bytes -------------------------------------------------------------------------------

    def _window(self, at: I64, width: int) -> npt.NDArray[np.uint8]:
        """``width`` bytes from each offset, as rows (zeros past the end of the file)."""
        n = len(self.buf)
        if not len(at):
            return np.zeros((0, width), dtype=np.uint8)
        if int(at.min()) < 0 or int(at.max()) >= n:
            raise IndexError("offset outside the file")
        full = np.lib.stride_tricks.as_strided(self.buf, (n - width + 1, width), (1, 1))
        if int(at.max()) <= n - width:
            return full[at]
        out = np.empty((len(at), width), dtype=np.uint8)
        near = at > n - width
        out[~near] = full[at[~near]]
        if width > _PAD:
            raise IndexError("window wider than the padded tail")
        tail = np.lib.stride_tricks.as_strided(self._tail, (_PAD + 1, width), (1, 1))
        out[near] = tail[at[near] - self._tail_at]
        return out

    def _be16(self, at: I64) -> I64:
        return self._u16[at].astype(np.int64)

    def _be32(self, at: I64) -> I64:
        return (self._be16(at) << 16) | self._be16(at + 2)

    def _varints(self, at: I64) -> tuple[I64, I64]:
        """The varint starting at each offset and the offset just after it."""
        b = self.buf
        value = b[at].astype(np.int64)
        end = at + 1
        more = np.flatnonzero(value >= 0x80)
        if not len(more):
            return value, end
        value[more] &= 0x7F
        # Bytes 2-8 add 7 bits each while the previous byte's top bit is set; byte 9 adds 8.
        for j in range(1, 9):
            nxt = b[at[more] + j].astype(np.int64)
            if j == 8:
                value[more] = (value[more] << 8) | nxt
                end[more] += 1
                break
            value[more] = (value[more] << 7) | (nxt & 0x7F)
            end[more] += 1
            more = more[nxt >= 0x80]
            if not len(more):
                break
        return value, end

    # -- B-tree ------------------------------------------------------------------------------

    def _pointers(self, pages: I64, header: int) -> tuple[I64, I64]:
        """Absolute offsets of every cell of ``pages`` (in page order, then cell order) and the
        index of the page each belongs to; ``header`` is the page header size."""
        base = (pages - 1) * self.page_size
        head = base + np.where(pages == 1, 100, 0)  # page 1 starts with the file header
        count = self._be16(head + 3)
        page_of = np.repeat(np.arange(len(pages), dtype=np.int64), count)
        slot = np.arange(len(page_of), dtype=np.int64) - (np.cumsum(count) - count)[page_of]
        ptr = self._be16(head[page_of] + header + 2 * slot)
        if ((ptr < header) | (ptr > self.page_size - 4)).any():
            raise IndexError("cell pointer outside its page")
        return base[page_of] + ptr, page_of

    def _leaf_cells(self, root: int) -> I64 | None:
        """Offsets of all leaf cells of the table B-tree at ``root``, in rowid order."""
        last = len(self.buf) // self.page_size
        level = np.array([root], dtype=np.int64)
        visited = 0
        for _ in range(64):  # a B-tree is never this deep; a cycle means a corrupt file
            # Each page sits once in a tree: more pages than the file has is a cycle, which
            # would otherwise multiply the level by its fan-out until memory runs out.
            visited += len(level)
            if visited > last or ((level < 1) | (level > last)).any():
                return None
            head = (level - 1) * self.page_size + np.where(level == 1, 100, 0)
            kind = self.buf[head]
            if (kind == _LEAF).all():
                return self._pointers(level, 8)[0]
            if not (kind == _INTERIOR).all():  # all leaves of a table B-tree sit at one depth
                return None
            cells, page_of = self._pointers(level, 12)
            # Children in key order: each page's cells' left children, then its right child.
            key = np.concatenate([page_of * 2, np.arange(len(level), dtype=np.int64) * 2 + 1])
            children = np.concatenate([self._be32(cells), self._be32(head + 8)])
            level = children[np.argsort(key, kind="stable")]
        return None

    # -- record headers ----------------------------------------------------------------------

    def _serial_types(
        self, first: I64, header_end: I64, want: int, simple: Bools
    ) -> npt.NDArray[np.int32] | None:
        """Serial types of the first ``want`` columns of each record, one row per column
        (``first``: offset of the first type, ``header_end``: end of the header, ``simple``:
        records whose types are all one-byte varints); ``None`` when a record has fewer."""
        n = len(first)
        if not want:
            return np.zeros((0, n), dtype=np.int32)
        # One-byte varints: the k-th type is the k-th byte.
        out = self._window(first, want).T.astype(np.int32)
        rows = np.flatnonzero(~simple)
        if not len(rows):
            return out
        # The others: decode their headers as varint streams, all at once.
        span = header_end[rows] - first[rows]
        if int(span.max()) > _PAD:  # a very wide header: decode it column by column
            at = first[rows]
            for k in range(want):
                if (at >= header_end[rows]).any():
                    return None
                value, at = self._varints(at)
                out[k, rows] = value
            return out
        # A few rows at a time: each byte of a header costs ~60 bytes of masks and values.
        for lo in range(0, len(rows), _HEADER_ROWS):
            part, part_span = rows[lo : lo + _HEADER_ROWS], span[lo : lo + _HEADER_ROWS]
            if not self._multibyte_types(out, part, first[part], part_span, want):
                return None
        return out

    def _multibyte_types(
        self, out: npt.NDArray[np.int32], rows: I64, first: I64, span: I64, want: int
    ) -> bool:
        """Decode the headers of ``rows`` (starting at ``first``, ``span`` bytes each) as
        varint streams into ``out``; ``False`` when a record has fewer than ``want`` types or
        one this reader does not know."""
        width = int(span.max())
        m = self._window(first, width).astype(np.int64)
        inside = np.arange(width) < span[:, None]
        cont = m >= 0x80
        last = ~cont & inside  # the final byte of each varint
        # A varint's value: its final byte's 7 bits, then those of the continuation bytes
        # before it.
        value = m & 0x7F
        run = np.ones_like(cont)  # run[:, p]: the d bytes before p continue p's varint
        for back in range(1, min(width, 9)):
            run[:, back:] &= cont[:, : width - back]
            run[:, :back] = False
            if not run.any():  # no varint is longer than ``back`` bytes
                break
            part = (m[:, : width - back] & 0x7F) << (7 * back)
            value[:, back:] |= np.where(run[:, back:], part, 0)
        r, c = np.nonzero(last)
        per_row = np.bincount(r, minlength=len(rows))
        if (per_row < want).any():
            return False
        # The varint's column in its record: its place after the record's first (r is sorted).
        col = spans(np.zeros(len(per_row), dtype=np.int64), per_row)
        keep = col < want
        if int(value[r[keep], c[keep]].max(initial=0)) >= len(_SIZE):
            return False
        out[col[keep], rows[r[keep]]] = value[r[keep], c[keep]]
        return True
