"""Event chunks of a trace-event file -> numpy columns (the importer's hot path).

Each chunk from :mod:`importers.chrome_json` is decoded into :class:`RawEvent` structs (only the
fields a timeline needs; ``args`` stays raw JSON) and turned into columns with one C-level
``map`` per field, never one Python object per event kept beyond the chunk. What is not a row of
the event table is set aside: ``M`` metadata (names), ``s``/``t``/``f`` flow points and ``E``/``e``
ends (matched to their begins later). Times are converted exactly (:mod:`importers.kineto.values`).
"""

from __future__ import annotations

import codecs
import math
from dataclasses import dataclass, field
from io import BytesIO
from itertools import compress
from operator import attrgetter
from operator import index as int_index
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.model import NONE
from echo_view.model.trace_rules import parse_flow_id
from echo_view.text import clipped
from echo_view.units import (
    FLOAT_NS_LIMIT,
    TEXT_BAD,
    TEXT_EMPTY,
    int_us_in_range,
    us_floats_to_ns,
    us_texts_to_ns,
)
from importers.chrome_json import EventChunk
from importers.kineto.rows import (
    IDX,
    PH_AB,
    PH_AE,
    PH_AN,
    PH_B,
    PH_C,
    PH_E,
    PH_F,
    PH_I,
    PH_M,
    PH_OTHER,
    PH_S,
    PH_T,
    PH_X,
    FileColumns,
    PointColumns,
)
from importers.kineto.values import (
    MISSING,
    Classes,
    Interner,
    ThreadIds,
    as_int,
    ints,
)

I64 = npt.NDArray[np.int64]


def _phase_mask(*codes: int) -> npt.NDArray[np.bool_]:
    """Whether each phase code is one of ``codes``: ``mask[ph]`` costs a fraction of
    ``np.isin(ph, codes)`` (~0.1 ms per chunk)."""
    mask = np.zeros(PH_M + 1, dtype=np.bool_)  # PH_M is the largest code
    mask[list(codes)] = True
    return mask


#: Phases that become rows of the event table.
ROW_PHASES = np.array([PH_X, PH_B, PH_I, PH_C, PH_AB, PH_AN], dtype=np.uint8)
_IS_ROW = _phase_mask(*ROW_PHASES.tolist())
_IS_FLOW = _phase_mask(PH_S, PH_T, PH_F)
_IS_END = _phase_mask(PH_E, PH_AE)


class RawEvent(msgspec.Struct, gc=False):
    """One trace event as decoded for import (unknown fields are skipped by msgspec).

    Fields are in Kineto's key order, which msgspec matches fastest.
    """

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw()  # the number's text: converted exactly, in bulk
    dur: msgspec.Raw = msgspec.Raw()
    args: msgspec.Raw = msgspec.Raw()
    id: int | str | None = None
    bp: str = ""


class NumberEvent(RawEvent, gc=False):
    """:class:`RawEvent` with ``ts``/``dur`` decoded as numbers: the faster reading while every
    time is an integer (exact); a chunk with a float is read again as :class:`TimeTexts`."""

    # Redefined in place, so that msgspec keeps the fields' order (the fastest to match).
    ts: int | float = MISSING  # type: ignore[assignment]
    dur: int | float = MISSING  # type: ignore[assignment]


class IntEvent(RawEvent, gc=False):
    """:class:`RawEvent` with integer ``ts``/``dur`` (Kineto before PyTorch 2.3): each column
    is read into int64 in one pass, with no look at each value's type. A chunk with a float
    does not fit; it and the chunks after it are decoded as :class:`NumberEvent`."""

    ts: int = MISSING  # type: ignore[assignment]
    dur: int = MISSING  # type: ignore[assignment]


class FloatEvent(RawEvent, gc=False):
    """:class:`RawEvent` with ``ts``/``dur`` decoded as doubles (NaN where absent), read after
    the first float while the times stay small enough to be exact as doubles
    (:func:`echo_view.units.us_floats_to_ns`); a column that is not is read again as
    :class:`TimeTexts`, and a ``ts`` that is not switches the reader to :class:`FracEvent`."""

    ts: float = math.nan  # type: ignore[assignment]
    dur: float = math.nan  # type: ignore[assignment]


