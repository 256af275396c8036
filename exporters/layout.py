"""Layout shared by the Perfetto exporters: processes, threads, overlap lanes, flows, time base.

Perfetto merges pids/tids of different files and reads them as uint32, so a multi-rank export
renumbers them: one process per (rank, GPU device) and per (rank, OS process), pids 1..P in rank
order, then one tid per output thread, P+1.. in the same order (unique across the whole file).
The original ids stay in the names ("rank 0 CPU (pid 59811)", "thread 59976", "stream 7").
Slices that partly overlap on a lane go to extra lanes (see :mod:`exporters.lanes`). Times are
relative to :attr:`ExportLayout.base_ns`, the earliest aligned start of the job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.model import EventKind, Job, Lane, LaneKind, Trace
from exporters.lanes import assign_lanes
from exporters.links import FlowLinks, build_links

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Mask = npt.NDArray[np.bool_]

#: Name of the per-rank thread that shows one slice per training step.
STEPS_THREAD = "steps"
#: Category of the step slices (so that a re-import can tell them from the trace's own events).
STEP_CATEGORY = "echo_view_step"

_NON_SLICE = np.array([int(EventKind.INSTANT), int(EventKind.COUNTER)], dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class OutProcess:
    """One output process."""

    pid: int
    name: str
    sort_index: int
    rank: int


@dataclass(frozen=True, slots=True)
class OutThread:
    """One output thread (a CPU thread, a GPU stream, an overlap lane or the steps track)."""

    pid: int
    tid: int
    name: str
    sort_index: int
    process: int
    gpu: bool


@dataclass(frozen=True, eq=False)
class RankLayout:
    """Where one rank's events and steps go."""

    index: int
    trace: Trace
    offset_ns: int
    start_ns: I64
    thread: I32
    is_slice: Mask
    step_start_ns: I64
    step_dur_ns: I64
    step_thread: I32


@dataclass(frozen=True, eq=False)
class ExportLayout:
    """Everything both exporters need besides the events themselves."""

    base_ns: int
    processes: tuple[OutProcess, ...]
    threads: tuple[OutThread, ...]
    ranks: tuple[RankLayout, ...]
    links: FlowLinks
    moved: int
    extra_lanes: int

    def event_count(self) -> int:
        """Events of the job (slices, instants, counters)."""
        return sum(len(r.trace) for r in self.ranks)

    def slice_count(self) -> int:
        """Slices a viewer builds from the export: every event but counters (instants are
        zero-length slices) plus one per step."""
        counter = int(EventKind.COUNTER)
        return sum(
            int(np.count_nonzero(r.trace.events.kind != counter)) + len(r.trace.steps)
            for r in self.ranks
        )

    def stats(self, written: int, slices: int) -> ExportStats:
        """Summary of an export that wrote ``written`` trace events and ``slices`` slices."""
        return ExportStats(
            events=written,
            slices=slices,
            slices_moved=self.moved,
            extra_lanes=self.extra_lanes,
            flows=len(self.links),
            flows_skipped=self.links.skipped,
            processes=len(self.processes),
            threads=len(self.threads),
        )


@dataclass(frozen=True, slots=True)
class ExportStats:
    """What an export wrote (the CLI prints it): ``slices`` and ``flows`` are what a viewer's
    slice and flow tables hold after importing the file."""

    events: int
    slices: int
    slices_moved: int
    extra_lanes: int
    flows: int
    flows_skipped: int
    processes: int
    threads: int
    counter_values_dropped: int = 0
    """Counter args that are no number (a ``.pftrace`` counter sample holds a number only)."""

    def one_line(self) -> str:
        dropped = self.counter_values_dropped
        return (
            f"{self.events} events ({self.slices} slices), {self.processes} processes, "
            f"{self.threads} threads, "
            f"{self.slices_moved} slices moved to {self.extra_lanes} overlap lanes, "
            f"{self.flows} flows ({self.flows_skipped} skipped)"
            + (f", {dropped} counter value(s) that are no number left out" if dropped else "")
        )


def _sort_value(value: int | str) -> tuple[int, int, str]:
    return (0, value, "") if isinstance(value, int) else (1, 0, value)


