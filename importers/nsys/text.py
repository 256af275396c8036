"""Column-wise work on the NVTX text of an export: interning names and splitting
``torch.autograd.profiler.emit_nvtx`` range names, with numpy over the raw UTF-8 bytes.

``emit_nvtx`` names each range ``op, seq = N, op_id = M`` (``seq`` is absent for ops without
autograd; ``, sizes = [...]`` follows with ``record_shapes``). Nearly every such text is
distinct (``op_id`` counts up), so the split must not cost a Python call per row: the byte
patterns are found for all rows at once, and only names -- a few hundred distinct ones -- become
Python strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import byte_slices, spans
from importers.nsys.args import gather
from importers.nsys.pages import Text
from importers.nsys.tables import Names

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

_OP_ID = b", op_id = "
_SEQ = b", seq = "
_MAX_DIGITS = 18  # fits int64; longer numbers go to the regular-expression path


#: Text bytes decoded at once: the index of a group's bytes costs 8 bytes per byte.
DECODE_BYTES = 1 << 22
#: Text bytes searched at once by the general path of :func:`split_torch_ops` (its masks and
#: running counts cost several bytes per byte).
SEARCH_BYTES = 1 << 24


def decoded(data: U8, start: I64, length: I64) -> Iterator[tuple[int, list[str]]]:
    """The byte ranges as strings, :data:`DECODE_BYTES` at a time: ``(first row, strings)``
    per group, so that a caller can use and drop each group's strings."""
    for i, j in byte_slices(length + 1, DECODE_BYTES):
        yield i, _decode_group(data, start[i:j], length[i:j])


def decode_all(data: U8, start: I64, length: I64) -> list[str]:
    """The byte ranges as strings (:func:`decoded`'s groups, joined)."""
    out: list[str] = []
    for _, texts in decoded(data, start, length):
        out += texts
    return out


def _decode_group(data: U8, start: I64, length: I64) -> list[str]:
    """One C-level decode and split of the ranges, not one call per row."""
    n = len(start)
    if not n:
        return []
    if n == 1:  # one row, perhaps longer than a group: a slice, no index
        a, b = int(start[0]), int(length[0])
        return [data[a : a + b].tobytes().decode("utf-8", "replace")]
    # Each range and the byte after it (made a NUL), then one decode and one split.
    ends = np.cumsum(length + 1)
    idx = spans(start, length + 1)
    if not len(data):
        buf = np.zeros(len(idx), dtype=np.uint8)
    elif int((start + length).max()) >= len(data):  # the byte after the last text: none
        buf = data[np.minimum(idx, len(data) - 1)]
    else:
        buf = data[idx]
    del idx
    buf[ends - 1] = 0
    parts = buf.tobytes().decode("utf-8", "replace").split("\x00")
    if len(parts) == n + 1:
        return parts[:n]
    # A text with a NUL of its own: decode row by row.
    return [
        data[a : a + b].tobytes().decode("utf-8", "replace")
        for a, b in zip(start.tolist(), length.tolist(), strict=True)
    ]


# Texts up to this many bytes are grouped by their bytes without being decoded.
_KEY_BYTES = 48
_MIX = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x27D4EB2F165667C5],
    dtype=np.uint64,
)  # fmt: skip


def intern_ranges(names: Names, data: U8, start: I64, length: I64) -> I64:
    """Registry ids of the texts ``data[start:start+length]``: texts are grouped by their
    bytes (short ones by a hash of their zero-padded bytes, checked byte for byte), and each
    distinct text is decoded and interned once."""
    n = len(start)
    out = np.empty(n, dtype=np.int64)
    width = _KEY_BYTES
    short = (length <= width) & (start + width <= len(data))
    rows = np.flatnonzero(short)
    if len(rows):
        view = np.lib.stride_tricks.as_strided(data, (max(len(data) - width + 1, 0), width), (1, 1))
        grid = view[start[rows]] * (np.arange(width) < length[rows, None])
        words = grid.view(np.uint64)
        key = length[rows].astype(np.uint64) * _MIX[-1]
        for j in range(words.shape[1]):
            key += words[:, j] * _MIX[j]
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        rep = first[group]
        if (words == words[rep]).all() and (length[rows] == length[rows[rep]]).all():
            texts = decode_all(data, start[rows[first]], length[rows[first]])
            out[rows] = np.array([names.intern(t) for t in texts], dtype=np.int64)[group]
        else:  # two texts with one hash: decode them all
            short[:] = False
    rest = np.flatnonzero(~short)
    ids: dict[str, int] = {}
    for i, texts in decoded(data, start[rest], length[rest]):
        for t in dict.fromkeys(texts):
            if t not in ids:
                ids[t] = names.intern(t)
        at = rest[i : i + len(texts)]
        out[at] = np.fromiter(map(ids.__getitem__, texts), dtype=np.int64, count=len(texts))
    return out