class FracEvent(RawEvent, gc=False):
    """:class:`RawEvent` with ``ts`` as text (absolute-epoch µs with decimals, beyond a double)
    and ``dur`` as a double (short times are exact as doubles; a chunk where one is not is read
    again as :class:`TimeTexts`)."""

    dur: float = math.nan  # type: ignore[assignment]


class TimeTexts(msgspec.Struct, gc=False):
    """The text of ``ts``/``dur``, from which fractional µs are converted exactly."""

    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()


class KeyArgs(msgspec.Struct, gc=False):
    """The args every event may need: links between CPU ops, launches and GPU work."""

    correlation: int = NONE
    external_id: int = msgspec.field(default=NONE, name="External id")
    external_id_old: int = msgspec.field(default=NONE, name="external id")


_GET = {name: attrgetter(name) for name in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "args")}


_KEYARGS = msgspec.json.Decoder(list[KeyArgs])
_CLASS_KEY = attrgetter("ph", "cat", "name", "pid", "tid")
_CORR = attrgetter("correlation")
_ID = attrgetter("id")
_BP = attrgetter("bp")
_BIND_END = "e"
_EXT = attrgetter("external_id")
_EXT_OLD = attrgetter("external_id_old")
_KEYARGS_ONE = msgspec.json.Decoder(KeyArgs)
_EMPTY_OBJ = b"{}"


