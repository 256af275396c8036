"""Dependency reconstruction for replay: which measured op waited on which.

Rules, per rank (times are measured, on the workload's clock):

- **launch**: a GPU op starts no earlier than its launch call starts (same correlation id).
  An op whose launch is not in the trace follows its stream predecessor with its measured gap
  (the first op of a stream keeps its measured start).
- **blocking call**: a launch call that returned after its GPU op ended (``cudaMemcpy`` to
  pageable memory, synchronous memset) waited for it: the call ends after the op ends.
- **host sync**: ``cudaDeviceSynchronize`` waits for the last op launched on every stream;
  ``cudaStreamSynchronize`` and ``cudaEventSynchronize`` for the last op launched on their
  stream — the stream named by the trace's ``cuda_sync`` record when there is one, else the
  stream of the thread's latest launch (PyTorch synchronises the stream it just used). A sync
  never waits on work that ended after it returned.
- **event wait**: ``cudaStreamWaitEvent`` makes the next op on the waiting stream wait for the
  last op launched on the recorded stream before ``cudaEventRecord``. With a ``cuda_sync``
  record both streams and the record are known. Without one (older Kineto), the next op the
  thread launches waits for the last op launched on each other stream before the wait call,
  keeping only those that had ended when it started (a real dependency always had).
- **thread wake-up**: a CPU thread that resumes shortly after another thread of its rank
  finished a call, having waited longer than it then worked, waited for that thread. A thread's
  first call is tied to the latest call another thread finished before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, Trace
from echo_view.model.columns import groups
from echo_view.model.workload import DepKind, DepMode
from echo_view.sim.replay.lags import finish_lags

I64 = npt.NDArray[np.integer[Any]]

_DEVICE_SYNC = {"cudaDeviceSynchronize", "cudaCtxSynchronize", "cuCtxSynchronize",
                "hipDeviceSynchronize"}  # fmt: skip
_STREAM_SYNC = {"cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize"}
_EVENT_SYNC = {"cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize"}
_WAIT_EVENT = {"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"}
_MODE_S2S, _MODE_E2S, _MODE_E2E = (
    int(DepMode.START_TO_START),
    int(DepMode.END_TO_START),
    int(DepMode.END_TO_END),
)


@dataclass
class RankView:
    """One rank's ops as replay laid them out (global op ids)."""

    trace: Trace
    shift: int
    op_ids: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    op_of_row: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    container: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    lane_ops: dict[int, I64] = field(default_factory=dict)
    gpu_lanes: list[int] = field(default_factory=list)
    cpu_lanes: list[int] = field(default_factory=list)
    launch_of: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    src_row: I64 = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    call_of_corr: dict[int, int] | None = None


@dataclass
class _Edges:
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    mode: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    lag: list[int] = field(default_factory=list)

    def add(self, src: int, dst: int, mode: int, kind: DepKind, lag: int = -1) -> None:
        if src == dst:
            return
        self.src.append(src)
        self.dst.append(dst)
        self.mode.append(mode)
        self.kind.append(int(kind))
        self.lag.append(lag)


class _Streams:
    """Per stream: ops in FIFO order with their launch times, for "last launched before t"."""

    def __init__(self, view: RankView, launch_t: I64, launched: npt.NDArray[np.bool_]) -> None:
        """``launch_t``: each op's launch time where ``launched`` (a recorded launch), else
        its GPU start."""
        self.ops: dict[int, I64] = {}
        self.t: dict[int, I64] = {}
        self.lane_of: dict[int, int] = {}
        for lane in view.gpu_lanes:
            ids = view.lane_ops[lane]
            self.ops[lane] = ids
            self.lane_of.update(dict.fromkeys(ids.tolist(), lane))
            self.t[lane] = _fifo_launch_times(launch_t[ids], launched[ids]) if len(ids) else ids

    def last_before(self, lane: int, t: int) -> int:
        ts = self.t.get(lane)
        if ts is None or not len(ts):
            return NONE
        k = int(np.searchsorted(ts, t, side="left")) - 1
        return int(self.ops[lane][k]) if k >= 0 else NONE

    def first_after(self, lane: int, t: int) -> int:
        ts = self.t.get(lane)
        if ts is None or not len(ts):
            return NONE
        k = int(np.searchsorted(ts, t, side="left"))
        return int(self.ops[lane][k]) if k < len(ts) else NONE


