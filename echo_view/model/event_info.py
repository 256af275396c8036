"""Typed facts about events that the core reads, as side tables of a :class:`Trace`.

Importers fill them from what the source records (Kineto args, Nsight columns); everything
else reads these columns, never the args text, which stays for display and export only. Each
table has one row per event that has the facts (an ``event`` row of the event table), in event
order; unknown values are -1 (NaN for the two fractional columns), never guessed.

- :class:`LaunchTable`: a kernel's launch configuration and the size of a copy or set.
- :class:`OpInputTable`: an operator's recorded inputs (PyTorch ``record_shapes``).
- :class:`SyncTable`: what a CUDA synchronisation record waited on.

A trace holds them in :class:`EventFacts`: an importer may give each as a function that
computes it from the events (called on first use, so commands that never read a table never
pay for reading the args); a built trace gives the tables themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import check_lengths, frozen

Col = npt.NDArray[Any]

#: Column dtypes of each table, in declaration order (the builder and importers use them).
LAUNCH_COLUMNS: dict[str, str] = {
    "event": "i4",
    "grid_x": "i4",
    "grid_y": "i4",
    "grid_z": "i4",
    "block_x": "i4",
    "block_y": "i4",
    "block_z": "i4",
    "registers": "i4",
    "shared_bytes": "i8",
    "blocks_per_sm": "f8",
    "occupancy": "f8",
    "bytes": "i8",
}
OP_INPUT_COLUMNS: dict[str, str] = {"event": "i4", "dims": "i4", "types": "i4", "concrete": "i4"}
SYNC_COLUMNS: dict[str, str] = {
    "event": "i4",
    "correlation": "i8",
    "stream": "i8",
    "wait_on_stream": "i8",
    "wait_on_record": "i8",
}


def _freeze(obj: object, table: str, dtypes: dict[str, str]) -> int:
    cols = {name: frozen(getattr(obj, name), dt) for name, dt in dtypes.items()}
    n = check_lengths(table, cols)
    if n > 1 and not bool(np.all(cols["event"][1:] > cols["event"][:-1])):
        raise ValueError(f"{table}.event must be increasing (one row per event, in event order)")
    for name, col in cols.items():
        object.__setattr__(obj, name, col)
    return n


def _empty(dtypes: dict[str, str]) -> dict[str, Col]:
    return {name: np.empty(0, dtype=dt) for name, dt in dtypes.items()}


@dataclass(frozen=True, eq=False)
class LaunchTable:
    """GPU work as launched: one row per kernel, memcpy or memset with a known grid or size.

    ``grid_*`` / ``block_*`` are the kernel's grid and block dimensions (all three -1 when
    unknown), ``registers`` per thread, ``shared_bytes`` of shared memory per block (static +
    dynamic), ``blocks_per_sm`` and ``occupancy`` (0..1) the profiler's estimates (NaN when it
    gives none), ``bytes`` the size of a copy or set.
    """

    event: Col
    grid_x: Col
    grid_y: Col
    grid_z: Col
    block_x: Col
    block_y: Col
    block_z: Col
    registers: Col
    shared_bytes: Col
    blocks_per_sm: Col
    occupancy: Col
    bytes: Col

    def __post_init__(self) -> None:
        _freeze(self, "launches", LAUNCH_COLUMNS)

    def __len__(self) -> int:
        return len(self.event)

    @classmethod
    def empty(cls) -> LaunchTable:
        return cls(**_empty(LAUNCH_COLUMNS))


#: One argument's recorded sizes: a tensor's sizes, a tuple of them for a tensor list, ``()``
#: for a scalar; ``None`` where the record is no list of integers.
Dims = tuple[Any, ...] | None


@dataclass(frozen=True, eq=False)
class OpInputTable:
    """Operator inputs as the profiler recorded them (``Input Dims``, ``Input type``,
    ``Concrete Inputs``): one row per operator that recorded its input sizes.

    ``dims``, ``types`` and ``concrete`` index :attr:`values`, where each distinct record is
    stored once: per argument its :data:`Dims` (``dims``), its type name (``types``, e.g.
    ``float``, ``c10::BFloat16``, ``Scalar``) or its value as text (``concrete``); -1 where
    the operator did not record that list. Equal ids mean equal records.
    """

    event: Col
    dims: Col
    types: Col
    concrete: Col
    values: tuple[tuple[Any, ...], ...] = ()

    def __post_init__(self) -> None:
        _freeze(self, "op_inputs", OP_INPUT_COLUMNS)
        for name in ("dims", "types", "concrete"):
            col = getattr(self, name)
            if len(col) and (col.min() < -1 or col.max() >= len(self.values)):
                raise ValueError(f"op_inputs.{name} refers to a value that does not exist")

    def __len__(self) -> int:
        return len(self.event)

    @classmethod
    def empty(cls) -> OpInputTable:
        z = _empty(OP_INPUT_COLUMNS)
        return cls(z["event"], z["dims"], z["types"], z["concrete"])

    def value(self, vid: int) -> tuple[Any, ...] | None:
        """The record with id ``vid`` (``None`` for -1)."""
        return self.values[vid] if vid >= 0 else None

    def restricted(self, rows: Sequence[int]) -> OpInputTable:
        """The rows of this table whose event is one of ``rows`` (the records kept whole)."""
        keep = np.isin(self.event, np.asarray(rows, dtype=np.int64))
        return OpInputTable(
            self.event[keep], self.dims[keep], self.types[keep], self.concrete[keep], self.values
        )

    def row_of(self, events: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.int64]:
        """For each event row, its row in this table (-1 when it recorded no inputs)."""
        events = np.asarray(events, dtype=np.int64)
        if not len(self.event):
            return np.full(len(events), -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.event, events), 0, len(self.event) - 1)
        out: npt.NDArray[np.int64] = np.where(self.event[pos] == events, pos, -1)
        return out


@dataclass(frozen=True, eq=False)
class SyncTable:
    """CUDA synchronisation records (Kineto ``cuda_sync`` events, Nsight synchronisation rows).

    ``correlation`` is the id of the call the record describes; ``stream`` the stream that
    waits (or is synchronised); ``wait_on_stream`` the stream of the CUDA event waited on and
    ``wait_on_record`` the correlation id of that event's ``cudaEventRecord``.
    """

    event: Col
    correlation: Col
    stream: Col
    wait_on_stream: Col
    wait_on_record: Col

    def __post_init__(self) -> None:
        _freeze(self, "syncs", SYNC_COLUMNS)

    def __len__(self) -> int:
        return len(self.event)

    @classmethod
    def empty(cls) -> SyncTable:
        return cls(**_empty(SYNC_COLUMNS))


def _no_op_inputs(rows: Sequence[int] | None = None) -> OpInputTable:
    del rows
    return OpInputTable.empty()


class EventFacts:
    """A trace's typed side tables, each computed at most once, on first use: each is given
    as the table, or as a function (picklable, e.g. a ``functools.partial``) computing it.
    The operator-input function takes the event rows to read (``None``: every row), so that a
    caller needing a few rows does not build the whole table (:meth:`op_inputs_of`)."""

    __slots__ = ("_launches", "_op_inputs", "_syncs")

    def __init__(
        self,
        launches: LaunchTable | Callable[[], LaunchTable] = LaunchTable.empty,
        op_inputs: OpInputTable | Callable[[Sequence[int] | None], OpInputTable] = _no_op_inputs,
        syncs: SyncTable | Callable[[], SyncTable] = SyncTable.empty,
    ) -> None:
        self._launches = launches
        self._op_inputs = op_inputs
        self._syncs = syncs

    @property
    def launches(self) -> LaunchTable:
        if not isinstance(self._launches, LaunchTable):
            self._launches = self._launches()
        return self._launches

    @property
    def op_inputs(self) -> OpInputTable:
        if not isinstance(self._op_inputs, OpInputTable):
            self._op_inputs = self._op_inputs(None)
        return self._op_inputs

    def op_inputs_of(self, rows: Sequence[int]) -> OpInputTable:
        """The operator inputs of event ``rows`` (ascending) only, equal to the whole table's
        rows for them; the whole table is not built for them."""
        if isinstance(self._op_inputs, OpInputTable):
            return self._op_inputs.restricted(rows)
        return self._op_inputs(rows)

    @property
    def syncs(self) -> SyncTable:
        if not isinstance(self._syncs, SyncTable):
            self._syncs = self._syncs()
        return self._syncs

    def built(self) -> list[tuple[str, LaunchTable | OpInputTable | SyncTable]]:
        """The tables already computed, by name (those given as tables, or used)."""
        have = (("launches", self._launches), ("op_inputs", self._op_inputs),
                ("syncs", self._syncs))  # fmt: skip
        return [(n, t) for n, t in have if isinstance(t, LaunchTable | OpInputTable | SyncTable)]

    def __getstate__(self) -> tuple[Any, Any, Any]:
        return (self._launches, self._op_inputs, self._syncs)

    def __setstate__(self, state: tuple[Any, Any, Any]) -> None:
        self._launches, self._op_inputs, self._syncs = state
