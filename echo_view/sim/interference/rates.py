"""Rates that change mid-flight: the engine's hook for interference.

A *rated* op (a compute op with slowdown ``s > 1`` on a GPU that communicates) does ``w`` ns of
solo work, at rate 1 while no communication op is active on its GPU and at rate ``1 / s``
while one is. A *communication* op (a GPU op of class collective) makes its GPU's
communication active from its start to its end; a collective participant's end is unknown
until its last peer arrives, so its interval stays open until then.

Protocol with the engine (:mod:`echo_view.sim.engine`), which binds its start and end lists
(:meth:`RateHook.bind`):

- When a rated op ``i`` starts at ``s`` the engine records it as the last rated op of its
  stream (``last[op_lane[i]] = i``) and, only when the communication known on its GPU reaches
  past ``s`` (``reach[op_dev[i]] > s``), asks :meth:`RateHook.begin` for its end; otherwise
  the end is ``s + w`` as without interference.
- When communication opens (:meth:`RateHook.comm_open`) or closes
  (:meth:`RateHook.comm_close`), the hook returns the rated ops whose end moved; the engine
  re-queues them and skips heap entries that are no longer an op's end (or repeat one).

Each change happens at or after the engine's current time ``now`` (its heap is monotone, and
every op starts no earlier than the time it is scheduled), so the work an op in flight has done
up to ``now`` is final: the hook banks it (the op's *anchor*; by default its start and full
work), then recomputes ends from the anchors. A stream runs one op at a time and rated ops are
never chained, so the ops in flight on a GPU are the last rated op of each of its streams that
has not ended before ``now``. Everything is per event, on small per-GPU lists.
"""

from __future__ import annotations

from bisect import insort
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.workload import DepMode, Workload
from echo_view.sim.interference.model import interference_ops

_INF = float("inf")


