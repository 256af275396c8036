"""Column-wise args JSON and NVTX text splitting against their one-row-at-a-time definitions."""

from __future__ import annotations

import numpy as np
import pytest

from importers.nsys.args import Ints, Packed, assemble
from importers.nsys.pages import Text
from importers.nsys.tables import torch_op
from importers.nsys.text import decode_all, split_torch_ops


def test_assemble_writes_what_printf_writes() -> None:
    rng = np.random.default_rng(1)
    n = 3000
    cols = [rng.integers(-(10**k), 10**k, n) for k in range(1, 19)]
    cols[0][:4] = [0, -1, 9, -9]
    cols[-1][:3] = [2**63 - 1, -(2**63), 10**18]
    pieces: list[bytes | Ints] = [b"{"]
    for k, c in enumerate(cols):
        pieces += [f'"k{k}":'.encode(), Ints(c), b","]
    packed = assemble(n, [*pieces[:-1], b"}"])
    template = "{" + ",".join(f'"k{k}":%d' for k in range(len(cols))) + "}"
    for i in range(n):
        assert packed.get(i) == (template % tuple(int(c[i]) for c in cols)).encode()
    blob, offsets = packed.take(np.arange(n)[::-1]).pack()
    assert blob[offsets[0] : offsets[1]] == packed.get(n - 1)


def test_packed_rows_move_without_copying() -> None:
    a = assemble(3, [b'{"x":', Ints(np.array([1, 22, 333])), b"}"])
    b = Packed.concat([a, Packed.empty(2), a.take(np.array([2]))])
    c = b.replace({1: b'{"y":[]}', 3: b""})
    assert [c.get(i) for i in range(len(c))] == [
        b'{"x":1}',
        b'{"y":[]}',
        b'{"x":333}',
        b"",
        b"",
        b'{"x":333}',
    ]
    blob, offsets = c.take(np.array([5, 0, 1])).pack()
    assert blob == b'{"x":333}{"x":1}{"y":[]}' and offsets.tolist() == [0, 9, 16, 24]


def _reference(text: str) -> tuple[str, int, int] | str | None:
    """The definition: rpartition on the last ``, op_id = `` and ``, seq = ``; layouts with
    other content after the id take the full pattern (``torch_op``)."""
    head, sep, op_id = text.rpartition(", op_id = ")
    if not sep:
        return None
    if not (op_id.isdigit() and op_id.isascii()):
        return "pattern"
    name, sep, seq = head.rpartition(", seq = ")
    if sep and seq.isdigit() and seq.isascii():
        return name, int(seq), int(op_id)
    return head, -1, int(op_id)


TEXTS = [
    "aten::mm, seq = 3, op_id = 7",
    "aten::empty_strided, op_id = 999730",
    "forward",
    "",
    "x, op_id = abc",
    "a, seq = x, op_id = 5",
    "aten::add, seq = 12, op_id = 99, sizes = [[1], [2]]",
    "q, seq = 1, op_id = 2, op_id = 3",
    ", op_id = 5",
    "w, seq = , op_id = 3",
    "trailing, op_id = 6 ",
    "ünïcode::op, seq = 40, op_id = 41",
    "0, op_id = 1",
]


@pytest.mark.parametrize("lead", [b"", b"#" * 64])
def test_split_matches_rpartition(lead: bytes) -> None:
    raw = [t.encode() for t in TEXTS]
    length = np.array([len(r) for r in raw], dtype=np.int64)
    start = np.cumsum(length) - length + len(lead)
    data = np.frombuffer(lead + b"".join(raw), dtype=np.uint8)
    text = Text(data, start, length, np.zeros(len(raw), dtype=bool))
    ops = split_torch_ops(text, np.arange(len(raw)))
    got: dict[int, object] = {int(k): "pattern" for k in ops.odd}
    for i, k in enumerate(ops.rows.tolist()):
        name = raw[k][: int(ops.name_length[i])].decode()
        got[k] = (name, int(ops.seq[i]), int(ops.op_id[i]))
    for k, t in enumerate(TEXTS):
        assert got.get(k) == _reference(t), t
    assert torch_op(TEXTS[6]) == ("aten::add", b'{"seq":12,"op_id":99,"sizes":"[[1], [2]]"}')
    assert decode_all(data, start, length) == TEXTS


def test_decode_all_with_a_nul_inside() -> None:
    data = np.frombuffer(b"ab\x00cdef", dtype=np.uint8)
    got = decode_all(data, np.array([0, 3]), np.array([3, 3]))
    assert got == ["ab\x00", "cde"]


def _digits_reference(d: bytes, lo: int, hi: int) -> tuple[bool, bool, int]:
    part = d[lo:hi]
    ok = hi - lo >= 1 and all(48 <= c <= 57 for c in part)
    wide = ok and len(part) > 18
    return ok, wide, int(part) if ok and not wide else 0


