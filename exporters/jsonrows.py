"""Chrome/Perfetto JSON text for the events of one rank, a chunk of rows at a time.

Each row is ``%``-formatted into a template whose head (phase, category, name, pid, tid) is
built once per distinct (category, name, thread) and whose times are exact microseconds with
three decimals, from integer ns (``%d.%03d`` of ``divmod(ns, 1000)``; no float on the way).
``args`` are the event's raw JSON bytes, written through without decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model import CollectiveKind, Trace
from echo_view.model.collectives import collective
from echo_view.model.columns import byte_slices
from echo_view.model.dtypes import dtype_bytes
from exporters.layout import OutThread, RankLayout

#: Rows formatted per chunk: bounds the memory of one chunk's text (~200 bytes a row).
CHUNK_ROWS = 65_536
#: Bytes of one chunk's text (less the fixed fields): a chunk of rows whose names or args are
#: long is cut to this (an Nsight export can name 1,700 kernels by one 1 MB string, held once).
CHUNK_BYTES = 32 << 20

_X_TAIL = b'%b%d.%03d,"dur":%d.%03d,"args":%b},\n'
_TAIL = b'%b%d.%03d,"args":%b},\n'
_OPEN = ord("{")

Head = Callable[[bytes, bytes, OutThread], bytes]


def json_string(text: str) -> bytes:
    """``text`` as a JSON string literal."""
    return msgspec.json.encode(text)


def x_head(cat: bytes, name: bytes, th: OutThread) -> bytes:
    return b'{"ph":"X","cat":%b,"name":%b,"pid":%d,"tid":%d,"ts":' % (cat, name, th.pid, th.tid)


def instant_head(cat: bytes, name: bytes, th: OutThread) -> bytes:
    return b'{"ph":"i","s":"t","cat":%b,"name":%b,"pid":%d,"tid":%d,"ts":' % (
        cat,
        name,
        th.pid,
        th.tid,
    )


def counter_head(cat: bytes, name: bytes, th: OutThread) -> bytes:
    # Counters belong to their process (Perfetto ignores a counter's tid); the tid is written
    # so that reading the export back puts the samples on their thread again (without it they
    # went to a new thread of the pid's number, named as the first).
    return b'{"ph":"C","cat":%b,"name":%b,"pid":%d,"tid":%d,"ts":' % (cat, name, th.pid, th.tid)


class _HeadCache:
    """Head bytes per (category, name, thread) of one trace."""

    def __init__(self, trace: Trace, threads: Sequence[OutThread], head: Head) -> None:
        self._trace = trace
        self._threads = threads
        self._head = head
        self._strings: dict[int, bytes] = {}
        self._heads: dict[tuple[int, int, int], bytes] = {}

    def _string(self, sid: int) -> bytes:
        enc = self._strings.get(sid)
        if enc is None:
            enc = self._strings[sid] = json_string(self._trace.strings[sid])
        return enc

    def heads(
        self, cat: npt.NDArray[Any], name: npt.NDArray[Any], thread: npt.NDArray[Any]
    ) -> tuple[list[bytes], npt.NDArray[np.intp]]:
        """Distinct heads of these rows and each row's index into them."""
        # Two int64 keys instead of a row-wise unique (which sorts void records, ~10x slower):
        # (cat, name) < 2**62 since string ids are int32; then (that pair's rank, thread).
        pair = cat.astype(np.int64) * len(self._trace.strings) + name.astype(np.int64)
        pairs, pair_inv = np.unique(pair, return_inverse=True)
        key = pair_inv.astype(np.int64) * len(self._threads) + thread.astype(np.int64)
        keys, inv = np.unique(key, return_inverse=True)
        n_strings = len(self._trace.strings)
        pair_of = pairs[keys // len(self._threads)]
        uniq = np.stack((pair_of // n_strings, pair_of % n_strings, keys % len(self._threads)))
        out: list[bytes] = []
        for c, n, t in uniq.T.tolist():
            h = self._heads.get((c, n, t))
            if h is None:
                h = self._head(self._string(c), self._string(n), self._threads[t])
                self._heads[(c, n, t)] = h
            out.append(h)
        return out, inv.reshape(-1)


def collective_args(trace: Trace) -> dict[int, bytes]:
    """Args for the collectives whose event has none (a predicted job's, an Nsight capture's),
    in PyTorch's spelling (``Collective name``, ``Process Group Name``/``Ranks``/
    ``Description``, ``Seq``, and ``In``/``Out msg nelems`` with ``dtype`` when the dtype is
    known), by event row: so that reading the export back finds the same collectives in the
    same process groups, and ``check`` can compare the ranks."""
    ev, coll = trace.events, trace.collectives
    assert ev.args_offsets is not None
    rows = coll.event.astype(np.int64)
    bare = ev.args_offsets[rows + 1] == ev.args_offsets[rows]
    out: dict[int, bytes] = {}
    for i in np.flatnonzero(bare).tolist():
        kind = CollectiveKind(int(coll.kind[i]))
        args: dict[str, object] = {"Collective name": kind.label}
        g = int(coll.group[i])
        if 0 <= g < len(trace.groups):
            pg = trace.groups[g]
            args["Process Group Name"] = pg.name
            args["Process Group Ranks"] = list(pg.ranks)
            if pg.description:
                args["Process Group Description"] = pg.description
            if int(coll.seq[i]) >= 0:
                args["Seq"] = int(coll.seq[i])
        dt = int(coll.dtype[i])
        dtype = trace.strings[dt] if dt >= 0 else None
        size = dtype_bytes(dtype)
        nbytes = int(coll.bytes[i])
        if dtype is not None and size and nbytes >= 0 and nbytes % size == 0:
            side = "Out" if collective(kind).output_sized else "In"
            args[f"{side} msg nelems"] = nbytes // size
            args["dtype"] = dtype
        out[int(rows[i])] = msgspec.json.encode(args)
    return out


def _args_list(
    trace: Trace, rows: npt.NDArray[Any], added: dict[int, bytes] | None = None
) -> list[bytes] | None:
    """Per-row args when some need fixing (a non-object is wrapped) or are ``added`` (by event
    row, for rows without args), else ``None``."""
    ev = trace.events
    assert ev.args_offsets is not None
    lo = ev.args_offsets[rows]
    hi = ev.args_offsets[rows + 1]
    extra = (
        np.flatnonzero(np.isin(rows, np.fromiter(added, np.int64, len(added)))).tolist()
        if added
        else []
    )
    nonempty = np.flatnonzero(hi > lo)
    odd = np.zeros(0, dtype=np.intp)
    if len(nonempty) and len(ev.args_blob):
        blob = np.frombuffer(ev.args_blob, dtype=np.uint8)
        odd = nonempty[blob[lo[nonempty]] != _OPEN]
    if not len(odd) and not extra:
        return None
    raw = ev.args_blob
    out = [raw[a:b] or b"{}" for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    for i in odd.tolist():
        out[i] = b'{"value":' + out[i] + b"}"
    if added:
        for i in extra:
            out[i] = added[int(rows[i])]
    return out


def event_chunks(
    rl: RankLayout,
    rows: npt.NDArray[Any],
    threads: Sequence[OutThread],
    head: Head,
    *,
    with_dur: bool,
    chunk_rows: int = CHUNK_ROWS,
) -> Iterator[tuple[int, bytes]]:
    """``(rows done, text)`` per chunk of ``rows`` (event rows of ``rl.trace``, in order)."""
    trace = rl.trace
    ev = trace.events
    assert ev.args_offsets is not None
    cache = _HeadCache(trace, threads, head)
    blob = ev.args_blob
    added = collective_args(trace)
    for lo_row in range(0, len(rows), chunk_rows):
        part = rows[lo_row : lo_row + chunk_rows]
        heads, head_of = cache.heads(ev.cat[part], ev.name[part], rl.thread[part])
        inv = head_of.tolist()
        ts_us, ts_ns = np.divmod(rl.start_ns[part], 1000)
        lo_b, hi_b = ev.args_offsets[part], ev.args_offsets[part + 1]
        # Bytes per row, near enough to cut chunks by: the head and the args (an empty one is
        # written "{}", a wrapped one 10 bytes longer).
        head_len = np.fromiter(map(len, heads), dtype=np.int64, count=len(heads))
        sizes = head_len[head_of] + (hi_b - lo_b) + 12
        fixed = _args_list(trace, part, added)
        us, ns = ts_us.tolist(), ts_ns.tolist()
        offs, ends = lo_b.tolist(), hi_b.tolist()
        if with_dur:
            dur_us, dur_ns = (d.tolist() for d in np.divmod(ev.dur_ns[part], 1000))
        for i, j in byte_slices(sizes, CHUNK_BYTES):
            if with_dur and fixed is None:
                text = [
                    _X_TAIL % (heads[h], a, b, c, d, blob[lo:hi] or b"{}")
                    for h, a, b, c, d, lo, hi in zip(
                        inv[i:j], us[i:j], ns[i:j], dur_us[i:j], dur_ns[i:j], offs[i:j],
                        ends[i:j], strict=True,
                    )
                ]  # fmt: skip
            elif with_dur:
                assert fixed is not None
                text = [
                    _X_TAIL % (heads[h], a, b, c, d, x)
                    for h, a, b, c, d, x in zip(
                        inv[i:j], us[i:j], ns[i:j], dur_us[i:j], dur_ns[i:j], fixed[i:j],
                        strict=True,
                    )
                ]  # fmt: skip
            else:
                args = fixed[i:j] if fixed is not None else [
                    blob[lo:hi] or b"{}" for lo, hi in zip(offs[i:j], ends[i:j], strict=True)
                ]  # fmt: skip
                text = [
                    _TAIL % (heads[h], a, b, x)
                    for h, a, b, x in zip(inv[i:j], us[i:j], ns[i:j], args, strict=True)
                ]
            yield lo_row + j, b"".join(text)
