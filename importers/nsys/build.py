"""Turning the file-level event columns of one capture into per-rank :class:`Trace` objects."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from echo_view.model.kinds import EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.model.trace import (
    NONE,
    CollectiveTable,
    DeviceInfo,
    EventTable,
    FlowTable,
    Lane,
    ProcessGroup,
    StepTable,
    Trace,
)
from importers.event_args import event_facts
from importers.nsys.nccl import Collective, Communicator
from importers.nsys.tables import I64, NO_STREAM, Names, Rows, compact, factorize

# Step-like NVTX ranges: "ProfilerStep#3", "step 3", "train_step_3", "iteration 7", "iteration".
_STEP = re.compile(
    r"^(?:ProfilerStep#(\d{1,18})"  # at most 18 digits: a step number is an int64
    r"|(?:train(?:ing)?[ _]?)?(?:step|iteration|iter)(?:[ _#:=-]*(\d{1,18}))?)$",
    re.IGNORECASE,
)
_GPU_LANE_BASE = 1 << 62


def link_launches(work_process: I64, work_corr: I64, rt_process: I64, rt_corr: I64) -> I64:
    """For each GPU work row, the runtime row with the same correlation id in the same process
    (-1 when the launch is not in the capture)."""
    out = np.full(len(work_corr), -1, dtype=np.int64)
    if not len(rt_corr) or not len(work_corr):
        return out
    _, inv = factorize(np.concatenate([rt_process, work_process]))
    # Correlation ids are 32-bit per process; pack (process index, id) into one int64 key.
    key = (inv.astype(np.int64) << 32) | (np.concatenate([rt_corr, work_corr]) & 0xFFFFFFFF)
    rt_key, work_key = key[: len(rt_corr)], key[len(rt_corr) :]
    valid_rt = np.flatnonzero(rt_corr >= 0)
    order = valid_rt[np.argsort(rt_key[valid_rt], kind="stable")]
    if not len(order):
        return out
    pos = np.minimum(np.searchsorted(rt_key[order], work_key), len(order) - 1)
    hit = (rt_key[order[pos]] == work_key) & (work_corr >= 0)
    out[hit] = order[pos[hit]]
    return out


@dataclass
class CaptureInfo:
    """File-level facts that every rank of the capture shares."""

    path: str
    names: Names
    process_names: Mapping[int, str]
    thread_names: Mapping[int, str]
    launch_src: I64  # runtime row of each launch link
    launch_dst: I64  # GPU work row it launched
    collectives: Sequence[Collective]
    comms: Mapping[int, Communicator]
    process_ranks: Mapping[int, int] = field(default_factory=dict)  # globalPid -> capture rank
    metadata: dict[str, Any] = field(default_factory=dict)


def detect_steps(names: Names, rows: Rows, idx: I64) -> tuple[I64, I64, I64] | None:
    """``(number, start, end)`` of step-like NVTX ranges among rows ``idx`` (the thread with the
    most of them wins), or ``None``."""
    ann = idx[rows.kind[idx] == int(EventKind.USER_ANNOTATION)]
    if not len(ann):
        return None
    uniq, inv = compact(rows.name[ann], len(names))
    numbers: list[int] = []
    for g in uniq.tolist():
        m = _STEP.match(names[g])
        numbers.append(-2 if m is None else int(m.group(1) or m.group(2) or -1))
    num = np.array(numbers, dtype=np.int64)[inv.reshape(-1)]
    is_step = num > -2
    hit, hit_num = ann[is_step], num[is_step]
    if not len(hit):
        return None
    threads, counts = np.unique(rows.thread[hit], return_counts=True)
    on_best = rows.thread[hit] == threads[np.argmax(counts)]
    pick, number = hit[on_best], hit_num[on_best]
    o = np.argsort(rows.start[pick], kind="stable")
    pick, number = pick[o], number[o]
    # Ranges named without a number ("iteration") are numbered in time order.
    unnumbered = number < 0
    number[unnumbered] = np.flatnonzero(unnumbered)
    return number, rows.start[pick], rows.end[pick]


def time_order(rows: Rows) -> I64:
    """All rows by start time, longer first on ties (parents before their children), then in
    row order. Each table is nearly sorted already, so a stable sort merges a few runs."""
    order = np.argsort(rows.start, kind="stable")
    start = rows.start[order]
    tie = start[1:] == start[:-1]
    if tie.any():
        near = np.zeros(len(order), dtype=bool)
        near[1:] |= tie
        near[:-1] |= tie
        at = np.flatnonzero(near)  # runs of equal starts: order them by duration
        sub = order[at]
        dur = rows.end[sub] - rows.start[sub]
        order[at] = sub[np.lexsort((sub, -dur, rows.start[sub]))]
    return order


@dataclass(frozen=True)
class LaneIndex:
    """The lanes of a whole capture: ``keys`` ascending and the lane of each row.

    One int64 key per lane: a CPU thread is its globalTid (>= 0); a GPU stream is its place
    among the (process, device, stream) triples, ascending, minus 2**62: negative, so GPU lanes
    come first, by process, device and stream. ``gpu_proc`` and ``gpu_stream`` give each GPU
    lane's process (an index into ``procs``) and ``device << 32 | stream``. Stream ids are per
    CUDA context: when several processes share a GPU in one rank, the process keeps their
    streams apart."""

    keys: I64
    of_row: I64
    procs: I64
    gpu_proc: I64
    gpu_stream: I64


def lane_index(rows: Rows) -> LaneIndex:
    on_gpu = rows.device >= 0
    procs, pidx = factorize(np.where(on_gpu, rows.process, -1))
    g = np.flatnonzero(on_gpu)
    # A device fits 16 bits and a stream 32 (checked where they are read); the process index
    # does not fit what is left, so the triple is numbered in two steps.
    streams, sid = factorize((rows.device[g] << 32) | (rows.stream[g] & 0xFFFFFFFF))
    n = max(len(streams), 1)
    triples, gid = factorize(pidx[g] * n + sid)  # (both below the rows' count: no overflow)
    key = rows.thread.copy()
    key[g] = gid - _GPU_LANE_BASE
    keys, of_row = factorize(key)
    return LaneIndex(keys, of_row, procs, triples // n, streams[triples % n])


def _lanes(
    index: LaneIndex, order: I64, thread_names: Mapping[int, str]
) -> tuple[tuple[Lane, ...], I64]:
    """The lanes of rows ``order`` (a rank) and each row's lane among them."""
    used, lane_of = compact(index.of_row[order], len(index.keys))
    keys = index.keys[used].tolist()
    gpu_procs = {int(index.gpu_proc[k + _GPU_LANE_BASE]) for k in keys if k < 0}
    shared = len(gpu_procs) > 1  # then lane names tell the processes apart
    lanes: list[Lane] = []
    for k in keys:
        if k >= 0:
            tid = k & 0xFFFFFF
            name = thread_names.get(k) or f"thread {tid}"
            lanes.append(Lane(LaneKind.CPU_THREAD, (k >> 24) & 0xFFFFFF, tid, name))
            continue
        k += _GPU_LANE_BASE
        ds = int(index.gpu_stream[k])
        d, s = ds >> 32, ds & 0xFFFFFFFF
        pid = (int(index.procs[index.gpu_proc[k]]) >> 24) & 0xFFFFFF
        suffix = f" (pid {pid})" if shared else ""
        if s == NO_STREAM:  # event and context syncs wait on no stream
            lanes.append(Lane(LaneKind.OTHER, d, "cuda sync", "CUDA sync" + suffix, device=d))
        else:
            lanes.append(Lane(LaneKind.GPU_STREAM, d, s, f"stream {s}{suffix}", device=d, stream=s))
    return tuple(lanes), lane_of