@dataclass
class Columns:
    """Everything one file's events turned into, accumulated chunk by chunk."""

    strings: Interner = field(default_factory=Interner)
    #: (pid, tid) pairs as written (after digit-strings became ints), by pair id.
    threads: list[tuple[int | str, int | str]] = field(default_factory=list)
    # Row columns, one array per chunk until finish().
    phase: list[npt.NDArray[np.uint8]] = field(default_factory=list)
    name: list[npt.NDArray[np.int32]] = field(default_factory=list)
    cat: list[npt.NDArray[np.int32]] = field(default_factory=list)
    thread: list[npt.NDArray[np.int32]] = field(default_factory=list)
    start_ns: list[I64] = field(default_factory=list)
    dur_ns: list[I64] = field(default_factory=list)
    correlation: list[I64] = field(default_factory=list)
    external_id: list[I64] = field(default_factory=list)
    index: list[IDX] = field(default_factory=list)  # traceEvents index of each row
    async_id: dict[int, int] = field(default_factory=dict)  # row -> id of b/n events
    args_len: list[I64] = field(default_factory=list)
    args: BytesIO = field(default_factory=BytesIO)
    # Side events.
    metadata: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    flows: list[PointColumns] = field(default_factory=list)
    ends: list[PointColumns] = field(default_factory=list)
    end_args: dict[int, dict[str, Any]] = field(default_factory=dict)  # E's args, by file index
    _string_ids: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    #: The type the next chunks are best decoded as: :class:`IntEvent` until a time is a
    #: float, then :class:`FloatEvent` or, once a ``ts`` needs its text, :class:`FracEvent`.
    event_type: type[RawEvent] = IntEvent

    def __post_init__(self) -> None:
        self._thread_ids = ThreadIds(self.threads)
        self._classes = Classes(self.strings, self._thread_ids)

    def _ids(self, table: dict[Any, int], keys: Any, n: int) -> npt.NDArray[np.int32]:
        return np.fromiter(map(table.__getitem__, keys), dtype=np.int32, count=n)

    def add(self, chunk: EventChunk[Any]) -> None:
        """Turn one chunk (of either event type) into columns."""
        evs = chunk.events
        n = len(evs)
        if not n:
            return
        g = _GET
        # One multi-field getter builds each (ph, cat, name, pid, tid) key in a single C call.
        cls = self._ids(self._classes, map(_CLASS_KEY, evs), n)
        props = self._classes.props[cls]
        ph = props[:, 0].astype(np.uint8)
        cats, names, threads = props[:, 1], props[:, 2], props[:, 3]
        is_row = _IS_ROW[ph]
        ts, dur = self._times(chunk)
        missing_ts = (ts == MISSING) & (ph != PH_M) & (ph != PH_OTHER)
        if missing_ts.any():
            raise _missing(chunk, int(np.flatnonzero(missing_ts)[0]), "ts")
        bad_dur = (dur == MISSING) & (ph == PH_X)
        if bad_dur.any():
            raise _missing(chunk, int(np.flatnonzero(bad_dur)[0]), "dur")
        dur[(ph != PH_X) & (ph != PH_B) & (ph != PH_AB)] = 0
        rows = np.flatnonzero(is_row)
        self._side_events(chunk, ph, threads, names, cats, ts, is_row)
        if not len(rows):
            return
        row_evs = evs if len(rows) == n else list(compress(evs, is_row))
        raws = list(map(g["args"], row_evs))
        text = b"".join(raws)
        self.args.write(text)
        lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
        self.args_len.append(lengths)
        linked = props[rows, 4].astype(np.bool_)
        all_linked = bool(linked.all())
        keys = _key_args_of_all(text, lengths, linked)
        if keys is None:
            keys = self._key_args(
                chunk,
                raws if all_linked else list(compress(raws, linked)),
                bool((lengths[linked] == 0).any()),
                rows if all_linked else rows[linked],
            )
        del text
        self.phase.append(ph[rows])
        self.name.append(self._counter_names(names[rows], ph[rows], row_evs))
        self.cat.append(cats[rows])
        self.thread.append(threads[rows])
        self.start_ns.append(ts[rows])
        self.dur_ns.append(np.where(dur[rows] == MISSING, 0, dur[rows]))
        corr = _int_column(keys, _CORR)
        ext = _int_column(keys, _EXT)
        # 2021 traces spell it "external id": read only where "External id" is absent.
        no_ext = np.flatnonzero(ext == NONE)
        if len(no_ext):
            ext[no_ext] = _int_column(list(map(keys.__getitem__, no_ext.tolist())), _EXT_OLD)
        if len(keys) < len(rows):
            corr, ext = _spread(corr, linked), _spread(ext, linked)
        self.correlation.append(corr)
        self.external_id.append(ext)
        self.index.append(_file_index(rows, chunk.first_index))
        row_ph = ph[rows]
        for j in np.flatnonzero((row_ph == PH_AB) | (row_ph == PH_AN)).tolist():
            self.async_id[self.rows + j] = int(self.flow_ids([row_evs[j]])[0])
        self.rows += len(rows)

    def _counter_names(
        self, names: npt.NDArray[Any], ph: npt.NDArray[np.uint8], evs: list[Any]
    ) -> npt.NDArray[Any]:
        """Row names, a counter's with its ``id`` added as Perfetto names its tracks
        (``<name> id: <id>``): counters of one name and different ids are separate series."""
        counters = np.flatnonzero(ph == PH_C)
        if not len(counters):
            return names
        with_id = [j for j in counters.tolist() if evs[j].id is not None]
        if not with_id:
            return names
        text = list(self.strings)
        for j in with_id:
            names[j] = self.strings[f"{text[int(names[j])]} id: {evs[j].id}"]
        return names

    def _times(self, chunk: EventChunk[Any]) -> tuple[I64, I64]:
        """Exact ns of the chunk's ``ts`` and ``dur`` (MISSING where absent)."""
        evs: list[Any] = chunk.events
        kind = type(evs[0])
        if kind is IntEvent or kind is NumberEvent:
            if kind is IntEvent:
                ts, dur = _int_column_times(evs, "ts"), _int_column_times(evs, "dur")
            else:
                ts, dur = (
                    _int_times(list(map(_GET["ts"], evs))),
                    _int_times(list(map(_GET["dur"], evs))),
                )
            if ts is not None and dur is not None:
                return ts, dur
            # A float: exact here from its text; later chunks as doubles where they are exact.
            texts = chunk.decode(TimeTexts)
            ts, dur = _text_times(chunk, texts, "ts"), _text_times(chunk, texts, "dur")
            small = (ts == MISSING) | (np.abs(ts) < FLOAT_NS_LIMIT)
            self.event_type = FloatEvent if small.all() else FracEvent
            return ts, dur
        if kind is RawEvent:  # (a chunk that fits neither: a time that is not a number)
            return _text_times(chunk, evs, "ts"), _text_times(chunk, evs, "dur")
        reread: list[TimeTexts] | None = None
        out: list[I64] = []
        for what in ("ts", "dur"):
            if what == "ts" and kind is FracEvent:
                out.append(_text_times(chunk, evs, "ts"))
                continue
            us = np.fromiter(map(_GET[what], evs), dtype=np.float64, count=len(evs))
            ns, exact = us_floats_to_ns(us)
            absent = np.isnan(us)
            if (exact | absent).all():
                ns[absent] = MISSING
                out.append(ns)
                continue
            if reread is None:
                reread = chunk.decode(TimeTexts)
            out.append(_text_times(chunk, reread, what))
            if what == "ts":
                self.event_type = FracEvent
        return out[0], out[1]

    def _key_args(
        self,
        chunk: EventChunk[RawEvent],
        raws: list[msgspec.Raw],
        empty: bool,
        where: npt.NDArray[np.intp],
    ) -> list[KeyArgs]:
        """The link ids of each of ``raws`` (the args of chunk events ``where``)."""
        # Events without args (``empty``) get ``{}``; without any, the list is joined as it is.
        text = b"[" + b",".join([r or _EMPTY_OBJ for r in raws] if empty else raws) + b"]"
        try:
            return _KEYARGS.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass
        # Some args are not objects or hold a non-integer id: decode one by one, as dicts.
        out: list[KeyArgs] = []
        for j, r in enumerate(raws):
            try:
                out.append(_KEYARGS_ONE.decode(r) if r else KeyArgs())
                continue
            except (msgspec.ValidationError, msgspec.DecodeError):
                pass
            args = decode_args(chunk, int(where[j]), r)
            args = args if isinstance(args, dict) else {}
            out.append(
                KeyArgs(
                    *(as_int(args.get(k)) for k in ("correlation", "External id", "external id"))
                )
            )
        return out

    def _side_events(
        self,
        chunk: EventChunk[RawEvent],
        ph: npt.NDArray[np.uint8],
        threads: npt.NDArray[np.int32],
        names: npt.NDArray[np.int32],
        cats: npt.NDArray[np.int32],
        ts: I64,
        is_row: npt.NDArray[np.bool_],
    ) -> None:
        if is_row.all():
            return
        evs = chunk.events
        for i in np.flatnonzero(ph == PH_M).tolist():
            e = evs[i]
            args = decode_args(chunk, i, e.args) if e.args else {}
            self.metadata.append((e.name, int(threads[i]), args if isinstance(args, dict) else {}))
        for phases, out in ((_IS_FLOW, self.flows), (_IS_END, self.ends)):
            idx = np.flatnonzero(phases[ph])
            if not len(idx):
                continue
            points = list(map(evs.__getitem__, idx.tolist()))
            point_ph = ph[idx]
            # A source and a step bind to their enclosing slice whatever their "bp"; an end
            # reads it (ends of slices do not bind).
            bind = (point_ph == PH_S) | (point_ph == PH_T)
            if out is self.flows and not bind.all():
                rest = np.flatnonzero(~bind)
                bps = map(_BP, map(points.__getitem__, rest.tolist()))
                bind[rest] = np.fromiter(map(_BIND_END.__eq__, bps), np.bool_, len(rest))
            out.append(
                PointColumns(
                    phase=point_ph,
                    thread=threads[idx],
                    ts=ts[idx],
                    id=self.flow_ids(points),
                    cat=cats[idx],
                    name=names[idx],
                    bind_enclosing=bind,
                    index=_file_index(idx, chunk.first_index),
                )
            )
        for i in np.flatnonzero(ph == PH_E).tolist():
            raw = evs[i].args
            if raw and bytes(raw).strip() != _EMPTY_OBJ:
                args = decode_args(chunk, i, raw)  # here, to name the event if it cannot be
                if isinstance(args, dict) and args:
                    self.end_args[chunk.first_index + i] = args
        for i in np.flatnonzero((ph == PH_OTHER) & ~is_row).tolist():
            e = evs[i]
            key = e.ph or ("(empty)" if _is_empty(e) else "(none)")
            self.skipped[key] = self.skipped.get(key, 0) + 1

    def finish(self) -> FileColumns:
        """The accumulated columns as one :class:`FileColumns` (the accumulator is emptied)."""

        def cat(parts: list[Any], dtype: str) -> Any:
            out = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
            parts.clear()
            return out

        lengths = cat(self.args_len, "i8")
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        del lengths
        blob = self.args.getvalue()
        self.args = BytesIO()
        return FileColumns(
            strings=list(self.strings),
            threads=list(self.threads),
            phase=cat(self.phase, "u1"),
            name=cat(self.name, "i4"),
            cat=cat(self.cat, "i4"),
            thread=cat(self.thread, "i4"),
            start_ns=cat(self.start_ns, "i8"),
            dur_ns=cat(self.dur_ns, "i8"),
            correlation=cat(self.correlation, "i8"),
            external_id=cat(self.external_id, "i8"),
            index=cat(self.index, "i4"),
            async_id=self.async_id,
            args_blob=blob,
            args_offsets=offsets,
            metadata=self.metadata,
            flows=PointColumns.concat(self.flows),
            ends=PointColumns.concat(self.ends),
            skipped=self.skipped,
            end_args=self.end_args,
        )

    def flow_ids(self, events: list[Any]) -> I64:
        """The ``id`` of flow/async ``events`` as int64: ints as they are, strings as hex
        (Perfetto's rule) or, when not hex, a per-file number; -1 for none."""
        try:  # every id an int64 (Kineto's): one pass in C (int_index refuses str, None)
            return np.fromiter(map(int_index, map(_ID, events)), dtype=np.int64, count=len(events))
        except (TypeError, OverflowError):
            pass
        values = list(map(_ID, events))
        if str not in set(map(type, values)):
            return ints(values)
        out: list[int] = []
        for v in values:
            if isinstance(v, str):
                hex_id = parse_flow_id(v)
                if hex_id is not None:
                    out.append(hex_id & (2**63 - 1))
                else:
                    out.append(self._string_ids.setdefault(v, 2**62 + len(self._string_ids)))
            else:
                out.append(v if type(v) is int and -(2**63) <= v < 2**63 else NONE)
        return np.array(out, dtype=np.int64)


