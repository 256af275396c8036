"""Kineto-style event args -> the model's typed side tables (:mod:`echo_view.model.event_info`).

The one place where the args the core needs are read from their JSON text, for every importer
that writes Kineto's keys (Kineto and other trace-event JSON; Nsight Systems, whose args are
built with the same keys):

- kernels, memcpys and memsets: ``grid`` / ``block`` (``[x, y, z]``), ``registers per thread``,
  ``shared memory``, ``blocks per SM``, ``est. achieved occupancy %``, ``bytes``;
- events with ``Input Dims`` (operators recorded with ``record_shapes``): ``Input Dims``,
  ``Input type``, ``Concrete Inputs``;
- synchronisation records: ``correlation``, ``stream``, ``wait_on_stream``,
  ``wait_on_cuda_event_record_corr_id``.

Only those rows' args are decoded, in blocks of rows with one msgspec call each, into typed
structs (a block that does not fit is decoded again row by row, leniently): values of the wrong
type or out of range (a grid dimension of 2^31 or more, a negative size) are unknown (-1 / NaN).
Operator inputs repeat from step to step, so each distinct ``Input Dims`` text is decoded once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import chain, compress
from operator import attrgetter
from typing import Annotated, Any, Generic, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model import (
    GPU_WORK_KINDS,
    NONE,
    EventFacts,
    EventKind,
    EventTable,
    LaunchTable,
    OpInputTable,
    SyncTable,
)
from echo_view.model.event_info import LAUNCH_COLUMNS, OP_INPUT_COLUMNS, Dims
from echo_view.model.trace import Text

I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.integer[Any]]
S = TypeVar("S", bound=msgspec.Struct)

_INPUT_DIMS = re.compile(re.escape(b'"Input Dims"'))
_DIM_LIMIT = 2**31  # CUDA's grid and block dimensions are far below this: above is damage
_SIZE_LIMIT = 2**62
#: Rows decoded per msgspec call: bounds the joined text held at once (~1-3 MB).
_BLOCK = 8192

Dim = Annotated[int, msgspec.Meta(ge=0, lt=_DIM_LIMIT)]
Size = Annotated[int, msgspec.Meta(ge=0, lt=_SIZE_LIMIT)]


class RowDecoder(Generic[S]):
    """Decodes the args of chosen event rows as one msgspec struct type."""

    def __init__(self, struct: type[S], lenient: Callable[[bytes], S] | None = None) -> None:
        self.default = struct()
        self.one = msgspec.json.Decoder(struct)
        self.many = msgspec.json.Decoder(list[struct])  # type: ignore[valid-type]
        self.lenient = lenient

    def __call__(self, blob: Text, offsets: Ints, rows: Sequence[int]) -> list[S]:
        """The args of each of ``rows`` (a row whose args are not an object, or do not fit
        the struct, gets what ``lenient`` makes of them, else the struct's defaults)."""
        out: list[S] = []
        for _, part in self.blocks(blob, offsets, rows):
            out += part
        return out

    def blocks(
        self, blob: Text, offsets: Ints, rows: Sequence[int]
    ) -> Iterator[tuple[I64, list[S]]]:
        """:meth:`__call__` in blocks of rows: ``(rows, their args)``; only one block's
        structs need to be alive at a time."""
        at = np.asarray(rows, dtype=np.int64)
        for first in range(0, len(at), _BLOCK):
            part = at[first : first + _BLOCK]
            lo, hi = offsets[part].tolist(), offsets[part + 1].tolist()
            raws = [blob[a:b] or b"{}" for a, b in zip(lo, hi, strict=True)]
            try:
                yield part, self.many.decode(b"[" + b",".join(raws) + b"]")
            except msgspec.DecodeError:  # or its ValidationError: read each row
                yield part, list(map(self._one, raws))

    def _one(self, raw: bytes) -> S:
        try:
            return self.one.decode(raw)
        except msgspec.DecodeError:  # tables are read lazily: damage is unknown, never raised
            return self.lenient(raw) if self.lenient is not None else self.default


_UNKNOWN3 = (NONE, NONE, NONE)


class LaunchArgs(msgspec.Struct, gc=False):
    """A kernel's, memcpy's or memset's args as a well-formed trace writes them (the defaults
    stand for unknown)."""

    grid: tuple[Dim, Dim, Dim] = _UNKNOWN3
    block: tuple[Dim, Dim, Dim] = _UNKNOWN3
    registers: Dim = msgspec.field(default=NONE, name="registers per thread")
    shared: Size = msgspec.field(default=NONE, name="shared memory")
    blocks_per_sm: float = msgspec.field(default=math.nan, name="blocks per SM")
    occupancy: float = msgspec.field(default=math.nan, name="est. achieved occupancy %")
    bytes: float = math.nan


def _int(v: Any, limit: int) -> int:
    """``v`` when it is an integer in ``[0, limit)``, else -1."""
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < limit
    return int(v) if ok else NONE


def _number(v: Any) -> float:
    ok = isinstance(v, int | float) and not isinstance(v, bool)
    return float(v) if ok else math.nan


def _triple(v: Any) -> tuple[int, int, int]:
    if isinstance(v, list) and len(v) == 3:
        x, y, z = (_int(d, _DIM_LIMIT) for d in v)
        if min(x, y, z) >= 0:
            return x, y, z
    return _UNKNOWN3


def _launch_fields(args: dict[str, Any]) -> dict[str, Any]:
    """:class:`LaunchArgs` fields from decoded args that do not fit it, field by field."""
    get = args.get
    return {
        "grid": _triple(get("grid")),
        "block": _triple(get("block")),
        "registers": _int(get("registers per thread"), _DIM_LIMIT),
        "shared": _int(get("shared memory"), _SIZE_LIMIT),
        "blocks_per_sm": _number(get("blocks per SM")),
        "occupancy": _number(get("est. achieved occupancy %")),
        "bytes": _number(get("bytes")),
    }


def _lenient_launch(raw: bytes) -> LaunchArgs:
    try:
        args = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return LaunchArgs()
    return LaunchArgs(**_launch_fields(args)) if isinstance(args, dict) else LaunchArgs()


class InputArgs(msgspec.Struct, gc=False):
    """An operator's recorded inputs, kept as text until each distinct one is decoded."""

    dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")


class SyncArgs(msgspec.Struct, gc=False):
    """A synchronisation record's args (Kineto ``cuda_sync``, Nsight's with the same keys)."""

    correlation: Any = None
    stream: Any = None
    wait_on_stream: Any = None
    wait_on_record: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")


_LAUNCH_ARGS = RowDecoder(LaunchArgs, _lenient_launch)
_INPUT_ARGS = RowDecoder(InputArgs)
_SYNC_ARGS = RowDecoder(SyncArgs)


_GRID, _BLOCK_DIMS = attrgetter("grid"), attrgetter("block")
_LAUNCH_INTS = {"registers": attrgetter("registers"), "shared_bytes": attrgetter("shared")}
_LAUNCH_FLOATS = {
    "blocks_per_sm": attrgetter("blocks_per_sm"),
    "occupancy": attrgetter("occupancy"),
    "bytes": attrgetter("bytes"),
}


def _launch_columns(rows: I64, args: Sequence[LaunchArgs]) -> dict[str, npt.NDArray[Any]]:
    """The launch columns of GPU work rows ``rows`` from their args, keyed like
    :data:`LAUNCH_COLUMNS`; only rows with a readable grid or size are kept."""
    has = np.fromiter(map(_UNKNOWN3.__ne__, map(_GRID, args)), dtype=bool, count=len(args))
    nbytes = np.fromiter(map(_LAUNCH_FLOATS["bytes"], args), dtype=np.float64, count=len(args))
    has |= (nbytes >= 0) & (nbytes < _SIZE_LIMIT)
    if not has.all():
        args, rows = list(compress(args, has)), rows[has]
    n = len(args)
    cols: dict[str, npt.NDArray[Any]] = {"event": rows}
    for name, get in (("grid", _GRID), ("block", _BLOCK_DIMS)):
        dims = np.fromiter(chain.from_iterable(map(get, args)), dtype=np.int64, count=3 * n)
        for i, axis in enumerate("xyz"):
            cols[f"{name}_{axis}"] = dims[i::3]
    for name, get in _LAUNCH_INTS.items():
        cols[name] = np.fromiter(map(get, args), dtype=np.int64, count=n)
    for name, get in _LAUNCH_FLOATS.items():
        cols[name] = np.fromiter(map(get, args), dtype=np.float64, count=n)
    size = cols["bytes"]
    cols["bytes"] = np.where((size >= 0) & (size < _SIZE_LIMIT), size, NONE).astype(np.int64)
    cols["occupancy"] = cols["occupancy"] * 0.01
    return cols


def _concat_launches(parts: Sequence[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """Blocks of :func:`_launch_columns` as one."""
    return {
        k: np.concatenate([p[k] for p in parts]) if parts else np.empty(0, dtype=dt)
        for k, dt in LAUNCH_COLUMNS.items()
    }


def _launch_table(kind: Ints, blob: Text, offsets: Ints) -> LaunchTable:
    gpu = np.isin(kind, np.array([int(k) for k in GPU_WORK_KINDS], dtype=kind.dtype))
    rows = np.flatnonzero(gpu & (offsets[1:] > offsets[:-1])).tolist()
    blocks = _LAUNCH_ARGS.blocks(blob, offsets, rows)
    return LaunchTable(**_concat_launches([_launch_columns(r, a) for r, a in blocks]))


def _dims(v: Any) -> Dims:
    """One argument's ``Input Dims`` entry: sizes as a tuple (nested for tensor lists)."""
    if not isinstance(v, list):
        return None
    if all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        return tuple(v)
    if all(isinstance(d, list) for d in v):
        return tuple(_dims(d) for d in v)
    return None


def _typed(what: str, value: list[Any]) -> tuple[Any, ...]:
    """A decoded input list: :data:`Dims` per argument, or texts (``""`` for other values)."""
    if what == "dims":
        return tuple(map(_dims, value))
    return tuple(t if isinstance(t, str) else "" for t in value)


def _op_input_table(blob: Text, offsets: Ints, only: Sequence[int] | None = None) -> OpInputTable:
    """The table of every event that recorded ``Input Dims`` (of ``only``, ascending rows,
    when given: a few rows are decoded without scanning the whole text)."""
    rows: list[int] = []
    if only is not None:
        rows = [int(r) for r in only]
    elif b'"Input Dims"' in blob:
        pos = np.fromiter((m.start() for m in _INPUT_DIMS.finditer(blob)), dtype=np.int64)
        rows = np.unique(np.searchsorted(offsets, pos, side="right") - 1).tolist()
    args = _INPUT_ARGS(blob, offsets, rows)
    cols: dict[str, list[int]] = {name: [] for name in OP_INPUT_COLUMNS}
    values: dict[tuple[Any, ...], int] = {}
    # Text -> value id (-1: absent or not a list), each distinct text decoded once.
    seen: dict[tuple[str, bytes], int] = {}

    def vid(what: str, raw: msgspec.Raw) -> int:
        key = (what, bytes(raw))
        found = seen.get(key)
        if found is None:
            value = msgspec.json.decode(key[1]) if key[1] else None
            if isinstance(value, list):
                found = values.setdefault(_typed(what, value), len(values))
            else:
                found = NONE
            seen[key] = found
        return found

    for r, a in zip(rows, args, strict=True):
        dims = vid("dims", a.dims)
        if dims < 0:
            continue
        cols["event"].append(r)
        cols["dims"].append(dims)
        cols["types"].append(vid("types", a.types))
        cols["concrete"].append(vid("concrete", a.concrete))
    arrays = {k: np.array(v, dtype=OP_INPUT_COLUMNS[k]) for k, v in cols.items()}
    return OpInputTable(**arrays, values=tuple(values))


def _sync_table(kind: Ints, correlation: Ints, blob: Text, offsets: Ints) -> SyncTable:
    rows = np.flatnonzero(kind == int(EventKind.SYNC)).tolist()
    args = _SYNC_ARGS(blob, offsets, rows)

    def corr(r: int, a: SyncArgs) -> int:
        return int(correlation[r]) if a.correlation is None else _int(a.correlation, 2**63)

    return SyncTable(
        event=np.array(rows, dtype=np.int64),
        correlation=np.array([corr(r, a) for r, a in zip(rows, args, strict=True)], np.int64),
        stream=np.array([_int(a.stream, _DIM_LIMIT) for a in args], np.int64),
        wait_on_stream=np.array([_int(a.wait_on_stream, _DIM_LIMIT) for a in args], np.int64),
        wait_on_record=np.array([_int(a.wait_on_record, _DIM_LIMIT) for a in args], np.int64),
    )


def event_facts(events: EventTable) -> EventFacts:
    """The typed side tables of ``events``, each read from their args text on first use (an
    import whose tables no command reads costs nothing)."""
    kind, blob = events.kind, events.args_blob
    offsets = events.args_offsets
    assert offsets is not None
    return EventFacts(
        launches=partial(_launch_table, kind, blob, offsets),
        op_inputs=partial(_op_input_table, blob, offsets),
        syncs=partial(_sync_table, kind, events.correlation, blob, offsets),
    )