@dataclass(frozen=True)
class TorchOps:
    """``emit_nvtx`` ranges among the rows given to :func:`split_torch_ops` (positions in
    that selection): the op name is the first ``name_length`` bytes of the text; ``seq`` is -1
    where the text has none. ``odd`` rows name an ``op_id`` but need the full pattern match."""

    rows: I64
    name_length: I64
    seq: I64
    op_id: I64
    odd: I64


def _find(d: U8, pattern: bytes) -> I64:
    """Start of every occurrence of ``pattern`` in ``d`` (the pattern does not overlap itself)."""
    if len(d) < len(pattern):
        return np.zeros(0, dtype=np.int64)
    at = np.flatnonzero(d[: len(d) - len(pattern) + 1] == pattern[0])
    for j in range(1, len(pattern)):
        at = at[d[at + j] == pattern[j]]
    return at.astype(np.int64)


def _last_per_row(at: I64, offsets: I64, size: int, stop: I64 | None = None) -> tuple[I64, I64]:
    """For matches ``at`` (of ``size`` bytes) in a buffer whose rows start at ``offsets``: the
    row of the last match of each row that has one, and that match. A match counts when it ends
    by ``stop[row]``, or by the row's end."""
    row = np.searchsorted(offsets, at, side="right") - 1
    limit = offsets[row + 1] if stop is None else stop[row]
    keep = at + size <= limit
    at, row = at[keep], row[keep]
    last = np.ones(len(row), dtype=bool)
    last[:-1] = row[1:] != row[:-1]
    return row[last], at[last]


def _digits(d: U8, lo: I64, hi: I64) -> tuple[Bools, Bools, I64]:
    """Whether ``d[lo:hi]`` is one or more ASCII digits, whether there are too many of them
    for an int64, and the value of those that fit. Only the ranges' bytes are read (a count
    over the whole buffer cost 8 bytes of memory per byte of text)."""
    n = len(lo)
    width = hi - lo
    ok = width >= 1
    value = np.zeros(n, dtype=np.int64)
    fits = ok & (width <= _MAX_DIGITS)
    for j in range(int(width[fits].max(initial=0))):
        live = fits & (width > j)
        byte = d[np.where(live, lo + j, 0)].astype(np.int64)
        ok &= ~live | ((byte >= 48) & (byte <= 57))
        value = np.where(live, value * 10 + byte - 48, value)
    wide = np.flatnonzero(ok & ~fits)
    if len(wide):  # more digits than an int64 holds (rare): are they all digits?
        packed = gather(d, lo[wide], width[wide])
        other = (packed.data < 48) | (packed.data > 57)
        ok[wide[np.logical_or.reduceat(other, packed.start)]] = False
    return ok, ok & ~fits, value


def _tail(data: U8, start: I64, stop: I64, pattern: bytes) -> tuple[Bools, Bools, I64, I64]:
    """For each text ``data[start:stop]``: whether it ends with ``pattern`` and 1-18 ASCII
    digits; whether it ends with more digits than that (or lies too close to the buffer start to
    tell: both need the slow path); where the pattern starts; the digits' value."""
    n = len(start)
    width = len(pattern) + _MAX_DIGITS + 2
    first = stop - width
    near = first < 0
    rows = np.arange(n)
    win = np.lib.stride_tricks.as_strided(data, (max(len(data) - width + 1, 0), width), (1, 1))
    grid = win[np.where(near, 0, first)] if len(win) else np.zeros((n, width), np.uint8)
    # Trailing digits, counted from the end while any row still has one.
    count = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    for k in range(1, width + 1):
        byte = grid[:, width - k]
        alive &= (byte >= 48) & (byte <= 57)
        if not alive.any():
            break
        count += alive
    count = np.minimum(count, stop - start)  # digits before the text are not its own
    at = stop - count - len(pattern)
    ok = (count >= 1) & (count <= _MAX_DIGITS) & (at >= start) & ~near
    # Compare the pattern 8 bytes at a time (little-endian words at any byte offset).
    flat = np.concatenate([grid.reshape(-1), np.zeros(8, dtype=np.uint8)])
    words = np.ndarray((len(flat) - 7,), "<u8", buffer=flat, strides=(1,))
    at_pattern = rows * width + np.where(ok, width - count - len(pattern), 0)
    for j in range(0, len(pattern), 8):
        piece = pattern[j : j + 8]
        mask = np.uint64((1 << (8 * len(piece))) - 1)
        want = np.uint64(int.from_bytes(piece, "little"))
        ok &= (words[at_pattern + j] & mask) == want
    value = np.zeros(n, dtype=np.int64)
    for k in range(int(count[ok].max(initial=0))):
        value += np.where(count > k, (grid[:, width - 1 - k].astype(np.int64) - 48) * 10**k, 0)
    return ok, near | (count > _MAX_DIGITS), at, value


