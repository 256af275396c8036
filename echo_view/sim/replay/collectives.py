"""Collectives of a measured job, matched across ranks into collective instances.

Each rank's collective table points at the op that ran each collective (NCCL kernels the table
misses are added from their names). A collective belongs to a group: its process group when the
trace names one, else the world. Within a group the same collective on different ranks is
matched by sequence number when every rank's trace carries one, else by position (the k-th
collective a rank launched on the group). Ranks of a group that are not in the job at all
(a job traced on a subset of its ranks) are left out of the instance: replay treats them as
arriving on time.

When a trace records no payload for a collective (older Kineto writes no ``In msg nelems``),
it is read from the ``nccl:<collective>`` annotation around the collective's launch, whose
``Input Dims`` and ``Input type`` give the element count and size; that annotation also names
the collective when the kernel is NCCL's generic point-to-point one (``SendRecv`` running an
all-to-all).

The measured transfer time of an instance is the duration of the participant that started
last: it started when everyone else was already waiting, so its kernel time is the transfer
alone, and it is read off one rank's clock (no cross-rank clock error).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import (
    NONE,
    CollectiveKind,
    EventKind,
    Job,
    ProcessGroup,
    Trace,
    collective_kind_from_name,
    parse_comm_kernel_name,
)
from echo_view.model.dtypes import dtype_bytes
from echo_view.model.workload import CollectiveSpecs
from echo_view.sim.replay.deps import RankView

I64 = npt.NDArray[np.integer[Any]]
_GroupKey = tuple[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Matched:
    """Collective instances and the ops taking part in them."""

    specs: CollectiveSpecs
    groups: tuple[ProcessGroup, ...]
    op_ids: I64
    op_coll: I64
    matched_by: str
    absent_ranks: int


@dataclass(slots=True)
class _Entry:
    t: int
    op: int
    seq: int
    kind: int
    nbytes: int


def match_collectives(
    job: Job, views: list[RankView], mstart: I64, mend: I64, world: int | None
) -> Matched:
    """Instances of ``job``'s collectives (see the module docstring)."""
    world_ranks = tuple(range(world)) if world else tuple(job.ranks)
    per_group: dict[_GroupKey, dict[int, list[_Entry]]] = {}
    for view in views:
        for key, entry in _rank_entries(view, mstart, world_ranks):
            per_group.setdefault(key, {}).setdefault(view.trace.rank, []).append(entry)
    present = set(job.ranks)
    groups: list[ProcessGroup] = []
    kind_c: list[int] = []
    bytes_c: list[int] = []
    group_c: list[int] = []
    seq_c: list[int] = []
    meas_c: list[int] = []
    op_ids: list[int] = []
    op_coll: list[int] = []
    modes: set[str] = set()
    absent = 0
    for key in sorted(per_group):
        by_rank = per_group[key]
        gid = len(groups)
        groups.append(ProcessGroup(key[0], key[1]))
        absent = max(absent, len(set(key[1]) - present))
        for entries in by_rank.values():
            entries.sort(key=lambda e: (e.t, e.op))
        use_seq = all(e.seq >= 0 for entries in by_rank.values() for e in entries)
        modes.add("sequence" if use_seq else "order")
        instances: dict[int, list[_Entry]] = {}
        for entries in by_rank.values():
            for pos, e in enumerate(entries):
                instances.setdefault(e.seq if use_seq else pos, []).append(e)
        for seq in sorted(instances):
            members = instances[seq]
            c = len(kind_c)
            known = [e.kind for e in members if e.kind != int(CollectiveKind.UNKNOWN)]
            kind_c.append(known[0] if known else int(CollectiveKind.UNKNOWN))
            bytes_c.append(max(e.nbytes for e in members))
            group_c.append(gid)
            seq_c.append(seq)
            last = max(members, key=lambda e: (int(mstart[e.op]), -e.op))
            meas_c.append(int(mend[last.op] - mstart[last.op]))
            for e in members:
                op_ids.append(e.op)
                op_coll.append(c)
    return Matched(
        specs=CollectiveSpecs(
            kind=np.array(kind_c, dtype=np.int64),
            bytes=np.array(bytes_c, dtype=np.int64),
            group=np.array(group_c, dtype=np.int64),
            seq=np.array(seq_c, dtype=np.int64),
            measured_ns=np.array(meas_c, dtype=np.int64),
        ),
        groups=tuple(groups),
        op_ids=np.array(op_ids, dtype=np.int64),
        op_coll=np.array(op_coll, dtype=np.int64),
        matched_by="+".join(sorted(modes)) if modes else "none",
        absent_ranks=absent,
    )


