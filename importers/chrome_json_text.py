"""A cursor over the decompressed text of a JSON file, read block by block.

:class:`TextCursor` holds only a window of the text: it reads gzip or plain files in blocks
(gzip sniffed by magic bytes) and drops what has been consumed. Errors still name an exact
``line L column C``: the text before the error is read again to count its lines. The cursor
reads the small JSON values around a trace's event array (top-level keys);
:mod:`importers.chrome_json` decodes the array itself in chunks.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from echo_view.errors import InputError
from echo_view.formats import check_inflation


def _load_inflater() -> Any:
    """ISA-L's zlib-compatible inflater (isal): ~2.8x zlib's speed on trace JSON (0.016 vs
    0.044 s for 53.7 MB, docs/performance.md); zlib where isal is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency
        return zlib
    return isal_zlib


_inflater: Any = _load_inflater()
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflater.error)
#: The module that inflates gzip input (``isal.isal_zlib`` or ``zlib``).
INFLATER: str = _inflater.__name__

BLOCK = 1 << 20  # decompressed bytes produced per read
_READ = 256 << 10  # compressed bytes read per call
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"
WS = b" \t\r\n"

_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]|"', re.DOTALL)
#: A string's text up to its closing quote (or the end of the text read so far).
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_BRACKET_OR_QUOTE = re.compile(rb'[\[\]{}"]')
_NOT_WS = re.compile(rb"[^ \t\r\n]")
_SCALAR = re.compile(rb"[^,:\]\}\[\{ \t\r\n]+")
_BYTE = re.compile(r"\s*\(byte (\d+)\)\s*$")
_AT = re.compile(r"^(.*?) - at `\$\[(\d+)\](.*)`$", re.DOTALL)

HINT_JSON = "the file is damaged or not a trace; Perfetto and chrome://tracing will refuse it too"
#: Deepest nesting of arrays and objects accepted in a JSON value. msgspec decodes recursively
#: and gives up at Python's recursion limit (about 1,000 levels, fewer on a deeper stack);
#: real traces nest fewer than 10. Values outside the event array are held to it exactly.
MAX_DEPTH = 500
TOO_DEEP = f"JSON nested more than {MAX_DEPTH} levels deep"
HINT_DEEP = "no real file nests this deep: it is damaged or hostile"


def json_kind(first: int) -> str:
    """What a JSON value starting with byte ``first`` is, in words ("" when no JSON value
    starts with that byte)."""
    c = chr(first)
    if c == "{":
        return "an object"
    if c == "[":
        return "a list"
    if c == '"':
        return "a string"
    if c in "tf":
        return "a boolean"
    if c == "n":
        return "null"
    return "a number" if c == "-" or c.isdigit() else ""


def split_decode_error(
    exc: msgspec.DecodeError, text: bytes | bytearray | memoryview | None = None
) -> tuple[str, int | None]:
    """msgspec's message without its ``(byte N)`` suffix, and N (``None`` when absent).

    msgspec names no byte for a string that is not UTF-8: given the ``text`` it decoded, the
    first such byte is found here, so that bad bytes are told from a text cut short (a
    truncated array form would otherwise end at them, the rest of its events dropped)."""
    message = str(exc)
    m = _BYTE.search(message)
    if m is not None:
        return message[: m.start()].removeprefix("JSON is malformed: "), int(m.group(1))
    if text is not None and message.startswith("Invalid UTF-8"):
        try:
            bytes(text).decode("utf-8")
        except UnicodeDecodeError as bad:
            if bad.reason != "unexpected end of data":  # not a character cut by the text's end
                return (
                    f"a string holds bytes that are not UTF-8 (0x{bad.object[bad.start]:02x})",
                    bad.start,
                )
    return message.removeprefix("JSON is malformed: "), None


def validation_error(path: Path, first_index: int, exc: msgspec.ValidationError) -> InputError:
    """An event that does not fit the requested type, named ``traceEvents[i].field``."""
    text = str(exc)
    m = _AT.match(text)
    if m is None:
        return InputError(f"unexpected event layout: {text}", path=path, where="traceEvents")
    msg, idx, rest = m.group(1), int(m.group(2)), m.group(3)
    return InputError(
        msg[:1].lower() + msg[1:],
        path=path,
        where=f"traceEvents[{first_index + idx}]{rest}",
        hint="echo-view reads the trace-event types strictly: ts and dur as JSON numbers, "
        "name and cat as strings, pid and tid as integers or strings (Perfetto is more "
        "lenient); `echo-view check FILE` lists every such event, and `check --fix` writes "
        "times given as numeric strings as numbers",
    )


