"""Streaming reader for trace-event JSON files (Chrome, Perfetto, PyTorch Kineto).

The ``traceEvents`` array is decoded in chunks of about ``chunk_bytes`` of text with msgspec (2 MB
by default, the fastest and smallest of the sizes measured in docs/performance.md), so a
multi-gigabyte trace never has to be held as one string, one ``list`` of dicts, or (for gzip)
one decompressed buffer. Everything else in the file is decoded normally. ``sniff_head`` and
``looks_like_trace`` tell cheaply whether a file is trace-event JSON.

Usage::

    from importers.chrome_json import read_container

    with read_container(path) as c:          # reads up to the start of the event array
        c.form                                # "object" ({"traceEvents": [...], ...}) or "array"
        c.header                              # top-level keys before "traceEvents", decoded
        for chunk in c.chunks(Event):         # Event: any msgspec type (a Struct, dict, Raw...)
            chunk.first_index                 # index of chunk.events[0] in traceEvents
            chunk.events                      # list[Event]
            chunk.decode(OtherType)           # the same chunk decoded again as another type
        c.top                                 # every top-level key but traceEvents (after chunks())
        c.truncated, c.dropped_bytes          # array form without its closing "]"
        c.event_count, c.text_bytes

Accepted input (what Perfetto and catapult accept):

- plain or gzip-compressed text (gzip is recognised by its magic bytes, not by the file name;
  concatenated gzip members are read in sequence);
- the object form ``{"traceEvents": [...], <any other keys, before or after>}`` and the array form
  ``[{...}, ...]``; an array whose closing ``]`` is missing (a trace cut short while being written)
  is read up to its last complete event and flagged ``truncated``; the bytes of a half-written last
  event are counted in ``dropped_bytes``.

Every failure is an :class:`~echo_view.errors.InputError` naming the file, the place and what to do:
empty file, damaged or truncated gzip, invalid JSON (``line L column C`` of the decompressed text;
columns count bytes), a top level that is neither object nor array, no ``traceEvents`` key,
``traceEvents`` that is not a list, and events that do not fit ``Event`` (``traceEvents[i].field``).

Why chunking is correct: a chunk is cut right after a ``}`` followed by ``,`` and decoded as
``[`` + text + ``]``. That text is valid JSON only when the cut falls between two events: a cut
inside a string leaves the string open, a cut inside a nested value leaves it unbalanced, and both
fail at the very end of the chunk, which is how a bad cut is told apart from a real error (a real
error is reported at its own position, before the end). After a bad cut the next candidate is tried.
The end of the array needs no scanning either: msgspec reports "trailing characters" exactly
where ``[`` + the rest of the text closed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import msgspec

from echo_view.errors import InputError
from echo_view.formats import describe_content
from importers.chrome_json_text import (
    BLOCK,
    BOM,
    HINT_DEEP,
    HINT_JSON,
    TOO_DEEP,
    WS,
    TextCursor,
    json_kind,
    line_col_in_file,
    looks_like_trace,
    sniff_head,
    split_decode_error,
    too_deep_at,
    validation_error,
)

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "Container",
    "EventChunk",
    "looks_like_trace",
    "read_container",
    "sniff_head",
]

T = TypeVar("T")
U = TypeVar("U")

#: Default amount of JSON text decoded at once.
DEFAULT_CHUNK_BYTES = 2 << 20

_CUT = re.compile(rb"\}[ \t\r\n]*,")
_TRAILING = "trailing characters"
_HINT_TRACE = 'a trace is {"traceEvents": [...]} or a JSON array of events'

_DECODERS: dict[tuple[Any, Any], msgspec.json.Decoder[Any]] = {}


def _decoder(event_type: Any, float_hook: Any) -> msgspec.json.Decoder[Any]:
    key = (event_type, float_hook)
    dec = _DECODERS.get(key)
    if dec is None:
        dec = msgspec.json.Decoder(list[event_type], float_hook=float_hook)
        _DECODERS[key] = dec
    return dec


@dataclass(eq=False)
class _Switchable:
    """The decoder of :meth:`Container.chunks`, replaceable between chunks."""

    dec: msgspec.json.Decoder[Any]
    float_hook: Any
    #: Used from the first text that ``dec`` finds invalid on: a narrow type (faster to read)
    #: with a wider one behind it, whose errors are the ones reported.
    fallback: msgspec.json.Decoder[Any] | None = None

    def decode(self, buf: Any) -> Any:
        try:
            return self.dec.decode(buf)
        except msgspec.ValidationError:
            if self.fallback is None:
                raise
        self.dec, self.fallback = self.fallback, None
        return self.dec.decode(buf)


@dataclass(eq=False)
class EventChunk(Generic[T]):
    """Consecutive events of ``traceEvents`` and the text they were decoded from."""

    path: Path
    #: Index of ``events[0]`` in ``traceEvents``.
    first_index: int
    events: list[T]
    #: ``[`` + the events' JSON text + ``]``; ``msgspec.Raw`` values point into it. Often a
    #: view of the reader's window, whose bracket bytes are separators again once the next
    #: chunk is requested: decode it (:meth:`decode`) before that.
    text: bytes | memoryview
    #: Offset of ``text[1]`` in the decompressed file.
    offset: int

    def __len__(self) -> int:
        return len(self.events)

    def locate(self, k: int) -> str:
        """``line L column C`` of byte ``k`` of :attr:`text` (reads the file again)."""
        k = max(1, min(k, len(self.text) - 1))
        line, col = line_col_in_file(self.path, self.offset + k - 1)
        return f"line {line} column {col}"

    def release(self) -> None:
        """Drop the events and the text now (a chunk is large; free it before the next one)."""
        self.events = []
        self.text = b""

    def decode(self, event_type: type[U], *, float_hook: Any = None) -> list[U]:
        """The chunk's events decoded again as ``event_type`` (errors name ``traceEvents[i]``)."""
        try:
            events: list[U] = _decoder(event_type, float_hook).decode(self.text)
        except RecursionError:
            where = self.locate(too_deep_at(self.text))
            raise InputError(TOO_DEEP, path=self.path, where=where, hint=HINT_DEEP) from None
        except msgspec.ValidationError as exc:
            raise validation_error(self.path, self.first_index, exc) from None
        except msgspec.DecodeError as exc:
            msg, k = split_decode_error(exc, self.text)
            where = self.locate(len(self.text) - 1 if k is None else k)
            raise InputError(
                f"invalid JSON: {msg}", path=self.path, where=where, hint=HINT_JSON
            ) from None
        return events


