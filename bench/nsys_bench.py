"""Nsight Systems import speed: echo-view's importer against a pandas ``read_sql`` baseline.

Both read the same decompressed SQLite export (the largest real fixture, 2 x H100) and the same
tables with the same joins: kernels, memcpy, memset and synchronisation with their names, CUDA
API calls with names and their launch -> GPU work join by (process, correlationId), NVTX events
with ``COALESCE(text, StringIds.value)``, thread and process names. The baseline stops at
DataFrames; the importer builds the full per-rank model (lanes, flows, collectives, args). A
third line runs the importer with its page reader switched off, so that every column comes
through Python's row-at-a-time sqlite3 API (its fallback path for files the page reader does not
handle): the gain of reading columns from the pages.

Each path's peak memory is measured too, in a fresh process per path (its maximum resident set).
``--record-shapes K`` first grows the export: its ``emit_nvtx`` ranges repeated K times, later
in time, each text ending in ``, sizes = [[...]]`` as ``emit_nvtx(record_shapes=True)`` writes
them (the layout that takes the importer's general text path).

Run: ``python bench/nsys_bench.py [export.sqlite[.gz]] [--record-shapes K]``. Prints the
medians of 5 interleaved runs each (wall and CPU time), the peak memory, and the ratios.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_bench import hwm_bytes  # noqa: E402  (bench/ingest_bench.py: this process's VmHWM)

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


PATHS: dict[str, Callable[[Path], int]] = {
    "base": baseline,
    "imp": importer,
    "sql": sql_importer,
}


def grow_record_shapes(path: Path, copies: int) -> None:
    """Append ``copies`` copies of the export's ``emit_nvtx`` ranges (domain 0, inline text),
    each shifted past the capture and with record_shapes' ``sizes`` at the end of its text."""
    con = sqlite3.connect(path)
    try:
        (lo, hi) = con.execute("SELECT min(start), max(end) FROM NVTX_EVENTS").fetchone()
        span = int(hi) - int(lo) + 1_000_000
        for k in range(1, copies + 1):
            con.execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                "SELECT start + ?, end + ?, eventType, "
                "text || ', sizes = [[' || (rowid % 97 + ?) || ', 4096], [4096, 1024], []]', "
                "globalTid, domainId FROM NVTX_EVENTS WHERE text LIKE '%op_id = %' "
                "AND text NOT LIKE '%sizes = %' AND domainId = 0",
                (k * span, k * span, k),
            )
        con.commit()
    finally:
        con.close()


def peak_mb(key: str, path: Path) -> float:
    """Peak resident memory of a fresh process that imports, then runs path ``key`` once
    (its ``VmHWM``: the process's own high-water mark; ``ru_maxrss`` would include this
    process's memory at the fork)."""
    out = subprocess.run(
        [sys.executable, __file__, str(path), "--peak-of", key],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.split()[-1]) / 1024  # kB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", type=Path, nargs="?", default=DEFAULT)
    ap.add_argument("--record-shapes", type=int, default=0, metavar="K")
    ap.add_argument("--peak-of", choices=sorted(PATHS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peak_of:  # a child of peak_mb
        PATHS[args.peak_of](args.export)
        print(hwm_bytes() // 1024)
        return
    src: Path = args.export
    with tempfile.TemporaryDirectory() as tmp:
        path = src
        if src.name.endswith(".gz") or args.record_shapes:
            path = Path(tmp) / src.name.removesuffix(".gz")
            if src.name.endswith(".gz"):
                with gzip.open(src, "rb") as fin, path.open("wb") as fout:
                    shutil.copyfileobj(fin, fout)
            else:  # grown below: a copy, the user's file stays as it is
                shutil.copyfile(src, path)
        if args.record_shapes:
            grow_record_shapes(path, args.record_shapes)
        size = path.stat().st_size
        baseline(path), importer(path), sql_importer(path)  # warm the page cache and imports
        runs: dict[str, list[tuple[float, float, int]]] = {"base": [], "imp": [], "sql": []}
        for _ in range(RUNS):  # interleaved, so that load changes hit all alike
            for key in runs:
                runs[key].append(timed(PATHS[key], path))
        peaks = {key: peak_mb(key, path) for key in runs}

    def med(key: str, col: int) -> float:
        return statistics.median(r[col] for r in runs[key])

    grown = f", its emit_nvtx ranges repeated {args.record_shapes}x" if args.record_shapes else ""
    print(f"file: {src.name} ({size / 1e6:.2f} MB SQLite{grown}), {RUNS} interleaved runs each")
    labels = (
        ("pandas read_sql baseline", "base"),
        ("echo-view NsysImporter", "imp"),
        ("importer via sqlite3 rows", "sql"),
    )
    for label, key in labels:
        what = "rows" if key == "base" else "events"
        print(
            f"{label:26s} median wall {med(key, 0) * 1e3:7.1f} ms, "
            f"CPU {med(key, 1) * 1e3:7.1f} ms ({runs[key][0][2]} {what}), "
            f"peak RSS {peaks[key]:,.0f} MB"
        )
    print(
        f"ratio baseline/importer: wall {med('base', 0) / med('imp', 0):.2f}x, "
        f"CPU {med('base', 1) / med('imp', 1):.2f}x, peak RSS {peaks['base'] / peaks['imp']:.2f}x"
    )
    print(
        f"ratio sqlite3-rows importer/importer: wall {med('sql', 0) / med('imp', 0):.2f}x, "
        f"CPU {med('sql', 1) / med('imp', 1):.2f}x (the page reader's gain)"
    )


if __name__ == "__main__":
    main()