def _fifo_launch_times(t: I64, known: npt.NDArray[np.bool_]) -> I64:
    """Launch times along one stream's FIFO order, never decreasing. An op without a recorded
    launch (launched before the capture began, or sampled out) was launched no later than its
    GPU start nor than the next op with a recorded launch: with its GPU start alone, a GPU
    14,000 launches behind its CPU (h100_2gpu_1s) pushed every later op's launch 400 ms late,
    and a sync was tied to the wrong copy (compute.scale.all=0.1 left the step at 964.7 ms)."""
    later = np.where(known, t, np.iinfo(np.int64).max)
    bound = np.minimum.accumulate(later[::-1])[::-1]  # the next recorded launch, or itself
    return np.maximum.accumulate(np.where(known, t, np.minimum(t, bound)))


def infer_dependencies(
    view: RankView, mstart: I64, mend: I64, dur: I64, release: I64
) -> tuple[I64, I64, I64, I64, I64, I64]:
    """Edges ``(src, dst, mode, lag, kind)`` of one rank and the lane gap of each of its ops
    (aligned with ``view.op_ids``). Sets ``view.launch_of``; shortens ``dur`` of calls found
    blocked (their time is the wait) and sets ``release`` of ops nothing else anchors."""
    trace = view.trace
    ev = trace.events
    ids = view.op_ids
    base = int(ids[0]) if len(ids) else 0
    edges = _Edges()
    op_lane_local = np.empty(len(ids), dtype=np.int64)
    for lane, lane_ids in view.lane_ops.items():
        op_lane_local[lane_ids - base] = lane
    src_row = view.src_row

    launch_of = _launches(view, ev.correlation, src_row, base)
    view.launch_of = launch_of
    launch_t = mstart.copy()
    gpu_ids = (
        np.concatenate([view.lane_ops[g] for g in view.gpu_lanes]) if view.gpu_lanes else ids[:0]
    )
    has_launch = launch_of[gpu_ids - base] >= 0
    launch_t[gpu_ids[has_launch]] = mstart[launch_of[gpu_ids[has_launch] - base]]
    first_on_stream = {int(view.lane_ops[s][0]) for s in view.gpu_lanes}
    for g, lop in zip(gpu_ids.tolist(), launch_of[gpu_ids - base].tolist(), strict=True):
        if lop < 0:
            # No launch recorded (launched before the window, or sampled out): the op follows
            # its stream with its measured gap; the first op of a stream keeps its start.
            if g in first_on_stream:
                release[g] = mstart[g]
            continue
        edges.add(lop, g, _MODE_S2S, DepKind.LAUNCH)
        if mend[lop] >= mend[g]:
            edges.add(g, lop, _MODE_E2E, DepKind.HOST_SYNC)
    launched = np.zeros(len(launch_t), dtype=bool)
    launched[gpu_ids[has_launch]] = True
    streams = _Streams(view, launch_t, launched)
    thread_launches = _thread_launches(
        gpu_ids[has_launch], launch_of, base, op_lane_local, launch_t
    )
    syncs = _sync_records(trace)
    names = [trace.strings[int(n)] for n in ev.name.tolist()]
    for lane in view.cpu_lanes:
        for y in view.lane_ops[lane].tolist():
            row = int(src_row[y - base])
            if row < 0:
                continue
            name = names[row]
            corr = int(ev.correlation[row])
            if name in _DEVICE_SYNC:
                for s in view.gpu_lanes:
                    p = streams.last_before(s, int(mstart[y]))
                    if p >= 0 and mend[p] <= mend[y]:
                        edges.add(p, y, _MODE_E2E, DepKind.HOST_SYNC)
            elif name in _STREAM_SYNC or name in _EVENT_SYNC:
                rec = syncs.get(corr)
                p = _synced_op(view, streams, rec, y, lane, mstart, mend, thread_launches)
                if p >= 0:
                    edges.add(p, y, _MODE_E2E, DepKind.HOST_SYNC)
            elif name in _WAIT_EVENT:
                _wait_edges(view, streams, syncs.get(corr), y, lane, mstart, mend,
                            thread_launches, edges)  # fmt: skip
    gaps = _thread_edges(view, mstart, mend, release, edges)
    src, dst, mode, kind, lag = (np.array(x, dtype=np.int64) for x in (
        edges.src, edges.dst, edges.mode, edges.kind, edges.lag))  # fmt: skip
    lags = finish_lags(view, src, dst, mode, kind, lag, mstart, mend, dur, gaps)
    return src, dst, mode, lags, kind, gaps


