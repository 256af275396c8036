"""The :class:`Workload`: what the simulator runs — ops of every rank with their dependencies.

A workload is a graph of *ops*. Each op runs on one lane (a CPU thread or a GPU stream) of one
rank and has a cost (its duration before any cost model is applied). Lanes are sequential:
ops on one lane run one at a time in increasing op id, and ``gap_ns`` is the least time between
the end of the previous op on the lane and the start of this one (CPU time spent between two
runtime calls, say). Everything else that orders ops is an explicit dependency
(:class:`DepTable`): launch -> kernel, event record -> wait across streams, host syncs,
cross-thread wake-ups, data dependencies of a traced graph.

Collectives are first-class: an op whose ``coll`` is set is one rank's part of a collective
instance (:class:`CollectiveSpecs`); the instance starts when its last participant is ready and
all participants end together.

Every table is columnar (read-only numpy), ids are dense ints, and nothing refers to Python
objects per op, so a workload of millions of ops stays compact and the engine can turn the
columns into flat lists in one call each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import check_lengths, frozen
from echo_view.model.graph import OpClass
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
from echo_view.model.strings import StringTable
from echo_view.model.trace import NONE, Lane, ProcessGroup

Ints = npt.NDArray[np.integer[Any]]


class DepMode(IntEnum):
    """Which ends of two ops a dependency ties together.

    ``END_TO_START``: the successor starts no earlier than ``pred.end + lag`` (the usual case).
    ``START_TO_START``: the successor starts no earlier than ``pred.start + lag`` (a kernel can
    start while its launch call is still running). ``END_TO_END``: the successor ends no earlier
    than ``pred.end + lag`` (a blocking host sync returns after the GPU work it waits for).
    """

    END_TO_START = 0
    START_TO_START = 1
    END_TO_END = 2


class DepKind(IntEnum):
    """Where a dependency comes from (kept for explanations and output flows)."""

    LAUNCH = 0
    EVENT = 1
    HOST_SYNC = 2
    THREAD = 3
    DATA = 4
    OTHER = 5

    @property
    def label(self) -> str:
        """Lower-case name (``launch``)."""
        return self.name.lower()


#: Op classes as stored in :attr:`OpTable.op_class`: the traced graph's classes
#: (:class:`echo_view.model.graph.OpClass`), so the cost models see one vocabulary.
OP_CLASS_NAMES: tuple[str, ...] = OpClass.NAMES
CLASS_GEMM, CLASS_ATTENTION, CLASS_ELEMENTWISE = (
    OpClass.GEMM,
    OpClass.ATTENTION,
    OpClass.ELEMENTWISE,
)
CLASS_REDUCTION, CLASS_NORMALIZATION = OpClass.REDUCTION, OpClass.NORMALIZATION
CLASS_EMBEDDING, CLASS_OPTIMIZER, CLASS_COPY = OpClass.EMBEDDING, OpClass.OPTIMIZER, OpClass.COPY
CLASS_OTHER, CLASS_COLLECTIVE = OpClass.OTHER, OpClass.COLLECTIVE


@dataclass(frozen=True, eq=False)
class OpTable:
    """Ops as parallel columns; row ``i`` is op ``i``.

    ``rank`` and ``lane`` (an index into :attr:`Workload.lanes`) place the op; ``kind`` is an
    :class:`~echo_view.model.kinds.EventKind`; ``op_class`` one of :data:`OP_CLASS_NAMES`;
    ``name`` a string id. ``dur_ns`` is the op's own cost before cost models; ``gap_ns`` the least
    time after the previous op on the lane ends; ``release_ns`` the earliest start
    (:data:`~echo_view.model.trace.NONE` when unconstrained). ``step`` indexes
    :class:`StepMarks` (the step the op belongs to), ``coll`` indexes :class:`CollectiveSpecs`,
    ``source`` is the op's event row in its rank's measured trace; each is -1 when absent.
    """

    rank: Ints
    lane: Ints
    kind: Ints
    op_class: Ints
    name: Ints
    dur_ns: Ints
    gap_ns: Ints
    release_ns: Ints
    step: Ints
    coll: Ints
    source: Ints

    def __post_init__(self) -> None:
        cols = {
            "rank": frozen(self.rank, "i4"),
            "lane": frozen(self.lane, "i4"),
            "kind": frozen(self.kind, "u1"),
            "op_class": frozen(self.op_class, "u1"),
            "name": frozen(self.name, "i4"),
            "dur_ns": frozen(self.dur_ns, "i8"),
            "gap_ns": frozen(self.gap_ns, "i8"),
            "release_ns": frozen(self.release_ns, "i8"),
            "step": frozen(self.step, "i4"),
            "coll": frozen(self.coll, "i4"),
            "source": frozen(self.source, "i4"),
        }
        check_lengths("ops", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.rank)


@dataclass(frozen=True, eq=False)
class DepTable:
    """Dependencies in compressed rows by successor: the predecessors of op ``i`` are
    ``src[ptr[i]:ptr[i+1]]``, each with a :class:`DepMode`, a lag ``lag_ns >= 0`` and a
    :class:`DepKind`. Lane order is implicit (see :class:`OpTable`) and not listed here."""

    ptr: Ints
    src: Ints
    mode: Ints
    lag_ns: Ints
    kind: Ints

    def __post_init__(self) -> None:
        object.__setattr__(self, "ptr", frozen(self.ptr, "i8"))
        cols = {
            "src": frozen(self.src, "i4"),
            "mode": frozen(self.mode, "u1"),
            "lag_ns": frozen(self.lag_ns, "i8"),
            "kind": frozen(self.kind, "u1"),
        }
        check_lengths("deps", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.src)

    def dst(self) -> npt.NDArray[np.int32]:
        """The successor of each dependency (expanded from :attr:`ptr`)."""
        counts = np.diff(self.ptr)
        return np.repeat(np.arange(len(counts), dtype=np.int32), counts)

    @classmethod
    def from_edges(
        cls, n_ops: int, src: Ints, dst: Ints, mode: Ints, lag_ns: Ints, kind: Ints
    ) -> DepTable:
        """Build the table from unordered edge columns (sorted stably by successor)."""
        dst_a = np.asarray(dst, dtype=np.int64)
        order = np.argsort(dst_a, kind="stable")
        ptr = np.zeros(n_ops + 1, dtype=np.int64)
        if len(dst_a):
            if dst_a.min() < 0 or dst_a.max() >= n_ops:
                raise ValueError("deps.dst refers to an op that does not exist")
            np.cumsum(np.bincount(dst_a, minlength=n_ops), out=ptr[1:])
        return cls(
            ptr=ptr,
            src=np.asarray(src, dtype=np.int64)[order],
            mode=np.asarray(mode, dtype=np.int64)[order],
            lag_ns=np.asarray(lag_ns, dtype=np.int64)[order],
            kind=np.asarray(kind, dtype=np.int64)[order],
        )

    @classmethod
    def empty(cls, n_ops: int) -> DepTable:
        z = np.empty(0, dtype=np.int64)
        return cls(ptr=np.zeros(n_ops + 1, dtype=np.int64), src=z, mode=z, lag_ns=z, kind=z)


@dataclass(frozen=True, eq=False)
class CollectiveSpecs:
    """Collective instances: one row per communication operation of the whole job.

    ``kind`` is a :class:`~echo_view.model.kinds.CollectiveKind`; ``bytes`` the payload per rank
    (-1 unknown); ``group`` indexes :attr:`Workload.groups`; ``seq`` the per-group sequence
    number (-1 unknown); ``measured_ns`` the transfer time seen in a measured trace (-1 none).
    The participants are the ops whose :attr:`OpTable.coll` is the row.
    """

    kind: Ints
    bytes: Ints
    group: Ints
    seq: Ints
    measured_ns: Ints

    def __post_init__(self) -> None:
        cols = {
            "kind": frozen(self.kind, "u1"),
            "bytes": frozen(self.bytes, "i8"),
            "group": frozen(self.group, "i4"),
            "seq": frozen(self.seq, "i8"),
            "measured_ns": frozen(self.measured_ns, "i8"),
        }
        check_lengths("collectives", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def empty(cls) -> CollectiveSpecs:
        z = np.empty(0, dtype=np.int64)
        return cls(kind=z, bytes=z, group=z, seq=z, measured_ns=z)


@dataclass(frozen=True, eq=False)
class StepMarks:
    """Training steps: ``marker`` is the zero-length op whose start is step ``number``'s start
    on ``rank``. An op belongs to the step in its :attr:`OpTable.step` column."""

    rank: Ints
    number: Ints
    marker: Ints

    def __post_init__(self) -> None:
        cols = {
            "rank": frozen(self.rank, "i4"),
            "number": frozen(self.number, "i8"),
            "marker": frozen(self.marker, "i4"),
        }
        check_lengths("steps", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.rank)

    @classmethod
    def empty(cls) -> StepMarks:
        z = np.empty(0, dtype=np.int64)
        return cls(rank=z, number=z, marker=z)


@dataclass(frozen=True, eq=False)
class Workload:
    """Ops of all ranks of one job, their dependencies, collectives and steps.

    ``lanes[i]`` is a CPU thread or GPU stream of rank ``lane_rank[i]``. ``groups`` are the
    communicators collectives run on (global ranks). ``ranks`` are the ranks present;
    ``world_size`` may be larger (a job traced on a subset of its ranks). ``measured_start_ns``
    and ``measured_end_ns`` hold each op's measured times when the workload was reconstructed
    from a measured job (on the workload's clock, which starts at 0), else ``None``.
    """

    strings: StringTable
    lanes: tuple[Lane, ...]
    lane_rank: Ints
    ops: OpTable
    deps: DepTable
    collectives: CollectiveSpecs = field(default_factory=CollectiveSpecs.empty)
    groups: tuple[ProcessGroup, ...] = ()
    steps: StepMarks = field(default_factory=StepMarks.empty)
    ranks: tuple[int, ...] = ()
    world_size: int | None = None
    measured_start_ns: Ints | None = None
    measured_end_ns: Ints | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))
        object.__setattr__(self, "lane_rank", frozen(self.lane_rank, "i4"))
        for name in ("measured_start_ns", "measured_end_ns"):
            col = getattr(self, name)
            if col is not None:
                col = frozen(col, "i8")
                if len(col) != len(self.ops):
                    raise ValueError(f"workload.{name} has {len(col)} rows, expected ops")
                object.__setattr__(self, name, col)
        if not self.ranks:
            object.__setattr__(self, "ranks", tuple(sorted({int(r) for r in self.lane_rank})))
        self._check()

    def _check(self) -> None:
        """Structural checks; a workload that passes them can be simulated or reports why not."""
        n = len(self.ops)
        ops = self.ops
        if len(self.lane_rank) != len(self.lanes):
            raise ValueError("workload.lane_rank needs one rank per lane")
        if n:
            if ops.lane.min() < 0 or ops.lane.max() >= len(self.lanes):
                raise ValueError("ops.lane refers to a lane that does not exist")
            if not np.array_equal(self.lane_rank[ops.lane], ops.rank):
                raise ValueError("ops.rank differs from the rank of the op's lane")
            if ops.dur_ns.min() < 0 or ops.gap_ns.min() < 0:
                raise ValueError("ops.dur_ns and ops.gap_ns must be >= 0")
            if ops.name.min() < 0 or ops.name.max() >= len(self.strings):
                raise ValueError("ops.name refers to a string that does not exist")
            if ops.coll.max() >= len(self.collectives) or ops.coll.min() < NONE:
                raise ValueError("ops.coll refers to a collective that does not exist")
            if ops.step.max() >= len(self.steps) or ops.step.min() < NONE:
                raise ValueError("ops.step refers to a step that does not exist")
        deps = self.deps
        if len(deps.ptr) != n + 1 or (n and deps.ptr[0] != 0) or deps.ptr[-1] != len(deps):
            raise ValueError("deps.ptr must have one entry per op plus one and end at len(deps)")
        if len(deps):
            if np.any(np.diff(deps.ptr) < 0):
                raise ValueError("deps.ptr must be non-decreasing")
            if deps.src.min() < 0 or deps.src.max() >= n:
                raise ValueError("deps.src refers to an op that does not exist")
            if np.any(deps.src == deps.dst()):
                raise ValueError("an op cannot depend on itself")
            if deps.lag_ns.min() < 0:
                raise ValueError("deps.lag_ns must be >= 0")
            if deps.mode.max() > max(DepMode):
                raise ValueError("deps.mode holds an unknown DepMode")
        colls = self.collectives
        if len(colls) and (colls.group.min() < 0 or colls.group.max() >= len(self.groups)):
            raise ValueError("collectives.group refers to a group that does not exist")
        if len(self.steps) and (self.steps.marker.min() < 0 or self.steps.marker.max() >= n):
            raise ValueError("steps.marker refers to an op that does not exist")

    def __len__(self) -> int:
        return len(self.ops)

    def lane_kind(self) -> npt.NDArray[np.uint8]:
        """The :class:`~echo_view.model.kinds.LaneKind` of each op's lane."""
        kinds = np.array([int(lane.kind) for lane in self.lanes], dtype=np.uint8)
        return kinds[self.ops.lane] if len(self.ops) else np.empty(0, dtype=np.uint8)

    def gpu_mask(self) -> npt.NDArray[np.bool_]:
        """Ops on GPU streams."""
        mask: npt.NDArray[np.bool_] = self.lane_kind() == int(LaneKind.GPU_STREAM)
        return mask

    def op_label(self, i: int) -> str:
        """A short human description of op ``i`` (for error messages)."""
        lane = self.lanes[int(self.ops.lane[i])]
        kind = EventKind(int(self.ops.kind[i])).label
        name = self.strings[int(self.ops.name[i])]
        return f"rank {int(self.ops.rank[i])} {lane.name or lane.tid} {kind} {name!r}"

    def collective_label(self, c: int) -> str:
        """``all_reduce (group 'pg' ranks [0..7], seq 12)`` for collective row ``c``."""
        kind = CollectiveKind(int(self.collectives.kind[c])).label
        group = self.groups[int(self.collectives.group[c])]
        seq = int(self.collectives.seq[c])
        return f"{kind} (group {_group_text(group)}, seq {seq if seq >= 0 else 'unknown'})"


def _group_text(group: ProcessGroup) -> str:
    ranks = group.ranks
    if len(ranks) > 2 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        text = f"ranks [{ranks[0]}..{ranks[-1]}]"
    else:
        text = f"ranks {list(ranks)}"
    return f"{group.name!r} {text}" if group.name else text