def _trace_correlation(rows: Rows, order: I64) -> I64:
    """The correlation ids of rows ``order``, unique within the trace: CUPTI numbers them per
    process, so when several processes share the rank's GPU each id gets its process's index
    above its 32 bits (the ids the args show stay as recorded). Matched on the id alone, two
    processes' launches met each other's kernels, and the replay found cycles."""
    corr = rows.correlation[order]
    known = corr >= 0
    procs, pidx = factorize(np.where(known, rows.process[order], -1))
    if len(procs) - int(not known.all()) <= 1:
        return corr
    return np.where(known, (pidx.astype(np.int64) << 32) | corr, corr)


def build_trace(
    rank: int,
    rows: Rows,
    order: I64,
    info: CaptureInfo,
    devices: Sequence[DeviceInfo],
    lane_rows: LaneIndex,
) -> Trace:
    """The :class:`Trace` of one rank: rows ``order`` of the capture, in :func:`time_order`."""
    names = info.names
    dur = rows.end - rows.start
    new_pos = np.full(len(rows), -1, dtype=np.int64)
    new_pos[order] = np.arange(len(order))

    ids = np.concatenate([rows.name[order], rows.cat[order]])
    uniq, inv = compact(ids, len(names))
    # Registry ids may share a text: the trace's table holds each text once.
    strings = StringTable()
    sid = np.array([strings.intern(names[int(g)]) for g in uniq.tolist()], dtype=np.int64)
    sid = sid[inv] if len(sid) else inv
    lanes, lane_of = _lanes(lane_rows, order, info.thread_names)
    args_blob, args_offsets = rows.args.take(order).pack()
    correlation = _trace_correlation(rows, order)
    events = EventTable(
        kind=rows.kind[order],
        start_ns=rows.start[order],
        dur_ns=dur[order],
        name=sid[: len(order)],
        cat=sid[len(order) :],
        lane=lane_of,
        correlation=correlation,
        external_id=np.full(len(order), -1, dtype=np.int64),
        args_blob=args_blob,
        args_offsets=args_offsets,
    )

    src, dst = new_pos[info.launch_src], new_pos[info.launch_dst]
    both = (src >= 0) & (dst >= 0)
    ac2g = strings.intern("ac2g")
    flows = FlowTable(
        src=src[both],
        dst=dst[both],
        flow_id=correlation[dst[both]],
        cat=np.full(int(both.sum()), ac2g, dtype=np.int64),
    )
    collectives, groups = _collectives(strings, info, new_pos)

    # Steps (the end of their GPU work is left to echo_view.analysis.steps, the one rule).
    steps = StepTable.empty()
    found = detect_steps(names, rows, order)
    if found is not None:
        number, s_start, s_end = found
        steps = StepTable(
            number=number,
            start_ns=s_start,
            end_ns=s_end,
            gpu_end_ns=np.full(len(number), NONE, dtype=np.int64),
        )
    return Trace(
        rank=rank,
        source=info.path,
        strings=strings,
        events=events,
        lanes=lanes,
        flows=flows,
        collectives=collectives,
        groups=groups,
        steps=steps,
        devices=tuple(devices),
        metadata=dict(info.metadata),
        facts=event_facts(events),
    )