def _launches(view: RankView, corr_col: I64, src_row: I64, base: int) -> I64:
    """For each op of the rank, the op id of the CPU call that launched it (-1 none)."""
    out = np.full(len(src_row), NONE, dtype=np.int64)
    cont = view.container
    calls = np.flatnonzero((cont >= 0) & (corr_col >= 0))
    if not len(calls):
        return out
    corr = corr_col[calls]
    order = np.argsort(corr, kind="stable")
    corr, calls = corr[order], calls[order]
    gpu = [i for lane in view.gpu_lanes for i in view.lane_ops[lane].tolist()]
    for g in gpu:
        row = int(src_row[g - base])
        c = int(corr_col[row]) if row >= 0 else NONE
        if c < 0:
            continue
        k = int(np.searchsorted(corr, c))
        if k < len(corr) and corr[k] == c:
            out[g - base] = view.op_of_row[int(cont[int(calls[k])])]
    return out


def _thread_launches(
    gpu_ids: I64, launch_of: I64, base: int, op_lane: I64, launch_t: I64
) -> dict[int, tuple[I64, I64]]:
    """Per CPU lane: (launch times sorted, GPU op ids) of the GPU ops it launched."""
    out: dict[int, tuple[I64, I64]] = {}
    if not len(gpu_ids):
        return out
    lanes = op_lane[launch_of[gpu_ids - base] - base]
    for lane, sel in groups(lanes):  # (one sort; a mask per lane read every op per lane)
        g = gpu_ids[sel]
        t = launch_t[g]
        order = np.lexsort((g, t))
        out[lane] = (t[order], g[order])
    return out


def _sync_records(trace: Trace) -> dict[int, dict[str, int]]:
    """Sync records (:attr:`Trace.syncs`) by the correlation id of the call they describe,
    each with the keys it knows: ``stream``, ``wait_on_stream``,
    ``wait_on_cuda_event_record_corr_id``."""
    sy = trace.syncs
    out: dict[int, dict[str, int]] = {}
    cols = (
        ("stream", sy.stream.tolist()),
        ("wait_on_stream", sy.wait_on_stream.tolist()),
        ("wait_on_cuda_event_record_corr_id", sy.wait_on_record.tolist()),
    )
    for k, corr in enumerate(sy.correlation.tolist()):
        if corr >= 0:
            out[corr] = {key: values[k] for key, values in cols if values[k] >= 0}
    return out


def _stream_lane(view: RankView, stream: int) -> int:
    for lane in view.gpu_lanes:
        if view.trace.lanes[lane].stream == stream or view.trace.lanes[lane].tid == stream:
            return lane
    return NONE


def _record_time(view: RankView, rec: dict[str, int], fallback: int, mstart: I64) -> int:
    """When the event a sync/wait refers to was recorded (the wait call itself if unknown)."""
    corr = rec.get("wait_on_cuda_event_record_corr_id")
    if corr is None:
        return fallback
    if view.call_of_corr is None:
        # CPU calls by correlation id, built on first use (only traces with cuda_sync records).
        ev = view.trace.events
        rows = np.flatnonzero((view.container >= 0) & (ev.correlation >= 0))
        ops = view.op_of_row[view.container[rows]]
        view.call_of_corr = dict(zip(ev.correlation[rows].tolist(), ops.tolist(), strict=True))
    op = view.call_of_corr.get(corr, NONE)
    return int(mstart[op]) if op >= 0 else fallback


def _synced_op(
    view: RankView,
    streams: _Streams,
    rec: dict[str, int] | None,
    y: int,
    lane: int,
    mstart: I64,
    mend: I64,
    thread_launches: dict[int, tuple[I64, I64]],
) -> int:
    """The GPU op a stream/event sync ``y`` waited for (-1 when none can be told)."""
    t = int(mstart[y])
    if rec:
        s = _stream_lane(view, rec.get("wait_on_stream", rec.get("stream", NONE)))
        if s >= 0:
            p = streams.last_before(s, _record_time(view, rec, t, mstart))
            return p if p >= 0 and mend[p] <= mend[y] else NONE
    launched = thread_launches.get(lane)
    if launched is not None:
        k = int(np.searchsorted(launched[0], t, side="left")) - 1
        if k >= 0:
            s = streams.lane_of[int(launched[1][k])]
            p = streams.last_before(s, t)
            if p >= 0 and mend[p] <= mend[y]:
                return p
    # Fall back to the stream whose last work ended last while the call was blocked.
    best = NONE
    for s in view.gpu_lanes:
        p = streams.last_before(s, t)
        if p >= 0 and t < mend[p] <= mend[y] and (best < 0 or mend[p] > mend[best]):
            best = p
    return best


