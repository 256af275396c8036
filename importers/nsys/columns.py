"""Reading the columns of an Nsight Systems export table: from the file's pages
(:mod:`importers.nsys.pages`) where possible, else with SQL, into the same :class:`Columns`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from importers.nsys.pages import I64, Text

if TYPE_CHECKING:
    from importers.nsys.db import Export


@dataclass(frozen=True)
class Columns:
    """Columns of one table, in rowid order: integers (NULL replaced by a default), texts, and
    whether other columns are set."""

    rowid: I64
    ints: dict[str, I64]
    texts: dict[str, Text]
    present: dict[str, npt.NDArray[np.bool_]]

    def __len__(self) -> int:
        return len(self.rowid)


def read_columns(
    exp: Export,
    table: str,
    ints: Mapping[str, int],
    texts: Sequence[str] = (),
    present: Sequence[str] = (),
) -> Columns:
    """All rows of ``table``: the ``ints`` columns with NULL (or a column this schema
    lacks) as the given default, the ``texts`` columns, and for ``present`` whether each
    row sets them. Read from the file's pages where possible, else with SQL."""
    layout = exp.layout(table)
    pos = {name: k for k, (name, _, _, hidden) in enumerate(layout) if not hidden}
    try:
        got = _read_pages(exp, table, layout, pos, ints, texts, present)
    except (IndexError, ValueError, OverflowError):
        # A damaged page (offsets, lengths or varints out of range): SQLite reads what it
        # can and reports the damage properly.
        got = None
    if got is not None:
        return got
    return _read_sql(exp, table, pos, ints, texts, present)


def _read_pages(
    exp: Export,
    table: str,
    layout: list[tuple[str, str, int, int]],
    pos: dict[str, int],
    ints: Mapping[str, int],
    texts: Sequence[str],
    present: Sequence[str],
) -> Columns | None:
    root, sql = exp.root(table)
    shape = sql.upper()
    if (
        exp.pages is None
        or not isinstance(root, int)
        or root < 1
        or any(hidden for *_, hidden in layout)  # generated columns are not stored
        or "WITHOUT ROWID" in shape
    ):
        return None
    keys = [pk for _, _, pk, _ in layout if pk]
    alias = None
    if len(keys) == 1:
        name, decl, _, _ = next(c for c in layout if c[2])
        if decl.upper() == "INTEGER":
            if "DESC" in shape:  # INTEGER PRIMARY KEY DESC is not a rowid alias
                return None
            alias = name
    want = {c: pos[c] for c in (*ints, *texts) if c in pos}
    flags = {c: pos[c] for c in present if c in pos}
    rec = exp.pages.records(root, len(layout), want, alias, flags)
    if rec is None:
        return None
    n = len(rec)
    got = rec.int_columns({c: d for c, d in ints.items() if c in pos})
    if got is None:
        return None
    out_i = {c: got[c] if c in got else np.full(n, d, dtype=np.int64) for c, d in ints.items()}
    out_t: dict[str, Text] = {}
    for c in texts:
        text = rec.text(c) if c in pos else _null_text(n)
        if text is None:
            return None
        out_t[c] = text
    out_p = {c: rec.set(c) if c in pos else np.zeros(n, dtype=bool) for c in present}
    return Columns(rec.rowid, out_i, out_t, out_p)


def _read_sql(
    exp: Export,
    table: str,
    pos: dict[str, int],
    ints: Mapping[str, int],
    texts: Sequence[str],
    present: Sequence[str],
) -> Columns:
    # A WITHOUT ROWID table has no rowid: its rows are numbered in their (primary key) order.
    schema = exp.query("SELECT sql FROM sqlite_master WHERE name = ?", table, (table,))
    keyed = bool(schema and schema[0][0] and "WITHOUT ROWID" in str(schema[0][0]).upper())
    exprs = ["ROW_NUMBER() OVER ()" if keyed else "rowid"]
    exprs += [f'"{c}"' for c in (*ints, *texts) if c in pos]
    exprs += [f'"{c}" IS NOT NULL' for c in present if c in pos]
    rows = exp.query(f'SELECT {", ".join(exprs)} FROM "{table}"', table)
    n = len(rows)
    cols = iter(zip(*rows, strict=True) if rows else [()] * len(exprs))
    rowid = np.array(next(cols), dtype=np.int64)
    out_i: dict[str, I64] = {}
    for c, default in ints.items():
        if c not in pos:
            out_i[c] = np.full(n, default, dtype=np.int64)
            continue
        try:
            values: Sequence[Any] = next(cols)
            out_i[c] = np.array([default if v is None else v for v in values], np.int64)
        except (TypeError, ValueError, OverflowError):
            raise InputError(
                f"column {c} holds a value that is not an integer",
                path=exp.path,
                where=table,
                hint="export the report again with `nsys export --type sqlite`",
            ) from None
    out_t = {c: _text_column(next(cols)) if c in pos else _null_text(n) for c in texts}
    out_p = {
        c: np.array(next(cols), dtype=bool) if c in pos else np.zeros(n, dtype=bool)
        for c in present
    }
    return Columns(rowid, out_i, out_t, out_p)


def _null_text(n: int) -> Text:
    zeros = np.zeros(n, dtype=np.int64)
    return Text(np.zeros(0, dtype=np.uint8), zeros, zeros, np.ones(n, dtype=bool))


def _text_column(values: Sequence[Any]) -> Text:
    """A :class:`Text` of SQL values (str, bytes or None)."""
    parts = [
        v.encode()
        if isinstance(v, str)
        else bytes(v)
        if isinstance(v, bytes | memoryview)
        else b""
        if v is None
        else str(v).encode()
        for v in values
    ]
    length = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    start = np.cumsum(length) - length
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    null = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    return Text(data, start, length, null)
