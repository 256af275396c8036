"""Flow points -> arrows between event rows, by the trace-event format's rules (formats.md §1,
:mod:`echo_view.model.trace_rules`).

Flows (v1 ``s``/``t``/``f``, keyed by id, cat and name): the source binds to the deepest slice
open on its thread at its ts, an end with ``"bp": "e"`` likewise, an end without it to the next
slice that begins on its thread. The first ``s`` of a key is its source (Perfetto keeps the
first); every ``t`` and ``f`` of the key becomes an arrow from the latest ``t`` before it (in
file order), else from that source: a step binds to its slice and becomes the new source, and
an ``f`` does not close the flow. Points that bind to nothing are counted, not guessed.

Binding runs after the file's columns exist and before any of the event table is handed over,
so its temporaries set the importer's peak memory: they are kept to one thread's rows at a time
(int32 row numbers, no column of slice ends) and blocks of points (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, FlowTable
from echo_view.model.trace_rules import bind_points, thread_order
from importers.kineto.rows import I32, I64, PH_C, PH_S, PH_T, FileColumns, unique


def resolve_flows(fc: FileColumns, thread: I32, dur: I64, notes: dict[str, int]) -> FlowTable:
    """Bind flow points to rows and pair each source with its ends."""
    pts = fc.flows
    if not len(pts):
        return FlowTable.empty()
    bound = _bind(fc, thread, dur, pts.thread, pts.ts, pts.bind_enclosing)
    # Group points by key (name, cat, id); within a key the sources come first, in file order.
    is_src = pts.phase == PH_S
    order = np.lexsort((pts.index, ~is_src, pts.id, pts.cat, pts.name))
    # A key changes where any of its fields does; one field at a time (no stacked copy of the
    # three: these temporaries count towards the importer's peak memory).
    new_group = np.ones(len(order), dtype=np.bool_)
    changed = new_group[1:]
    changed[:] = False
    for col in (pts.name, pts.cat, pts.id):
        sorted_col = col[order]
        changed |= sorted_col[1:] != sorted_col[:-1]
        del sorted_col
    group = np.cumsum(new_group, dtype=np.int32)
    group -= 1
    # An end or a step comes from the key's latest step before it, else from its first source
    # (a step "t" binds to its slice and becomes the new source: s -> t -> f is two arrows).
    # Sources come first in a key, so its first source, if any, opens it.
    is_end = ~is_src[order]
    carries = new_group & ~is_end
    carries |= pts.phase[order] == PH_T
    at = np.where(carries, np.arange(len(order)), -1)
    np.maximum.accumulate(at, out=at)
    before = np.empty(len(order), dtype=np.int64)
    before[0] = -1
    before[1:] = at[:-1]
    del at, carries
    key_start = np.flatnonzero(new_group)[group]
    before = np.where(before >= key_start, bound[order[np.maximum(before, 0)]], -2)
    del new_group, key_start
    ends = order[is_end]
    src = before[is_end]
    duplicated = int(is_src.sum()) - int(unique(group[~is_end]).size)
    del before, group, order, is_end
    dst = bound[ends]
    del bound
    ok = (src >= 0) & (dst >= 0) & (pts.id[ends] != NONE)
    notes_of = {
        # Kineto writes an "f" on launches whose GPU side was not recorded: no source exists.
        "flow_ends_without_source": int((src == -2).sum()),
        "flow_points_unbound": int(((src == -1) | ((src >= 0) & (dst < 0))).sum()),
        "flow_sources_duplicated": duplicated,
    }
    notes.update({k: v for k, v in notes_of.items() if v})
    ends = ends[ok]
    return FlowTable(src=src[ok], dst=dst[ok], flow_id=pts.id[ends], cat=pts.cat[ends])


def _bind(
    fc: FileColumns,
    thread: I32,
    dur: I64,
    q_thread: I32,
    q_ts: I64,
    enclosing: npt.NDArray[np.bool_],
) -> I32 | I64:
    """Row each point binds to (-1 when none): the deepest slice open at its time on its
    thread, or (``enclosing`` False) the next slice that begins there."""
    n = len(q_ts)
    # Row numbers as int32 while they fit (FlowTable keeps int32 anyway).
    out: I32 | I64 = (
        np.full(n, -1, dtype=np.int32) if len(thread) < 2**31 else np.full(n, -1, dtype=np.int64)
    )
    q_order = np.argsort(q_thread, kind="stable")
    q_sorted = q_thread[q_order]
    q_threads = unique(q_sorted)
    q_bounds = np.append(np.searchsorted(q_sorted, q_threads), len(q_sorted)).tolist()
    del q_sorted
    slices = fc.phase != PH_C
    # One thread's rows at a time, int32 row numbers, no column of slice ends, points in
    # blocks: these temporaries set the importer's peak memory (docs/performance.md).
    for i, seg in enumerate(_rows_by_thread(thread, slices, q_threads)):
        if not len(seg):
            continue
        seg, starts = thread_order(seg, fc.start_ns, dur)
        points = q_order[q_bounds[i] : q_bounds[i + 1]]
        for lo in range(0, len(points), _POINT_BLOCK):
            q = points[lo : lo + _POINT_BLOCK]
            out[q] = bind_points(seg, starts, dur, q_ts[q], enclosing[q])
    return out


def _rows_by_thread(
    thread: I32, slices: npt.NDArray[np.bool_], threads: I32
) -> Iterator[npt.NDArray[np.int32]]:
    """The slice rows of each of ``threads``, in file order. Flow points sit on a handful of
    threads in real traces: a scan of the thread column per thread holds the least memory.
    Past :data:`_SCAN_THREADS` of them (a damaged or generated trace with a thread per
    event, where the scans took seconds to minutes) one stable sort groups them all."""
    if len(threads) <= _SCAN_THREADS:
        for t in threads.tolist():
            on_thread = thread == t
            on_thread &= slices
            yield np.flatnonzero(on_thread).astype(np.int32)
        return
    rows = np.flatnonzero(slices).astype(np.int32)
    th = thread[rows]
    order = np.argsort(th, kind="stable")
    rows, th = rows[order], th[order]
    del order
    lo = np.searchsorted(th, threads, side="left").tolist()
    hi = np.searchsorted(th, threads, side="right").tolist()
    for a, b in zip(lo, hi, strict=True):
        yield rows[a:b]


#: Threads with flow points past which :func:`_rows_by_thread` sorts instead of scanning.
_SCAN_THREADS = 64

#: Flow points bound at a time (bounds the per-point temporaries of :func:`_bind`).
_POINT_BLOCK = 8192