def _process_key(
    lane: Lane, cpu_pids: set[int | str]
) -> tuple[int, tuple[int, int, str], int | str]:
    if lane.kind == LaneKind.GPU_STREAM:
        device: int | str = lane.device if lane.device >= 0 else lane.pid
        return (1, _sort_value(device), device)
    # Other lanes of a process with CPU threads (its async lanes, say) stay in that process.
    klass = 0 if lane.kind == LaneKind.CPU_THREAD or lane.pid in cpu_pids else 2
    return (klass, _sort_value(lane.pid), lane.pid)


def _process_name(rank: int, key: tuple[int, Any, int | str]) -> str:
    klass, _, value = key
    if klass == 1:
        return f"rank {rank} GPU {value}"
    if klass == 0:
        return f"rank {rank} CPU (pid {value})"
    return f"rank {rank} {value}" if value != "" else f"rank {rank} other"


def _thread_name(lane: Lane) -> str:
    name = lane.name.strip()
    if name:
        return name
    if lane.kind == LaneKind.GPU_STREAM:
        return f"stream {lane.stream if lane.stream >= 0 else lane.tid}"
    if lane.kind == LaneKind.OTHER:
        return str(lane.tid) or "events"
    return f"thread {lane.tid}"


def _thread_key(lane: Lane) -> tuple[tuple[int, int, str], str]:
    if lane.kind == LaneKind.GPU_STREAM and lane.stream >= 0:
        return (_sort_value(lane.stream), lane.name)
    return (_sort_value(lane.tid), lane.name)


def _check_durations(trace: Trace) -> None:
    neg = np.flatnonzero(trace.events.dur_ns < 0)
    if len(neg):
        i = int(neg[0])
        raise InputError(
            f"event {trace.name(i)!r} has a negative duration ({int(trace.events.dur_ns[i])} ns)",
            path=trace.source or None,
            where=f"rank {trace.rank} events[{i}]",
            hint="the importer produced an invalid trace; re-import the source file",
        )
    st = trace.steps
    bad = np.flatnonzero(st.end_ns < st.start_ns)
    if len(bad):
        i = int(bad[0])
        raise InputError(
            f"step {int(st.number[i])} ends before it starts",
            path=trace.source or None,
            where=f"rank {trace.rank} steps[{i}]",
            hint="the importer produced an invalid trace; re-import the source file",
        )


def _base_ns(job: Job) -> int:
    starts = []
    for trace, off in zip(job.traces, job.alignment.offsets_ns, strict=True):
        if len(trace):
            starts.append(int(trace.events.start_ns.min()) + off)
        if len(trace.steps):
            starts.append(int(trace.steps.start_ns.min()) + off)
    return min(starts) if starts else 0


@dataclass
class _Proc:
    rank: int
    key: tuple[int, Any, int | str]
    lanes: list[tuple[tuple[tuple[int, int, str], str], int, str, bool, int]]


