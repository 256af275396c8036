"""Vectorised interval arithmetic on int64 nanosecond columns.

An interval set is a pair of int64 arrays ``(starts, ends)``; interval ``i`` is the half-open
``[starts[i], ends[i])``. Empty intervals (``end <= start``) cover nothing and are dropped.
Everything here is a sort plus cumulative sums: no Python loop runs per interval.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
IntArray = npt.NDArray[np.integer[Any]]

_EMPTY = np.empty(0, dtype=np.int64)


def _pair(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[I64, I64]:
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if s.shape != e.shape or s.ndim != 1:
        raise ValueError(f"starts and ends must be 1-D and equally long, got {s.shape}, {e.shape}")
    return s, e


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[I64, I64]:
    """Merge intervals into the sorted, disjoint intervals covering the same time.

    Touching intervals (``a.end == b.start``) merge, so the result has no zero-length gaps.
    """
    s, e = _pair(starts, ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return _EMPTY.copy(), _EMPTY.copy()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # reach[i]: the furthest end among intervals 0..i; interval i opens a new group when it
    # starts after everything before it has ended.
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def measure(starts: npt.ArrayLike, ends: npt.ArrayLike) -> int:
    """Total time covered by the intervals (overlaps counted once)."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def clip(starts: npt.ArrayLike, ends: npt.ArrayLike, lo: int, hi: int) -> tuple[I64, I64]:
    """The parts of the intervals inside ``[lo, hi)``; empty results are dropped."""
    s, e = _pair(starts, ends)
    s = np.maximum(s, lo)
    e = np.minimum(e, hi)
    keep = e > s
    return s[keep], e[keep]


def pattern_measure(
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    labels: IntArray,
    n_labels: int,
    win_starts: npt.ArrayLike,
    win_ends: npt.ArrayLike,
) -> I64:
    """Time inside each window during which each combination of labels is active.

    Interval ``i`` carries label ``labels[i]`` in ``0..n_labels-1``. A label is *active* at time
    ``t`` when at least one of its intervals covers ``t`` (union semantics: two overlapping
    intervals of one label count once). The result ``out`` has shape
    ``(n_windows, 2**n_labels)``: ``out[w, p]`` is the time inside window ``w`` during which
    exactly the labels whose bits are set in ``p`` are active (``p = 0``: none is). Each row
    therefore sums to its window's length.

    Windows must be sorted and disjoint (``win_ends[w] <= win_starts[w + 1]``).
    """
    s, e = _pair(starts, ends)
    ws, we = _pair(win_starts, win_ends)
    lab = np.asarray(labels, dtype=np.int64)
    if lab.shape != s.shape:
        raise ValueError("labels must have one entry per interval")
    if not 1 <= n_labels <= 16:
        raise ValueError("n_labels must be in 1..16")
    if len(lab) and (lab.min() < 0 or lab.max() >= n_labels):
        raise ValueError(f"labels must be in 0..{n_labels - 1}")
    n_patterns = 1 << n_labels
    we = np.maximum(we, ws)
    if len(ws) > 1 and np.any(ws[1:] < we[:-1]):
        raise ValueError("windows must be sorted and disjoint")
    out = np.zeros((len(ws), n_patterns), dtype=np.int64)
    if not len(ws):
        return out
    keep = e > s
    s, e, lab = s[keep], e[keep], lab[keep]

    # Breakpoints: every interval edge and every window edge. Between two consecutive
    # breakpoints nothing changes, so each elementary segment has one pattern and lies wholly
    # inside one window or outside all of them.
    n = len(s)
    times = np.concatenate([s, e, ws, we])
    deltas = np.zeros((len(times), n_labels), dtype=np.int32)
    rows = np.arange(n)
    deltas[rows, lab] = 1
    deltas[n + rows, lab] = -1
    order = np.argsort(times, kind="stable")
    times = times[order]
    counts = np.cumsum(deltas[order], axis=0)
    active = counts > 0
    bits = (active * (1 << np.arange(n_labels, dtype=np.int64))).sum(axis=1)

    seg_len = np.diff(times)
    seg_start = times[:-1]
    pattern = bits[:-1]
    win = np.searchsorted(ws, seg_start, side="right") - 1
    inside = (seg_len > 0) & (win >= 0)
    inside[inside] &= times[1:][inside] <= we[win[inside]]
    key = win[inside] * n_patterns + pattern[inside]
    # float64 bincount is exact while each cell stays below 2**53 ns (104 days).
    sums = np.bincount(key, weights=seg_len[inside], minlength=len(ws) * n_patterns)
    out[:] = np.rint(sums).astype(np.int64).reshape(len(ws), n_patterns)
    return out
