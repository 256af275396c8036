"""Opening an Nsight Systems export and learning its schema.

Accepts a SQLite export (plain or gzip-compressed) or a ``.nsys-rep`` report, which is turned into
SQLite by the ``nsys`` CLI. The input is never modified: compressed files and reports are
materialised in a temporary directory that is removed afterwards. Tables and columns are
inspected at run time because the schema drifts between Nsight Systems versions (schema 3.0 in
2022.4 to 3.25 in 2026.2). SQLite answers the schema and small-table queries; the event tables'
columns are read by :meth:`Export.read` (:mod:`importers.nsys.columns`).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.leftovers import sweep, tagged
from echo_view.units import NS_LIMIT
from importers.chrome_json_text import file_blocks
from importers.nsys.columns import Columns, read_columns
from importers.nsys.pages import PageFile, page_size

#: Default of a ``start``/``end`` column that must not be NULL (see :meth:`Export.read`).
REQUIRED_TIME = -(2**63)


#: A check of one column: its name, the rows that fail it, what they do, and whether the
#: message quotes the first failing value.
_Check = tuple[str, npt.NDArray[np.bool_], str, bool]


def _time_checks(cols: Columns, ints: Mapping[str, int]) -> list[_Check]:
    """The required time columns of ``cols`` are set and do not run backwards, and no time
    lies beyond ±:data:`~echo_view.units.NS_LIMIT` (where an end, or a sum of two times, would
    no longer fit an int64)."""
    start, end = (ints.get(c) == REQUIRED_TIME for c in ("start", "end"))
    checks: list[_Check] = []
    for c, needed in (("start", start), ("end", end)):
        if c not in ints:
            continue
        values = cols.ints[c]
        if needed:  # (a stored -2**63 reads as NULL too)
            checks.append((c, values == REQUIRED_TIME, f"have no {c} time (NULL or -2^63)", False))
        beyond = (values < -NS_LIMIT) | (values >= NS_LIMIT)
        what = f"have {c} times beyond ±146 years of the capture's clock"
        checks.append((c, beyond, what, False))
    if start and end:
        backwards = cols.ints["end"] < cols.ints["start"]
        checks.append(("end", backwards, "end before they start", False))
    return checks


#: Id columns lanes and links are keyed by, and the values they may take (a NULL's default
#: aside): CUPTI's ids are unsigned 32-bit, and a lane key gives a device 16 bits (real ones
#: are small); launches are matched on the low 32 bits of a correlation id.
ID_RANGES = {
    "deviceId": (0, 0xFFFF),
    "streamId": (0, 0xFFFFFFFF),
    "correlationId": (0, 0xFFFFFFFF),
}


def _id_checks(cols: Columns, ints: Mapping[str, int]) -> list[_Check]:
    """Device, stream and correlation ids within :data:`ID_RANGES`: a device id of -3 or 2^40
    once broke or merged the GPU lanes, and correlation ids 2^32 apart linked one launch to
    another's kernel."""
    checks: list[_Check] = []
    for c, (lo, hi) in ID_RANGES.items():
        if c in ints:
            v = cols.ints[c]
            if ints[c] < lo:  # a default outside the range: the column must be set
                checks.append((c, v == ints[c], f"have no {c} (NULL)", False))
            bad = ((v < lo) | (v > hi)) & (v != ints[c])
            checks.append((c, bad, f"have {c} values outside {lo}..{hi:,}", True))
    if "globalPid" in ints:
        # Ranks are told apart by process: a NULL (read as 0) made a rank of its own.
        bad = cols.ints["globalPid"] <= 0
        checks.append(("globalPid", bad, "have no process (globalPid NULL or below 1)", False))
    return checks


def _check_values(cols: Columns, table: str, ints: Mapping[str, int], path: Path) -> None:
    """Refuse the export at the first check of :func:`_time_checks` and :func:`_id_checks`
    that a row fails."""
    for col, bad, what, quote in [*_time_checks(cols, ints), *_id_checks(cols, ints)]:
        if bad.any():
            k = int(bad.argmax())
            value = f"{int(cols.ints[col][k])} " if quote else ""
            raise InputError(
                f"{int(bad.sum())} row(s) {what}; first {value}at rowid {int(cols.rowid[k])}",
                path=path,
                where=f"{table}.{col}",
                hint="the export is damaged; export the report again with nsys",
            )


SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
#: Report suffixes: ``.nsys-rep`` (2021.3 and later) and the older ``.qdrep``.
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: Start of the temporary folder a compressed export or a report is read from.
NSYS_TMP_PREFIX = "echo-view-nsys-"

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
        self.pages = PageFile.open(db_path) if db_path is not None else None
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
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # text decoded on fetch
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
            cols = frozenset(name for name, _, _, hidden in self.layout(table) if not hidden)
            self._columns[table] = cols
        return cols

    def root(self, table: str) -> tuple[int | None, str]:
        """The table's root page and its ``CREATE`` statement."""
        return self._roots.get(table, (None, ""))

    def layout(self, table: str) -> list[tuple[str, str, int, int]]:
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
        row sets them. Read from the file's pages where possible, else with SQL.

        ``start`` and ``end`` read with the default :data:`REQUIRED_TIME` must be set in every
        row and ``end >= start``: a NULL would turn into time 0 (a kernel spanning the whole
        capture) and a negative duration into nothing, silently."""
        cols = read_columns(self, table, ints, texts, present)
        _check_values(cols, table, ints, self.path)
        return cols

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


def _connect(db_path: Path, shown: Path) -> sqlite3.Connection:
    # Read-only and immutable: no journal, no locks, and the input can never be changed.
    uri = db_path.resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise InputError(f"cannot open the SQLite file ({exc})", path=shown) from None


#: First bytes of a rollback journal that a crashed writer left to be played back.
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _check_complete(path: Path) -> None:
    """Refuse a database that is cut short, or whose last writes sit in a ``-wal`` or hot
    ``-journal`` file beside it: the file is read immutable (no locks, no recovery), so
    those would be read as they are, half-written (cut pages read as zero rows)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", path=path) from None
    page = page_size(head)
    pages = int.from_bytes(head[28:32], "big")
    # The header's page count holds while its version number matches the change counter.
    counted = pages if head[92:96] == head[24:28] else 0
    # (A header that is not SQLite's, bytes 21-23 not its fixed 64/32/32, is left to SQLite.)
    if (
        page is not None
        and head[21:24] == b"\x40\x20\x20"
        and (size % page or counted * page > size)
    ):
        raise InputError(
            f"the file is cut short ({size:,} bytes: "
            + (
                f"not a whole number of {page:,}-byte pages)"
                if size % page
                else f"its header counts {counted:,} pages of {page:,} bytes)"
            ),
            path=path,
            hint="copy the file again, or export it again with `nsys export --type sqlite`",
        )
    # A writer keeps its journal beside the database it opened: beside the file a link points
    # to (SQLite follows links), or beside the link when it opened the link's path.
    for base in dict.fromkeys((path, path.resolve())):
        for suffix, pending in (("-wal", _wal_pending), ("-journal", _journal_pending)):
            side = base.with_name(base.name + suffix)
            if pending(side):
                raise InputError(
                    f"{side.name} beside the file holds writes that are not in it yet "
                    "(a program is writing the database, or was stopped while writing)",
                    path=path,
                    hint="let the writer finish; after a crash, open the file once with "
                    "sqlite3 to recover it, then retry",
                )


def _wal_pending(side: Path) -> bool:
    try:
        return side.stat().st_size > 32  # more than the WAL header: frames not checkpointed
    except OSError:
        return False


def _journal_pending(side: Path) -> bool:
    try:
        with side.open("rb") as fh:
            return fh.read(8) == _JOURNAL_MAGIC  # zeroed or truncated when committed
    except OSError:
        return False


def _gunzip(path: Path, tmp: Path) -> Path:
    """Inflate ``path`` into the directory ``tmp`` (bounded like every gzip input)."""
    out = tmp / (path.name.removesuffix(".gz") or "export.sqlite")
    try:
        with out.open("wb") as dst:
            for block in file_blocks(path):
                dst.write(block)
    except OSError as exc:
        raise InputError(
            f"cannot decompress into {tmp.parent} ({exc.strerror or exc})",
            path=path,
            hint="free space there or point TMPDIR to a larger directory",
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
        _check_complete(path)
        conn = _connect(path, path)
        try:
            yield Export(path, conn, path)
        finally:
            conn.close()
        return
    # What a killed read left (a whole decompressed database each): removed first.
    sweep(Path(tempfile.gettempdir()), NSYS_TMP_PREFIX)
    try:
        tmp_dir = tempfile.TemporaryDirectory(prefix=tagged(NSYS_TMP_PREFIX))
    except OSError as exc:
        raise InputError(
            f"cannot create a temporary directory ({exc.strerror or exc})",
            path=path,
            hint="point TMPDIR to a writable directory",
        ) from None
    # Removed on every exit, SIGTERM included (the CLI turns it into an exception).
    with tmp_dir as tmp_name:
        tmp = Path(tmp_name)
        db_path = _gunzip(path, tmp) if kind == "gzip" else _export_report(path, tmp)
        conn = _connect(db_path, path)
        try:
            yield Export(path, conn, db_path)
        finally:
            conn.close()
