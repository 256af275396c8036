"""Row-by-row construction of a :class:`~echo_view.model.workload.Workload` (tests, small
generators, converters); bulk producers such as replay build the columns directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from echo_view.model.columns import ColumnBuilder
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.model.trace import NONE, Lane, ProcessGroup
from echo_view.model.workload import (
    CLASS_COLLECTIVE,
    CLASS_OTHER,
    CollectiveSpecs,
    DepKind,
    DepMode,
    DepTable,
    OpTable,
    StepMarks,
    Workload,
)

_OP_DTYPES = {
    "rank": "i4",
    "lane": "i4",
    "kind": "u1",
    "op_class": "u1",
    "name": "i4",
    "dur_ns": "i8",
    "gap_ns": "i8",
    "release_ns": "i8",
    "step": "i4",
    "coll": "i4",
    "source": "i4",
}


class WorkloadBuilder:
    """Add lanes, ops, dependencies, collectives and steps; :meth:`build` freezes them.

    Ops on one lane run in the order they are added.
    """

    def __init__(self, world_size: int | None = None) -> None:
        self.strings = StringTable()
        self._lanes: list[Lane] = []
        self._lane_rank: list[int] = []
        self._lane_ids: dict[tuple[int, Lane], int] = {}
        self._ops = ColumnBuilder(_OP_DTYPES)
        self._deps = ColumnBuilder(
            {"src": "i4", "dst": "i4", "mode": "u1", "lag": "i8", "kind": "u1"}
        )
        self._colls = ColumnBuilder(
            {"kind": "u1", "bytes": "i8", "group": "i4", "seq": "i8", "measured_ns": "i8"}
        )
        self._groups: list[ProcessGroup] = []
        self._group_ids: dict[ProcessGroup, int] = {}
        self._steps = ColumnBuilder({"rank": "i4", "number": "i8", "marker": "i4"})
        self.world_size = world_size
        self.meta: dict[str, Any] = {}

    def lane(self, rank: int, kind: LaneKind, name: str, *, device: int = NONE) -> int:
        """Id of a CPU thread or GPU stream of ``rank`` (added if new)."""
        lane = Lane(kind, rank, name, name, device=device)
        key = (rank, lane)
        lid = self._lane_ids.get(key)
        if lid is None:
            lid = len(self._lanes)
            self._lanes.append(lane)
            self._lane_rank.append(rank)
            self._lane_ids[key] = lid
        return lid

    def op(
        self,
        lane: int,
        name: str,
        dur_ns: int,
        *,
        kind: EventKind | None = None,
        op_class: int = CLASS_OTHER,
        gap_ns: int = 0,
        release_ns: int = NONE,
        step: int = NONE,
        source: int = NONE,
        coll: int = NONE,
    ) -> int:
        """Append an op to ``lane``; returns its id."""
        lane_obj = self._lanes[lane]
        if kind is None:
            kind = EventKind.KERNEL if lane_obj.kind == LaneKind.GPU_STREAM else EventKind.RUNTIME
        return self._ops.append(
            rank=self._lane_rank[lane],
            lane=lane,
            kind=int(kind),
            op_class=op_class,
            name=self.strings.intern(name),
            dur_ns=dur_ns,
            gap_ns=gap_ns,
            release_ns=release_ns,
            step=step,
            coll=coll,
            source=source,
        )

    def dep(
        self,
        src: int,
        dst: int,
        *,
        mode: DepMode = DepMode.END_TO_START,
        lag_ns: int = 0,
        kind: DepKind = DepKind.DATA,
    ) -> None:
        """``dst`` waits on ``src`` as ``mode`` says."""
        self._deps.append(src=src, dst=dst, mode=int(mode), lag=lag_ns, kind=int(kind))

    def group(self, ranks: Sequence[int], name: str = "") -> int:
        """Id of a communicator (added if new)."""
        pg = ProcessGroup(name, tuple(ranks))
        gid = self._group_ids.get(pg)
        if gid is None:
            gid = len(self._groups)
            self._groups.append(pg)
            self._group_ids[pg] = gid
        return gid

    def collective(
        self,
        kind: CollectiveKind,
        group: int,
        *,
        nbytes: int = NONE,
        seq: int = NONE,
        measured_ns: int = NONE,
    ) -> int:
        """A new collective instance; attach ops to it with :meth:`participant`."""
        return self._colls.append(
            kind=int(kind), bytes=nbytes, group=group, seq=seq, measured_ns=measured_ns
        )

    def participant(self, lane: int, coll: int, name: str = "", **kw: Any) -> int:
        """Append ``lane``'s op for collective ``coll``; returns the op id."""
        kw.setdefault("op_class", CLASS_COLLECTIVE)
        return self.op(lane, name or f"collective {coll}", 0, coll=coll, **kw)

    def step(self, rank: int, number: int, marker: int) -> int:
        """Step ``number`` of ``rank`` starts when op ``marker`` starts."""
        return self._steps.append(rank=rank, number=number, marker=marker)

    def build(self) -> Workload:
        ops = self._ops.columns()
        n = len(self._ops)
        deps = self._deps.columns()
        return Workload(
            strings=self.strings,
            lanes=tuple(self._lanes),
            lane_rank=np.array(self._lane_rank, dtype=np.int32),
            ops=OpTable(**ops),
            deps=DepTable.from_edges(
                n, deps["src"], deps["dst"], deps["mode"], deps["lag"], deps["kind"]
            ),
            collectives=CollectiveSpecs(**self._colls.columns()),
            groups=tuple(self._groups),
            steps=StepMarks(**self._steps.columns()),
            world_size=self.world_size,
            meta=self.meta,
        )
