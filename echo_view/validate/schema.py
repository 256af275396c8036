"""EV2xx: each event on its own — phase, required fields and their types, time values.

The rules follow Perfetto's JSON parser (``../research/formats.md`` section 1.3): a missing
``ph`` or ``ts`` fails the event, ``X`` needs ``dur`` and drops a negative one, async events need
an id and a pid, counters need numeric args, unknown phases are silently ignored, and a double
keeps exact nanoseconds only below 2**42 µs.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from echo_view.units import EXACT_FLOAT_US_LIMIT
from echo_view.validate.context import FileContext
from echo_view.validate.events import (
    PH,
    PH_EMPTY,
    PH_MISSING,
    PH_NOT_OBJECT,
    PH_UNKNOWN,
    T_BIG_FLOAT,
    T_INVALID,
    T_MISSING,
    T_RANGE,
    T_STRING,
    UNSET,
    EventChunk,
    args_of,
)
from echo_view.validate.findings import Severity, define

define(
    "EV201",
    Severity.ERROR,
    "event is not an object",
    "every element of traceEvents must be a JSON object",
)
define(
    "EV202",
    Severity.ERROR,
    'event without "ph"',
    'add the phase ("X", "B", "i"...); Perfetto rejects the event (json_tokenizer_failure)',
)
define(
    "EV203",
    Severity.WARNING,
    "unknown phase",
    "use a phase Perfetto reads (B E X i I R C b n e s t f M); it ignores others silently",
)
define(
    "EV204",
    Severity.INFO,
    "phase Perfetto does not display",
    "Perfetto ignores object (N O D), legacy async (S T p F), memory (v V) and context "
    "events and reads T as a thread state; use b/e async events instead",
)
define(
    "EV205",
    Severity.ERROR,
    'event without "ts"',
    "add ts (µs); only metadata (M) events may omit it",
)
define(
    "EV206",
    Severity.ERROR,
    "ts or dur of the wrong type",
    "write ts and dur as JSON numbers of microseconds",
)
define(
    "EV207",
    Severity.WARNING,
    "ts or dur written as a string",
    "write a JSON number; Perfetto parses numeric strings, other readers (echo-view's importer "
    "too) do not; `check --fix` writes them as numbers",
    fixable=True,
)
define(
    "EV208",
    Severity.ERROR,
    'complete event without "dur"',
    "give every X event a dur; Perfetto rejects it (json_parser_failure)",
)
define(
    "EV209",
    Severity.ERROR,
    "negative duration",
    "Perfetto drops slices with a negative dur (slice_negative_duration); fix the producer",
)
define(
    "EV210",
    Severity.WARNING,
    "negative timestamp",
    "use timestamps at or after 0; write them relative to a base kept in metadata",
)
define(
    "EV211",
    Severity.ERROR,
    "ts or dur out of range",
    "times must be finite and below 9.2e15 µs (int64 nanoseconds)",
)
define(
    "EV212",
    Severity.WARNING,
    "timestamp beyond exact double precision",
    "a double holds exact ns only below 2**42 µs (~51 days): write ts relative to a base "
    "(as Kineto's baseTimeNanoseconds) or as integers; `check --fix` rebases them exactly",
    fixable=True,
)
define(
    "EV213",
    Severity.ERROR,
    "async event without id or pid",
    "b/n/e events need an id (or id2) and a pid; Perfetto drops them (json_parser_failure)",
)
define(
    "EV214",
    Severity.ERROR,
    "flow event without id",
    "s/t/f events need an id; flows bind by (id, cat, name)",
)
define(
    "EV215",
    Severity.ERROR,
    "counter without numeric args",
    "a C event needs args: an object whose values are numbers, one series each",
)
define(
    "EV216",
    Severity.WARNING,
    "name or category missing or not a string",
    "give slices and instants a string name, and categories as strings",
)
define(
    "EV217",
    Severity.WARNING,
    "instant with an unknown scope",
    'the scope "s" of an instant must be "g", "p" or "t"',
)
define("EV218", Severity.INFO, "empty event {}", "remove empty objects; Perfetto skips them")
define(
    "EV219",
    Severity.ERROR,
    "args is not an object",
    "args must be a JSON object (checked on M and C events and on the Kineto events read)",
)

_IGNORED = {p: PH[p] for p in "NODSpFvVc()TP"}
_IGNORED_WHY = {
    "N": "object created",
    "O": "object snapshot",
    "D": "object destroyed",
    "S": "legacy async begin",
    "T": "legacy async step (read as a thread state)",
    "p": "legacy async step",
    "F": "legacy async end",
    "v": "memory dump",
    "V": "memory dump",
    "c": "clock sync",
    "(": "context enter",
    ")": "context leave",
    "P": "sample (only V8 CPU profiles use it)",
}
_NAMED = np.array([PH[p] for p in "XBiIRbnC"], dtype=np.uint8)
_ASYNC = np.array([PH[p] for p in "bne"], dtype=np.uint8)
_FLOW = np.array([PH[p] for p in "stf"], dtype=np.uint8)
_INSTANT = np.array([PH[p] for p in "iI"], dtype=np.uint8)
_NO_TS_OK = np.array([PH_EMPTY, PH_NOT_OBJECT, PH_MISSING, PH["M"]], dtype=np.uint8)


def _num(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return False
        return True
    return isinstance(value, Decimal)


class SchemaRule:
    """Per-event checks, vectorised per chunk."""

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None:
        ph = chunk.ph
        ev = chunk.events
        ctx.emit_rows(
            "EV201",
            chunk,
            np.flatnonzero(ph == PH_NOT_OBJECT),
            lambda r: "array element is not an object",
        )
        ctx.emit_rows(
            "EV202",
            chunk,
            np.flatnonzero(ph == PH_MISSING),
            lambda r: 'the event has fields but no "ph"',
        )
        ctx.emit_rows("EV218", chunk, np.flatnonzero(ph == PH_EMPTY), lambda r: "empty object")
        ctx.emit_rows(
            "EV203",
            chunk,
            np.flatnonzero(ph == PH_UNKNOWN),
            lambda r: f"phase {ev[r].ph!r} is not a trace event phase",
        )
        ignored = np.flatnonzero(np.isin(ph, list(_IGNORED.values())))
        ctx.emit_rows(
            "EV204", chunk, ignored, lambda r: f"phase {ev[r].ph!r} ({_IGNORED_WHY[ev[r].ph]})"
        )

        ts_kind, dur_kind = chunk.ts_kind, chunk.dur_kind
        needs_ts = ~np.isin(ph, _NO_TS_OK)
        ctx.emit_rows(
            "EV205",
            chunk,
            np.flatnonzero(needs_ts & (ts_kind == T_MISSING)),
            lambda r: f"{ev[r].ph!r} event without ts",
        )
        bad_type = (ts_kind == T_INVALID) | (dur_kind == T_INVALID)
        ctx.emit_rows("EV206", chunk, np.flatnonzero(bad_type), lambda r: _type_msg(ev[r]))
        ctx.emit_rows(
            "EV207",
            chunk,
            np.flatnonzero((ts_kind == T_STRING) | (dur_kind == T_STRING)),
            lambda r: _string_msg(ev[r]),
        )
        ctx.emit_rows(
            "EV211",
            chunk,
            np.flatnonzero((ts_kind == T_RANGE) | (dur_kind == T_RANGE)),
            lambda r: (
                f"ts={_number(ev[r].ts)} dur={_number(ev[r].dur)} is not a finite int64-ns time"
            ),
        )
        is_x = ph == PH["X"]
        ctx.emit_rows(
            "EV208",
            chunk,
            np.flatnonzero(is_x & (dur_kind == T_MISSING)),
            lambda r: "X event without dur",
        )
        dur_ok = (dur_kind != T_MISSING) & (dur_kind != T_INVALID) & (dur_kind != T_RANGE)
        ctx.emit_rows(
            "EV209",
            chunk,
            np.flatnonzero(is_x & dur_ok & (chunk.dur_ns < 0)),
            lambda r: f"dur={ev[r].dur} (Perfetto drops the slice; echo-view reads it as 0 long)",
        )
        ts_ok = (ts_kind != T_MISSING) & (ts_kind != T_INVALID) & (ts_kind != T_RANGE)
        ctx.emit_rows(
            "EV210", chunk, np.flatnonzero(ts_ok & (chunk.ts_ns < 0)), lambda r: f"ts={ev[r].ts}"
        )
        big_ts = (ts_kind == T_BIG_FLOAT) & (chunk.ts_ns % 1000 != 0)
        big_dur = (dur_kind == T_BIG_FLOAT) & (chunk.dur_ns % 1000 != 0)

        def big_msg(r: int) -> str:
            # (A dur was reported as its event's ts, "off by up to 0 ns".)
            field, value = ("ts", ev[r].ts) if big_ts[r] else ("dur", ev[r].dur)
            tail = "" if big_ts[r] else " (a rebase moves ts only: write the dur as an integer)"
            return (
                f"{field}={value} µs is >= 2**42 with sub-µs digits; a double reader is off by "
                f"up to {_ulp_ns(value)} ns{tail}"
            )

        ctx.emit_rows("EV212", chunk, np.flatnonzero(big_ts | big_dur), big_msg)

        self._ids(chunk, ctx)
        self._names(chunk, ctx)
        self._instants(chunk, ctx)
        self._counters(chunk, ctx)

    def _ids(self, chunk: EventChunk, ctx: FileContext) -> None:
        ev = chunk.events
        rows = np.flatnonzero(np.isin(chunk.ph, _ASYNC))
        if len(rows) and ctx.wants("EV213"):
            bad = [
                r
                for r in rows.tolist()
                if (ev[r].id is UNSET and ev[r].id2 is UNSET) or ev[r].pid is UNSET
            ]
            ctx.emit_rows(
                "EV213",
                chunk,
                np.array(bad, dtype=np.intp),
                lambda r: "async event without " + ("pid" if ev[r].pid is UNSET else "id or id2"),
            )
        rows = np.flatnonzero(np.isin(chunk.ph, _FLOW))
        if len(rows) and ctx.wants("EV214"):
            bad = [r for r in rows.tolist() if ev[r].id is UNSET and ev[r].id2 is UNSET]
            ctx.emit_rows(
                "EV214",
                chunk,
                np.array(bad, dtype=np.intp),
                lambda r: f"flow {ev[r].ph!r} event without id",
            )

    def _names(self, chunk: EventChunk, ctx: FileContext) -> None:
        if not ctx.wants("EV216"):
            return
        ev = chunk.events
        named = np.isin(chunk.ph, _NAMED)
        rows = np.flatnonzero(named & (chunk.name < 0))
        extra: list[int] = []
        # Non-string names and categories are interned too; find them among distinct ids.
        table = ctx.strings.table.keys_
        for col in (chunk.name, chunk.cat):
            ids = np.unique(col[col >= 0])
            odd = [i for i in ids.tolist() if not isinstance(table[i], str)]
            if odd:
                extra.extend(np.flatnonzero(np.isin(col, odd)).tolist())
        # A category that is no string nor absent (an array, an object) is not interned.
        extra.extend(r for r in np.flatnonzero(chunk.cat < 0).tolist() if ev[r].cat is not UNSET)
        if extra:
            rows = np.union1d(rows, np.array(extra, dtype=np.intp))
        ctx.emit_rows(
            "EV216",
            chunk,
            rows,
            lambda r: f"name={ev[r].name!r} cat={ev[r].cat!r}".replace("UNSET", "absent"),
        )

    def _instants(self, chunk: EventChunk, ctx: FileContext) -> None:
        ev = chunk.events
        rows = np.flatnonzero(np.isin(chunk.ph, _INSTANT))
        if len(rows) and ctx.wants("EV217"):
            bad = [
                r for r in rows.tolist() if ev[r].s is not UNSET and ev[r].s not in ("g", "p", "t")
            ]
            ctx.emit_rows("EV217", chunk, np.array(bad, dtype=np.intp), lambda r: f"s={ev[r].s!r}")

    def _counters(self, chunk: EventChunk, ctx: FileContext) -> None:
        ev = chunk.events
        for r in chunk.rows("C").tolist():
            try:
                args = args_of(ev[r])
            except msgspec.DecodeError:  # pragma: no cover - the chunk decoded already
                args = None
            if args is not None and not isinstance(args, dict):
                ctx.emit_rows(
                    "EV219", chunk, np.array([r]), lambda _r: "C event args is not an object"
                )
            elif not args or not any(_num(v) for v in args.values()):
                ctx.emit_rows(
                    "EV215",
                    chunk,
                    np.array([r]),
                    lambda _r: "counter has no numeric series in args",
                )

    def finish(self, ctx: FileContext) -> None:
        return None


def _type_msg(e: Any) -> str:
    parts = []
    for f in ("ts", "dur"):
        v = getattr(e, f)
        if v is not UNSET and (
            v is None
            or isinstance(v, bool | list | dict)
            or (isinstance(v, str) and not _finite_text(v))
        ):
            parts.append(f"{f}={v!r}")
    return ", ".join(parts) + " is not a number"


def _finite_text(text: str) -> bool:
    """Whether ``text`` reads as a finite number (``"NaN"``, ``"Infinity"`` and ``"1e400"``
    read as floats, but as none; they were left out of the message, which read ``:  is not a
    number``)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _number(v: Any) -> str:
    """A raw time for a message: a big float as its text (``1E+400``), not the Decimal's repr."""
    return str(v) if isinstance(v, Decimal) else repr(v)


def _string_msg(e: Any) -> str:
    parts = [f"{f}={getattr(e, f)!r}" for f in ("ts", "dur") if isinstance(getattr(e, f), str)]
    return ", ".join(parts) + " is a string"


def _ulp_ns(ts: Any) -> int:
    """Half a double's spacing at ``ts`` µs, in ns (the worst rounding of a reader)."""
    x = abs(float(ts))
    if x < EXACT_FLOAT_US_LIMIT:
        return 0
    return max(1, round(float(np.spacing(x)) * 1000 / 2))
