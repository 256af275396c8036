"""The trace-event format's rules as Perfetto applies them, in one place for the importers,
the checks (``echo_view.validate``) and the exporters.

- **Nesting order**: the slices of one thread in Perfetto's order, start ascending, longest
  first at equal start, then file order (:func:`nesting_order`, :func:`thread_order`); replayed
  on one stack (a slice ending at or before a start is closed first), a slice that ends after
  the one on top of the stack partly overlaps it (:func:`partial_overlaps`).
- **Flow ids**: integers, hex strings (``"0x1f"``), or ``{"local": ...}`` / ``{"global": ...}``
  (:func:`parse_flow_id`).
- **Flow binding**: a point at ``ts`` is inside a slice that starts at or before ``ts`` and
  ends after it, or starts exactly at ``ts`` (a zero-length slice included: Perfetto pushes it
  before the point and has not popped it yet) (:func:`open_at`); a flow source, and an end with
  ``"bp": "e"``, binds to the deepest such slice on its thread, an end without it to the next
  slice that begins (:func:`bind_points`).

Exact µs -> ns conversion is :mod:`echo_view.units`; thread identity differs on purpose between
the model (pairs as written) and the checks (Perfetto's uint32 coercion,
``echo_view.validate.threads``).
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.integer[Any]]
Bools = npt.NDArray[np.bool_]

#: How far :func:`bind_points` looks back for an enclosing slice when the last one that started
#: has ended (bounds the time per point; real nesting is a few dozen levels deep).
WALK_LIMIT = 4096


def parse_flow_id(value: Any) -> int | None:
    """A flow id as Perfetto reads it (uint64), or ``None`` when invalid: an integer, a hex
    string with or without ``0x``, or ``{"global": ID}`` / ``{"local": ID}`` (a local id gets
    bit 63 so that the two never meet)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value & 0xFFFFFFFFFFFFFFFF
    if isinstance(value, str):
        text = value.strip().lower()
        text = text[2:] if text.startswith("0x") else text
        try:
            return int(text, 16) if text else None
        except ValueError:
            return None
    if isinstance(value, dict):
        for scope in ("global", "local"):
            if scope in value:
                inner = parse_flow_id(value[scope])
                return None if inner is None else inner ^ (1 << 63 if scope == "local" else 0)
    return None


def nesting_order(start_ns: Ints, dur_ns: Ints, group: Ints) -> npt.NDArray[np.intp]:
    """Row order by (group, start, longest first, row): Perfetto's order for ``X`` slices,
    ``group`` being each row's thread or lane."""
    # lexsort is stable, so equal keys keep row order.
    return np.lexsort((-np.asarray(dur_ns), start_ns, group))


def thread_order(rows: I32, start_ns: I64, dur_ns: I64) -> tuple[I32, I64]:
    """``rows`` (one thread's slices, in file order) in :func:`nesting_order`, and their starts.

    A stable argsort of the starts gives (start, file order); only runs of equal starts are
    then re-sorted, longest first (one lexsort of all keys held ~1 MB more per 90k rows, and
    the importer binds flows within its peak memory).
    """
    starts = start_ns[rows]
    order = np.argsort(starts, kind="stable")
    starts = starts[order]
    tie = starts[1:] == starts[:-1]
    if tie.any():
        # Positions in a run of equal starts, and which run each is in.
        in_run = np.zeros(len(starts), dtype=np.bool_)
        in_run[1:] = tie
        in_run[:-1] |= tie
        pos = np.flatnonzero(in_run)
        run = np.cumsum(~tie[pos[1:] - 1]) if len(pos) > 1 else np.zeros(0, np.intp)
        run_of = np.concatenate(([0], run))
        sub = np.lexsort((-dur_ns[rows[order[pos]]], run_of))  # stable: file order within ties
        order[pos] = order[pos[sub]]
    del tie
    return rows[order], starts


