"""Opening an Nsight Systems export and learning its schema.

Accepts a SQLite export (plain or gzip-compressed) or a ``.nsys-rep`` report, which is turned into
SQLite by the ``nsys`` CLI. The input is never modified: compressed files and reports are
materialised in a temporary directory that is removed afterwards. Tables and columns are
inspected at run time because the schema drifts between Nsight Systems versions (schema 3.0 in
2022.4 to 3.25 in 2026.2).
"""

from __future__ import annotations

import contextlib
import gzip
import re
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from importers.nsys_pages import I64, PageFile, Text

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
#: Report suffixes: ``.nsys-rep`` (2021.3 and later) and the older ``.qdrep``.
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

#: Schema majors this reader understands, and the newest minor it was checked against.
SUPPORTED_SCHEMA_MAJOR = 3
NEWEST_CHECKED_MINOR = 25

KERNEL_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2022.4 used the second name
KERNEL_HINT = (
    "profile with `nsys profile --trace=cuda,nvtx ...` and export with "
    "`nsys export --type sqlite --lazy=false <report>.nsys-rep`; a lazy export omits empty tables"
)
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def file_kind(path: Path) -> str | None:
    """``"sqlite"``, ``"gzip"`` (gzip-compressed SQLite), ``"report"`` (by suffix) or ``None``;
    reads at most a few bytes. The content wins over the name."""
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
            if head.startswith(SQLITE_MAGIC):
                return "sqlite"
            if head.startswith(GZIP_MAGIC):
                fh.seek(0)
                with gzip.GzipFile(fileobj=fh) as gz:
                    if gz.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                        return "gzip"
    except (OSError, EOFError, zlib.error):
        pass
    return "report" if path.name.lower().endswith(REPORT_SUFFIXES) else None


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