class Container(TextCursor):
    """An open trace-event JSON file: its layout, its top-level keys and its event chunks.

    Create it with :func:`read_container`. :meth:`chunks` can be iterated once; :attr:`top` is
    complete only after it has run to the end (keys after ``traceEvents`` are read then).
    """

    def __init__(self, path: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        super().__init__(path)
        self.chunk_bytes = chunk_bytes
        #: ``"object"`` or ``"array"``.
        self.form: Literal["object", "array"] = "object"
        #: Top-level keys that come before ``traceEvents``, decoded.
        self.header: dict[str, Any] = {}
        #: The array form ended without its closing bracket.
        self.truncated = False
        #: Bytes of an incomplete last event that a truncated array form had to drop (the text
        #: after the last complete event, without separators and whitespace).
        self.dropped_bytes = 0
        #: Events decoded so far.
        self.event_count = 0
        self._top: dict[str, Any] = {}
        self._done = False
        self._started = False
        self._switchable: _Switchable | None = None
        self._patches: list[tuple[int, int]] = []

    @property
    def top(self) -> dict[str, Any]:
        """Every top-level key except ``traceEvents``, decoded (after :meth:`chunks` finished)."""
        if not self._done:
            raise RuntimeError("Container.top is complete only after chunks() has been consumed")
        return self._top

    def chunks(
        self, event_type: type[T], *, float_hook: Any = None, fallback: type[Any] | None = None
    ) -> Iterator[EventChunk[T]]:
        """Decode ``traceEvents`` as ``list[event_type]``, chunk by chunk (the next chunks as
        another type after :meth:`decode_next_as`).

        ``float_hook`` is passed to msgspec: it applies to ``Any``-typed fields only (``str``
        keeps each float's exact text). ``fallback``: the type that the first chunk that does
        not fit ``event_type`` and every chunk after it are decoded as (errors are then its).
        """
        if self._started:
            raise RuntimeError("Container.chunks() can be iterated only once")
        self._started = True
        dec = _Switchable(_decoder(event_type, float_hook), float_hook)
        if fallback is not None:
            dec.fallback = _decoder(fallback, float_hook)
        self._switchable = dec
        try:
            yield from self._event_chunks(dec)
            self._read_tail()
            self._done = True
        finally:
            self.close()

    def decode_next_as(self, event_type: type[Any], *, fallback: type[Any] | None = None) -> None:
        """Decode the chunks after the current one as ``list[event_type]`` (a reader that finds
        it needs other fields switches once, without decoding each later chunk twice);
        ``fallback`` as in :meth:`chunks`."""
        if self._switchable is None:
            raise RuntimeError("Container.decode_next_as() applies while chunks() runs")
        hook = self._switchable.float_hook
        self._switchable.dec = _decoder(event_type, hook)
        self._switchable.fallback = None if fallback is None else _decoder(fallback, hook)

    def __enter__(self) -> Container:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- top level --------------------------------------------------------------------------

    def _read_header(self) -> None:
        """Parse up to the first event of ``traceEvents`` (or of the top-level array)."""
        self._fill(1 << 16)
        if self._buf.startswith(BOM):
            self._pos = len(BOM)
        c = self._skip_ws()
        if c == -1:
            raise InputError(
                "empty file" if self.text_bytes == 0 else "the file holds only whitespace",
                path=self.path,
                where="byte 0",
                hint=_HINT_TRACE,
            )
        if c == ord("["):
            self.form = "array"
            self._pos += 1
            return
        if c != ord("{"):
            kind = json_kind(c)
            what = (
                f"the top level is {kind}, not an object or a list"
                if kind
                else f"{describe_content(bytes(self._buf[:4096]))}, not JSON"
            )
            raise InputError(
                f"not a trace: {what}",
                path=self.path,
                where=self._where(self._pos),
                hint=_HINT_TRACE,
            )
        self._pos += 1
        if self._skip_ws() == ord("}"):
            raise InputError(
                "not a trace: no traceEvents key",
                path=self.path,
                where="top-level object",
                hint=_HINT_TRACE,
            )
        while True:
            key = self._read_key()
            if key == "traceEvents":
                c = self._skip_ws()
                if c != ord("["):
                    kind = "missing" if c == -1 else json_kind(c) or "not JSON"
                    raise InputError(
                        f"traceEvents is not a list (it is {kind})",
                        path=self.path,
                        where=self._where(self._pos),
                        hint="traceEvents must be a JSON array of event objects",
                    )
                self._pos += 1
                return
            self.header[key] = self._read_value()
            if not self._after_member():
                raise InputError(
                    "not a trace: no traceEvents key",
                    path=self.path,
                    where="top-level object",
                    hint=_HINT_TRACE,
                )

    def _read_tail(self) -> None:
        """After the event array: the object form's remaining keys, then only whitespace."""
        self._top = dict(self.header)
        if self.form == "object" and self._after_member():
            while True:
                key = self._read_key()
                if key == "traceEvents":
                    raise self._json_error("traceEvents appears twice")
                self._top[key] = self._read_value()
                if not self._after_member():
                    break
        if not self.truncated and self._skip_ws() != -1:
            raise self._json_error("invalid JSON: trailing characters after the trace")

    # -- events -----------------------------------------------------------------------------

    def _try(
        self, dec: _Switchable, start: int, end: int, close: bool
    ) -> tuple[EventChunk[Any] | None, str, int | None, bytes]:
        """Decode ``[`` + ``_buf[start:end]`` (+ ``]``).

        Returns (chunk or None, decode error, its byte in the text, the text).
        """
        view = memoryview(self._buf)[start:end]
        text = b"".join((b"[", view, b"]") if close else (b"[", view))
        view.release()
        chunk: EventChunk[Any] = EventChunk(
            self.path, self.event_count, [], text, self._base + start
        )
        try:
            chunk.events = dec.decode(text)
        except RecursionError:
            raise self._too_deep(text, self._base + start - 1) from None
        except msgspec.ValidationError as exc:
            raise validation_error(self.path, self.event_count, exc) from None
        except msgspec.DecodeError as exc:
            msg, k = split_decode_error(exc, text)
            return None, msg, k, text
        self.event_count += len(chunk.events)
        return chunk, "", None, text

    def _try_in_place(
        self, dec: _Switchable, start: int, end: int
    ) -> tuple[EventChunk[Any] | None, str, int | None, int]:
        """Decode ``_buf[start:end]`` as an array without copying it: the separator bytes
        either side become ``[`` and ``]`` while the chunk is out (see :meth:`_restore`).

        Returns (chunk or None, decode error, its byte in the text, the text's length); the
        text is ``_buf[start - 1 : end + 1]``. Copying the text took ~1 ms per 2 MB chunk and
        held a second copy of it.
        """
        buf = self._buf
        if start < 1 or end >= len(buf):
            copied, msg, k, text = self._try(dec, start, end, close=True)
            return copied, msg, k, len(text)
        self._patches = [(start - 1, buf[start - 1]), (end, buf[end])]
        buf[start - 1] = 0x5B  # [
        buf[end] = 0x5D  # ]
        view = memoryview(buf)[start - 1 : end + 1]
        try:
            events = dec.decode(view)
        except RecursionError:
            err = self._too_deep(view, self._base + start - 1)
            self._restore(view)
            raise err from None
        except msgspec.ValidationError as exc:
            self._restore(view)
            raise validation_error(self.path, self.event_count, exc) from None
        except msgspec.DecodeError as exc:
            msg, k = split_decode_error(exc, view)
            self._restore(view)
            return None, msg, k, end - start + 2
        chunk: EventChunk[Any] = EventChunk(
            self.path, self.event_count, events, view, self._base + start
        )
        self.event_count += len(events)
        return chunk, "", None, end - start + 2

    def _too_deep(self, text: bytes | memoryview, offset: int) -> InputError:
        """The error for ``text`` (at ``offset`` of the decompressed file) nested too deep."""
        line, col = line_col_in_file(self.path, offset + too_deep_at(text))
        return InputError(
            TOO_DEEP, path=self.path, where=f"line {line} column {col}", hint=HINT_DEEP
        )

    def _restore(self, view: memoryview | None = None) -> None:
        """Put back the separator bytes that :meth:`_try_in_place` turned into brackets."""
        if view is not None:
            with contextlib.suppress(BufferError):  # a value still points into it
                view.release()
        for i, byte in self._patches:
            self._buf[i] = byte
        self._patches = []

    def _event_chunks(self, dec: _Switchable) -> Iterator[EventChunk[Any]]:
        size = self.chunk_bytes
        while True:
            self._compact(keep=1)  # the byte before the next event: room for its "["
            self._fill(size + BLOCK)
            c = self._skip_ws()
            if c == ord("]"):
                self._pos += 1
                return
            if c == -1:
                self._end_of_text()
                return
            pos = self._pos
            search = min(pos + size, len(self._buf))
            fails = 0
            while True:
                m = _CUT.search(self._buf, search)
                if m is None:
                    if self._more():
                        continue
                    # No cut point left: the rest holds the end of the array, or is cut short.
                    yield from self._final(dec, pos)
                    return
                end = m.start() + 1
                chunk, msg, k, n = self._try_in_place(dec, pos, end)
                if chunk is not None:
                    yield chunk
                    del chunk
                    self._restore()
                    self._pos = m.end()
                    break
                if k is not None and msg.startswith(_TRAILING):
                    # The array closed inside this text.
                    text = b"".join((b"[", self._buf[pos:end], b"]"))
                    yield from self._close_at(dec, pos, text, k)
                    return
                if k is not None and k < n - 1:
                    raise self._json_error(f"invalid JSON: {msg}", pos + k - 1)
                # The cut fell inside a string or a nested value: try the next candidate,
                # in growing steps after many failures so that bad input stays O(n log n).
                fails += 1
                search = m.end() if fails < 8 else m.end() + (m.end() - pos) // 2

    def _close_at(
        self, dec: _Switchable, pos: int, text: bytes, k: int
    ) -> Iterator[EventChunk[Any]]:
        """``text`` (``[`` + ``_buf[pos:]``...) parsed as a complete array up to byte ``k``."""
        close = text.rfind(b"]", 0, k)
        chunk, msg, k2, _ = self._try(dec, pos, pos + close - 1, close=True)
        if chunk is None:  # pragma: no cover - these bytes parsed a moment ago
            raise self._json_error(f"invalid JSON: {msg}", pos + (k2 or 1) - 1)
        if chunk.events:
            yield chunk
        self._pos = pos + close

    def _final(self, dec: _Switchable, pos: int) -> Iterator[EventChunk[Any]]:
        """Decode the rest of the text, which has no cut point left."""
        chunk, msg, k, text = self._try(dec, pos, len(self._buf), close=False)
        if chunk is not None:
            # "[" + rest is a complete array: the text ends right after traceEvents' "]".
            if chunk.events:
                yield chunk
            self._pos = len(self._buf)
            if self.form == "object":
                raise self._json_error(
                    "invalid JSON: the file ends after traceEvents without the closing '}'"
                )
            return
        if k is not None and msg.startswith(_TRAILING):
            yield from self._close_at(dec, pos, text, k)
            return
        if k is not None and k < len(text):
            raise self._json_error(f"invalid JSON: {msg}", pos + k - 1)
        self._end_of_text()
        yield from self._truncated_rest(dec, pos)

    def _end_of_text(self) -> None:
        """The text ended inside the event array: acceptable for the array form only."""
        if self.form == "object":
            raise self._json_error("invalid JSON: the file ends inside traceEvents", len(self._buf))
        self.truncated = True

    def _truncated_rest(self, dec: _Switchable, pos: int) -> Iterator[EventChunk[Any]]:
        """A truncated array: keep the complete events, drop a half-written last one."""
        buf = self._buf
        stop = len(buf.rstrip(WS))
        if stop > pos and buf[stop - 1] == ord(","):
            stop = len(buf[: stop - 1].rstrip(WS))
        end = stop
        while end > pos:
            chunk, msg, k, text = self._try(dec, pos, end, close=True)
            if chunk is not None:
                yield chunk
                break
            if k is not None and k < len(text) - 1:
                raise self._json_error(f"invalid JSON: {msg}", pos + k - 1)
            # Back off to the previous "}," : the last event is incomplete.
            end = buf.rfind(b"}", pos, end - 1)
            while end >= pos and not buf[end + 1 : end + 64].lstrip(WS).startswith(b","):
                end = buf.rfind(b"}", pos, end)
            end = max(end + 1, pos)
        self.dropped_bytes = len(buf[max(end, pos) : stop].strip(WS + b","))
        self._pos = len(buf)


def read_container(path: str | Path, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Container:
    """Open ``path`` and read up to the first event (raises :class:`InputError` on bad input)."""
    container = Container(Path(path), chunk_bytes=max(1024, chunk_bytes))
    container.open()
    try:
        container._read_header()
    except BaseException:
        container.close()
        raise
    return container
