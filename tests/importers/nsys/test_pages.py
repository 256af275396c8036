"""The page reader against SQLite itself: every table of the real samples, and files built to
hit the layouts it must handle (deep B-trees, multi-byte serial types, page sizes) or refuse
(overflow pages, floats, WAL, UTF-16), where reading falls back to SQL with the same result."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.errors import InputError
from echo_view.model import EventKind
from importers.nsys.db import Export
from importers.nsys.pages import PageFile
from tests.importers.nsys.helpers import SAMPLE_NAMES, unpacked


def _layout(con: sqlite3.Connection, table: str) -> tuple[dict[str, int], str | None]:
    info = con.execute(f'PRAGMA table_info("{table}")').fetchall()
    keys = [r for r in info if r[5]]
    alias = keys[0][1] if len(keys) == 1 and keys[0][2].upper() == "INTEGER" else None
    return {r[1]: r[0] for r in info}, alias


def _same_as_sql(path: Path, con: sqlite3.Connection, table: str, pages: PageFile) -> None:
    cols, alias = _layout(con, table)
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    rec = pages.records(root, len(cols), cols, alias)
    assert rec is not None, table
    quoted = ", ".join(f'"{c}"' for c in cols)
    rows = con.execute(f'SELECT rowid, {quoted} FROM "{table}"').fetchall()
    assert len(rec) == len(rows)
    assert rec.rowid.tolist() == [r[0] for r in rows]
    for j, c in enumerate(cols, start=1):
        values = [r[j] for r in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds <= {int}:
            got = rec.ints(c, -7)
            assert got is not None and got.tolist() == [-7 if v is None else v for v in values]
        elif kinds <= {str, bytes}:
            text = rec.text(c)
            assert text is not None
            for i, v in enumerate(values):
                assert bool(text.null[i]) == (v is None)
                raw = text.data[text.start[i] : text.start[i] + text.length[i]].tobytes()
                assert v is None or raw == (v.encode() if isinstance(v, str) else v)
        else:  # floats: the reader declines, SQL reads them
            assert rec.ints(c, 0) is None


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_every_table_of_the_samples(name: str, tmp_path: Path) -> None:
    path = unpacked(name, tmp_path)
    pages = PageFile.open(path)
    assert pages is not None
    con = sqlite3.connect(path)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert len(tables) > 40
    for table in tables:
        _same_as_sql(path, con, table, pages)


def _build(path: Path, page_size: int, rows: list[tuple[Any, ...]]) -> sqlite3.Connection:
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b TEXT, c INTEGER, d BLOB)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    return con


@pytest.mark.parametrize("header_rows", [None, 7])
@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_deep_trees_and_wide_values(
    tmp_path: Path, page_size: int, header_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also with the multi-byte headers decoded 7 records at a time (a bound on the memory
    that decoding takes) instead of all at once."""
    if header_rows is not None:
        from importers.nsys import pages as nsys_pages

        monkeypatch.setattr(nsys_pages, "_HEADER_ROWS", header_rows)
    rng = np.random.default_rng(page_size)
    big = [0, 1, -1, 127, 128, -129, 2**15, -(2**23), 2**31 - 1, -(2**47), 2**63 - 1, -(2**63)]
    rows: list[tuple[Any, ...]] = []
    for i in range(6000):
        a = big[i % len(big)] if i % 3 else int(rng.integers(-(2**40), 2**40))
        text = "x" * int(rng.integers(0, 200)) + f"é{i}"  # 2-byte serial types past 57 bytes
        rows.append((i * 7 + 3, a, None if i % 11 == 0 else text, i % 2, bytes([i % 256]) * 3))
    path = tmp_path / "t.sqlite"
    con = _build(path, page_size, rows)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    page = path.read_bytes()[(root - 1) * page_size : root * page_size]
    assert page[100 if root == 1 else 0] == 5  # an interior page above the leaves
    pages = PageFile.open(path)
    assert pages is not None and pages.page_size == page_size
    _same_as_sql(path, con, "t", pages)


def test_what_it_refuses_reads_the_same_through_sql(tmp_path: Path) -> None:
    path = tmp_path / "t.sqlite"
    con = _build(path, 1024, [(1, 5, "short", 1, b"")])
    con.execute("INSERT INTO t VALUES (2, 6, ?, 2, NULL)", ("y" * 5000,))  # overflow pages
    # Enough of an export for Export to open it.
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, "
        "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER)"
    )
    con.execute("CREATE TABLE f (x INTEGER)")
    con.executemany("INSERT INTO f VALUES (?)", [(1,), (2.5,), (None,)])
    con.commit()
    pages = PageFile.open(path)
    assert pages is not None
    cols, alias = _layout(con, "t")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    assert pages.records(root, len(cols), cols, alias) is None
    exp = Export(path, sqlite3.connect(path), path)
    t = exp.read("t", {"a": -1, "c": -1}, ("b",))
    assert t.ints["a"].tolist() == [5, 6] and t.texts["b"].length.tolist() == [5, 5000]
    assert exp.read("f", {"x": 0}).ints["x"].tolist() == [1, 2, 0]  # as SQLite's CAST would
    con.execute("INSERT INTO f VALUES ('text')")
    con.commit()
    exp = Export(path, sqlite3.connect(path), path)
    with pytest.raises(InputError, match="not an integer"):
        exp.read("f", {"x": 0})