def _file_index(rows: npt.NDArray[np.intp], first: int) -> IDX:
    """``traceEvents`` indices of ``rows``: int32 while they fit (0.6 MB less per 150k rows at
    the importer's peak), else int64 (``np.concatenate`` then widens the whole column)."""
    if first + len(rows) < 2**31:
        return rows.astype(np.int32) + np.int32(first)
    return rows.astype(np.int64) + first


#: Least share of a chunk's rows that can hold link ids for their args to be read from the
#: rows' args text as it is written to the blob (every row's args decoded; else the linked
#: rows' args are joined and decoded apart).
LINKED_SHARE = 0.75


def _key_args_of_all(
    text: bytes, lengths: I64, linked: npt.NDArray[np.bool_]
) -> list[KeyArgs] | None:
    """The link ids of the linked rows, from ``text``, the rows' args as written one after the
    other (msgspec reads concatenated values): no second join of the args. None when it does
    not apply (few linked rows, a row without args, args that are not all objects with
    integer ids): :meth:`Columns._key_args` then reads them."""
    n = len(lengths)
    if linked.sum() < LINKED_SHARE * n or not lengths.all():
        return None
    try:
        keys = _KEYARGS_ONE.decode_lines(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    if len(keys) != n:  # (two values ran together: numbers, say)
        return None
    return keys if bool(linked.all()) else list(compress(keys, linked))


def _spread(values: I64, where: npt.NDArray[np.bool_]) -> I64:
    out = np.full(len(where), NONE, dtype=np.int64)
    out[where] = values
    return out


def _int_column(keys: list[KeyArgs], get: Any) -> I64:
    try:
        return np.fromiter(map(get, keys), dtype=np.int64, count=len(keys))
    except OverflowError:  # an id beyond int64 is no id we can use
        return ints(list(map(get, keys)))


def decode_args(chunk: EventChunk[RawEvent], i: int, raw: msgspec.Raw | bytes) -> Any:
    """Chunk event ``i``'s args text decoded, or an InputError naming the event (the text is
    not read when events are split, so only here is it known to be, e.g., valid UTF-8)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InputError(
            f"the args cannot be decoded: {exc}",
            path=chunk.path,
            where=f"traceEvents[{chunk.first_index + i}].args",
            hint="a trace file must be UTF-8 JSON; export the trace again",
        ) from None


def check_args_text(blob: bytes, offsets: I64, index: npt.NDArray[Any], path: Any) -> None:
    """Raise an InputError naming the event whose args are not UTF-8 (JSON's encoding), so
    that nothing fails later when an event's args are decoded on demand. ASCII (nearly every
    trace) is checked in one pass; otherwise the text is decoded in 1 MiB pieces."""
    if blob.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    view, step = memoryview(blob), 1 << 20
    for lo in range(0, len(blob), step):
        try:
            decoder.decode(view[lo : lo + step], final=lo + step >= len(blob))
        except UnicodeDecodeError as exc:
            at = lo + exc.start
            row = int(np.searchsorted(offsets, at, side="right")) - 1
            raise InputError(
                "the args are not valid UTF-8 text",
                path=path,
                where=f"traceEvents[{int(index[row])}].args",
                hint="a trace file must be UTF-8 JSON; export the trace again",
            ) from None


def _int_times(values: list[Any]) -> I64 | None:
    """ns of integer µs values (MISSING kept); None when any is a float or out of range."""
    # numpy's own type discovery tells the integers (int64) from a float or an int beyond
    # int64 (float64, uint64 or object): half the cost of a Python-level pass over the types.
    us = np.array(values)
    if us.dtype != np.int64 or us.ndim != 1:
        return None
    return _us_ns(us)


def _int_column_times(evs: list[IntEvent], what: str) -> I64 | None:
    """ns of the ``what`` (int) of ``evs`` (MISSING kept); None when one is out of range."""
    try:
        us = np.fromiter(map(_GET[what], evs), dtype=np.int64, count=len(evs))
    except OverflowError:
        return None
    return _us_ns(us)


def _us_ns(us: I64) -> I64 | None:
    """ns of int64 µs (MISSING kept); None when one is out of range."""
    missing = us == MISSING
    if not (missing | int_us_in_range(us)).all():
        return None  # (the text path names the event)
    return np.where(missing, MISSING, us * 1000)


def _text_times(chunk: EventChunk[Any], evs: list[Any], what: str) -> I64:
    """Exact ns of the ``what`` texts of ``evs`` (the chunk's events); MISSING where absent."""
    texts = list(map(_GET[what], evs))
    ns, status = us_texts_to_ns(texts)
    ns[status == TEXT_EMPTY] = MISSING
    bad = np.flatnonzero(status == TEXT_BAD)
    if len(bad):
        chunk.decode(NumberEvent)  # a value that is no number is named by the decoder's error
        i = int(bad[0])
        e = chunk.events[i]
        value = clipped(bytes(texts[i]).decode())
        raise InputError(
            f"{_event(e)} has {what} {value}, not a time in µs",
            path=chunk.path,
            where=f"traceEvents[{chunk.first_index + i}].{what}",
            hint="times are microseconds within ±146 years of the trace's clock origin",
        )
    return ns


def _missing(chunk: EventChunk[RawEvent], i: int, what: str) -> InputError:
    return InputError(
        f"{_event(chunk.events[i])} has no {what}",
        path=chunk.path,
        where=f"traceEvents[{chunk.first_index + i}]",
        hint="every event except 'M' needs ts, and complete ('X') events need dur (µs)",
    )


def _event(e: RawEvent) -> str:
    """``'X' event 'name'`` for a message, each part cut to 80 characters."""
    return f"{clipped(repr(e.ph))} event {clipped(repr(e.name))}"


def _is_empty(event: Any) -> bool:
    """Whether an event object holds no field at all: the ``{}`` that Chrome-style writers put
    after the last event of the array form (routine, not a damaged event)."""
    return bool(event == type(event)())  # (every field at its default)
