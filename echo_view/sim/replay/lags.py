"""Measured lags for replayed dependencies.

Each constraint on an op is "the op may start (or end) ``lag`` after some base time": a launch
call's start, a stream predecessor's end, an awaited op's end. In the measurement one of them
was binding — the one with the latest base; its lag is the op's measured start minus that base,
and keeping it reproduces the measured start exactly. The others get the rank's typical lag for
their kind (the median over the ops where that kind was binding), capped at their own measured
slack so they never bind earlier than measured. A blocked call (a sync that waited, a copy to
pageable memory) keeps its measured tail after the awaited op and its own cost is cut to that
tail: the rest of its measured time was the wait.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.model.workload import DepMode

I64 = npt.NDArray[np.integer[Any]]
_FIFO = -1  # pseudo kind of the stream-order constraint in the typical-lag table


class _View(Protocol):
    op_ids: I64
    lane_ops: dict[int, I64]
    gpu_lanes: list[int]


def finish_lags(
    view: _View,
    src: I64,
    dst: I64,
    mode: I64,
    kind: I64,
    lag: I64,
    mstart: I64,
    mend: I64,
    dur: I64,
    gaps: I64,
) -> I64:
    """Lags for the edges whose ``lag`` is -1 (others are kept); sets the GPU ops' lane gaps in
    ``gaps`` (indexed by op id minus the rank's first id) and cuts ``dur`` of blocked calls."""
    out = lag.copy()
    base_id = int(view.op_ids[0]) if len(view.op_ids) else 0
    # Stream-order constraints of GPU ops: (pred, op).
    pred_l, op_l = [], []
    for lane in view.gpu_lanes:
        ids = view.lane_ops[lane]
        pred_l.append(ids[:-1])
        op_l.append(ids[1:])
    fifo_pred = np.concatenate(pred_l) if pred_l else np.empty(0, dtype=np.int64)
    fifo_op = np.concatenate(op_l) if op_l else np.empty(0, dtype=np.int64)

    start_c = (mode != int(DepMode.END_TO_END)) & (lag < 0)
    e_base = np.where(mode == int(DepMode.START_TO_START), mstart[src], mend[src])
    # Latest base per op over its open start constraints and its stream predecessor.
    latest: dict[int, int] = {}
    for d, b in zip(dst[start_c].tolist(), e_base[start_c].tolist(), strict=True):
        if b > latest.get(d, -(2**62)):
            latest[d] = b
    for d, b in zip(fifo_op.tolist(), mend[fifo_pred].tolist(), strict=True):
        if b > latest.get(d, -(2**62)):
            latest[d] = b
    lowest = -(2**62)
    # Raw lags and binding flags.
    e_raw = np.maximum(mstart[dst] - e_base, 0)
    e_bind = start_c & np.array(
        [latest.get(d, lowest) == b for d, b in zip(dst.tolist(), e_base.tolist(), strict=True)],
        dtype=bool,
    )
    f_raw = np.maximum(mstart[fifo_op] - mend[fifo_pred], 0)
    f_bind = np.array(
        [
            latest.get(d, lowest) == b
            for d, b in zip(fifo_op.tolist(), mend[fifo_pred].tolist(), strict=True)
        ],
        dtype=bool,
    )
    typical: dict[int, int] = {}
    for k in np.unique(kind[start_c]).tolist():
        sel = e_bind & (kind == k)
        typical[k] = int(np.median(e_raw[sel])) if sel.any() else 0
    typical[_FIFO] = int(np.median(f_raw[f_bind])) if f_bind.any() else 0
    typ_e = np.array([typical.get(k, 0) for k in kind.tolist()], dtype=np.int64)
    out[start_c] = np.where(e_bind, e_raw, np.minimum(typ_e, e_raw))[start_c]
    gaps[fifo_op - base_id] = np.where(f_bind, f_raw, np.minimum(typical[_FIFO], f_raw))

    # End constraints (blocked calls): the awaited op that ended last is binding when it ended
    # after the call began.
    end_c = (mode == int(DepMode.END_TO_END)) & (lag < 0)
    if end_c.any():
        idx = np.flatnonzero(end_c)
        last: dict[int, int] = {}
        for d, b in zip(dst[idx].tolist(), mend[src[idx]].tolist(), strict=True):
            if b > last.get(d, lowest):
                last[d] = b
        raw = np.maximum(mend[dst[idx]] - mend[src[idx]], 0)
        bind = np.array(
            [
                last[d] == b and b > mstart[d]
                for d, b in zip(dst[idx].tolist(), mend[src[idx]].tolist(), strict=True)
            ],
            dtype=bool,
        )
        tail = int(np.median(raw[bind])) if bind.any() else 0
        out[idx] = np.where(bind, raw, np.minimum(tail, raw))
        for d, r in zip(dst[idx][bind].tolist(), raw[bind].tolist(), strict=True):
            dur[d] = min(int(dur[d]), r)
    return out
