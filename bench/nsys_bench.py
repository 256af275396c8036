"""Nsight Systems import speed: echo-view's importer against a pandas ``read_sql`` baseline.

Both read the same decompressed SQLite export (the largest real fixture, 2 x H100) and the same
tables with the same joins: kernels, memcpy, memset and synchronisation with their names, CUDA
API calls with names and their launch -> GPU work join by (process, correlationId), NVTX events
with ``COALESCE(text, StringIds.value)``, thread and process names. The baseline stops at
DataFrames; the importer builds the full per-rank model (lanes, flows, collectives, args). A
third line runs the importer with its page reader switched off, so that every column comes
through Python's row-at-a-time sqlite3 API (its fallback path for files the page reader does not
handle): the gain of reading columns from the pages.

Run: ``python bench/nsys_bench.py [export.sqlite[.gz]]``. Prints the medians of 5 interleaved
runs each (wall and CPU time) and the ratios.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from importers.nsys import NsysImporter  # noqa: E402
from importers.nsys import pages as nsys_pages  # noqa: E402

DEFAULT = ROOT / "samples" / "nsys" / "mfu_2gpu_before.sqlite.gz"
RUNS = 5

K = "CUPTI_ACTIVITY_KIND_KERNEL"
R = "CUPTI_ACTIVITY_KIND_RUNTIME"
BASELINE_SQL = {
    "kernels": f"SELECT k.*, s.value AS name, t.value AS short FROM {K} k "
    "LEFT JOIN StringIds s ON s.id = k.demangledName LEFT JOIN StringIds t ON t.id = k.shortName",
    "memcpy": "SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "SELECT * FROM CUPTI_ACTIVITY_KIND_MEMSET",
    "sync": "SELECT * FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "runtime": f"SELECT r.*, s.value AS name FROM {R} r LEFT JOIN StringIds s ON s.id = r.nameId",
    "launches": "SELECT r.rowid AS launch, g.rowid AS work FROM {R} r JOIN ("
    f"SELECT rowid, correlationId, globalPid FROM {K} UNION ALL "
    "SELECT rowid, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
    "SELECT rowid, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) g "
    "ON g.correlationId = r.correlationId AND (g.globalPid >> 24) = (r.globalTid >> 24)".replace(
        "{R}", R
    ),
    "nvtx": "SELECT n.*, COALESCE(n.text, s.value) AS name FROM NVTX_EVENTS n "
    "LEFT JOIN StringIds s ON s.id = n.textId",
    "threads": "SELECT t.globalTid, s.value AS name FROM ThreadNames t "
    "LEFT JOIN StringIds s ON s.id = t.nameId",
    "processes": "SELECT * FROM PROCESSES",
}


def baseline(path: Path) -> int:
    import pandas as pd

    con = sqlite3.connect(path)
    try:
        frames = {name: pd.read_sql(sql, con) for name, sql in BASELINE_SQL.items()}
    finally:
        con.close()
    return sum(len(f) for f in frames.values())


def importer(path: Path) -> int:
    return NsysImporter().read([path]).event_count()


def sql_importer(path: Path) -> int:
    """The importer with every table read through sqlite3 rows (its fallback path)."""
    with mock.patch.object(nsys_pages.PageFile, "open", return_value=None):
        return importer(path)


def timed(fn: Callable[[Path], int], path: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of one call (CPU time is robust to other load on a shared host)."""
    w0, c0 = time.perf_counter(), time.process_time()
    n = fn(path)
    return time.perf_counter() - w0, time.process_time() - c0, n


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    with tempfile.TemporaryDirectory() as tmp:
        path = src
        if src.name.endswith(".gz"):
            path = Path(tmp) / src.name.removesuffix(".gz")
            with gzip.open(src, "rb") as fin, path.open("wb") as fout:
                shutil.copyfileobj(fin, fout)
        size = path.stat().st_size
        baseline(path), importer(path), sql_importer(path)  # warm the page cache and imports
        runs: dict[str, list[tuple[float, float, int]]] = {"base": [], "imp": [], "sql": []}
        for _ in range(RUNS):  # interleaved, so that load changes hit all alike
            runs["base"].append(timed(baseline, path))
            runs["imp"].append(timed(importer, path))
            runs["sql"].append(timed(sql_importer, path))

    def med(key: str, col: int) -> float:
        return statistics.median(r[col] for r in runs[key])

    print(f"file: {src.name} ({size / 1e6:.2f} MB SQLite), {RUNS} interleaved runs each")
    labels = (
        ("pandas read_sql baseline", "base"),
        ("echo-view NsysImporter", "imp"),
        ("importer via sqlite3 rows", "sql"),
    )
    for label, key in labels:
        what = "rows" if key == "base" else "events"
        print(
            f"{label:26s} median wall {med(key, 0) * 1e3:7.1f} ms, "
            f"CPU {med(key, 1) * 1e3:7.1f} ms ({runs[key][0][2]} {what})"
        )
    print(
        f"ratio baseline/importer: wall {med('base', 0) / med('imp', 0):.2f}x, "
        f"CPU {med('base', 1) / med('imp', 1):.2f}x"
    )
    print(
        f"ratio sqlite3-rows importer/importer: wall {med('sql', 0) / med('imp', 0):.2f}x, "
        f"CPU {med('sql', 1) / med('imp', 1):.2f}x (the page reader's gain)"
    )


if __name__ == "__main__":
    main()
