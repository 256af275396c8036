"""Overlap lanes: put slices that partly overlap on one timeline lane onto extra lanes.

Perfetto's JSON importer needs the ``X`` slices of one (pid, tid) to nest properly: a slice that
starts inside another and ends after it is spilled to an overflow track (dropped before v57).
Real PyTorch traces have such slices (a child op that ends a few ns after its parent, PDL
kernels on one stream), so the exporters move them to extra lanes ("stream 7 (lane 2)").

The check is vectorised: slices become open/close brackets sorted the way Perfetto orders them
(closes before opens at equal time, longer slices open first, equal slices in input order), and a
lane nests properly exactly when every slice's close is at the bracket depth of its open. Only
lanes that fail the check run the greedy first-fit assignment, in Python.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.trace_rules import first_fit_lanes, nesting_order

Ints = npt.NDArray[np.integer[Any]]
I64 = npt.NDArray[np.int64]


def _combined_key(group: I64, times: I64, lo: int, hi: int) -> I64 | None:
    """``group`` and ``times`` in one sortable int64, or ``None`` when they do not fit."""
    span_bits = max(1, int(hi - lo).bit_length())
    group_bits = max(1, int(group.max()).bit_length()) if len(group) else 1
    if group.min() < 0 or span_bits + group_bits > 62:
        return None
    key: I64 = (group << span_bits) + (times - lo)
    return key


def badly_nested(start_ns: Ints, dur_ns: Ints, group: Ints) -> npt.NDArray[np.bool_]:
    """Mask of the rows whose slice does not nest inside the slices open when it starts.

    Rows with ``dur_ns == 0`` never overlap partly and are never flagged. A row is flagged when
    the bracket depth at its close differs from the depth at its open, which happens exactly
    when some slice partly overlaps it (see the module docstring).
    """
    n = len(start_ns)
    bad = np.zeros(n, dtype=bool)
    cand = np.flatnonzero(np.asarray(dur_ns) > 0)
    m = len(cand)
    if m < 2:
        return bad
    s = np.asarray(start_ns)[cand].astype(np.int64)
    d = np.asarray(dur_ns)[cand].astype(np.int64)
    g = np.asarray(group)[cand].astype(np.int64)
    e = s + d
    opens = nesting_order(s, d, g)
    rank = np.empty(m, dtype=np.int64)
    rank[opens] = np.arange(m)
    ko = _combined_key(g, s, int(s.min()), int(e.max()))
    kc = _combined_key(g, e, int(s.min()), int(e.max()))
    if ko is None or kc is None:
        return _badly_nested_lexsort(s, d, g, rank, cand, bad)
    # Closes sorted by (group, end, inner first). Merging them with the sorted opens (closes
    # first at equal keys) gives each bracket's depth by counting, without materialising it.
    closes = np.lexsort((-rank, kc))
    ko_sorted = ko[opens]
    kc_sorted = kc[closes]
    depth_open = np.arange(1, m + 1) - np.searchsorted(kc_sorted, ko_sorted, "right")
    depth_close = np.searchsorted(ko_sorted, kc_sorted, "left") - np.arange(m)
    at_open = np.empty(m, dtype=np.int64)
    at_open[opens] = depth_open
    at_close = np.empty(m, dtype=np.int64)
    at_close[closes] = depth_close
    bad[cand] = at_open != at_close
    return bad


def _badly_nested_lexsort(
    s: I64, d: I64, g: I64, rank: I64, cand: npt.NDArray[np.intp], bad: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """:func:`badly_nested` for keys too wide to combine: sort all brackets together."""
    m = len(s)
    # Brackets: opens (kind 1, outer first), closes (kind 0, inner first) sorted per group by time.
    times = np.concatenate((s, s + d))
    kinds = np.concatenate((np.ones(m, np.int8), np.zeros(m, np.int8)))
    sub = np.concatenate((rank, -rank))
    order = np.lexsort((sub, kinds, times, np.concatenate((g, g))))
    depth = np.cumsum(np.where(order < m, 1, -1))
    position = np.empty(2 * m, dtype=np.int64)
    position[order] = np.arange(2 * m)
    bad[cand] = depth[position[:m]] != depth[position[m:]] + 1
    return bad


def assign_lanes(start_ns: Ints, dur_ns: Ints, group: Ints) -> npt.NDArray[np.int32]:
    """Lane number (0 = the original lane) per row, so that slices nest on every lane.

    ``group`` is the original lane of each row. Rows of groups that already nest stay on lane
    0 without entering Python. In the other groups, slices are taken in Perfetto's order and
    each goes to the first lane where it nests (after closing the slices that ended), else to a
    new lane (:func:`~echo_view.model.trace_rules.first_fit_lanes`): O(n log n).
    """
    n = len(start_ns)
    lane = np.zeros(n, dtype=np.int32)
    bad = badly_nested(start_ns, dur_ns, group)
    if not bad.any():
        return lane
    group = np.asarray(group)
    dur = np.asarray(dur_ns)
    rows = np.flatnonzero(np.isin(group, np.unique(group[bad])) & (dur > 0))
    rows = rows[nesting_order(np.asarray(start_ns)[rows], dur[rows], group[rows])]
    starts = np.asarray(start_ns)[rows].astype(np.int64).tolist()
    ends = (np.asarray(start_ns)[rows].astype(np.int64) + dur[rows]).tolist()
    cuts = [0, *(np.flatnonzero(np.diff(group[rows])) + 1).tolist(), len(rows)]
    out = [k for a, b in itertools.pairwise(cuts) for k in first_fit_lanes(starts[a:b], ends[a:b])]
    lane[rows] = out
    return lane
