"""Helpers for the Nsight Systems importer tests: decompressed copies of the real samples and
small exports built on the real 2022.4 schema."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "samples" / "nsys"
SAMPLE_NAMES = ("mfu_2gpu_before", "mfu_2gpu_after", "h100_2gpu_1s")
SCHEMA_2022_4 = Path(__file__).with_name("data") / "schema_2022_4.sql"


def sample(name: str) -> Path:
    return SAMPLES / f"{name}.sqlite.gz"


def unpacked(name: str, tmp: Path) -> Path:
    """A writable, decompressed copy of a sample (the sample itself is never touched)."""
    out = tmp / f"{name}.sqlite"
    with gzip.open(sample(name), "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def query(path: Path, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def export_2022_4(path: Path, *, drop: Iterable[str] = (), version: str | None = None) -> Path:
    """An empty export with the real 2022.4 (schema 3.0.0) tables, minus ``drop``."""
    con = fast_connect(path)
    con.executescript(SCHEMA_2022_4.read_text())
    for table in drop:
        con.execute(f"DROP TABLE {table}")
    if version is not None:
        con.execute(
            "UPDATE EXPORT_META_DATA SET value = ? WHERE name = 'EXPORT_SCHEMA_VERSION'", (version,)
        )
    con.commit()
    con.close()
    return path


def fast_connect(path: Path) -> sqlite3.Connection:
    """A connection for writing test files: no fsync, no journal file (nothing to recover)."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA journal_mode = MEMORY")
    return con


def global_pid(pid: int) -> int:
    """Nsight's serialized process id (vmId 1, as in real exports)."""
    return (1 << 48) | (pid << 24)


def global_tid(pid: int, tid: int) -> int:
    return global_pid(pid) | tid
