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

Only those rows' args are decoded, in one msgspec call; values of the wrong type or out of
range (a grid dimension of 2^31 or more, a negative size) are unknown (-1 / NaN).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model import GPU_WORK_KINDS, NONE, EventKind, LaunchTable, OpInputTable, SyncTable
from echo_view.model.event_info import LAUNCH_COLUMNS, OP_INPUT_COLUMNS, SYNC_COLUMNS, Dims

I64 = npt.NDArray[np.int64]
S = TypeVar("S", bound=msgspec.Struct)

_INPUT_DIMS = re.compile(re.escape(b'"Input Dims"'))
_DIM_LIMIT = 2**31  # CUDA's grid and block dimensions are far below this: above is damage
_SIZE_LIMIT = 2**62


class EventArgs(msgspec.Struct, gc=False):
    """The args of one event that the model keeps as typed columns (others skipped)."""

    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared: Any = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: Any = None
    dims: Any = msgspec.field(default=None, name="Input Dims")
    types: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")
    correlation: Any = None
    stream: Any = None
    wait_on_stream: Any = None
    wait_on_record: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")


class RowDecoder(Generic[S]):
    """Decodes the args of chosen event rows as one msgspec struct type."""

    def __init__(self, struct: type[S]) -> None:
        self.default = struct()
        self.one = msgspec.json.Decoder(struct)
        self.many = msgspec.json.Decoder(list[struct])  # type: ignore[valid-type]

    def __call__(self, blob: bytes, offsets: I64, rows: Sequence[int]) -> list[S]:
        """The args of each of ``rows``, in one call (a row whose args are not an object, or
        do not fit the struct, gets the struct's defaults)."""
        raws = [blob[int(offsets[r]) : int(offsets[r + 1])] or b"{}" for r in rows]
        try:
            return self.many.decode(b"[" + b",".join(raws) + b"]")
        except msgspec.ValidationError:
            pass
        out: list[S] = []
        for raw in raws:
            try:
                out.append(self.one.decode(raw))
            except msgspec.ValidationError:
                out.append(self.default)
        return out


_EVENT_ARGS = RowDecoder(EventArgs)


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
    return NONE, NONE, NONE


def _dims(v: Any) -> Dims:
    """One argument's ``Input Dims`` entry: sizes as a tuple (nested for tensor lists)."""
    if not isinstance(v, list):
        return None
    if all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        return tuple(v)
    if all(isinstance(d, list) for d in v):
        return tuple(_dims(d) for d in v)
    return None


def _texts(v: Any) -> tuple[str, ...] | None:
    if not isinstance(v, list):
        return None
    return tuple(t if isinstance(t, str) else "" for t in v)


def _launches(rows: list[int], args: list[EventArgs]) -> LaunchTable:
    cols: dict[str, list[Any]] = {name: [] for name in LAUNCH_COLUMNS}
    for r, a in zip(rows, args, strict=True):
        grid, block = _triple(a.grid), _triple(a.block)
        size = _number(a.bytes)
        row = {
            "registers": _int(a.registers, _DIM_LIMIT),
            "shared_bytes": _int(a.shared, _SIZE_LIMIT),
            "blocks_per_sm": _number(a.blocks_per_sm),
            "occupancy": _number(a.occupancy) * 0.01,
            "bytes": int(size) if 0 <= size < _SIZE_LIMIT else NONE,  # NaN compares False
        }
        known = [v >= 0 for v in (*grid[:1], *block[:1], *row.values())]  # NaN -> False
        if not any(known):
            continue
        cols["event"].append(r)
        for axis, g, b in zip("xyz", grid, block, strict=True):
            cols[f"grid_{axis}"].append(g)
            cols[f"block_{axis}"].append(b)
        for name, value in row.items():
            cols[name].append(value)
    return LaunchTable(**{k: np.array(v, dtype=LAUNCH_COLUMNS[k]) for k, v in cols.items()})


def _op_inputs(rows: list[int], args: list[EventArgs]) -> OpInputTable:
    cols: dict[str, list[int]] = {name: [] for name in OP_INPUT_COLUMNS}
    values: dict[tuple[Any, ...], int] = {}

    def vid(value: tuple[Any, ...] | None) -> int:
        return NONE if value is None else values.setdefault(value, len(values))

    for r, a in zip(rows, args, strict=True):
        if not isinstance(a.dims, list):
            continue
        cols["event"].append(r)
        cols["dims"].append(vid(tuple(_dims(d) for d in a.dims)))
        cols["types"].append(vid(_texts(a.types)))
        cols["concrete"].append(vid(_texts(a.concrete)))
    arrays = {k: np.array(v, dtype=OP_INPUT_COLUMNS[k]) for k, v in cols.items()}
    return OpInputTable(**arrays, values=tuple(values))


def _syncs(rows: list[int], args: list[EventArgs], correlation: I64) -> SyncTable:
    cols: dict[str, list[int]] = {name: [] for name in SYNC_COLUMNS}
    for r, a in zip(rows, args, strict=True):
        corr = int(correlation[r]) if a.correlation is None else _int(a.correlation, 2**63)
        cols["event"].append(r)
        cols["correlation"].append(corr)
        cols["stream"].append(_int(a.stream, _DIM_LIMIT))
        cols["wait_on_stream"].append(_int(a.wait_on_stream, _DIM_LIMIT))
        cols["wait_on_record"].append(_int(a.wait_on_record, _DIM_LIMIT))
    return SyncTable(**{k: np.array(v, dtype=SYNC_COLUMNS[k]) for k, v in cols.items()})


def event_tables(
    kind: npt.NDArray[np.integer[Any]], correlation: I64, blob: bytes, offsets: I64
) -> tuple[LaunchTable, OpInputTable, SyncTable]:
    """The typed side tables of one trace's events, from their args text."""
    gpu = np.isin(kind, np.array([int(k) for k in GPU_WORK_KINDS], dtype=kind.dtype))
    sync = kind == int(EventKind.SYNC)
    shaped = np.zeros(len(kind), dtype=bool)
    if blob:
        pos = np.fromiter((m.start() for m in _INPUT_DIMS.finditer(blob)), dtype=np.int64)
        shaped[np.searchsorted(offsets, pos, side="right") - 1] = True
    rows = np.flatnonzero(gpu | sync | shaped)
    has_args = offsets[rows + 1] > offsets[rows]
    rows = rows[has_args | sync[rows]].tolist()
    args = _EVENT_ARGS(blob, offsets, rows)
    picked = {
        name: [(r, a) for r, a in zip(rows, args, strict=True) if mask[r]]
        for name, mask in (("gpu", gpu), ("sync", sync), ("shaped", shaped))
    }

    def split(name: str) -> tuple[list[int], list[EventArgs]]:
        return [r for r, _ in picked[name]], [a for _, a in picked[name]]

    return (
        _launches(*split("gpu")),
        _op_inputs(*split("shaped")),
        _syncs(*split("sync"), correlation),
    )