def build_layout(job: Job) -> ExportLayout:
    """Compute processes, threads, overlap lanes and flows for exporting ``job``."""
    base = _base_ns(job)
    procs: list[_Proc] = []
    # Per rank: lane_no per event, and (lane id -> index into the process's lane list).
    per_rank: list[tuple[npt.NDArray[np.int32], dict[int, tuple[int, int]], int, I32]] = []
    moved = 0
    for trace in job.traces:
        _check_durations(trace)
        ev = trace.events
        is_slice = ~np.isin(ev.kind, _NON_SLICE)
        lane_no = np.zeros(len(ev), dtype=np.int32)
        sl = np.flatnonzero(is_slice)
        lane_no[sl] = assign_lanes(ev.start_ns[sl], ev.dur_ns[sl], ev.lane[sl])
        moved += int(np.count_nonzero(lane_no))
        used = np.unique(ev.lane)
        extra = np.zeros(len(trace.lanes), dtype=np.int32)
        if len(ev):
            np.maximum.at(extra, ev.lane, lane_no)
        by_key: dict[tuple[int, Any, int | str], _Proc] = {}
        placed: dict[int, tuple[int, int]] = {}
        cpu_pids = {
            trace.lanes[i].pid for i in used.tolist() if trace.lanes[i].kind == LaneKind.CPU_THREAD
        }
        for lid in used.tolist():
            lane = trace.lanes[lid]
            key = _process_key(lane, cpu_pids)
            proc = by_key.get(key)
            if proc is None:
                proc = by_key[key] = _Proc(trace.rank, key, [])
            proc.lanes.append(
                (
                    _thread_key(lane),
                    int(extra[lid]),
                    _thread_name(lane),
                    lane.kind == LaneKind.GPU_STREAM,
                    lid,
                )
            )
        ordered = sorted(by_key.values(), key=lambda p: p.key[:2])
        step_lanes = np.zeros(0, dtype=np.int32)
        if len(trace.steps):
            st = trace.steps
            step_lanes = assign_lanes(
                st.start_ns, st.end_ns - st.start_ns, np.zeros(len(st), dtype=np.int64)
            )
            cpu = [p for p in ordered if p.key[0] == 0]
            host = cpu[0] if cpu else (ordered[0] if ordered else None)
            if host is None:
                host = _Proc(trace.rank, (0, _sort_value(""), "steps"), [])
                ordered.insert(0, host)
            # Sorts before every real lane of the process.
            host.lanes.append((((-1, -1, ""), ""), int(step_lanes.max()), STEPS_THREAD, False, -1))
        first = len(procs)
        for pi, proc in enumerate(ordered):
            proc.lanes.sort(key=lambda t: t[0])
            for li, entry in enumerate(proc.lanes):
                placed[entry[4]] = (first + pi, li)
        procs.extend(ordered)
        per_rank.append((lane_no, placed, first, step_lanes))

    processes: list[OutProcess] = []
    threads: list[OutThread] = []
    # (process index, lane index in process) -> first output thread index.
    first_thread: dict[tuple[int, int], int] = {}
    tid = len(procs) + 1
    extra_lanes = 0
    for pi, proc in enumerate(procs):
        pid = pi + 1
        processes.append(OutProcess(pid, _process_name(proc.rank, proc.key), pi, proc.rank))
        sort_index = 0
        for li, (_, n_extra, name, gpu, _lid) in enumerate(proc.lanes):
            first_thread[(pi, li)] = len(threads)
            extra_lanes += n_extra
            for k in range(n_extra + 1):
                label = name if k == 0 else f"{name} (lane {k + 1})"
                threads.append(OutThread(pid, tid, label, sort_index, pi, gpu))
                tid += 1
                sort_index += 1
    if tid > 2**32 - 1:
        raise InputError(f"too many threads to number within uint32 ({tid})")

    ranks: list[RankLayout] = []
    for ti, (trace, off) in enumerate(zip(job.traces, job.alignment.offsets_ns, strict=True)):
        lane_no, placed, _, step_lanes = per_rank[ti]
        ev = trace.events
        lane_first = np.zeros(len(trace.lanes), dtype=np.int32)
        for lid, where in placed.items():
            if lid >= 0:
                lane_first[lid] = first_thread[where]
        thread = (lane_first[ev.lane] + lane_no).astype(np.int32)
        thread.flags.writeable = False
        step_thread = np.zeros(0, dtype=np.int32)
        if len(trace.steps):
            step_thread = (first_thread[placed[-1]] + step_lanes).astype(np.int32)
        shift = off - base
        ranks.append(
            RankLayout(
                index=ti,
                trace=trace,
                offset_ns=off,
                start_ns=(ev.start_ns + shift).astype(np.int64),
                thread=thread,
                is_slice=~np.isin(ev.kind, _NON_SLICE),
                step_start_ns=(trace.steps.start_ns + shift).astype(np.int64),
                step_dur_ns=(trace.steps.end_ns - trace.steps.start_ns).astype(np.int64),
                step_thread=step_thread,
            )
        )
    links = build_links([(r.trace, r.start_ns, r.is_slice) for r in ranks])
    return ExportLayout(
        base_ns=base,
        processes=tuple(processes),
        threads=tuple(threads),
        ranks=tuple(ranks),
        links=links,
        moved=moved,
        extra_lanes=extra_lanes,
    )
