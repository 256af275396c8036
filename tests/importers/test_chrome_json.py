"""The streaming trace-event JSON reader: every layout Perfetto accepts, and located errors.

Expected values come from the standard library's ``json`` on the same text, never from the
reader itself. Small ``chunk_bytes`` force many cuts, some inside strings and nested values.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from echo_view.errors import InputError
from importers import chrome_json_text
from importers.chrome_json import looks_like_trace, read_container, sniff_head
from tests.conftest import SAMPLES, shared_path

# An event whose strings hold "}," and whose args nest objects and lists: bad cut points.
EVENT = {
    "ph": "X",
    "name": 'a}, {"b": [1}, ',
    "cat": "cpu_op",
    "pid": 1,
    "tid": 2,
    "ts": 1.5,
    "dur": 2,
    "args": {"x": {"y": "},"}, "z": [{"q": 1}, {"r": [2, {"s": 3}]}], "t": "]}"},
}


def events(n: int) -> list[dict[str, Any]]:
    return [{**EVENT, "ts": i, "tid": i % 3} for i in range(n)]


def read_all(path: Path, chunk_bytes: int = 1024, event_type: Any = dict) -> tuple[Any, list[Any]]:
    c = read_container(path, chunk_bytes=chunk_bytes)
    out: list[Any] = []
    for chunk in c.chunks(event_type):
        assert chunk.first_index == len(out)
        out.extend(chunk.events)
    return c, out


def write(path: Path, text: bytes, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def error_of(path: Path, chunk_bytes: int = 1024) -> InputError:
    with pytest.raises(InputError) as info:
        read_all(path, chunk_bytes)
    err = info.value
    assert err.path == str(path)
    return err


SAMPLE_FILES = sorted(
    [*SAMPLES.glob("dlrm_kineto/*.json.gz"), *SAMPLES.glob("hta_*/*.json.gz")], key=str
)


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name[:24])
def test_samples_decode_like_json(path: Path) -> None:
    expected = json.loads(gzip.decompress(path.read_bytes()))
    c, got = read_all(path, chunk_bytes=64 << 10)
    assert got == expected["traceEvents"]
    assert c.top == {k: v for k, v in expected.items() if k != "traceEvents"}
    assert c.form == "object" and not c.truncated and c.compressed
    assert c.text_bytes == len(gzip.decompress(path.read_bytes()))
    assert c.event_count == len(got)


def test_largest_shared_file_in_default_chunks() -> None:
    path = shared_path("data", "hta-tests", "df_index_resolver", "df_index_resolver.json.gz")
    expected = json.loads(gzip.decompress(path.read_bytes()))
    c, got = read_all(path, chunk_bytes=4 << 20)
    assert len(got) == len(expected["traceEvents"]) == 216_092
    assert got[::997] == expected["traceEvents"][::997]
    assert c.top["distributedInfo"] == {"backend": "nccl", "rank": 1, "world_size": 2}


@pytest.mark.parametrize("chunk_bytes", [1024, 4096, 1 << 20])
def test_cuts_inside_strings_and_nested_values(tmp_path: Path, chunk_bytes: int) -> None:
    doc = {"before": [{"a": "}, {"}], "traceEvents": events(500), "after": {"k": "],"}}
    path = write(tmp_path / "t.json", json.dumps(doc, indent=1).encode())
    c, got = read_all(path, chunk_bytes)
    assert got == doc["traceEvents"]
    assert c.header == {"before": doc["before"]}
    assert c.top == {"before": doc["before"], "after": doc["after"]}


def test_long_strings_outside_the_events_are_read_in_one_pass(tmp_path: Path) -> None:
    # A string was matched again from its opening quote at every 1 MiB block read: a 32 MB
    # top-level string took 107 s, a 4 MB one inside an object 2.7 s. Escapes sit across the
    # block boundaries here (a backslash at the end of a block waits for the next).
    unit = "a" * 1000 + '\\"' + "\\\\" + "é"
    long = unit * 12_000  # about 12 MB
    doc = {
        "big": long,
        "deviceProperties": [{"name": "x", "extra": long[: 3 << 20]}],
        "traceEvents": events(3),
        "after": [long[: 2 << 20], {"k": "]"}],
    }
    path = write(tmp_path / "t.json", json.dumps(doc).encode())
    c, got = read_all(path, 1 << 20)
    assert got == doc["traceEvents"]
    assert c.top == {k: v for k, v in doc.items() if k != "traceEvents"}


def test_top_is_complete_only_after_the_events(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", json.dumps({"traceEvents": [], "late": 1}).encode())
    c = read_container(path)
    with pytest.raises(RuntimeError):
        _ = c.top
    assert list(c.chunks(dict)) == []
    assert c.top == {"late": 1}
    with pytest.raises(RuntimeError):
        list(c.chunks(dict))


def test_array_form(tmp_path: Path) -> None:
    evs = events(300)
    path = write(tmp_path / "a.json", json.dumps(evs).encode())
    c, got = read_all(path)
    assert (c.form, c.truncated, got, c.top) == ("array", False, evs, {})


@pytest.mark.parametrize(
    ("tail", "dropped"),
    [(b"", 0), (b",", 0), (b",\n  ", 0), (b', {"ph": "X", "na', 15), (b', {"args": {"a": 1},', 17)],
)
def test_truncated_array_keeps_complete_events(tmp_path: Path, tail: bytes, dropped: int) -> None:
    evs = events(200)
    text = json.dumps(evs).encode()[:-1] + tail  # no closing "]"
    path = write(tmp_path / "a.json", text)
    c, got = read_all(path)
    assert got == evs
    assert c.truncated and c.dropped_bytes == dropped


def test_empty_event_lists(tmp_path: Path) -> None:
    for text in (b"[]", b" [ ] ", b'{"traceEvents": [ ], "x": 1}'):
        _, got = read_all(write(tmp_path / "e.json", text))
        assert got == []


def test_gzip_is_sniffed_by_content(tmp_path: Path) -> None:
    doc = {"traceEvents": events(50)}
    text = json.dumps(doc).encode()
    gz_named_json = write(tmp_path / "x.json", text, gz=True)
    plain_named_gz = write(tmp_path / "y.json.gz", text)
    for path in (gz_named_json, plain_named_gz):
        _, got = read_all(path)
        assert got == doc["traceEvents"]
    assert looks_like_trace(sniff_head(gz_named_json))
    assert looks_like_trace(sniff_head(plain_named_gz))


def test_concatenated_gzip_members(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": events(100), "k": 2}).encode()
    path = tmp_path / "m.json.gz"
    path.write_bytes(gzip.compress(text[:700]) + gzip.compress(text[700:]) + b"\0\0\0")
    c, got = read_all(path)
    assert got == events(100) and c.top == {"k": 2}


def test_bom_and_decode_again(tmp_path: Path) -> None:
    class Named(msgspec.Struct):
        name: str
        ts: int

    path = write(tmp_path / "b.json", b"\xef\xbb\xbf" + json.dumps(events(40)).encode())
    c = read_container(path, chunk_bytes=2048)
    for chunk in c.chunks(msgspec.Raw):
        again = chunk.decode(Named)
        assert [json.loads(bytes(r))["ts"] for r in chunk.events] == [n.ts for n in again]
        chunk.release()
        assert chunk.events == [] and chunk.text == b""


@pytest.mark.parametrize("gz", [False, True])
def test_raw_values_kept_across_chunks(tmp_path: Path, gz: bool) -> None:
    # Chunks are decoded from views of the reader's window; values kept after the next chunk
    # was read must still hold their own text, and the separators must be intact again.
    evs = events(300)
    text = json.dumps({"traceEvents": evs, "after": [1, {"x": "],"}]}, indent=1).encode()
    path = write(tmp_path / "k.json", text, gz=gz)
    kept: list[msgspec.Raw] = []
    with read_container(path, chunk_bytes=1024) as c:
        for chunk in c.chunks(msgspec.Raw):
            kept.extend(chunk.events)  # the chunk and its values stay referenced
        assert c.top == {"after": [1, {"x": "],"}]}
    assert [json.loads(bytes(r)) for r in kept] == evs


def test_looks_like_trace() -> None:
    assert looks_like_trace(b' \n{"traceEvents": [')
    assert looks_like_trace(b'[{"ph": "X"}')
    assert looks_like_trace(b"[ ]")
    assert not looks_like_trace(b'{"schema": 1}')
    assert not looks_like_trace(b"[1, 2]")
    assert not looks_like_trace(b"")


# -- rejections ----------------------------------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    assert "empty file" in error_of(write(tmp_path / "e.json", b"")).message
    assert "whitespace" in error_of(write(tmp_path / "w.json", b"  \n ")).message


class TakesAllInput:
    """A zlib-like decompressor that takes in all the input it is given at once and hands
    out at most ``max_length`` bytes a call: output can be pending after the file's end."""

    def __init__(self, wbits: int) -> None:
        self._z = zlib.decompressobj(wbits=wbits)
        self._out = b""
        self.eof = False
        self.unused_data = b""
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        self._out += self._z.decompress(data)
        out, self._out = self._out[:max_length], self._out[max_length:]
        self.eof = self._z.eof and not self._out
        self.unused_data = self._z.unused_data if self.eof else b""
        return out


