"""HolisticTraceAnalysis' temporal breakdown, recomputed with echo-view's interval arithmetic.

HTA 0.5.0 (``TraceAnalysis.get_temporal_breakdown`` and ``get_comm_comp_overlap``) measures
a rank over one window rather than per step. Its definitions, reproduced here so the two tools
can be compared number for number:

- **Times in whole µs.** When a file's timestamps are fractional, HTA rounds every event to
  ``[ceil(ts), floor(ts + dur))`` in µs (``HTA_DISABLE_NS_ROUNDING`` turns it off). Rounding an
  already whole-µs time is the identity, so ``round_to_us=True`` reproduces HTA on both kinds of
  file. An event shorter than the rounding keeps a negative length in HTA; here it is empty.
- **Which GPU work.** When the loaded job has more than one distinct ``ProfilerStep#N`` name,
  HTA keeps, per rank, the GPU work whose launch (same correlation id) started before the
  rank's last ``ProfilerStep`` row: the last, possibly truncated, step is left out, and work
  launched before the first step is kept. With zero or one step name nothing is filtered.
  HTA counts GPU-side ``ProfilerStep`` annotations among those rows (they have no stream):
  where the profiler wrote them, the "last step start" is the GPU annotation of the last step,
  after all CPU activity, so the last step's work stays in.
- **Window** = first start to last end of that GPU work (kernels, memcpy, memset on all streams
  and devices of the rank together). HTA takes every event with a stream as GPU work, so CUDA
  synchronisation events on a stream (Nsight's and Kineto's ``cuda_sync``: ``Stream Wait
  Event``, ``Stream Sync``...) count too: as compute unless the name contains ``Sync`` (HTA's
  ``is_compute_kernel``), else as non-compute; echo-view's own breakdown leaves them out.
- ``idle`` = window minus the union of all that work; ``compute`` = union of compute kernels;
  ``non_compute = window - compute - idle`` (time only communication or memory work runs,
  i.e. echo-view's ``exposed_comm + memory``); ``overlap`` = share of the communication union
  that compute covers.

Kernel labels are echo-view's (:func:`~echo_view.analysis.breakdown.gpu_work`). HTA calls a
kernel compute unless its name matches ``^nccl.*Kernel``, ``.*Memcpy``, ``^Memset`` or ``.*Sync``;
the two agree on every kernel of the traces compared in docs/accuracy.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.analysis.breakdown import COMPUTE, MEMORY, categorize, gpu_work
from echo_view.analysis.steps import launch_start_ns
from echo_view.model import NONE, EventKind, Job, LaneKind, Trace

I64 = npt.NDArray[np.int64]
_US = 1_000
_STEP = "ProfilerStep"
#: HTA 0.5.0's non-compute kernel names (``hta/utils/utils.py``, ``NCCL_COMPUTE_KERNEL_RE``).
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


@dataclass(frozen=True)
class HtaBreakdown:
    """One rank's HTA-style temporal breakdown (ns; whole µs when rounded)."""

    rank: int
    window_ns: int
    idle_ns: int
    compute_ns: int
    non_compute_ns: int
    comm_ns: int
    overlap_ns: int
    events: int

    def pct(self, ns: int) -> float:
        """``ns`` as a percentage of the window."""
        return 100.0 * ns / self.window_ns if self.window_ns else 0.0

    @property
    def overlap_pct(self) -> float:
        """Communication time overlapped by compute, in % of communication time."""
        return 100.0 * self.overlap_ns / self.comm_ns if self.comm_ns else 0.0


def _ceil_us(ns: I64) -> I64:
    return -(-ns // _US) * _US


def _floor_us(ns: I64) -> I64:
    return (ns // _US) * _US


def _step_rows(trace: Trace) -> npt.NDArray[np.bool_]:
    """Events HTA takes for ``ProfilerStep`` rows: CPU events and GPU-side annotations (HTA
    files a ``gpu_user_annotation`` with no stream among the CPU events) whose name contains
    the substring."""
    where = trace.lane_mask(LaneKind.CPU_THREAD) | trace.mask(EventKind.GPU_ANNOTATION)
    ids = [int(i) for i in np.unique(trace.events.name[where]) if _STEP in trace.strings[int(i)]]
    return where & np.isin(trace.events.name, np.array(ids, dtype=np.int32))


def _last_step_start(trace: Trace) -> int | None:
    rows = _step_rows(trace)
    return int(trace.events.start_ns[rows].max()) if rows.any() else None


def _hta_work(trace: Trace) -> tuple[I64, I64]:
    """``(rows, labels)`` of what HTA takes for GPU work: echo-view's, plus synchronisation
    events on a stream (compute unless HTA's name rule says otherwise; non-compute is labelled
    memory, which HTA's quantities do not tell apart from communication)."""
    work = gpu_work(trace)
    sync = np.flatnonzero(trace.mask(EventKind.SYNC) & trace.lane_mask(LaneKind.GPU_STREAM))
    names = [trace.name(int(i)) for i in sync]
    sync_labels = [MEMORY if _HTA_NOT_COMPUTE.match(n) else COMPUTE for n in names]
    rows = np.concatenate([work.rows, sync.astype(np.int64)])
    labels = np.concatenate([work.labels, np.array(sync_labels, dtype=np.int64)])
    return rows, labels


def hta_breakdown(trace: Trace, *, filter_steps: bool, round_to_us: bool = True) -> HtaBreakdown:
    """HTA's temporal breakdown of one rank (see the module docstring)."""
    rows, labels = _hta_work(trace)
    start = np.asarray(trace.events.start_ns[rows], dtype=np.int64)
    end = np.asarray(trace.events.end_ns[rows], dtype=np.int64)
    if round_to_us:
        start, end = _ceil_us(start), _floor_us(end)
    if filter_steps:
        last = _last_step_start(trace)
        launch = launch_start_ns(trace)[rows]
        keep = (launch != NONE) & (trace.events.correlation[rows] >= 0)
        if last is not None:
            cut = int(_ceil_us(np.array([last]))[0]) if round_to_us else last
            launched = _ceil_us(launch) if round_to_us else launch
            keep &= launched < cut
        start, end, labels = start[keep], end[keep], labels[keep]
    if not len(start):
        return HtaBreakdown(trace.rank, 0, 0, 0, 0, 0, 0, 0)
    lo = int(start.min())
    hi = int(np.maximum(end, start).max())
    cats = categorize(start, end, labels, [lo], [hi])
    window = int(cats.window_ns[0])
    idle = int(cats.idle_ns[0])
    compute = int(cats.compute_ns[0])
    comm = int(cats.comm_ns[0])
    return HtaBreakdown(
        rank=trace.rank,
        window_ns=window,
        idle_ns=idle,
        compute_ns=compute,
        non_compute_ns=window - compute - idle,
        comm_ns=comm,
        overlap_ns=comm - int(cats.exposed_comm_ns[0]),
        events=len(start),
    )


def hta_job_breakdown(job: Job, *, round_to_us: bool = True) -> list[HtaBreakdown]:
    """HTA's temporal breakdown of every rank; step filtering is decided over the whole job,
    as HTA decides it over all the files it loaded."""
    names: set[str] = set()
    for trace in job.traces:
        names |= {trace.strings[int(i)] for i in np.unique(trace.events.name[_step_rows(trace)])}
    return [
        hta_breakdown(t, filter_steps=len(names) > 1, round_to_us=round_to_us) for t in job.traces
    ]
