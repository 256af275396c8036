"""The interference rate model applied to measured kernels: a kernel with solo work ``w``
progresses at rate 1 while no communication runs on its GPU and at rate ``1 / slowdown``
while some does (see :mod:`echo_view.sim.interference.fit`); the simulator's engine
applies the same rule event by event."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import groups
from echo_view.sim.interference.measure import OverlapSamples

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def finish_times(
    start: npt.ArrayLike,
    work: npt.ArrayLike,
    rate: npt.ArrayLike,
    comm_starts: I64,
    comm_ends: I64,
) -> I64:
    """End of each kernel that starts at ``start`` with ``work`` ns of solo work, progressing
    at rate 1 outside the sorted disjoint communication intervals ``[comm_starts, comm_ends)``
    and at ``rate`` (``1 / slowdown``) inside them. Exact up to rounding to whole ns."""
    s = np.asarray(start, dtype=np.int64)
    w = np.asarray(work, dtype=np.float64)
    u = np.broadcast_to(np.asarray(rate, dtype=np.float64), s.shape)
    m = len(comm_starts)
    if not m or not len(s):
        return s + np.rint(w).astype(np.int64)
    a = 1.0 - u
    # Breakpoints 2k (interval k starts) and 2k+1 (it ends), with the covered time before each.
    b = np.empty(2 * m, dtype=np.int64)
    b[0::2], b[1::2] = comm_starts, comm_ends
    cum = np.concatenate([[0], np.cumsum(comm_ends - comm_starts)])
    cov = np.empty(2 * m, dtype=np.float64)
    cov[0::2], cov[1::2] = cum[:-1], cum[1:]

    def covered(t: I64) -> F64:
        k = np.searchsorted(comm_starts, t, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.clip(t - comm_starts[kk], 0, comm_ends[kk] - comm_starts[kk])
        out: F64 = np.where(k >= 0, cum[kk] + inside, 0.0)
        return out

    target = s - a * covered(s) + w  # W(end) must reach W(start) + work
    # Last breakpoint at or after the start whose W is <= target (bisection on its index).
    lo = np.searchsorted(b, s, side="left")  # first breakpoint >= start
    hi = np.full(len(s), 2 * m, dtype=np.int64)  # one past the last candidate
    left, right = lo.copy(), hi.copy()
    while True:
        active = left < right
        if not active.any():
            break
        mid = (left + right) // 2
        mid_c = np.minimum(mid, 2 * m - 1)
        ok = (b[mid_c] - a * cov[mid_c]) <= target
        left = np.where(active & ok, mid + 1, left)
        right = np.where(active & ~ok, mid, right)
    j = left - 1  # last breakpoint with W <= target, or lo - 1 when none after the start
    use_b = j >= lo
    jj = np.clip(j, 0, 2 * m - 1)
    anchor = np.where(use_b, b[jj], s)
    w_anchor = np.where(use_b, b[jj] - a * cov[jj], s - a * covered(s))
    k = np.searchsorted(comm_starts, anchor, side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (anchor < comm_ends[kk])
    slope = np.where(inside, u, 1.0)
    end = anchor + (target - w_anchor) / slope
    out: I64 = np.rint(end).astype(np.int64)
    return out


def predict_durations(samples: OverlapSamples, slowdown: F64) -> I64:
    """Each sample's duration if its solo work met its device's measured communication at
    full-overlap ``slowdown`` (one value per sample)."""
    c = samples.cols
    out = np.empty(len(samples), dtype=np.int64)
    # Per (trace, device) pair, as they are (a device number may be any int64 a trace gives).
    pairs = np.stack([c["trace"], c["device"]], axis=1).astype(np.int64)
    uniq, which = np.unique(pairs, axis=0, return_inverse=True) if len(pairs) else (pairs, pairs)
    for k, sel in groups(which.reshape(-1)):
        us, ue = samples.comm[(int(uniq[k, 0]), int(uniq[k, 1]))]
        end = finish_times(c["start_ns"][sel], c["solo_ns"][sel], 1.0 / slowdown[sel], us, ue)
        out[sel] = end - c["start_ns"][sel]
    return out


__all__ = ["finish_times", "predict_durations"]
