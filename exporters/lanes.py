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

import heapq
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.trace_rules import nesting_order

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
    new lane (:class:`_FirstFit`): O(n log n).
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
    groups = group[rows].tolist()
    out = np.zeros(len(rows), dtype=np.int32)
    current: object = None
    fit = _FirstFit()
    for i, (g, s, e) in enumerate(zip(groups, starts, ends, strict=True)):
        if g != current:
            current, fit = g, _FirstFit()
        out[i] = fit.place(s, e)
    lane[rows] = out
    return lane


#: Lanes of one group tried one by one (the common case: a few overlaps, a few lanes); past
#: this many, a search tree finds the first that fits (:class:`_TopTree`).
SCAN_LANES = 16


class _FirstFit:
    """One group's lanes, each a stack of the ends of its open slices (innermost on top, so
    non-increasing). Slices come in start order; one nests on a lane when, after closing the
    slices that ended by its start, the lane is empty or its innermost open slice ends at or
    after it. Each goes to the lowest-numbered such lane, else to a new one."""

    def __init__(self) -> None:
        self.stacks: list[list[int]] = []
        self.tree: _TopTree | None = None

    def place(self, s: int, e: int) -> int:
        """The lane of the slice ``[s, e)``."""
        if self.tree is not None:
            return self.tree.place(s, e)
        for k, stack in enumerate(self.stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                return k
        if len(self.stacks) < SCAN_LANES:
            self.stacks.append([e])
            return len(self.stacks) - 1
        # Every lane was closed up to s by the scan above: the tree starts from there.
        self.tree = _TopTree(self.stacks)
        return self.tree.place(s, e)


class _TopTree:
    """First fit over many lanes in O(log lanes) a slice: a max-tree over each lane's innermost
    open end (``inf`` for an empty lane, ``-inf`` past the last lane) finds the lowest lane whose
    value is at least the slice's end; a heap of the lanes' innermost ends closes the slices
    that ended before each start (starts only grow, so each end is closed once)."""

    def __init__(self, stacks: list[list[int]]) -> None:
        self.stacks = stacks
        self.heap = [(stack[-1], k) for k, stack in enumerate(stacks) if stack]
        heapq.heapify(self.heap)
        self.size = 1
        self.top: list[float] = []
        self._build()

    def _build(self) -> None:
        """The tree over the lanes, with room for as many again."""
        while self.size < 2 * len(self.stacks):
            self.size *= 2
        self.top = [-math.inf] * (2 * self.size)
        for k, stack in enumerate(self.stacks):
            self.top[self.size + k] = stack[-1] if stack else math.inf
        for i in range(self.size - 1, 0, -1):
            self.top[i] = max(self.top[2 * i], self.top[2 * i + 1])

    def _set(self, k: int, value: float) -> None:
        i = self.size + k
        top = self.top
        top[i] = value
        i //= 2
        while i:
            top[i] = max(top[2 * i], top[2 * i + 1])
            i //= 2

    def place(self, s: int, e: int) -> int:
        stacks, heap = self.stacks, self.heap
        while heap and heap[0][0] <= s:
            k = heapq.heappop(heap)[1]
            stack = stacks[k]
            if not stack or stack[-1] > s:
                continue  # an earlier top of this lane, already closed
            while stack and stack[-1] <= s:
                stack.pop()
            if stack:
                heapq.heappush(heap, (stack[-1], k))
            self._set(k, stack[-1] if stack else math.inf)
        top = self.top
        if top[1] >= e:
            i = 1
            while i < self.size:
                i = 2 * i if top[2 * i] >= e else 2 * i + 1
            k = i - self.size
        else:
            k = len(stacks)
            stacks.append([])
            if k >= self.size:
                self._build()
        stacks[k].append(e)
        heapq.heappush(heap, (e, k))
        self._set(k, e)
        return k