class RateHook:
    """Interference state of one simulation (see the module docstring).

    ``slowdown`` holds each op's full-overlap slowdown and ``dur`` its solo duration (what the
    engine runs). Ops that an end-to-end dependency holds are not rated (their end is the
    engine's to decide). ``ops`` is :func:`~echo_view.sim.interference.interference_ops` of the
    workload when the caller has it already.
    """

    def __init__(
        self,
        workload: Workload,
        slowdown: npt.ArrayLike,
        dur: npt.ArrayLike,
        ops: tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]
        | None = None,
    ) -> None:
        n = len(workload)
        s = np.asarray(slowdown, dtype=np.float64)
        if len(s) != n:
            raise ValueError(f"slowdown has {len(s)} values for {n} ops")
        dev, comm, compute = ops if ops is not None else interference_ops(workload)
        rated = compute & (s > 1.0)
        deps = workload.deps
        to_end = deps.mode == int(DepMode.END_TO_END)
        if to_end.any():
            rated[deps.dst()[to_end]] = False
        # Communication only matters on GPUs where something can be slowed.
        n_dev = int(dev.max()) + 1 if n and dev.max() >= 0 else 0
        has_rated = np.zeros(n_dev, dtype=bool)
        has_rated[dev[rated]] = True
        comm = comm & (dev >= 0)
        comm[comm] &= has_rated[dev[comm]]
        lane = workload.ops.lane.astype(np.int64)
        #: Ops whose timing the hook takes part in (never chain-coarsened).
        self.pinned: npt.NDArray[np.bool_] = rated | comm
        self.active = bool(rated.any())
        #: Per op: 1 rated, 2 communication, 0 neither; the GPU of a rated or communication op,
        #: and a rated op's stream (lane).
        self.role: list[int] = np.where(rated, 1, np.where(comm, 2, 0)).tolist()
        self.op_dev: list[int] = np.where(rated | comm, dev, 0).tolist()
        self.op_lane: list[int] = np.where(rated, lane, 0).tolist()
        #: Per GPU: the latest end of its known communication (inf while one is open).
        self.reach: list[float] = [0.0] * n_dev
        #: Per lane: the last rated op that started on it (-1: none); written by the engine.
        self.last: list[int] = [-1] * len(workload.lanes)
        # Per op: solo work and rate while overlapped (numpy: read only for the few ops that
        # meet communication, so not worth converting to lists).
        self._work = np.asarray(dur, dtype=np.float64)
        self._rate = np.where(rated, 1.0 / np.maximum(s, 1.0), 1.0)
        # Per GPU: the lanes holding rated ops, communication not yet over {op: [start, end]}
        # (also sorted by start) and banked progress {op: (anchor time, work left)}.
        lanes_of: list[list[int]] = [[] for _ in range(n_dev)]
        n_lanes = max(len(workload.lanes), 1)
        for key in np.unique(dev[rated] * n_lanes + lane[rated]).tolist():
            lanes_of[key // n_lanes].append(key % n_lanes)
        self._lanes_of = lanes_of
        # Per GPU: communication not yet over as [start, end] (end inf while unknown), sorted
        # by start; per communication op its interval; per op banked progress (anchor time,
        # -1 while the anchor is the op's start, and work left at it).
        self._sorted: list[list[list[float]]] = [[] for _ in range(n_dev)]
        self._iv: dict[int, list[float]] = {}
        self._at: list[float] = [-1.0] * n
        self._left: list[float] = [0.0] * n
        self._start: list[int] = []
        self._end: list[int] = []

    def bind(self, start: list[int], end: list[int]) -> None:
        """The engine's start and end lists (read only)."""
        self._start = start
        self._end = end

    # -- engine calls -------------------------------------------------------------------------
    def begin(self, i: int, s: int) -> int:
        """Rated op ``i`` starts at ``s``: its end under the communication known now."""
        w, u = float(self._work[i]), float(self._rate[i])
        return _round(_finish(self._sorted[self.op_dev[i]], s, w, u))

    def comm_open(self, i: int, s: int, e: int | None, now: int) -> list[tuple[int, int]]:
        """Communication op ``i`` runs from ``s`` (to ``e``, None while unknown); returns the
        rated ops ``(op, new end)`` whose end moved (often none)."""
        d = self.op_dev[i]
        iv: list[float] = [s, _INF if e is None else e]
        self._iv[i] = iv
        end, last = self._end, self.last
        busy = False
        for ln in self._lanes_of[d]:
            op = last[ln]
            if op >= 0 and end[op] >= now:
                busy = True
                break
        if busy:
            flight = self._settle(d, now)
            insort(self._sorted[d], iv)
            moved = self._refresh(d, flight)
        else:  # nothing in flight: only prune and record
            ivs = self._sorted[d]
            if ivs and ivs[0][1] <= now:
                ivs = self._sorted[d] = [x for x in ivs if x[1] > now]
            insort(ivs, iv)
            moved = []
        if iv[1] > self.reach[d]:
            self.reach[d] = iv[1]
        return moved

    def comm_close(self, i: int, e: int, now: int) -> list[tuple[int, int]]:
        """Communication op ``i`` ends at ``e`` (its collective completed)."""
        d = self.op_dev[i]
        flight = self._settle(d, now)
        iv = self._iv.pop(i, None)
        if iv is not None:
            iv[1] = e  # the start, and so the order, stays
            self.reach[d] = max(x[1] for x in self._sorted[d])
        return self._refresh(d, flight) if flight else flight

    # -- internals ----------------------------------------------------------------------------
    def _settle(self, d: int, now: int) -> list[Any]:
        """Bank the work of the ops in flight on GPU ``d`` up to ``now`` (returned), and forget
        the communication that ended by then (it cannot touch anything that starts later)."""
        t = float(now)
        end, last = self._end, self.last
        flight = [op for ln in self._lanes_of[d] if (op := last[ln]) >= 0 and end[op] >= now]
        ivs = self._sorted[d]
        at, left = self._at, self._left
        for op in flight:
            t0 = at[op]
            if t0 < 0:  # not banked yet: from its start with all its work
                t0 = float(self._start[op])
                left[op] = float(self._work[op])
            if t0 < t:
                left[op] = max(left[op] - _done(ivs, t0, t, float(self._rate[op])), 0.0)
                t0 = t
            at[op] = t0
        if ivs:
            kept = [iv for iv in ivs if iv[1] > t]
            if len(kept) != len(ivs):
                self._sorted[d] = kept
        return flight

    def _refresh(self, d: int, flight: list[int]) -> list[tuple[int, int]]:
        ivs = self._sorted[d]
        at, left, end = self._at, self._left, self._end
        moved = []
        for op in flight:
            e = _round(_finish(ivs, at[op], left[op], float(self._rate[op])))
            if e != end[op]:
                moved.append((op, e))
        return moved


def _round(t: float) -> int:
    return int(t + 0.5)


def _finish(ivs: list[list[float]], t: float, w: float, u: float) -> float:
    """When ``w`` of work started at ``t`` completes, at rate ``u`` inside the (sorted by
    start, possibly overlapping) intervals and 1 outside."""
    for a, b in ivs:
        if b <= t:
            continue
        if a > t:
            if w <= a - t:
                return t + w
            w -= a - t
            t = a
        if b == _INF:
            return t + w / u
        cap = (b - t) * u
        if w <= cap:
            return t + w / u
        w -= cap
        t = b
    return t + w


def _done(ivs: list[list[float]], t0: float, t1: float, u: float) -> float:
    """Work done between ``t0`` and ``t1`` at rate ``u`` inside the intervals, 1 outside."""
    slowed = 0.0
    reach = t0
    for a, b in ivs:
        lo = max(a, reach)
        hi = min(b, t1)
        if hi > lo:
            slowed += hi - lo
            reach = hi
    return (t1 - t0) - slowed * (1.0 - u)