def _members(comm: Communicator | None, info: CaptureInfo) -> tuple[int, ...]:
    """Job ranks of a communicator, in communicator-rank order, when every member's
    ``ncclCommInitRank`` payload is in the capture and each member process is one rank;
    otherwise ``()`` (unknown)."""
    if comm is None or comm.nranks is None or len(comm.members) != comm.nranks:
        return ()
    by_rank = sorted((r, p) for p, r in comm.members.items())
    if [r for r, _ in by_rank] != list(range(comm.nranks)):
        return ()
    if not all(p in info.process_ranks for _, p in by_rank):
        return ()
    return tuple(info.process_ranks[p] for _, p in by_rank)


def _collectives(
    strings: StringTable, info: CaptureInfo, new_pos: I64
) -> tuple[CollectiveTable, tuple[ProcessGroup, ...]]:
    mine = [c for c in info.collectives if new_pos[c.row] >= 0]
    if not mine:
        return CollectiveTable.empty(), ()
    groups: list[ProcessGroup] = []
    group_of: dict[int, int] = {}
    for c in mine:
        if c.comm is None or c.comm in group_of:
            continue
        comm = info.comms.get(c.comm)
        size = comm.nranks if comm is not None else None
        desc = f"NCCL communicator 0x{c.comm:016x}" + (f", {size} ranks" if size else "")
        group_of[c.comm] = len(groups)
        groups.append(ProcessGroup(f"nccl:{c.comm:016x}", _members(comm, info), desc))

    def sid(s: str | None) -> int:
        return -1 if s is None else strings.intern(s)

    table = CollectiveTable(
        event=np.array([new_pos[c.row] for c in mine], dtype=np.int64),
        kind=np.array([int(c.kind) for c in mine], dtype=np.int64),
        bytes=np.array([c.nbytes for c in mine], dtype=np.int64),
        dtype=np.array([sid(c.dtype) for c in mine], dtype=np.int64),
        group=np.array([group_of.get(c.comm, -1) if c.comm is not None else -1 for c in mine]),
        seq=np.full(len(mine), -1, dtype=np.int64),
        algorithm=np.array([sid(c.algorithm) for c in mine], dtype=np.int64),
        protocol=np.array([sid(c.protocol) for c in mine], dtype=np.int64),
    )
    return table, tuple(groups)
