"""Row-by-row construction of a :class:`~echo_view.model.trace.Trace`.

Bulk importers build numpy columns directly; the simulator, small importers and tests add
events one at a time through :class:`TraceBuilder`, which interns names and lanes for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model.columns import ColumnBuilder
from echo_view.model.event_info import (
    LAUNCH_COLUMNS,
    OP_INPUT_COLUMNS,
    SYNC_COLUMNS,
    Dims,
    EventFacts,
    LaunchTable,
    OpInputTable,
    SyncTable,
)
from echo_view.model.kinds import CollectiveKind, EventKind, LaneKind
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

_EVENT_DTYPES = {
    "kind": "u1",
    "start_ns": "i8",
    "dur_ns": "i8",
    "name": "i4",
    "cat": "i4",
    "lane": "i4",
    "correlation": "i8",
    "external_id": "i8",
}
_COLL_DTYPES = {
    "event": "i4",
    "kind": "u1",
    "bytes": "i8",
    "dtype": "i4",
    "group": "i4",
    "seq": "i8",
    "algorithm": "i4",
    "protocol": "i4",
}
_ENCODER = msgspec.json.Encoder()


class TraceBuilder:
    """Collect events, lanes, flows, collectives and steps; :meth:`build` freezes them."""

    def __init__(self, rank: int, source: str = "") -> None:
        self.rank = rank
        self.source = source
        self.strings = StringTable()
        self._lanes: list[Lane] = []
        self._lane_ids: dict[Lane, int] = {}
        self._events = ColumnBuilder(_EVENT_DTYPES)
        self._args: list[bytes] = []
        self._flows = ColumnBuilder({"src": "i4", "dst": "i4", "flow_id": "i8", "cat": "i4"})
        self._colls = ColumnBuilder(_COLL_DTYPES)
        self._groups: list[ProcessGroup] = []
        self._group_ids: dict[ProcessGroup, int] = {}
        self._steps = ColumnBuilder(
            {"number": "i8", "start_ns": "i8", "end_ns": "i8", "gpu_end_ns": "i8"}
        )
        self.devices: list[DeviceInfo] = []
        self.metadata: dict[str, Any] = {}
        self._launches: dict[int, dict[str, int | float]] = {}
        self._op_inputs: dict[int, dict[str, int]] = {}
        self._input_values: dict[tuple[Any, ...], int] = {}
        self._syncs: dict[int, dict[str, int]] = {}

    def lane(
        self,
        kind: LaneKind,
        pid: int | str,
        tid: int | str,
        name: str = "",
        *,
        device: int = NONE,
        stream: int = NONE,
    ) -> int:
        """Id of the lane with these fields, added if new."""
        lane = Lane(kind, pid, tid, name, device, stream)
        lid = self._lane_ids.get(lane)
        if lid is None:
            lid = len(self._lanes)
            self._lanes.append(lane)
            self._lane_ids[lane] = lid
        return lid

    def gpu_stream(self, device: int, stream: int, name: str | None = None) -> int:
        """Lane id of GPU ``device``'s ``stream`` (Kineto's pid/tid convention)."""
        return self.lane(
            LaneKind.GPU_STREAM,
            device,
            stream,
            name if name is not None else f"stream {stream}",
            device=device,
            stream=stream,
        )

    def event(
        self,
        kind: EventKind,
        name: str,
        start_ns: int,
        dur_ns: int,
        lane: int,
        *,
        cat: str | None = None,
        correlation: int = NONE,
        external_id: int = NONE,
        args: Mapping[str, Any] | bytes | None = None,
    ) -> int:
        """Add one event; returns its row."""
        if args is None:
            raw = b""
        elif isinstance(args, bytes):
            raw = args
        else:
            raw = _ENCODER.encode(args) if args else b""
        self._args.append(raw)
        return self._events.append(
            kind=int(kind),
            start_ns=start_ns,
            dur_ns=dur_ns,
            name=self.strings.intern(name),
            cat=self.strings.intern(cat if cat is not None else kind.label),
            lane=lane,
            correlation=correlation,
            external_id=external_id,
        )

    def flow(self, src: int, dst: int, flow_id: int, cat: str = "ac2g") -> None:
        """Add an arrow from event ``src`` to event ``dst``."""
        self._flows.append(src=src, dst=dst, flow_id=flow_id, cat=self.strings.intern(cat))

    def group(self, name: str, ranks: tuple[int, ...], description: str = "") -> int:
        """Id of a process group, added if new."""
        pg = ProcessGroup(name, tuple(ranks), description)
        gid = self._group_ids.get(pg)
        if gid is None:
            gid = len(self._groups)
            self._groups.append(pg)
            self._group_ids[pg] = gid
        return gid

    def collective(
        self,
        event: int,
        kind: CollectiveKind,
        *,
        nbytes: int = NONE,
        dtype: str | None = None,
        group: int = NONE,
        seq: int = NONE,
        algorithm: str | None = None,
        protocol: str | None = None,
    ) -> int:
        """Register event ``event`` as a collective; returns the collective row."""

        def sid(s: str | None) -> int:
            return NONE if s is None else self.strings.intern(s)

        return self._colls.append(
            event=event,
            kind=int(kind),
            bytes=nbytes,
            dtype=sid(dtype),
            group=group,
            seq=seq,
            algorithm=sid(algorithm),
            protocol=sid(protocol),
        )

    def launch(
        self,
        event: int,
        *,
        grid: tuple[int, int, int] | None = None,
        block: tuple[int, int, int] | None = None,
        registers: int = NONE,
        shared_bytes: int = NONE,
        blocks_per_sm: float = float("nan"),
        occupancy: float = float("nan"),
        nbytes: int = NONE,
    ) -> None:
        """Record how GPU work ``event`` was launched (``occupancy`` 0..1; ``nbytes`` of a copy)."""
        gx, gy, gz = grid if grid is not None else (NONE, NONE, NONE)
        bx, by, bz = block if block is not None else (NONE, NONE, NONE)
        self._launches[event] = {
            "event": event, "grid_x": gx, "grid_y": gy, "grid_z": gz, "block_x": bx,
            "block_y": by, "block_z": bz, "registers": registers, "shared_bytes": shared_bytes,
            "blocks_per_sm": blocks_per_sm, "occupancy": occupancy, "bytes": nbytes,
        }  # fmt: skip

    def op_inputs(
        self,
        event: int,
        dims: tuple[Dims, ...],
        types: tuple[str, ...] | None = None,
        concrete: tuple[str, ...] | None = None,
    ) -> None:
        """Record operator ``event``'s inputs: per argument its sizes, type and value text."""

        def vid(value: tuple[Any, ...] | None) -> int:
            if value is None:
                return NONE
            return self._input_values.setdefault(value, len(self._input_values))

        self._op_inputs[event] = {
            "event": event, "dims": vid(dims), "types": vid(types), "concrete": vid(concrete),
        }  # fmt: skip

    def sync(
        self,
        event: int,
        *,
        correlation: int = NONE,
        stream: int = NONE,
        wait_on_stream: int = NONE,
        wait_on_record: int = NONE,
    ) -> None:
        """Record what synchronisation ``event`` waited on (see :class:`SyncTable`)."""
        self._syncs[event] = {
            "event": event, "correlation": correlation, "stream": stream,
            "wait_on_stream": wait_on_stream, "wait_on_record": wait_on_record,
        }  # fmt: skip

    def step(self, number: int, start_ns: int, end_ns: int, gpu_end_ns: int = NONE) -> None:
        """Add a training step."""
        self._steps.append(number=number, start_ns=start_ns, end_ns=end_ns, gpu_end_ns=gpu_end_ns)

    def __len__(self) -> int:
        return len(self._events)

    def build(self, *, steps_detected: bool = False) -> Trace:
        """Freeze everything into a :class:`Trace`."""
        offsets = np.zeros(len(self._args) + 1, dtype=np.int64)
        if self._args:
            np.cumsum([len(a) for a in self._args], out=offsets[1:])
        events = EventTable(
            **self._events.columns(), args_blob=b"".join(self._args), args_offsets=offsets
        )
        steps = StepTable(**self._steps.columns(), detected=steps_detected)
        return Trace(
            rank=self.rank,
            source=self.source,
            strings=self.strings,
            events=events,
            lanes=tuple(self._lanes),
            flows=FlowTable(**self._flows.columns()),
            collectives=CollectiveTable(**self._colls.columns()),
            groups=tuple(self._groups),
            steps=steps,
            devices=tuple(self.devices),
            metadata=self.metadata,
            facts=EventFacts(
                launches=LaunchTable(**_by_event(self._launches, LAUNCH_COLUMNS)),
                op_inputs=OpInputTable(
                    **_by_event(self._op_inputs, OP_INPUT_COLUMNS),
                    values=tuple(self._input_values),
                ),
                syncs=SyncTable(**_by_event(self._syncs, SYNC_COLUMNS)),
            ),
        )


def _by_event(
    rows: Mapping[int, Mapping[str, int | float]], dtypes: Mapping[str, str]
) -> dict[str, npt.NDArray[Any]]:
    """Columns of side-table ``rows`` keyed by event, in event order."""
    cols = ColumnBuilder(dtypes)
    for event in sorted(rows):
        cols.append(**rows[event])
    return cols.columns()