def split_torch_ops(text: Text, rows: I64) -> TorchOps:
    """Find the ``emit_nvtx`` names among ``rows`` of ``text`` (which must not be NULL)."""
    start = text.start[rows]
    stop = start + text.length[rows]
    # Nearly always a text ends with ", op_id = <digits>" (rpartition's last occurrence), and
    # the part before it with ", seq = <digits>": the name ends there, else at op_id.
    ok, _, at, op_id = _tail(text.data, start, stop, _OP_ID)
    ops = np.flatnonzero(ok)
    good, unsure, sat, seq = _tail(text.data, start[ops], at[ops], _SEQ)
    sure = ~(unsure & ~good)
    ops, good, sat, seq = ops[sure], good[sure], sat[sure], seq[sure]
    # The others by searching: texts without the pattern, odd layouts (record_shapes' sizes).
    rest = np.setdiff1d(np.arange(len(rows)), ops, assume_unique=True)
    slow = _search_all(text, rows[rest])
    found = np.concatenate([ops, rest[slow.rows]])
    order = np.argsort(found, kind="stable")
    return TorchOps(
        found[order],
        np.concatenate([np.where(good, sat, at[ops]) - start[ops], slow.name_length])[order],
        np.concatenate([np.where(good, seq, -1), slow.seq])[order],
        np.concatenate([op_id[ops], slow.op_id])[order],
        rest[slow.odd],
    )


def _search_all(text: Text, rows: I64) -> TorchOps:
    """:func:`_search` over ``rows``, :data:`SEARCH_BYTES` of text at a time."""
    parts = []
    for i, j in byte_slices(text.length[rows], SEARCH_BYTES):
        got = _search(text, rows[i:j])
        parts.append(replace(got, rows=got.rows + i, odd=got.odd + i))  # positions in ``rows``
    return _joined(TorchOps, parts)


def _search(text: Text, rows: I64) -> TorchOps:
    """The same by searching each text for the patterns (the general, slower way)."""
    packed = gather(text.data, text.start[rows], text.length[rows])
    d, off = packed.data, np.concatenate([packed.start, [len(packed.data)]])
    # The last ", op_id = " of each row, then digits up to the row's end.
    ops, at = _last_per_row(_find(d, _OP_ID), off, len(_OP_ID))
    ok, long_, op_id = _digits(d, at + len(_OP_ID), off[ops + 1])
    ok &= ~long_
    odd = ops[~ok]
    ops, at, op_id = ops[ok], at[ok], op_id[ok]
    # The last ", seq = " before it; the name ends there when digits follow, else at op_id.
    end = np.full(len(rows), -1, dtype=np.int64)
    end[ops] = at
    srow, sat = _last_per_row(_find(d, _SEQ), off, len(_SEQ), end)
    good, long_, seq_v = _digits(d, sat + len(_SEQ), end[srow])
    if long_.any():  # a sequence number beyond int64: the full pattern keeps its digits
        odd = np.sort(np.concatenate([odd, srow[long_]]))
        keep = ~np.isin(ops, srow[long_])
        ops, at, op_id = ops[keep], at[keep], op_id[keep]
        end[srow[long_]] = -1
        good &= ~long_
    seq = np.full(len(rows), -1, dtype=np.int64)
    seq[srow[good]] = seq_v[good]
    name_end = end.copy()
    name_end[srow[good]] = sat[good]
    return TorchOps(ops, name_end[ops] - off[ops], seq[ops], op_id, odd)


_SIZES = b", sizes = "


@dataclass(frozen=True)
class SizedOps:
    """``emit_nvtx(record_shapes=True)`` ranges ``op, [seq = N, ]op_id = M[, sizes = S]``
    among the rows given to :func:`split_sized_ops` (positions in that selection): the name
    is the first ``name_length`` bytes of the text, ``seq`` -1 where absent, the sizes text
    ``data[sizes_start : sizes_start + sizes_length]`` (length -1: no sizes)."""

    rows: I64
    name_length: I64
    seq: I64
    op_id: I64
    sizes_start: I64
    sizes_length: I64


_Parts = TypeVar("_Parts")  # a dataclass of columns: TorchOps, SizedOps


def _joined(cls: type[_Parts], parts: list[_Parts]) -> _Parts:
    """One result of ``cls`` holding each part's rows in turn (every field is a column)."""
    empty = np.zeros(0, dtype=np.int64)
    names = [f.name for f in fields(cast(Any, cls))]
    return cls(*(np.concatenate([empty, *[getattr(p, n) for p in parts]]) for n in names))