INFLATERS = ["default", "zlib", "takes-all-input"]


def use_inflater(monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    """Read gzip with another zlib-compatible inflater than the default (ISA-L when there)."""
    if inflater == "zlib":
        monkeypatch.setattr(chrome_json_text, "_inflater", zlib)
    elif inflater == "takes-all-input":
        fake = SimpleNamespace(decompressobj=TakesAllInput, error=zlib.error)
        monkeypatch.setattr(chrome_json_text, "_inflater", fake)


@pytest.mark.parametrize("inflater", INFLATERS)
def test_gzip_members_larger_than_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str
) -> None:
    # Members that inflate to several blocks each, the first from less than one read of
    # compressed bytes, then zero padding.
    use_inflater(monkeypatch, inflater)
    text = json.dumps({"traceEvents": events(30000)}).encode()
    cut = len(text) * 2 // 3
    assert cut > 2 * chrome_json_text.BLOCK
    path = tmp_path / "big.json.gz"
    first = gzip.compress(text[:cut])
    assert len(first) < chrome_json_text._READ
    path.write_bytes(first + gzip.compress(text[cut:]) + b"\0" * 7)
    with open(path, "rb") as fh:
        src = chrome_json_text.BlockSource(path, fh)
        blocks = list(iter(src.read, b""))
    assert b"".join(blocks) == text
    assert max(map(len, blocks)) <= chrome_json_text.BLOCK and src.consumed == path.stat().st_size
    c, got = read_all(path, chunk_bytes=1 << 20)
    assert len(got) == 30000 and got[-1] == events(30000)[-1] and c.text_bytes == len(text)


