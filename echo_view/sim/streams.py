"""A traced step whose ops run on several streams, as a composed rank program.

A graph traced from a training script records the stream of every op and the waits between
streams (:class:`~echo_view.model.graph.OpTable`, ``stream`` and ``wait``; FSDP2's all-gather
copy-in, all-gather and reduce-scatter streams, each process group's communication stream).
Each traced stream becomes a lane of the rank (stream 0 the compute lane) and each wait row a
zero-time synchronisation op on its lane that depends on the end of the op it waits for, so
a collective overlaps the compute it does not block, as on the GPU.

The rank runs every micro-batch's forward and backward (pp = 1), then the optimizer. A wait
refers to a step-wide row; it is bound to the op that row most recently became (passes repeat
per micro-batch, as a CUDA event refers to its latest record). Consecutive rows of one stream
with nothing waiting in between become one op (``ranks="stages"``) — exact, as a pass of one
stream is — or one op each (``ranks="all"``, collectives matched across ranks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from echo_view.model.graph import AXES, OpClass, OpTable
from echo_view.model.kinds import EventKind
from echo_view.sim.compose_costs import TableCost
from echo_view.sim.schedule import schedule

if TYPE_CHECKING:
    from echo_view.sim.compose import _Composer

#: Stream numbers of a rank's lanes for traced streams 1, 2, ... (above the composer's own).
FIRST_STREAM = 32


def uses_streams(tables: tuple[OpTable, ...]) -> bool:
    """Whether a role's tables place ops on more than the compute stream."""
    return any(t.streams_used for t in tables)


class StreamRank:
    """Builds one rank's step from a graph with streams on a
    :class:`~echo_view.sim.compose._Composer` (module docstring)."""

    def __init__(self, comp: _Composer, rank: int, role_idx: int, compute_lane: int) -> None:
        self.comp, self.rank, self.role_idx = comp, rank, role_idx
        self.lanes = {0: compute_lane}
        role = comp.graph.roles[role_idx]
        tables = (role.forward[0], role.backward[0], role.optimizer)
        sizes = np.cumsum([0] + [len(t) for t in tables])
        self.offset = {
            "forward": int(sizes[0]),
            "backward": int(sizes[1]),
            "optimizer": int(sizes[2]),
        }
        waits = np.concatenate([t.wait for t in tables])
        #: Step-wide rows some wait refers to: each ends the op it is in.
        self.awaited = frozenset(waits[waits >= 0].tolist())
        #: Step-wide row -> the composer op it last became.
        self.op_of: dict[int, int] = {}
        self.names = self._stream_names(tables)

    def _stream_names(self, tables: tuple[OpTable, ...]) -> dict[int, str]:
        """A readable name per traced stream: the axis of the collectives it runs, if any."""
        names: dict[int, str] = {}
        for t in tables:
            for i in t.collective_rows().tolist():
                names.setdefault(int(t.stream[i]), f"communication, {AXES[int(t.axis[i])]}")
        return names

    def lane(self, stream: int) -> int:
        if stream not in self.lanes:
            number = FIRST_STREAM + stream
            what = self.names.get(stream, "side stream")
            self.lanes[stream] = self.comp.lane(self.rank, number, f"stream {number} ({what})")
        return self.lanes[stream]

    def emit(self, tc: TableCost, phase: str, label: str) -> None:
        """One run of a phase's table on the rank's lanes."""
        comp, t, base = self.comp, tc.table, self.offset[phase]
        tid = comp.table_id(tc)
        n = len(t)
        stream, wait, coll = t.stream, t.wait, tc.coll
        i = 0
        while i < n:
            s = int(stream[i])
            lane = self.lane(s)
            if wait[i] >= 0:
                op = comp.op(self.rank, lane, "cudaStreamWaitEvent", 0, kind=EventKind.SYNC)
                src = self.op_of.get(int(wait[i]))
                if src is not None:
                    comp.edges.append((src, op))
                self.op_of[base + i] = op
                i += 1
                continue
            if coll[i]:
                self.op_of[base + i] = comp.collective_row(self.rank, lane, tc, tid, i)
                i += 1
                continue
            # A run: this stream's rows up to the next row of another stream, wait or
            # collective, or up to an awaited row (one row each with ranks="all").
            hi = i + 1
            while (
                not comp.fine
                and hi < n
                and base + hi - 1 not in self.awaited
                and int(stream[hi]) == s
                and wait[hi] < 0
                and not coll[hi]
            ):
                hi += 1
            name = comp.graph.strings[int(t.name[i])] if comp.fine else f"{label} ops {i}-{hi - 1}"
            op = comp.op(
                self.rank,
                lane,
                name,
                int(tc.dur_ns[i:hi].sum()),
                cls=int(t.op_class[i]) if comp.fine else OpClass.OTHER,
                src=(tid, i, hi),
                issue=False,
            )
            costs = comp.issue_costs(tc)[i:hi]
            op = comp.issue(self.rank, op, op, costs, comp.tail_lag(tid, tc, i, hi))
            for r in range(i, hi):
                self.op_of[base + r] = op
            i = hi

    def run(self, microbatches: int) -> None:
        """Every micro-batch's forward and backward, then the optimizer."""
        comp = self.comp
        for ps in schedule(0, 1, microbatches):
            phase = "forward" if ps.forward else "backward"
            tc = comp.costs[(self.role_idx, phase, 0)]
            self.emit(tc, phase, f"{phase} mb {ps.microbatch}")
        self.emit(comp.costs[(self.role_idx, "optimizer", 0)], "optimizer", "optimizer")