def _rank_entries(
    view: RankView, mstart: I64, world_ranks: tuple[int, ...]
) -> list[tuple[_GroupKey, _Entry]]:
    trace = view.trace
    cs = trace.collectives
    out: list[tuple[_GroupKey, _Entry]] = []
    base = int(view.op_ids[0]) if len(view.op_ids) else 0
    covered: set[int] = set()

    def when(op: int) -> int:
        launch = int(view.launch_of[op - base]) if len(view.launch_of) else NONE
        return int(mstart[launch if launch >= 0 else op])

    notes = _Annotations(view)
    for row in range(len(cs)):
        op = int(view.op_of_row[int(cs.event[row])])
        if op < 0 or op in covered:
            continue
        covered.add(op)
        g = int(cs.group[row])
        key: _GroupKey = ("", world_ranks)
        if g >= 0:
            pg = trace.groups[g]
            key = (pg.name, tuple(pg.ranks) if pg.ranks else world_ranks)
        kind, nbytes = notes.fill(op, int(cs.kind[row]), int(cs.bytes[row]))
        out.append((key, _Entry(when(op), op, int(cs.seq[row]), kind, nbytes)))
    for lane in view.gpu_lanes:
        for op in view.lane_ops[lane].tolist():
            if op in covered:
                continue
            name = int(trace.events.name[int(view.src_row[op - base])])
            info = parse_comm_kernel_name(trace.strings[name])
            if info is None:
                continue
            kind, nbytes = notes.fill(op, int(info.collective), NONE)
            out.append((("", world_ranks), _Entry(when(op), op, NONE, kind, nbytes)))
    return out


_GENERIC = {int(CollectiveKind.SEND_RECV), int(CollectiveKind.UNKNOWN)}


class _Annotations:
    """``nccl:<collective>`` annotations of one rank, to fill in what a collective row lacks."""

    def __init__(self, view: RankView) -> None:
        self.view = view
        trace = view.trace
        ev = trace.events
        ann = np.flatnonzero(ev.kind == int(EventKind.USER_ANNOTATION))
        keep = [r for r in ann.tolist() if trace.strings[int(ev.name[r])].startswith("nccl:")]
        self.rows = np.array(keep, dtype=np.int64)

    def fill(self, op: int, kind: int, nbytes: int) -> tuple[int, int]:
        """``(kind, bytes)`` of the collective run by ``op``, completed from its annotation."""
        if not len(self.rows) or (nbytes >= 0 and kind not in _GENERIC):
            return kind, nbytes
        view = self.view
        base = int(view.op_ids[0])
        launch = int(view.launch_of[op - base])
        if launch < 0:
            return kind, nbytes
        ev = view.trace.events
        row = int(view.src_row[launch - base])
        t, lane = int(ev.start_ns[row]), int(ev.lane[row])
        rows = self.rows
        start = ev.start_ns[rows]
        around = rows[(ev.lane[rows] == lane) & (start <= t) & (start + ev.dur_ns[rows] >= t)]
        if not len(around):
            return kind, nbytes
        r = int(around[np.argmax(ev.start_ns[around])])  # the innermost
        name = view.trace.strings[int(ev.name[r])].removeprefix("nccl:")
        named = int(collective_kind_from_name(name))
        if kind in _GENERIC and named != int(CollectiveKind.UNKNOWN):
            kind = named
        if nbytes < 0:
            nbytes = _payload(view.trace, r)
        return kind, nbytes


def _payload(trace: Trace, row: int) -> int:
    """Bytes of the first input of event ``row``'s recorded inputs (-1 unknown)."""
    inputs = trace.facts.op_inputs_of([row])  # one row: the whole table is not built for it
    i = int(inputs.row_of(np.array([row]))[0])
    if i < 0:
        return NONE
    dims, types = inputs.value(int(inputs.dims[i])), inputs.value(int(inputs.types[i]))
    if not dims or not types:
        return NONE
    shape, dtype = dims[0], types[0]
    size = dtype_bytes(dtype)
    if size is None or not isinstance(shape, tuple) or not shape:
        return NONE
    count = 1
    for d in shape:
        if not isinstance(d, int) or d < 0:
            return NONE
        count *= d
    return count * size