def partial_overlaps(starts: list[int], ends: list[int]) -> list[tuple[int, int]]:
    """``(k, parent)`` for each slice ``k`` that ends after the slice on top of the stack.

    ``starts``/``ends`` are one thread's slices in :func:`nesting_order`. A flagged slice is
    not pushed, as Perfetto moves it away.
    """
    stack_end: list[int] = []
    stack_k: list[int] = []
    out: list[tuple[int, int]] = []
    push_e = stack_end.append
    push_k = stack_k.append
    for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
        while stack_end and stack_end[-1] <= s:
            stack_end.pop()
            stack_k.pop()
        if stack_end and e > stack_end[-1]:
            out.append((k, stack_k[-1]))
        else:
            push_e(e)
            push_k(k)
    return out


#: Lanes of one group tried one by one (the common case: a few overlaps, a few lanes); past
#: this many, a search tree finds the first that fits (:class:`_TopTree`).
SCAN_LANES = 16


def first_fit_lanes(starts: list[int], ends: list[int]) -> list[int]:
    """The lane of each of one thread's slices (given in :func:`nesting_order`) so that every
    lane nests: each slice goes to the lowest-numbered lane where it nests, else to a new one.
    Lane 0 holds what Perfetto's stack keeps (:func:`partial_overlaps`), lane 1 what that
    spills and lane 2 what lane 1 spills, and so on; O(n log n)."""
    fit = _FirstFit()
    return [fit.place(s, e) for s, e in zip(starts, ends, strict=True)]


class _FirstFit:
    """One thread's lanes, each a stack of the ends of its open slices (innermost on top, so
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


def _covers(start: Any, end: Any, ts: Any) -> Any:
    """The binding rule: a slice holds a point at ``ts`` when ``start <= ts < end`` or it
    starts at ``ts`` (the caller knows ``start <= ts``)."""
    return (ts < end) | (ts == start)


def open_at(starts: I64, ends: I64, ts: I64) -> Bools:
    """For each ``ts``: whether one of the slices (``starts`` ascending) holds it."""
    out = np.zeros(len(ts), dtype=np.bool_)
    if not len(starts) or not len(ts):
        return out
    k = np.searchsorted(starts, ts, side="right") - 1
    ok = k >= 0
    kk = k[ok]
    # The latest end among the slices started by then tells whether any is still open.
    out[ok] = _covers(starts[kk], np.maximum.accumulate(ends)[kk], ts[ok])
    return out


def bind_points(rows: I32, starts: I64, dur_ns: I64, ts: I64, enclosing: Bools) -> I64:
    """The rows points at ``ts`` on one thread bind to (-1 when none): the deepest slice that
    holds the point (``enclosing``), else the next slice that begins at or after it.

    ``rows``/``starts`` are the thread's slices in :func:`thread_order`; ``dur_ns`` is indexed
    by row (no column of slice ends is made).
    """
    j = np.searchsorted(starts, ts, side="right") - 1
    jj = np.maximum(j, 0)
    hit = (j >= 0) & _covers(starts[jj], starts[jj] + dur_ns[rows[jj]], ts)
    res = np.where(hit, jj, -1)
    for m in np.flatnonzero(enclosing & ~hit & (j >= 0)).tolist():
        res[m] = _walk_back(rows, starts, dur_ns, int(j[m]), int(ts[m]))
    nxt = np.searchsorted(starts, ts, side="left")
    res = np.where(enclosing, res, np.where(nxt < len(starts), nxt, -1))
    return np.where(res >= 0, rows[np.maximum(res, 0)], -1)


def _walk_back(rows: I32, starts: I64, dur_ns: I64, j: int, ts: int) -> int:
    """The nearest earlier slice still open at ``ts`` (an ancestor of slice ``j``), or -1."""
    for k in range(j - 1, max(-1, j - 1 - WALK_LIMIT), -1):
        if starts[k] <= ts < starts[k] + dur_ns[rows[k]]:
            return k
    return -1