def too_deep_at(text: bytes | bytearray | memoryview) -> int:
    """Offset in ``text`` where its nesting first passes :data:`MAX_DEPTH` (for the error of a
    value msgspec could not decode for its depth; the end of ``text`` when it never does)."""
    depth = 0
    for m in _TOKEN.finditer(text):
        c = m.group()[0]
        if c in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return m.start()
        elif c in b"]}":
            depth -= 1
    return len(text)


def line_col(text: bytes | bytearray, i: int) -> tuple[int, int]:
    """Line and column (1-based; columns count bytes) of ``text[i]``."""
    nl = text.count(b"\n", 0, i)
    return nl + 1, i - text.rfind(b"\n", 0, i)


def line_col_in_file(path: Path, offset: int) -> tuple[int, int]:
    """Line and column of byte ``offset`` of a file's decompressed text.

    Only errors need a position, so lines are not counted while reading; the text before the
    error is read again instead.
    """
    lines, col = 1, 1
    with open(path, "rb") as fh:
        src = BlockSource(path, fh)
        seen = 0
        while seen < offset:
            block = src.read()
            if not block:
                break
            part = block[: offset - seen]
            nl = part.count(b"\n")
            if nl:
                lines += nl
                col = len(part) - part.rfind(b"\n")
            else:
                col += len(part)
            seen += len(part)
    return lines, col


class BlockSource:
    """Decompressed text of a file, block by block; concatenated gzip members are joined, and
    inflation is bounded (:func:`echo_view.formats.check_inflation`).

    (Inflating on a helper thread was measured twice and dropped: docs/performance.md.)
    """

    def __init__(self, path: Path, fh: BinaryIO) -> None:
        self.path = path
        self.fh = fh
        self.size = os.fstat(fh.fileno()).st_size
        self.gzip = fh.read(2) == GZIP_MAGIC
        fh.seek(0)
        self.consumed = 0  # file bytes consumed so far (for progress)
        self.inflated = 0  # bytes inflated so far (bounded by check_inflation)
        self.eof = False
        self._z: Any = _inflater.decompressobj(wbits=31) if self.gzip else None
        self._pending = b""

    def read(self) -> bytes:
        """The next block of text; ``b""`` at the end."""
        if self.eof:
            return b""
        if self.gzip:
            out = self._inflate()
            self.inflated += len(out)
            check_inflation(self.path, self.inflated, self.consumed)
        else:
            out = self.fh.read(BLOCK)
            self.consumed += len(out)
        self.eof = not out
        return out

    def _inflate(self) -> bytes:
        """The next block of inflated gzip; ``b""`` at its end."""
        while True:
            if not self._pending:
                self._pending = self.fh.read(_READ)
                self.consumed += len(self._pending)
                if not self._pending:
                    if not self._z.eof:
                        # Output can still be pending inside the inflater: drain it first.
                        out = self._decompress(b"")
                        self._pending = self._z.unused_data if self._z.eof else b""
                        if out:
                            return out
                        if self._z.eof:
                            continue
                        raise InputError(
                            "truncated gzip: the compressed stream ends early",
                            path=self.path,
                            where=f"byte {self.consumed} of the .gz file",
                            hint="the file was cut short; copy or compress it again",
                        )
                    return b""
            if self._z.eof:
                # The member is complete: another member follows, or zero padding ends the file.
                if not self._pending.strip(b"\0"):
                    self._pending = b""
                    continue
                self._z = _inflater.decompressobj(wbits=31)
            out = self._decompress(self._pending)
            self._pending = self._z.unused_data if self._z.eof else self._z.unconsumed_tail
            if out:
                return out

    def _decompress(self, data: bytes) -> bytes:
        try:
            out: bytes = self._z.decompress(data, BLOCK)
        except _INFLATE_ERRORS as exc:
            raise InputError(
                f"damaged gzip data ({exc})",
                path=self.path,
                where=f"near byte {self.consumed} of the .gz file",
                hint="the compressed file is corrupt; copy or compress it again",
            ) from None
        return out


