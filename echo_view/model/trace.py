"""The per-rank columnar trace.

A :class:`Trace` holds one rank's events as read-only int64-nanosecond numpy columns with
interned names, plus small side tables: lanes (CPU threads, GPU streams), flows, collectives,
process groups, steps, devices, and the typed facts the core reads about single events (kernel
launches, operator inputs, synchronisations: :mod:`echo_view.model.event_info`). It is
immutable once built; importers and the simulator produce it, everything else reads it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model.columns import check_lengths, frozen
from echo_view.model.event_info import EventFacts, LaunchTable, OpInputTable, SyncTable
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
from echo_view.model.mapped import MappedBytes
from echo_view.model.strings import StringTable

# Column types. Stored dtypes are int64 / int32 / uint8 (see each table); constructors accept
# any integer array and convert it.
I64 = npt.NDArray[np.integer[Any]]
I32 = npt.NDArray[np.integer[Any]]
U8 = npt.NDArray[np.integer[Any]]

#: Sentinel for "unknown" in integer columns.
NONE = -1

_EMPTY_ARGS = b""

#: Raw JSON text: ``bytes``, or a read-only mapping that stands for them (a rank's ``args``
#: handed over by a worker through shared memory): slices of either are ``bytes``.
Text: TypeAlias = bytes | MappedBytes


@dataclass(frozen=True, slots=True)
class Lane:
    """A timeline lane: one CPU thread or one GPU stream of one process."""

    kind: LaneKind
    pid: int | str
    tid: int | str
    name: str
    device: int = NONE
    stream: int = NONE


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One GPU as the trace describes it (Kineto ``deviceProperties``, Nsight GPU info)."""

    index: int
    name: str
    sm_count: int | None = None
    total_memory_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """A communicator: its name as PyTorch reports it and the global ranks in it."""

    name: str
    ranks: tuple[int, ...]
    description: str = ""

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True, eq=False)
class EventTable:
    """Events as parallel columns; row ``i`` is one event.

    ``start_ns`` is on the trace's own clock (absolute epoch ns where the source gives it).
    ``dur_ns`` is 0 for instants. ``name`` and ``cat`` are ids into the trace's strings.
    ``correlation`` links a launch to its GPU work; ``external_id`` links a CPU op to its launches.
    ``args`` holds each event's arguments as raw JSON text (:data:`Text`), for display and
    export only: what the core reads from them is in the trace's typed side tables
    (:mod:`echo_view.model.event_info`).
    """

    kind: U8
    start_ns: I64
    dur_ns: I64
    name: I32
    cat: I32
    lane: I32
    correlation: I64
    external_id: I64
    args_blob: Text = _EMPTY_ARGS
    args_offsets: I64 | None = None

    def __post_init__(self) -> None:
        cols = {
            "kind": frozen(self.kind, "u1"),
            "start_ns": frozen(self.start_ns, "i8"),
            "dur_ns": frozen(self.dur_ns, "i8"),
            "name": frozen(self.name, "i4"),
            "cat": frozen(self.cat, "i4"),
            "lane": frozen(self.lane, "i4"),
            "correlation": frozen(self.correlation, "i8"),
            "external_id": frozen(self.external_id, "i8"),
        }
        n = check_lengths("events", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)
        offsets = self.args_offsets
        if offsets is None:
            offsets = np.zeros(n + 1, dtype=np.int64)
        offsets = frozen(offsets, "i8")
        if len(offsets) != n + 1:
            raise ValueError(f"events.args_offsets has {len(offsets)} entries, expected {n + 1}")
        object.__setattr__(self, "args_offsets", offsets)

    def __len__(self) -> int:
        return len(self.kind)

    @property
    def end_ns(self) -> I64:
        """``start_ns + dur_ns`` (computed, not stored)."""
        return self.start_ns + self.dur_ns

    def raw_args(self, i: int) -> bytes:
        """The JSON text of event ``i``'s args (``b""`` when it has none)."""
        assert self.args_offsets is not None
        lo, hi = int(self.args_offsets[i]), int(self.args_offsets[i + 1])
        return self.args_blob[lo:hi]

    def args(self, i: int) -> dict[str, Any]:
        """Event ``i``'s args decoded into a dict (empty when it has none)."""
        raw = self.raw_args(i)
        if not raw:
            return {}
        value = msgspec.json.decode(raw)
        return value if isinstance(value, dict) else {"value": value}