class Export:
    """An open, read-only Nsight Systems SQLite export (``db_path`` is the SQLite file itself,
    which differs from ``path`` for compressed inputs and reports)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, db_path: Path | None = None) -> None:
        self.path = path
        self.conn = conn
        self.warnings: list[str] = []
        rows = self.query(
            "SELECT name, rootpage, sql FROM sqlite_master WHERE type = 'table'", "sqlite_master"
        )
        self.tables: frozenset[str] = frozenset(str(r[0]) for r in rows)
        self._roots = {str(r[0]): (r[1], str(r[2] or "")) for r in rows}
        self._columns: dict[str, frozenset[str]] = {}
        self._layout: dict[str, list[tuple[str, str, int, int]]] = {}
        self._pages = PageFile.open(db_path) if db_path is not None else None
        self.meta = self._read_meta()
        self.schema_version = self.meta.get("EXPORT_SCHEMA_VERSION")
        self.product_version = self.meta.get("EXPORT_PRODUCT_VERSION")
        self._check_identity()
        self.kernel_table = self._require_kernel_table()

    # -- queries -----------------------------------------------------------------------------

    def query(self, sql: str, where: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run ``sql``; SQLite errors become one-line :class:`InputError` naming ``where``."""
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise InputError(
                f"cannot read the SQLite export ({exc})",
                path=self.path,
                where=where,
                hint="the file is corrupt or truncated; export it again with `nsys export`",
            ) from None

    def has(self, table: str) -> bool:
        return table in self.tables

    def first_table(self, *names: str) -> str | None:
        """The first of ``names`` that exists."""
        return next((n for n in names if n in self.tables), None)

    def columns(self, table: str) -> frozenset[str]:
        """Column names of ``table`` (empty when the table is absent)."""
        cols = self._columns.get(table)
        if cols is None:
            cols = frozenset(name for name, _, _, hidden in self._table_layout(table) if not hidden)
            self._columns[table] = cols
        return cols

    def _table_layout(self, table: str) -> list[tuple[str, str, int, int]]:
        """``(name, declared type, primary-key position, hidden)`` of each column, in record
        order."""
        layout = self._layout.get(table)
        if layout is None:
            layout = []
            if table in self.tables:
                rows = self.query(f'PRAGMA table_xinfo("{table}")', table)
                layout = [(str(r[1]), str(r[2] or ""), int(r[5]), int(r[6])) for r in rows]
            self._layout[table] = layout
        return layout

    def read(
        self,
        table: str,
        ints: Mapping[str, int],
        texts: Sequence[str] = (),
        present: Sequence[str] = (),
    ) -> Columns:
        """All rows of ``table``: the ``ints`` columns with NULL (or a column this schema
        lacks) as the given default, the ``texts`` columns, and for ``present`` whether each
        row sets them. Read from the file's pages where possible, else with SQL."""
        layout = self._table_layout(table)
        pos = {name: k for k, (name, _, _, hidden) in enumerate(layout) if not hidden}
        try:
            got = self._read_pages(table, layout, pos, ints, texts, present)
        except IndexError:  # a damaged page: SQLite reports it properly
            got = None
        if got is not None:
            return got
        return self._read_sql(table, pos, ints, texts, present)

    def _read_pages(
        self,
        table: str,
        layout: list[tuple[str, str, int, int]],
        pos: dict[str, int],
        ints: Mapping[str, int],
        texts: Sequence[str],
        present: Sequence[str],
    ) -> Columns | None:
        root, sql = self._roots.get(table, (None, ""))
        shape = sql.upper()
        if (
            self._pages is None
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
        rec = self._pages.records(root, len(layout), want, alias, flags)
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
        self,
        table: str,
        pos: dict[str, int],
        ints: Mapping[str, int],
        texts: Sequence[str],
        present: Sequence[str],
    ) -> Columns:
        exprs = ["rowid"]
        exprs += [f'"{c}"' for c in (*ints, *texts) if c in pos]
        exprs += [f'"{c}" IS NOT NULL' for c in present if c in pos]
        rows = self.query(f'SELECT {", ".join(exprs)} FROM "{table}"', table)
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
                    path=self.path,
                    where=table,
                    hint="export the report again with `nsys export --type sqlite`",
                ) from None
        out_t = {c: _text_column(next(cols)) if c in pos else _null_text(n) for c in texts}
        out_p = {
            c: np.array(next(cols), dtype=bool) if c in pos else np.zeros(n, dtype=bool)
            for c in present
        }
        return Columns(rowid, out_i, out_t, out_p)

    def col(self, table: str, column: str, default: str = "-1") -> str:
        """SQL for ``column`` of ``table`` with NULL as ``default``, or ``default`` itself when
        this schema version lacks the column."""
        if column in self.columns(table):
            return f'COALESCE("{column}", {default})'
        return default

    # -- schema checks -----------------------------------------------------------------------

    def _read_meta(self) -> dict[str, str]:
        table = self.first_table(*META_TABLES)
        if table is None or not {"name", "value"} <= self.columns(table):
            return {}
        rows = self.query(f'SELECT name, value FROM "{table}"', table)
        return {str(n): str(v) for n, v in rows if n is not None and v is not None}

    def _check_identity(self) -> None:
        if "StringIds" not in self.tables and not self.meta:
            raise InputError(
                "SQLite database is not an Nsight Systems export (no StringIds or "
                "META_DATA_EXPORT table)",
                path=self.path,
                hint="export the report with `nsys export --type sqlite <report>.nsys-rep`",
            )
        version = self.schema_version
        if version is None:
            self.warnings.append(
                "no EXPORT_SCHEMA_VERSION in the export; tables and columns are read by name"
            )
            return
        m = _VERSION.match(version.strip())
        if m is None or int(m.group(1)) != SUPPORTED_SCHEMA_MAJOR:
            raise InputError(
                f"unsupported Nsight Systems export schema {version!r} "
                f"(echo-view reads schema {SUPPORTED_SCHEMA_MAJOR}.x: nsys 2022.4 to 2026.2)",
                path=self.path,
                where="META_DATA_EXPORT.EXPORT_SCHEMA_VERSION",
                hint="export the report with an Nsight Systems release that writes schema 3.x",
            )
        if int(m.group(2)) > NEWEST_CHECKED_MINOR:
            self.warnings.append(
                f"export schema {version} is newer than the newest checked "
                f"({SUPPORTED_SCHEMA_MAJOR}.{NEWEST_CHECKED_MINOR}); read by table and column names"
            )

    def _require_kernel_table(self) -> str:
        table = self.first_table(*KERNEL_TABLES)
        if table is None:
            raise InputError(
                "the export has no CUDA kernel table",
                path=self.path,
                where=KERNEL_TABLES[0],
                hint=KERNEL_HINT,
            )
        cols = self.columns(table)
        needed = ("start", "end", "deviceId", "streamId", "correlationId", "globalPid")
        missing = [c for c in needed if c not in cols]
        if not {"demangledName", "shortName"} & cols:
            missing.append("demangledName")
        if missing:
            raise InputError(
                f"the kernel table lacks column(s) {', '.join(missing)}",
                path=self.path,
                where=table,
                hint="export the report again with `nsys export --type sqlite`",
            )
        return table


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


