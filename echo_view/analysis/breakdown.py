"""Where each step's time goes on each GPU: compute, communication, memory, idle.

Definitions (per rank, per step, per GPU device; all times int64 ns):

- **GPU work** is every kernel, memcpy and memset on the device's streams. It is labelled
  *communication* when it is an NCCL/RCCL or DeepEP kernel
  (:func:`~echo_view.model.comm_kernels.is_comm_kernel`, or the trace's collective table points
  at it), *memory* when it is a memcpy or memset, and
  *compute* otherwise (every other kernel).
- **Union semantics.** A label is *active* at time ``t`` when at least one of its events, on any
  stream of the device, covers ``t``. Two kernels of one label running concurrently on two
  streams count once; the categories below measure sets of instants, not sums of durations.
- **Step window** ``[window_start, window_end)``: ``window_end = max(cpu_end, gpu_end)``, where
  ``gpu_end`` is the latest end of the GPU work launched during the step's CPU span (see
  :mod:`echo_view.analysis.steps`); ``window_start = max(cpu_start, end of the previous step's
  window)``. Windows are therefore disjoint: when the GPU still runs step N's work after the CPU
  has entered step N+1, that time belongs to step N, and step N+1 starts where step N's window
  ends. All GPU work inside a window counts (clipped to it), whichever step launched it.
- ``compute_ns`` = time compute is active.
- ``comm_ns`` = time communication is active (overlapped or not).
- ``exposed_comm_ns`` = time communication is active and compute is not.
- ``memory_ns`` = time memory work is active and no kernel (compute or communication) is.
- ``idle_ns`` = time no GPU work is active.

So ``compute_ns + exposed_comm_ns + memory_ns + idle_ns == window_end - window_start`` exactly,
and ``comm_ns - exposed_comm_ns`` is the communication hidden under compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.analysis.intervals import pattern_measure
from echo_view.analysis.steps import StepDetection, find_steps
from echo_view.model import GPU_WORK_KINDS, NONE, EventKind, Lane, LaneKind, Trace, is_comm_kernel
from echo_view.model.columns import groups
from echo_view.model.trace import latest_end

I64 = npt.NDArray[np.int64]

#: Label values (bit positions in :func:`~echo_view.analysis.intervals.pattern_measure`).
COMPUTE, COMM, MEMORY = 0, 1, 2
N_LABELS = 3
_PATTERNS = np.arange(1 << N_LABELS)
_HAS_COMPUTE = (_PATTERNS >> COMPUTE) & 1 == 1
_HAS_COMM = (_PATTERNS >> COMM) & 1 == 1
_HAS_MEMORY = (_PATTERNS >> MEMORY) & 1 == 1


@dataclass(frozen=True, eq=False)
class GpuWork:
    """The GPU work of one trace: event rows, their labels and their devices."""

    rows: I64
    labels: I64
    device: I64


def nccl_name_ids(trace: Trace) -> npt.NDArray[np.int32]:
    """String ids of the kernel names that are communication kernels (NCCL/RCCL, DeepEP; one
    check per distinct name)."""
    kernels = trace.mask(EventKind.KERNEL)
    ids = np.unique(trace.events.name[kernels])
    return np.array([i for i in ids if is_comm_kernel(trace.strings[int(i)])], dtype=np.int32)


def _device_of(lane: Lane) -> int:
    if lane.device != NONE:
        return lane.device
    # Kineto's convention: a GPU stream's pid is the device index.
    if lane.kind == LaneKind.GPU_STREAM and isinstance(lane.pid, int):
        return lane.pid
    return NONE


def gpu_work(trace: Trace) -> GpuWork:
    """Label every kernel, memcpy and memset of ``trace`` (see the module docstring)."""
    ev = trace.events
    kind = ev.kind
    rows = np.flatnonzero(trace.mask(*GPU_WORK_KINDS)).astype(np.int64)
    labels = np.full(len(rows), COMPUTE, dtype=np.int64)
    k = kind[rows]
    labels[(k == int(EventKind.MEMCPY)) | (k == int(EventKind.MEMSET))] = MEMORY
    is_kernel = k == int(EventKind.KERNEL)
    comm = np.isin(ev.name[rows], nccl_name_ids(trace)) | np.isin(rows, trace.collectives.event)
    labels[is_kernel & comm] = COMM
    lane_device = np.array([_device_of(lane) for lane in trace.lanes], dtype=np.int64)
    device = lane_device[ev.lane[rows]] if len(rows) else np.empty(0, dtype=np.int64)
    return GpuWork(rows=rows, labels=labels, device=device)


@dataclass(frozen=True, eq=False)
class Categories:
    """Category times (ns) for a set of windows; index ``i`` is window ``i``."""

    window_ns: I64
    compute_ns: I64
    comm_ns: I64
    exposed_comm_ns: I64
    memory_ns: I64
    idle_ns: I64


def categorize(
    starts: npt.ArrayLike,
    ends: npt.ArrayLike,
    labels: npt.ArrayLike,
    win_starts: npt.ArrayLike,
    win_ends: npt.ArrayLike,
) -> Categories:
    """Category times of labelled intervals (one device) inside sorted, disjoint windows."""
    p = pattern_measure(
        starts, ends, np.asarray(labels, dtype=np.int64), N_LABELS, win_starts, win_ends
    )
    compute = p[:, _HAS_COMPUTE].sum(axis=1)
    comm = p[:, _HAS_COMM].sum(axis=1)
    exposed = p[:, _HAS_COMM & ~_HAS_COMPUTE].sum(axis=1)
    memory = p[:, _HAS_MEMORY & ~_HAS_COMM & ~_HAS_COMPUTE].sum(axis=1)
    return Categories(
        window_ns=p.sum(axis=1),
        compute_ns=compute,
        comm_ns=comm,
        exposed_comm_ns=exposed,
        memory_ns=memory,
        idle_ns=p[:, 0],
    )


@dataclass(frozen=True, eq=False)
class StepBreakdown:
    """One row per (step, device) of one rank; the columns are described in the module doc."""

    rank: int
    rule: str
    detected: bool
    step: I64
    device: I64
    cpu_start_ns: I64
    cpu_end_ns: I64
    gpu_end_ns: I64
    window_start_ns: I64
    window_end_ns: I64
    compute_ns: I64
    comm_ns: I64
    exposed_comm_ns: I64
    memory_ns: I64
    idle_ns: I64

    def __len__(self) -> int:
        return len(self.step)

    @property
    def cpu_ns(self) -> I64:
        """CPU step span (the ``ProfilerStep`` duration)."""
        return self.cpu_end_ns - self.cpu_start_ns

    @property
    def window_ns(self) -> I64:
        """Step window length: the step's wall time on the GPU side."""
        return self.window_end_ns - self.window_start_ns

    @property
    def busy_ns(self) -> I64:
        """Time any GPU work is active (``window_ns - idle_ns``)."""
        return self.compute_ns + self.exposed_comm_ns + self.memory_ns

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(int(d) for d in np.unique(self.device))