@pytest.mark.parametrize("inflater", INFLATERS)
def test_truncated_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    use_inflater(monkeypatch, inflater)
    data = gzip.compress(json.dumps({"traceEvents": events(300)}).encode())
    path = tmp_path / "t.json.gz"
    path.write_bytes(data[: len(data) // 2])
    err = error_of(path)
    assert "truncated gzip" in err.message and err.where and ".gz file" in err.where
    path.write_bytes(data[:-4])  # the deflate stream is whole, the gzip trailer is not
    err = error_of(path)
    assert "truncated gzip" in err.message and err.where == f"byte {len(data) - 4} of the .gz file"


@pytest.mark.parametrize("inflater", INFLATERS)
def test_damaged_gzip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str) -> None:
    use_inflater(monkeypatch, inflater)
    data = bytearray(gzip.compress(json.dumps({"traceEvents": events(300)}).encode()))
    data[40:60] = b"\xff" * 20
    err = error_of(write(tmp_path / "d.json.gz", bytes(data)))
    assert "gzip" in err.message


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    lines = [json.dumps(e) + "," for e in events(120)]
    lines[100] = '{"ph": "X", "ts": 1,, "dur": 2},'
    text = "{\n" + '"traceEvents": [\n' + "\n".join(lines) + '\n{"ph": "i"}]}'
    path = write(tmp_path / "bad.json", text.encode())
    for chunk_bytes in (1024, 1 << 20):
        err = error_of(path, chunk_bytes)
        assert "invalid JSON" in err.message
        assert err.where == "line 103 column 21"  # the second comma


@pytest.mark.parametrize(
    "bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80"], ids=["0xff", "overlong", "surrogate"]
)
@pytest.mark.parametrize("form", ["array", "object"])
def test_bytes_that_are_not_utf8_are_named_where_they_are(
    tmp_path: Path, bad: bytes, form: str
) -> None:
    # msgspec names no byte for them: the array form read them as the file's end and dropped
    # every later event (exit 0); the object form blamed the end of the file.
    lines = [json.dumps(e) + "," for e in events(120)]
    lines[100] = lines[100].replace('"a},', '"a}BAD,', 1)
    body = "\n".join(lines)[:-1]
    text = ("[\n" + body + "]" if form == "array" else '{"traceEvents": [\n' + body + "]}").encode()
    path = write(tmp_path / "bad.json", text.replace(b"BAD", bad))
    for chunk_bytes in (1024, 1 << 20):
        err = error_of(path, chunk_bytes)
        assert f"not UTF-8 (0x{bad[0]:02x})" in err.message
        assert err.where == f"line 102 column {lines[100].index('BAD') + 1}"