def _wait_edges(
    view: RankView,
    streams: _Streams,
    rec: dict[str, int] | None,
    w: int,
    lane: int,
    mstart: I64,
    mend: I64,
    thread_launches: dict[int, tuple[I64, I64]],
    edges: _Edges,
) -> None:
    t = int(mstart[w])
    if rec and "wait_on_stream" in rec and "stream" in rec:
        src_lane = _stream_lane(view, rec["wait_on_stream"])
        dst_lane = _stream_lane(view, rec["stream"])
        if src_lane >= 0 and dst_lane >= 0:
            p = streams.last_before(src_lane, _record_time(view, rec, t, mstart))
            k = streams.first_after(dst_lane, t)
            if p >= 0 and k >= 0 and src_lane != dst_lane:
                edges.add(p, k, _MODE_E2S, DepKind.EVENT)
            return
    launched = thread_launches.get(lane)
    if launched is None:
        return
    j = int(np.searchsorted(launched[0], t, side="left"))
    if j >= len(launched[0]):
        return
    k = int(launched[1][j])
    k_lane = streams.lane_of[k]
    for s in view.gpu_lanes:
        if s == k_lane:
            continue
        p = streams.last_before(s, t)
        if p >= 0 and mend[p] <= mstart[k]:
            edges.add(p, k, _MODE_E2S, DepKind.EVENT)


def _thread_edges(view: RankView, mstart: I64, mend: I64, release: I64, edges: _Edges) -> I64:
    """Cross-thread wake-ups (see the module docstring); returns the lane gap of each op of
    the rank, measured, shortened to the time after the wake-up where one was found. GPU ops'
    gaps are left 0 here (the lag pass sets them)."""
    ids = view.op_ids
    base = int(ids[0]) if len(ids) else 0
    gaps = np.zeros(len(ids), dtype=np.int64)
    cpu = [(lane, view.lane_ops[lane]) for lane in view.cpu_lanes if len(view.lane_ops[lane])]
    if not cpu:
        return gaps
    all_ids = np.concatenate([x for _, x in cpu])
    all_lane = np.concatenate([np.full(len(x), lane, dtype=np.int64) for lane, x in cpu])
    order = np.lexsort((all_ids, mend[all_ids]))
    e_sorted = mend[all_ids][order]
    id_sorted = all_ids[order]
    lane_sorted = all_lane[order]
    first_lane = min(cpu, key=lambda c: int(mstart[c[1][0]]))[0]

    def waker(lane: int, lo: int, hi: int) -> int:
        k = int(np.searchsorted(e_sorted, hi, side="right")) - 1
        while k >= 0 and e_sorted[k] > lo:
            if lane_sorted[k] != lane:
                return int(id_sorted[k])
            k -= 1
        return NONE

    lowest = np.iinfo(np.int64).min
    for lane, lane_ids in cpu:
        q0 = int(lane_ids[0])
        b = waker(lane, lowest, int(mstart[q0])) if lane != first_lane else NONE
        if b >= 0:
            edges.add(b, q0, _MODE_E2S, DepKind.THREAD, int(mstart[q0] - mend[b]))
        else:
            release[q0] = mstart[q0]
        prev = lane_ids[:-1]
        nxt = lane_ids[1:]
        gap = np.maximum(mstart[nxt] - mend[prev], 0)
        gaps[nxt - base] = gap
        for p, q in zip(prev.tolist(), nxt.tolist(), strict=True):
            if mstart[q] <= mend[p]:
                continue
            b = waker(lane, int(mend[p]), int(mstart[q]))
            if b < 0:
                continue
            after = int(mstart[q] - mend[b])
            if after < int(mend[b] - mend[p]):
                edges.add(b, q, _MODE_E2S, DepKind.THREAD, after)
                gaps[q - base] = after
    return gaps