def _match_at(d: U8, at: I64, limit: I64, pattern: bytes) -> Bools:
    """Whether ``pattern`` starts at each ``at`` and ends by ``limit``."""
    ok = at + len(pattern) <= limit
    for j, byte in enumerate(pattern):
        ok &= d[np.where(ok, at + j, 0)] == byte
    return ok


def _digit_run(d: U8, at: I64, limit: I64) -> I64:
    """Digits from each ``at`` (before ``limit``), counted up to ``_MAX_DIGITS + 1``."""
    count = np.zeros(len(at), dtype=np.int64)
    alive = at < limit
    for j in range(_MAX_DIGITS + 1):
        alive &= at + j < limit
        byte = d[np.where(alive, at + j, 0)]
        alive &= (byte >= 48) & (byte <= 57)
        if not alive.any():
            break
        count += alive
    return count


def split_sized_ops(text: Text, rows: I64) -> SizedOps:
    """The texts among ``rows`` that read ``op, [seq = N, ]op_id = M[, sizes = S]`` with an op
    free of commas, numbers of at most 18 digits and sizes without a newline, quote or
    backslash (which :func:`~importers.nsys.tables.torch_op` would escape): on the bytes,
    :data:`SEARCH_BYTES` of text at a time. The others are left to that function's pattern."""
    parts: list[SizedOps] = []
    for i, j in byte_slices(text.length[rows], SEARCH_BYTES):
        packed = gather(text.data, text.start[rows[i:j]], text.length[rows[i:j]])
        got = _split_sized(packed.data, packed.start, packed.start + packed.length)
        # Back to positions in the selection and offsets in the column's text.
        from_text = text.start[rows[i:j]] - packed.start
        parts.append(
            replace(got, rows=got.rows + i, sizes_start=got.sizes_start + from_text[got.rows])
        )
    return _joined(SizedOps, parts)


def _split_sized(d: U8, start: I64, stop: I64) -> SizedOps:
    """:func:`split_sized_ops` on texts ``d[start:stop]`` (disjoint, in order)."""
    if not len(d):  # empty texts only: none is an op
        empty = np.zeros(0, dtype=np.int64)
        return SizedOps(empty, empty, empty, empty, empty, empty)
    # The op ends at the text's first comma.
    commas = _find_in(d, start, stop, ord(","))
    ok = commas > start
    at = np.where(ok, commas, start)
    ok &= _match_at(d, at, stop, b", ")
    seq_at = at + 2 + len(b"seq = ")
    has_seq = ok & _match_at(d, at + 2, stop, b"seq = ")
    n_seq = np.where(has_seq, _digit_run(d, seq_at, stop), 0)
    has_seq &= (n_seq >= 1) & (n_seq <= _MAX_DIGITS)
    op_at = np.where(has_seq, seq_at + n_seq + 2, at + 2)
    ok &= ~has_seq | _match_at(d, seq_at + n_seq, stop, b", ")
    ok &= _match_at(d, op_at, stop, b"op_id = ")
    num_at = op_at + len(b"op_id = ")
    n_op = np.where(ok, _digit_run(d, num_at, stop), 0)
    ok &= (n_op >= 1) & (n_op <= _MAX_DIGITS)
    end = num_at + n_op
    sized = ok & _match_at(d, end, stop, _SIZES)
    ok &= sized | (end == stop)
    sizes_at = end + len(_SIZES)
    # Sizes with a byte the JSON string would need escaped, or a newline: the pattern's way.
    for byte in b'\n"\\':
        hits = _find_in(d, np.where(sized & ok, sizes_at, stop), stop, byte)
        ok &= hits >= stop
    keep = np.flatnonzero(ok)
    return SizedOps(
        keep,
        (commas - start)[keep],
        np.where(has_seq, _digits(d, seq_at, seq_at + n_seq)[2], -1)[keep],
        _digits(d, num_at, num_at + n_op)[2][keep],
        sizes_at[keep],
        np.where(sized, stop - sizes_at, -1)[keep],
    )


def _find_in(d: U8, start: I64, stop: I64, byte: int) -> I64:
    """The first position of ``byte`` in each ``d[start:stop]`` (``stop`` where there is none);
    the ranges are disjoint and in order."""
    out = stop.copy()
    if not len(start):
        return out
    hits = _find(d, bytes([byte]))
    # The first hit at or after each start, if it lies before that range's stop.
    i = np.searchsorted(hits, start)
    found = i < len(hits)
    pos = hits[np.minimum(i, len(hits) - 1)] if len(hits) else start
    found &= pos < stop
    out[found] = pos[found]
    return out