def test_a_character_cut_by_the_end_of_an_array_form_is_a_truncation(tmp_path: Path) -> None:
    evs = events(50)
    text = json.dumps(evs).encode()[:-1] + b', {"ph": "X", "name": "\xe4\xb8'  # 中, cut
    c, got = read_all(write(tmp_path / "cut.json", text))
    assert got == evs and c.truncated


def test_invalid_json_in_the_header(tmp_path: Path) -> None:
    err = error_of(write(tmp_path / "h.json", b'{"a": [1, 2,, 3], "traceEvents": []}'))
    assert "invalid JSON" in err.message and err.where == "line 1 column 13"


def test_not_a_trace(tmp_path: Path) -> None:
    err = error_of(write(tmp_path / "n.json", b"42"))
    assert "not a trace" in err.message and "a number" in err.message
    err = error_of(write(tmp_path / "s.json", b'"text"'))
    assert "a string" in err.message


def test_trace_events_missing(tmp_path: Path) -> None:
    for text in (b'{"schemaVersion": 1, "events": []}', b"{}"):
        err = error_of(write(tmp_path / "m.json", text))
        assert "no traceEvents" in err.message


def test_trace_events_not_a_list(tmp_path: Path) -> None:
    err = error_of(write(tmp_path / "l.json", b'{"traceEvents": {"ph": "X"}}'))
    assert err.message == "traceEvents is not a list (it is an object)"
    assert err.where == "line 1 column 17"