def test_wal_and_utf16_files_are_left_to_sqlite(tmp_path: Path) -> None:
    wal = tmp_path / "wal.sqlite"
    con = sqlite3.connect(wal)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.commit()
    assert PageFile.open(wal) is None
    con.close()
    utf16 = tmp_path / "utf16.sqlite"
    con = sqlite3.connect(utf16)
    con.execute("PRAGMA encoding = 'UTF-16le'")
    con.execute("CREATE TABLE t (a TEXT)")
    con.execute("INSERT INTO t VALUES ('x')")
    con.commit()
    con.close()
    assert PageFile.open(utf16) is None
    short = tmp_path / "short.sqlite"
    short.write_bytes(b"SQLite format 3\x00")
    assert PageFile.open(short) is None


def test_sql_fallback_imports_the_same_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from importers.nsys import NsysImporter
    from tests.importers.nsys.helpers import sample

    path = sample("mfu_2gpu_before")
    fast = NsysImporter().read([path])
    monkeypatch.setattr(PageFile, "open", staticmethod(lambda p: None))
    slow = NsysImporter().read([path])
    for a, b in zip(fast.traces, slow.traces, strict=True):
        for col in ("kind", "start_ns", "dur_ns", "name", "cat", "lane", "correlation"):
            assert np.array_equal(getattr(a.events, col), getattr(b.events, col)), col
        assert a.events.args_blob == b.events.args_blob
        assert a.events.args_offsets is not None and b.events.args_offsets is not None
        assert np.array_equal(a.events.args_offsets, b.events.args_offsets)
        assert list(a.strings.strings) == list(b.strings.strings)
        assert a.lanes == b.lanes and len(a.collectives) == len(b.collectives)


def test_rows_written_before_a_column_was_added(tmp_path: Path) -> None:
    """After ``ALTER TABLE StringIds ADD COLUMN`` the rows already written keep two columns;
    one with a two-byte serial type (a name of 57 bytes or more) has a header as long as a
    three-column record of one-byte types, and was decoded as one: every such kernel name was
    cut to about 60 bytes and different kernels merged (27 names became 19)."""
    from importers.nsys import NsysImporter

    base = unpacked("mfu_2gpu_before", tmp_path)
    altered = tmp_path / "altered.sqlite"
    altered.write_bytes(base.read_bytes())
    con = sqlite3.connect(altered)
    con.execute("ALTER TABLE StringIds ADD COLUMN note TEXT")
    con.commit()
    con.close()

    def names(path: Path) -> list[str]:
        job = NsysImporter().read([path])
        return sorted({t.strings[int(n)] for t in job.traces for n in t.events.name.tolist()})

    expected = names(base)
    assert max(len(n) for n in expected) > 60
    assert names(altered) == expected
    pages = PageFile.open(altered)
    assert pages is not None
    con = sqlite3.connect(altered)
    cols, alias = _layout(con, "StringIds")
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'StringIds'").fetchone()
    rec = pages.records(root, len(cols), cols, alias)
    if rec is not None:  # else read with SQL
        _same_as_sql(altered, con, "StringIds", pages)


def test_a_without_rowid_table_reads_through_sql_alike(tmp_path: Path) -> None:
    """The page reader leaves a WITHOUT ROWID table (its rows live in an index B-tree) to SQL,
    whose query asked for the rowid such a table lacks: 'no such column: rowid'."""
    from importers.nsys import NsysImporter

    base = unpacked("mfu_2gpu_before", tmp_path)
    path = tmp_path / "keyed.sqlite"
    path.write_bytes(base.read_bytes())
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    con = sqlite3.connect(path)
    (sql,) = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (kernels,)).fetchone()
    body = sql.replace(kernels, "k", 1).rstrip().rstrip(")").replace("PRIMARY KEY", "")
    con.execute(f"{body}, PRIMARY KEY (deviceId, streamId, start, correlationId)) WITHOUT ROWID")
    con.execute(f"INSERT INTO k SELECT * FROM {kernels}")
    con.execute(f"DROP TABLE {kernels}")
    con.execute(f"ALTER TABLE k RENAME TO {kernels}")
    con.commit()
    con.close()

    def kernel_times(p: Path) -> list[tuple[int, int]]:
        job = NsysImporter().read([p])
        return sorted(
            (int(s), int(d))
            for t in job.traces
            for s, d, k in zip(t.events.start_ns, t.events.dur_ns, t.events.kind, strict=True)
            if int(k) == int(EventKind.KERNEL)
        )

    times = kernel_times(base)
    assert len(times) > 1000 and kernel_times(path) == times