def test_digits_read_only_the_ranges() -> None:
    from importers.nsys.text import _digits

    rng = np.random.default_rng(3)
    d = bytes(rng.choice(list(b"0123456789x "), 5000).tolist())
    lo = rng.integers(0, 4900, 800)
    hi = lo + rng.integers(-2, 40, 800)
    ok, wide, value = _digits(np.frombuffer(d, dtype=np.uint8), lo, hi)
    want = [_digits_reference(d, a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    assert list(zip(ok.tolist(), wide.tolist(), strict=True)) == [w[:2] for w in want]
    assert [v if o and not w else 0 for v, o, w in zip(value.tolist(), ok, wide, strict=True)] == [
        w[2] for w in want
    ]
    assert ok.any() and wide.any()  # both kinds of range occur


LONG_TEXTS = [
    *TEXTS,
    "big, seq = 3, op_id = 123456789012345678901234",
    "bigseq, seq = 99999999999999999999, op_id = 5",
    "aten::cat, seq = 8, op_id = 9, sizes = [[" + "7" * 300 + "]]",
    "z" * 500,
]


def test_small_groups_give_the_same_split_and_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text work runs a bounded number of bytes at a time (decode, search, gather); with
    groups of a few bytes, or one row each, the results are those of one group."""
    from importers.nsys import args as nsys_args
    from importers.nsys import text as nsys_text

    raw = [t.encode() for t in LONG_TEXTS]
    length = np.array([len(r) for r in raw], dtype=np.int64)
    start = np.cumsum(length) - length + 5
    data = np.frombuffer(b"#" * 5 + b"".join(raw), dtype=np.uint8)
    text = Text(data, start, length, np.zeros(len(raw), dtype=bool))
    rows = np.arange(len(raw))
    whole = split_torch_ops(text, rows), decode_all(data, start, length)
    for budget in (1, 40, 300):
        monkeypatch.setattr(nsys_text, "DECODE_BYTES", budget)
        monkeypatch.setattr(nsys_text, "SEARCH_BYTES", budget)
        monkeypatch.setattr(nsys_args, "_CHUNK_BYTES", budget)
        ops, texts = split_torch_ops(text, rows), decode_all(data, start, length)
        assert texts == whole[1] == LONG_TEXTS
        for field in ("rows", "name_length", "seq", "op_id", "odd"):
            assert np.array_equal(getattr(ops, field), getattr(whole[0], field)), (budget, field)


SIZED_TEXTS = [
    *LONG_TEXTS,
    "aten::mm, seq = 3, op_id = 7, sizes = [[1, 2], [3]]",
    "aten::x, op_id = 9, sizes = []",
    'a, op_id = 9, sizes = ["q"]',
    "a, op_id = 9, sizes = x\n",
    "a, op_id = 9, sizes = back\\slash",
    "a, b, op_id = 1",
    ", op_id = 5, sizes = []",
    "a, op_id = 5, sizes = ",
    "a, op_id = 5,",
    "a, seq = 1, op_id = 2, sizes = [[4, 4096], [4096, 1024], []]",
]


@pytest.mark.parametrize("budget", [None, 30])
def test_sized_split_agrees_with_the_pattern(
    budget: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the byte-level split of record_shapes' texts takes, it names and gives args as
    ``torch_op``'s pattern does; what it leaves (quotes, newlines, long numbers, other
    layouts) is left to the pattern; the plain record_shapes forms it takes."""
    from importers.nsys import text as nsys_text
    from importers.nsys.text import split_sized_ops

    if budget is not None:
        monkeypatch.setattr(nsys_text, "SEARCH_BYTES", budget)
    raw = [t.encode() for t in SIZED_TEXTS]
    length = np.array([len(r) for r in raw], dtype=np.int64)
    start = np.cumsum(length) - length + 3
    data = np.frombuffer(b"xyz" + b"".join(raw), dtype=np.uint8)
    ops = split_sized_ops(
        Text(data, start, length, np.zeros(len(raw), dtype=bool)), np.arange(len(raw))
    )
    got: dict[int, tuple[str, bytes]] = {}
    for k, r in enumerate(ops.rows.tolist()):
        parts = [f'"op_id":{ops.op_id[k]}']
        if ops.seq[k] >= 0:
            parts.insert(0, f'"seq":{ops.seq[k]}')
        if ops.sizes_length[k] >= 0:
            a = int(ops.sizes_start[k])
            parts.append(f'"sizes":"{data[a : a + int(ops.sizes_length[k])].tobytes().decode()}"')
        got[r] = (
            raw[r][: int(ops.name_length[k])].decode(),
            ("{" + ",".join(parts) + "}").encode(),
        )
    for r, t in enumerate(SIZED_TEXTS):
        if r in got:
            assert got[r] == torch_op(t), t
    taken = {SIZED_TEXTS[r] for r in got}
    assert {
        "aten::mm, seq = 3, op_id = 7, sizes = [[1, 2], [3]]",
        "aten::x, op_id = 9, sizes = []",
        "a, seq = 1, op_id = 2, sizes = [[4, 4096], [4096, 1024], []]",
        "a, op_id = 5, sizes = ",
    } <= taken
    assert not taken & {'a, op_id = 9, sizes = ["q"]', "a, op_id = 9, sizes = x\n"}
    assert "a, op_id = 9, sizes = back\\slash" not in taken


def test_concat_and_replace_rows() -> None:
    from importers.nsys.args import concat_rows, literal

    a = Packed(np.frombuffer(b"abcdef", dtype=np.uint8), np.array([0, 2, 5]), np.array([2, 3, 0]))
    b = Packed(np.frombuffer(b"XYZ", dtype=np.uint8), np.array([2, 0, 1]), np.array([1, 0, 2]))
    joined = concat_rows([a, b, literal(3, b"!")])
    assert [joined.get(i) for i in range(3)] == [b"abZ!", b"cde!", b"YZ!"]
    swapped = a.replace_rows(np.array([2, 0]), b.take(np.array([0, 2])))
    assert [swapped.get(i) for i in range(3)] == [b"YZ", b"cde", b"Z"]


def test_sized_split_of_empty_texts() -> None:
    from importers.nsys.text import split_sized_ops

    empty = Text(
        np.zeros(0, dtype=np.uint8),
        np.zeros(3, dtype=np.int64),
        np.zeros(3, dtype=np.int64),
        np.zeros(3, dtype=bool),
    )
    assert len(split_sized_ops(empty, np.arange(3)).rows) == 0