def test_object_cut_inside_trace_events(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": events(100)}).encode()[:-40]
    err = error_of(write(tmp_path / "c.json", text))
    assert "ends inside traceEvents" in err.message


def test_trailing_garbage(tmp_path: Path) -> None:
    err = error_of(write(tmp_path / "g.json", b'{"traceEvents": []} x'))
    assert "trailing" in err.message and err.where == "line 1 column 21"


def test_event_of_the_wrong_shape_is_named(tmp_path: Path) -> None:
    class Ev(msgspec.Struct):
        ph: str
        ts: int

    evs = [{"ph": "X", "ts": i} for i in range(500)]
    evs[321] = {"ph": "X", "ts": "soon"}
    path = write(tmp_path / "v.json", json.dumps({"traceEvents": evs}).encode())
    with pytest.raises(InputError) as info:
        read_all(path, 1024, Ev)
    assert info.value.where == "traceEvents[321].ts"
    assert "expected `int`, got `str`" in info.value.message
    # What to do: the hint said only that fields must have their types.
    assert "`echo-view check FILE` lists every such event" in (info.value.hint or "")


def test_chunks_switch_type_between_chunks(tmp_path: Path) -> None:
    class Ts(msgspec.Struct):
        ts: int | float = 0

    class TsText(msgspec.Struct):
        ts: msgspec.Raw = msgspec.Raw()

    evs = [{"ph": "X", "ts": i + 0.5} for i in range(400)]
    path = write(tmp_path / "t.json", json.dumps({"traceEvents": evs}).encode())
    types, texts = [], []
    with read_container(path, chunk_bytes=1024) as c:
        with pytest.raises(RuntimeError, match="while chunks"):
            c.decode_next_as(TsText)
        for n, chunk in enumerate(c.chunks(Ts)):
            types.append({type(e) for e in chunk.events})
            if chunk.events and isinstance(chunk.events[0], TsText):
                texts += [bytes(e.ts) for e in chunk.events]
            if n == 1:
                c.decode_next_as(TsText)  # from the third chunk on
    assert types[0] == types[1] == {Ts} and all(t == {TsText} for t in types[2:])
    assert len(types) > 3
    assert texts == [str(e["ts"]).encode() for e in evs[-len(texts) :]]


def test_chunks_fall_back_to_a_wider_type(tmp_path: Path) -> None:
    class Ts(msgspec.Struct):
        ts: int = 0

    class Wide(msgspec.Struct):
        ts: int | float = 0

    evs: list[dict[str, Any]] = [{"ph": "X", "ts": i} for i in range(600)]
    evs[300]["ts"] = 300.5
    path = write(tmp_path / "f.json", json.dumps({"traceEvents": evs}).encode())
    types, got = [], []
    with read_container(path, chunk_bytes=1024) as c:
        for chunk in c.chunks(Ts, fallback=Wide):
            types.append({type(e) for e in chunk.events})
            got += [e.ts for e in chunk.events]
    assert got == [e["ts"] for e in evs]
    first_wide = types.index({Wide})
    assert first_wide > 0 and all(t == {Ts} for t in types[:first_wide])
    assert all(t == {Wide} for t in types[first_wide:])  # it stays wide

    # An event that fits neither is named with the wider type's error.
    evs[450]["ts"] = "soon"
    path = write(tmp_path / "g.json", json.dumps({"traceEvents": evs}).encode())
    with pytest.raises(InputError) as info, read_container(path, chunk_bytes=1024) as c:
        for _ in c.chunks(Ts, fallback=Wide):
            pass
    assert info.value.where == "traceEvents[450].ts"
    assert "expected `int | float`, got `str`" in info.value.message


def test_a_switch_between_chunks_can_bring_its_own_fallback(tmp_path: Path) -> None:
    class Ts(msgspec.Struct):
        ts: int | float = 0

    class Num(msgspec.Struct):
        ts: float = 0.0

    class Text(msgspec.Struct):
        ts: msgspec.Raw = msgspec.Raw()

    evs: list[dict[str, Any]] = [{"ph": "X", "ts": i + 0.5} for i in range(600)]
    evs[450]["ts"] = "soon"
    path = write(tmp_path / "s.json", json.dumps({"traceEvents": evs}).encode())
    types, got = [], []
    with read_container(path, chunk_bytes=1024) as c:
        for n, chunk in enumerate(c.chunks(Ts)):
            types.append({type(e) for e in chunk.events})
            got += [bytes(e.ts) if isinstance(e, Text) else e.ts for e in chunk.events]
            if n == 0:
                c.decode_next_as(Num, fallback=Text)
    first_text = types.index({Text})
    assert types[0] == {Ts} and all(t == {Num} for t in types[1:first_text])
    assert all(t == {Text} for t in types[first_text:])  # the fallback, from the chunk of 450 on
    assert got[450] == b'"soon"' and got[599] == b"599.5" and got[1] == 1.5
    assert all(isinstance(v, float) for v in got[:300])  # (the chunks before 450's)
