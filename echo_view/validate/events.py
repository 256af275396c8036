"""Raw trace events as columns: the input of every raw-JSON rule.

A chunk of ``traceEvents`` is decoded into :class:`RawEvent` structs (every field typed
``Any`` so that wrong types reach the schema rules instead of failing the decode; ``args`` kept
as raw JSON) and then turned into numpy columns once, in :func:`build_chunk`. Rules read the
columns; the structs are only consulted for the few events a finding names.

Times become exact int64 nanoseconds. A JSON float at or above 2**42 µs cannot hold
nanoseconds, so the decoder hands such literals over as :class:`~decimal.Decimal` (exact
text), which also lets the precision rule see whether sub-µs digits were written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.units import EXACT_FLOAT_US_LIMIT
from echo_view.validate.threads import (
    Interner,
    ThreadInfo,
    Threads,
    id_in_range,
    resolve_thread,
)
from echo_view.validate.times import (
    T_BIG_FLOAT,
    T_FLOAT,
    T_INT,
    T_INVALID,
    T_MISSING,
    T_RANGE,
    T_STRING,
    times_to_ns,
)

UNSET = msgspec.UNSET

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
BOOL = npt.NDArray[np.bool_]


class RawEvent(msgspec.Struct, gc=False):
    """One ``traceEvents`` element with the fields any rule reads; unknown fields skipped."""

    ph: Any = UNSET
    name: Any = UNSET
    cat: Any = UNSET
    ts: Any = UNSET
    dur: Any = UNSET
    pid: Any = UNSET
    tid: Any = UNSET
    id: Any = UNSET
    id2: Any = UNSET
    bp: Any = UNSET
    s: Any = UNSET
    bind_id: Any = UNSET
    flow_in: Any = UNSET
    flow_out: Any = UNSET
    args: msgspec.Raw = msgspec.Raw()


#: Marks an array element that is not a JSON object.
NOT_AN_OBJECT = object()

_FIELDS = RawEvent.__struct_fields__


def _float_hook(text: str) -> float | Decimal:
    value = float(text)
    if -EXACT_FLOAT_US_LIMIT < value < EXACT_FLOAT_US_LIMIT:
        return value
    return Decimal(text)


#: The float hook every event decoder must use (pass it to a reader's chunk decoder).
FLOAT_HOOK = _float_hook

#: Decodes a JSON array of events (the text between and including ``[`` and ``]``).
EVENTS_DECODER = msgspec.json.Decoder(list[RawEvent], float_hook=_float_hook)
_ANY_DECODER = msgspec.json.Decoder(list[Any], float_hook=_float_hook)
_ANY_VALUE = msgspec.json.Decoder(float_hook=_float_hook)
_ENCODER = msgspec.json.Encoder(decimal_format="number")

# Phase codes. 0: no "ph"; 253: not an object; 254: empty {}; 255: unknown phase.
PHASES = "BEXiIRCbnestfMTPNODSpFvVc()"
PH: dict[str, int] = {p: i + 1 for i, p in enumerate(PHASES)}
PH_MISSING = 0
PH_NOT_OBJECT = 253
PH_EMPTY = 254
PH_UNKNOWN = 255


def _intern_strings(values: list[Any], table: Interner) -> I32:
    try:
        ids = [table[v] for v in values]
    except TypeError:
        ids = [table[v] if isinstance(v, str) else -1 for v in values]
    return np.array(ids, dtype=np.int32)


@dataclass(eq=False)
class EventChunk:
    """Columns of one chunk of ``traceEvents``; row ``r`` is ``traceEvents[first + r]``."""

    first: int
    events: Sequence[RawEvent]
    ph: U8
    ts_ns: I64
    ts_kind: U8
    dur_ns: I64
    dur_kind: U8
    raw_thread: I32
    thread: I32
    name: I32
    cat: I32

    def __len__(self) -> int:
        return len(self.ph)

    def index(self, row: int) -> int:
        return self.first + row

    def rows(self, *phases: str) -> npt.NDArray[np.intp]:
        """Rows whose phase is one of ``phases``."""
        if len(phases) == 1:
            return np.flatnonzero(self.ph == PH[phases[0]])
        return np.flatnonzero(np.isin(self.ph, [PH[p] for p in phases]))


class Strings:
    """Names and categories of one file, interned (``-1``: absent)."""

    def __init__(self) -> None:
        self.table = Interner([(UNSET, -1), (None, -1)])

    def text(self, sid: int) -> str:
        if sid < 0:
            return ""
        value = self.table.keys_[sid]
        return value if isinstance(value, str) else repr(value)

    def id_of(self, text: str) -> int:
        """Id of ``text`` or -1 when no event used it."""
        return self.table.get(text, -1)


def _phase_codes(phs: list[Any]) -> U8:
    get = PH.get
    try:
        codes = [get(p, PH_UNKNOWN) for p in phs]
    except TypeError:
        codes = [get(p, PH_UNKNOWN) if isinstance(p, str) else PH_UNKNOWN for p in phs]
    arr = np.array(codes, dtype=np.uint8)
    if PH_UNKNOWN in codes:
        # Distinguish "no ph" and "{}" and "not an object" from unknown phases.
        for row in np.flatnonzero(arr == PH_UNKNOWN).tolist():
            p = phs[row]
            if p is UNSET:
                arr[row] = PH_MISSING
            elif p is NOT_AN_OBJECT:
                arr[row] = PH_NOT_OBJECT
    return arr


def build_chunk(
    events: Sequence[RawEvent], first: int, threads: Threads, strings: Strings
) -> EventChunk:
    """Turn decoded events into columns (one pass per field, no per-event objects kept)."""
    phs = [e.ph for e in events]
    ph = _phase_codes(phs)
    for row in np.flatnonzero(ph == PH_MISSING).tolist():
        e = events[row]
        if all(getattr(e, f) is UNSET for f in _FIELDS if f != "args") and not len(e.args):
            ph[row] = PH_EMPTY
    ts_ns, ts_kind = times_to_ns([e.ts for e in events])
    dur_ns, dur_kind = times_to_ns([e.dur for e in events])
    raw_thread, thread = threads.ids([e.pid for e in events], [e.tid for e in events], first)
    table = strings.table
    return EventChunk(
        first=first,
        events=events,
        ph=ph,
        ts_ns=ts_ns,
        ts_kind=ts_kind,
        dur_ns=dur_ns,
        dur_kind=dur_kind,
        raw_thread=raw_thread,
        thread=thread,
        name=_intern_strings([e.name for e in events], table),
        cat=_intern_strings([e.cat for e in events], table),
    )


def decode_events(data: bytes | memoryview) -> list[RawEvent]:
    """Decode a JSON array of events. Elements that are not objects become events whose
    ``ph`` is :data:`NOT_AN_OBJECT`; a JSON syntax error raises :class:`msgspec.DecodeError`."""
    try:
        return EVENTS_DECODER.decode(data)
    except msgspec.ValidationError:
        items = _ANY_DECODER.decode(data)
    return events_from_objects(items)


def events_from_objects(items: Iterable[Any]) -> list[RawEvent]:
    """Events from already-decoded JSON values (dicts, or anything else for a bad element)."""
    out: list[RawEvent] = []
    for item in items:
        if isinstance(item, RawEvent):
            out.append(item)
        elif isinstance(item, dict):
            out.append(EVENTS_DECODER.decode(b"[" + _ENCODER.encode(item) + b"]")[0])
        else:
            out.append(RawEvent(ph=NOT_AN_OBJECT))
    return out


def raw_value(event: RawEvent, field: str) -> Any:
    """A field of an event as written (``None`` when absent)."""
    value = getattr(event, field)
    return None if value is UNSET else value


def args_of(event: RawEvent) -> Any:
    """An event's decoded ``args`` (``None`` when absent; any JSON value otherwise)."""
    raw = event.args
    if not len(raw):
        return None
    return _ANY_VALUE.decode(raw)


def ts_text(value: Any) -> str | None:
    """A raw ``ts`` as text for locations (exact for Decimals)."""
    if value is UNSET or value is None:
        return None
    return str(value) if not isinstance(value, str) else repr(value)


__all__ = [
    "BOOL",
    "EVENTS_DECODER",
    "FLOAT_HOOK",
    "I32",
    "I64",
    "NOT_AN_OBJECT",
    "PH",
    "PHASES",
    "PH_EMPTY",
    "PH_MISSING",
    "PH_NOT_OBJECT",
    "PH_UNKNOWN",
    "T_BIG_FLOAT",
    "T_FLOAT",
    "T_INT",
    "T_INVALID",
    "T_MISSING",
    "T_RANGE",
    "T_STRING",
    "U8",
    "UNSET",
    "EventChunk",
    "Interner",
    "RawEvent",
    "Strings",
    "ThreadInfo",
    "Threads",
    "args_of",
    "build_chunk",
    "decode_events",
    "events_from_objects",
    "id_in_range",
    "raw_value",
    "resolve_thread",
    "times_to_ns",
    "ts_text",
]