def _connect(db_path: Path, shown: Path) -> sqlite3.Connection:
    # Read-only and immutable: no journal, no locks, and the input can never be changed.
    uri = db_path.resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise InputError(f"cannot open the SQLite file ({exc})", path=shown) from None


def _gunzip(path: Path, tmp: Path) -> Path:
    out = tmp / (path.name.removesuffix(".gz") or "export.sqlite")
    try:
        with gzip.open(path, "rb") as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(
            f"cannot decompress the gzip file ({exc})",
            path=path,
            hint="the file is corrupt or truncated; copy it again",
        ) from None
    return out


def export_command(report: Path, output: Path) -> list[str]:
    """The ``nsys export`` command line that turns ``report`` into SQLite at ``output``."""
    return [
        "nsys",
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "--output",
        str(output),
        str(report),
    ]


def _export_report(path: Path, tmp: Path) -> Path:
    out = tmp / (path.stem + ".sqlite")
    exe = shutil.which("nsys")
    if exe is None:
        shown = shlex.join(export_command(path, path.with_suffix(".sqlite")))
        raise InputError(
            "reading a .nsys-rep report needs the Nsight Systems `nsys` CLI, which is not on PATH",
            path=path,
            hint=f"run `{shown}` and pass the .sqlite file",
        )
    cmd = [exe, *export_command(path, out)[1:]]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"`nsys export` failed to run ({exc})", path=path) from None
    if proc.returncode != 0 or not out.exists():
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        last = detail[-1] if detail else f"exit code {proc.returncode}"
        raise InputError(
            f"`nsys export` could not convert the report: {last}",
            path=path,
            hint="check that the report opens in this Nsight Systems version",
        )
    return out


@contextlib.contextmanager
def open_export(path: Path) -> Iterator[Export]:
    """Open ``path`` (SQLite, gzip-compressed SQLite, or a report) as an :class:`Export`."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=path, hint="check the path")
    kind = file_kind(path)
    if kind is None:
        raise InputError(
            "not an Nsight Systems SQLite export (no SQLite header)",
            path=path,
            hint="export the report with `nsys export --type sqlite <report>.nsys-rep`",
        )
    if kind == "sqlite":  # read in place, read-only
        conn = _connect(path, path)
        try:
            yield Export(path, conn, path)
        finally:
            conn.close()
        return
    with tempfile.TemporaryDirectory(prefix="echo-view-nsys-") as tmp_name:
        tmp = Path(tmp_name)
        db_path = _gunzip(path, tmp) if kind == "gzip" else _export_report(path, tmp)
        conn = _connect(db_path, path)
        try:
            yield Export(path, conn, db_path)
        finally:
            conn.close()