@dataclass(frozen=True, eq=False)
class FlowTable:
    """Arrows between events (launch -> kernel, forward -> backward, ...), by event row."""

    src: I32
    dst: I32
    flow_id: I64
    cat: I32

    def __post_init__(self) -> None:
        cols = {
            "src": frozen(self.src, "i4"),
            "dst": frozen(self.dst, "i4"),
            "flow_id": frozen(self.flow_id, "i8"),
            "cat": frozen(self.cat, "i4"),
        }
        check_lengths("flows", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def empty(cls) -> FlowTable:
        z = np.empty(0, dtype=np.int64)
        return cls(src=z, dst=z, flow_id=z, cat=z)


@dataclass(frozen=True, eq=False)
class CollectiveTable:
    """Collectives, first-class: one row per communication operation on this rank.

    ``event`` is the row of the GPU kernel that ran it (or of the CPU op when no kernel was
    recorded). ``kind`` is a :class:`CollectiveKind`. ``bytes`` is the payload per rank (input
    size for all-reduce / reduce-scatter / send, output size for all-gather / recv; -1 unknown).
    ``group`` indexes :attr:`Trace.groups`; ``seq`` is the per-group sequence number; ``dtype``,
    ``algorithm`` and ``protocol`` are string ids. Unknown values are -1, never guessed.
    """

    event: I32
    kind: U8
    bytes: I64
    dtype: I32
    group: I32
    seq: I64
    algorithm: I32
    protocol: I32

    def __post_init__(self) -> None:
        cols = {
            "event": frozen(self.event, "i4"),
            "kind": frozen(self.kind, "u1"),
            "bytes": frozen(self.bytes, "i8"),
            "dtype": frozen(self.dtype, "i4"),
            "group": frozen(self.group, "i4"),
            "seq": frozen(self.seq, "i8"),
            "algorithm": frozen(self.algorithm, "i4"),
            "protocol": frozen(self.protocol, "i4"),
        }
        check_lengths("collectives", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.event)

    @classmethod
    def empty(cls) -> CollectiveTable:
        z = np.empty(0, dtype=np.int64)
        return cls(event=z, kind=z, bytes=z, dtype=z, group=z, seq=z, algorithm=z, protocol=z)


@dataclass(frozen=True, eq=False)
class StepTable:
    """Training steps: ``ProfilerStep#N`` annotations, or steps detected from the timeline.

    ``start_ns``/``end_ns`` bound the step on the CPU side; ``gpu_end_ns`` is when the last GPU
    work launched inside the step finished (-1 when the rank has no GPU work).
    """

    number: I64
    start_ns: I64
    end_ns: I64
    gpu_end_ns: I64
    detected: bool = False

    def __post_init__(self) -> None:
        cols = {
            "number": frozen(self.number, "i8"),
            "start_ns": frozen(self.start_ns, "i8"),
            "end_ns": frozen(self.end_ns, "i8"),
            "gpu_end_ns": frozen(self.gpu_end_ns, "i8"),
        }
        check_lengths("steps", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.number)

    @classmethod
    def empty(cls) -> StepTable:
        z = np.empty(0, dtype=np.int64)
        return cls(number=z, start_ns=z, end_ns=z, gpu_end_ns=z)

    def last_end_ns(self) -> I64:
        """Per step, the later of its CPU end and its GPU end (where that is known). Compared
        with ``!= NONE``, not ``>= 0``: a trace's times may be negative."""
        return latest_end(self.end_ns, self.gpu_end_ns)


def latest_end(end_ns: I64, gpu_end_ns: I64) -> I64:
    """``max(end, gpu_end)`` per step, ``end`` where ``gpu_end`` is unknown (``NONE``)."""
    return np.where(gpu_end_ns == NONE, end_ns, np.maximum(end_ns, gpu_end_ns))


@dataclass(frozen=True, eq=False)
class Trace:
    """One rank's timeline."""

    rank: int
    source: str
    strings: StringTable
    events: EventTable
    lanes: tuple[Lane, ...]
    flows: FlowTable = field(default_factory=FlowTable.empty)
    collectives: CollectiveTable = field(default_factory=CollectiveTable.empty)
    groups: tuple[ProcessGroup, ...] = ()
    steps: StepTable = field(default_factory=StepTable.empty)
    devices: tuple[DeviceInfo, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Typed facts about single events (:mod:`echo_view.model.event_info`).
    facts: EventFacts = field(default_factory=EventFacts)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        n = len(self.events)
        if n and (self.events.lane.min() < 0 or self.events.lane.max() >= len(self.lanes)):
            raise ValueError("events.lane refers to a lane that does not exist")
        if n and self.events.name.max() >= len(self.strings):
            raise ValueError("events.name refers to a string that does not exist")
        for table, col in (("flows.src", self.flows.src), ("flows.dst", self.flows.dst)):
            if len(col) and (col.min() < 0 or col.max() >= n):
                raise ValueError(f"{table} refers to an event that does not exist")
        if len(self.collectives) and self.collectives.event.max() >= n:
            raise ValueError("collectives.event refers to an event that does not exist")
        for table, built in self.facts.built():  # computed ones refer to the events by design
            col = built.event
            if len(col) and (col.min() < 0 or col.max() >= n):
                raise ValueError(f"{table}.event refers to an event that does not exist")

    def __len__(self) -> int:
        return len(self.events)

    # The metadata travels as a plain dict: pickle refuses a mappingproxy, and a trace that
    # plain pickle takes crosses to and from Dask workers without its slow fallbacks
    # (a ``reducer_override`` call per object, then cloudpickle).
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "metadata": dict(self.metadata)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "metadata", MappingProxyType(state["metadata"]))

    @property
    def launches(self) -> LaunchTable:
        """How GPU work was launched (:class:`~echo_view.model.event_info.LaunchTable`)."""
        return self.facts.launches

    @property
    def op_inputs(self) -> OpInputTable:
        """Operators' recorded inputs (:class:`~echo_view.model.event_info.OpInputTable`)."""
        return self.facts.op_inputs

    @property
    def syncs(self) -> SyncTable:
        """Synchronisation records (:class:`~echo_view.model.event_info.SyncTable`)."""
        return self.facts.syncs

    def name(self, i: int) -> str:
        """Name of event ``i``."""
        return self.strings[int(self.events.name[i])]

    def kind(self, i: int) -> EventKind:
        """Kind of event ``i``."""
        return EventKind(int(self.events.kind[i]))

    def mask(self, *kinds: EventKind) -> npt.NDArray[np.bool_]:
        """Boolean mask of the events whose kind is one of ``kinds``."""
        return np.isin(self.events.kind, np.array([int(k) for k in kinds], dtype=np.uint8))

    def lane_mask(self, kind: LaneKind) -> npt.NDArray[np.bool_]:
        """Boolean mask of the events on lanes of ``kind``."""
        ids = [i for i, lane in enumerate(self.lanes) if lane.kind == kind]
        return np.isin(self.events.lane, np.array(ids, dtype=np.int32))

    def span_ns(self) -> tuple[int, int]:
        """``(first start, last end)`` over all events with a duration or instant time."""
        if not len(self.events):
            return (0, 0)
        return int(self.events.start_ns.min()), int(self.events.end_ns.max())

    def collective_kind(self, row: int) -> CollectiveKind:
        """Kind of collective-table row ``row``."""
        return CollectiveKind(int(self.collectives.kind[row]))

    def iter_lanes(self) -> Iterator[tuple[int, Lane]]:
        """``(lane id, lane)`` pairs."""
        return iter(enumerate(self.lanes))

    @property
    def world_size(self) -> int | None:
        """World size the trace reports, if any."""
        ws = self.metadata.get("world_size")
        return int(ws) if isinstance(ws, int) else None
