"""Rates that change mid-flight: the engine's hook for interference.

A *rated* op (a compute op with slowdown ``s > 1`` on a GPU that communicates) does ``w`` ns of
solo work, at rate 1 while no communication op is active on its GPU and at rate ``1 / s``
while one is. A *communication* op (a GPU op of class collective) makes its GPU's
communication active from its start to its end; a collective participant's end is unknown
until its last peer arrives, so its interval stays open until then.

The engine asks :meth:`RateHook.begin` for a rated op's end when it starts, and tells the hook
when communication opens (:meth:`RateHook.comm_open`) and closes (:meth:`RateHook.comm_close`);
it skips a heap entry whose time is no longer the op's end, and a second entry at the same end.
Each such change happens at or after the engine's current time ``now`` (its heap is monotone,
and every op starts no earlier than the time it is scheduled), so the work a running op has
done up to ``now`` is settled: the hook banks it (the op's *anchor*), then recomputes the ends
of the GPU's rated ops in flight from their anchors under the new communication and returns
those that moved. The engine re-queues them and skips superseded heap entries.

Everything here is per event, on small per-GPU lists: a GPU has a handful of ops in flight
and of communication intervals not yet over.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.workload import DepMode, Workload
from echo_view.sim.interference import interference_ops

_INF = float("inf")


class RateHook:
    """Interference state of one simulation (see the module docstring).

    ``slowdown`` holds each op's full-overlap slowdown and ``dur`` its solo duration. Ops that
    an end-to-end dependency holds are not rated (their end is the engine's to decide).
    """

    def __init__(self, workload: Workload, slowdown: npt.ArrayLike, dur: npt.ArrayLike) -> None:
        n = len(workload)
        s = np.asarray(slowdown, dtype=np.float64)
        if len(s) != n:
            raise ValueError(f"slowdown has {len(s)} values for {n} ops")
        dev, comm, compute = interference_ops(workload)
        held = np.zeros(n, dtype=bool)
        deps = workload.deps
        held[deps.dst()[deps.mode == int(DepMode.END_TO_END)]] = True
        rated = compute & (s > 1.0) & ~held
        # Communication only matters on GPUs where something can be slowed.
        has_rated = np.zeros(int(dev.max()) + 1 if n and dev.max() >= 0 else 0, dtype=bool)
        has_rated[dev[rated]] = True
        comm = comm & (dev >= 0)
        comm[comm] &= has_rated[dev[comm]]
        #: Ops whose timing the hook takes part in (never chain-coarsened).
        self.pinned: npt.NDArray[np.bool_] = rated | comm
        self.rated: list[bool] = rated.tolist()
        self.comm_dev: list[int] = np.where(comm, dev, -1).tolist()
        self.dev: list[int] = dev.tolist()
        self.lane: list[int] = workload.ops.lane.tolist()
        self.rate: list[float] = np.where(rated, 1.0 / np.maximum(s, 1.0), 1.0).tolist()
        self.work: list[float] = np.asarray(dur, dtype=np.float64).tolist()
        n_dev = len(has_rated)
        # Per GPU: communication intervals not yet over {op: [start, end or inf]} and the rated
        # op in flight on each stream {lane: [op, anchor time, work left at the anchor, end]}
        # (a stream runs one op at a time, and rated ops are never chained, so the next rated
        # op on a stream starts after the previous one ended).
        self._comm: list[dict[int, list[float]]] = [{} for _ in range(n_dev)]
        self._sorted: list[list[list[float]]] = [[] for _ in range(n_dev)]  # _comm, by start
        self._flight: list[dict[int, list[Any]]] = [{} for _ in range(n_dev)]
        self.active = bool(rated.any())

    # -- engine calls -------------------------------------------------------------------------
    def begin(self, i: int, s: int) -> int:
        """Rated op ``i`` starts at ``s``: its end under the communication known now."""
        d = self.dev[i]
        w = self.work[i]
        ivs = self._sorted[d]
        e = s + _round(w) if not ivs else _round(_finish(ivs, float(s), w, self.rate[i]))
        self._flight[d][self.lane[i]] = [i, float(s), w, e]
        return e

    def comm_open(self, i: int, s: int, e: int | None, now: int) -> list[tuple[int, int]]:
        """Communication op ``i`` runs from ``s`` (to ``e``, None while unknown); returns the
        rated ops ``(op, new end)`` whose end moved."""
        d = self.comm_dev[i]
        if d < 0:
            return []
        self._settle(d, now)
        self._comm[d][i] = [float(s), _INF if e is None else float(e)]
        self._sorted[d] = sorted(self._comm[d].values())
        return self._refresh(d)

    def comm_close(self, i: int, e: int, now: int) -> list[tuple[int, int]]:
        """Communication op ``i`` ends at ``e`` (its collective completed)."""
        d = self.comm_dev[i]
        if d < 0:
            return []
        self._settle(d, now)
        iv = self._comm[d].get(i)
        if iv is not None:
            iv[1] = float(e)
            self._sorted[d] = sorted(self._comm[d].values())
        return self._refresh(d)

    # -- internals ----------------------------------------------------------------------------
    def _settle(self, d: int, now: int) -> None:
        """Bank the work of every op in flight on GPU ``d`` up to ``now`` and forget the
        communication that ended by then (no anchor lies before ``now`` afterwards)."""
        t = float(now)
        flight = self._flight[d]
        if flight:
            ivs = self._sorted[d]
            for lane in [lane for lane, st in flight.items() if st[3] < now]:
                del flight[lane]  # ended before now
            for st in flight.values():
                if st[1] < t:
                    st[2] = max(st[2] - _done(ivs, st[1], t, self.rate[st[0]]), 0.0)
                    st[1] = t
        comm = self._comm[d]
        over = [op for op, iv in comm.items() if iv[1] <= t]
        if over:
            for op in over:
                del comm[op]
            self._sorted[d] = sorted(comm.values())

    def _refresh(self, d: int) -> list[tuple[int, int]]:
        flight = self._flight[d]
        if not flight:
            return []
        ivs = self._sorted[d]
        moved = []
        for st in flight.values():
            e = _round(_finish(ivs, st[1], st[2], self.rate[st[0]]))
            if e != st[3]:
                st[3] = e
                moved.append((st[0], e))
        return moved


def _round(t: float) -> int:
    return int(t + 0.5)


def _finish(ivs: list[list[float]], t: float, w: float, u: float) -> float:
    """When ``w`` of work started at ``t`` completes, at rate ``u`` inside the (sorted,
    possibly overlapping) intervals and 1 outside."""
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