def step_windows(cpu_start: I64, cpu_end: I64, gpu_end: I64) -> tuple[I64, I64]:
    """Disjoint step windows from steps sorted by CPU start (see the module docstring)."""
    end = latest_end(cpu_end, gpu_end)
    prev_end = np.empty_like(end)
    if len(end):
        prev_end[0] = np.iinfo(np.int64).min
        prev_end[1:] = np.maximum.accumulate(end)[:-1]
    start = np.maximum(cpu_start, prev_end)
    return start, np.maximum(end, start)


def breakdown(trace: Trace, steps: StepDetection | None = None) -> StepBreakdown:
    """Per step and device category times of ``trace`` (steps found by ``find_steps``)."""
    found = steps if steps is not None else find_steps(trace)
    table = found.table
    order = np.argsort(table.start_ns, kind="stable")
    cpu_start = np.asarray(table.start_ns, dtype=np.int64)[order]
    cpu_end = np.asarray(table.end_ns, dtype=np.int64)[order]
    gpu_end = np.asarray(table.gpu_end_ns, dtype=np.int64)[order]
    win_start, win_end = step_windows(cpu_start, cpu_end, gpu_end)

    work = gpu_work(trace)
    n_steps = len(order)
    starts, ends = trace.events.start_ns, trace.events.end_ns  # (end_ns is computed: once)
    devices: list[int] = []
    parts: list[Categories] = []
    for dev, sel in groups(work.device):
        rows = work.rows[sel]
        devices.append(dev)
        parts.append(categorize(starts[rows], ends[rows], work.labels[sel], win_start, win_end))

    def col(values: I64) -> I64:
        return np.tile(values, len(devices))

    def cat(name: str) -> I64:
        if not parts:
            return np.empty(0, dtype=np.int64)
        return np.concatenate([getattr(c, name) for c in parts])

    return StepBreakdown(
        rank=trace.rank,
        rule=found.rule,
        detected=table.detected,
        step=col(np.asarray(table.number, dtype=np.int64)[order]),
        device=np.repeat(np.array(devices, dtype=np.int64), n_steps),
        cpu_start_ns=col(cpu_start),
        cpu_end_ns=col(cpu_end),
        gpu_end_ns=col(gpu_end),
        window_start_ns=col(win_start),
        window_end_ns=col(win_end),
        compute_ns=cat("compute_ns"),
        comm_ns=cat("comm_ns"),
        exposed_comm_ns=cat("exposed_comm_ns"),
        memory_ns=cat("memory_ns"),
        idle_ns=cat("idle_ns"),
    )