def file_blocks(path: Path) -> Iterator[bytes]:
    """The (decompressed, if gzip) content of ``path``, block by block, inflation bounded."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", path=path, hint="check the path") from None
    with fh:
        src = BlockSource(path, fh)
        while True:
            try:
                block = src.read()
            except OSError as exc:
                raise InputError(f"cannot read: {exc.strerror or exc}", path=path) from None
            if not block:
                return
            yield block


class TextCursor:
    """A position in a file's decompressed text, holding only a window of it in memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = None
        self._src: BlockSource | None = None
        # A bytearray: consumed text is dropped from its front in O(1) and new blocks are
        # appended in place, instead of copying the window twice per chunk.
        self._buf = bytearray()
        self._pos = 0
        self._base = 0  # text offset of _buf[0]

    @property
    def text_bytes(self) -> int:
        """Decompressed bytes read so far."""
        return self._base + len(self._buf)

    @property
    def compressed(self) -> bool:
        """Whether the file is gzip-compressed."""
        return self._src is not None and self._src.gzip

    def fraction_read(self) -> float:
        """Share of the file consumed so far, for progress reports."""
        if self._src is None or self._src.size == 0:
            return 1.0
        return min(1.0, self._src.consumed / self._src.size)

    def open(self) -> None:
        """Open the file (raises :class:`InputError` when it cannot be read)."""
        try:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise InputError(
                f"cannot open: {exc.strerror}", path=self.path, hint="check the path"
            ) from None
        self._src = BlockSource(self.path, self._fh)

    def close(self) -> None:
        """Close the file."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # -- window -----------------------------------------------------------------------------

    def _fill(self, need: int) -> bool:
        """Read until ``len(_buf) >= need`` or the end; False when nothing more was read."""
        assert self._src is not None
        grew = False
        while len(self._buf) < need:
            block = self._src.read()
            if not block:
                break
            try:
                self._buf += block
            except BufferError:  # a view of the window is still held: leave it intact
                self._buf = self._buf + block
            grew = True
        return grew

    def _more(self) -> bool:
        """Read at least one more block; False at the end of the text."""
        return self._fill(len(self._buf) + 1)

    def _at_eof(self) -> bool:
        return self._src is None or self._src.eof

    def _compact(self, keep: int = 0) -> None:
        """Drop the consumed text before ``_pos``, but for its last ``keep`` bytes."""
        drop = self._pos - keep
        if drop <= 0:
            return
        self._base += drop
        try:
            del self._buf[:drop]
        except BufferError:  # a view of the window is still held: leave it intact
            self._buf = self._buf[drop:]
        self._pos -= drop

    def _line_col(self, i: int) -> tuple[int, int]:
        """Line and column (1-based; columns count bytes) of ``_buf[i]``."""
        if self._base == 0:
            return line_col(self._buf, i)
        return line_col_in_file(self.path, self._base + i)

    def _where(self, i: int) -> str:
        line, col = self._line_col(i)
        return f"line {line} column {col}"

    def _json_error(self, message: str, i: int | None = None) -> InputError:
        where = self._where(self._pos if i is None else min(i, len(self._buf)))
        return InputError(message, path=self.path, where=where, hint=HINT_JSON)

    # -- JSON tokens ------------------------------------------------------------------------

    def _skip_ws(self) -> int:
        """Advance past whitespace; the next byte, or -1 at the end of the text."""
        while True:
            # A regex scan, not a byte loop: megabytes of whitespace cost milliseconds.
            m = _NOT_WS.search(self._buf, self._pos)
            if m is not None:
                self._pos = m.start()
                return self._buf[self._pos]
            self._pos = len(self._buf)
            self._compact(keep=1)  # only whitespace so far: hold none of it (keep "[" room)
            if not self._more():
                return -1

    def _read_key(self) -> str:
        """Read ``"key" :`` at the cursor."""
        c = self._skip_ws()
        if c != ord('"'):
            if c == -1:
                raise self._json_error("invalid JSON: the file ends inside the top-level object")
            raise self._json_error("invalid JSON: expected a key string")
        end = self._value_end(self._pos)
        try:
            key = msgspec.json.decode(self._buf[self._pos : end], type=str)
        except msgspec.DecodeError as exc:
            msg, k = split_decode_error(exc, self._buf[self._pos : end])
            raise self._json_error(f"invalid JSON: {msg}", self._pos + (k or 0)) from None
        self._pos = end
        if self._skip_ws() != ord(":"):
            raise self._json_error("invalid JSON: expected ':' after a key")
        self._pos += 1
        return key

    def _read_value(self) -> Any:
        """Read and decode the JSON value at the cursor."""
        if self._skip_ws() == -1:
            raise self._json_error("invalid JSON: the file ends where a value was expected")
        start = self._pos
        end = self._value_end(start)
        try:
            value = msgspec.json.decode(self._buf[start:end])
        except msgspec.DecodeError as exc:
            msg, k = split_decode_error(exc, self._buf[start:end])
            raise self._json_error(f"invalid JSON: {msg}", start + (k or 0)) from None
        self._pos = end
        return value

    def _after_member(self) -> bool:
        """After an object member: True on ``,``, False on ``}``."""
        c = self._skip_ws()
        if c == ord(","):
            self._pos += 1
            return True
        if c == ord("}"):
            self._pos += 1
            return False
        if c == -1:
            raise self._json_error("invalid JSON: the file ends inside the top-level object")
        raise self._json_error("invalid JSON: expected ',' or '}' after a value")

    def _value_end(self, start: int) -> int:
        """End offset of the JSON value at ``_buf[start]``, reading more text as needed.

        Only brackets and strings are tracked; msgspec validates the value afterwards. The scan
        resumes where it stopped when more text arrives, inside a string too, so a long value
        costs one pass (a 32 MB string rescanned from its quote at each 1 MiB block took 107 s).
        """
        first = self._buf[start]
        depth = 0
        scan = start + 1 if first == ord('"') else start
        in_string = first == ord('"')
        while True:
            buf = self._buf
            if first == ord('"'):
                end, scan = _string_end(buf, scan)
                if end is not None:
                    return end
            elif first in b"[{":
                while True:
                    if in_string:
                        end, scan = _string_end(buf, scan)
                        if end is None:
                            break  # the string runs past the window: resume inside it
                        in_string = False
                    m = _BRACKET_OR_QUOTE.search(buf, scan)
                    if m is None:
                        scan = len(buf)
                        break
                    scan = m.end()
                    tok = buf[m.start()]
                    if tok == ord('"'):
                        in_string = True
                        continue
                    depth += 1 if tok in b"[{" else -1
                    if depth == 0:
                        return scan
                    if depth > MAX_DEPTH:
                        raise InputError(
                            TOO_DEEP, path=self.path, where=self._where(m.start()), hint=HINT_DEEP
                        )
            else:
                m = _SCALAR.match(buf, start)
                if m is None:
                    raise self._json_error("invalid JSON: unexpected character", start)
                if m.end() < len(buf) or self._at_eof():
                    return m.end()
            if not self._more():
                raise self._json_error("invalid JSON: the file ends inside a value", len(buf))


def _string_end(buf: bytes | bytearray, pos: int) -> tuple[int | None, int]:
    """For a string whose text continues at ``buf[pos]``: the offset after its closing quote
    and the same again, or ``None`` and the offset to resume from once more text has arrived
    (the end of ``buf``, or a backslash that ends it)."""
    m = _STRING_BODY.match(buf, pos)
    end = m.end() if m is not None else pos
    if end < len(buf) and buf[end] == ord('"'):
        return end + 1, end + 1
    return None, end


def sniff_head(path: str | Path, limit: int = 1 << 16) -> bytes:
    """The first ``limit`` decompressed bytes of ``path`` (``b""`` when unreadable)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit)
    except OSError:
        return b""
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, limit)
    except zlib.error:
        return b""


def looks_like_trace(head: bytes) -> bool:
    """Whether text starting with ``head`` looks like trace-event JSON (cheap, not a proof)."""
    text = head.removeprefix(BOM).lstrip(WS)
    if text.startswith(b"["):
        rest = text[1:].lstrip(WS)
        return rest.startswith(b"{") or rest.startswith(b"]") or not rest
    return text.startswith(b"{") and b'"traceEvents"' in text
